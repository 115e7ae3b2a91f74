"""splice: a stream-processing engine for Python on multicore machines.

``splice.Engine`` is :class:`splice.runtime.engine.Engine`, imported on first use so that
``import splice`` stays light.
"""

from typing import Any

__version__ = "0.1.0"
__all__ = ["__version__", "Engine"]


def __getattr__(name: str) -> Any:
    if name == "Engine":
        from splice.runtime.engine import Engine

        return Engine
    raise AttributeError(f"module 'splice' has no attribute {name!r}")
