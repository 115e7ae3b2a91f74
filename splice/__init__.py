"""splice: a stream-processing engine for Python on multicore machines.

``splice.Engine`` is :class:`splice.runtime.engine.Engine` and ``splice.run_job`` is
:func:`splice.cli.run_job.run_sql_job` (a SQL job of sources, sinks and ``INSERT INTO``, run
until it ends or is stopped), each imported on first use so that ``import splice`` stays light.
"""

from typing import Any

__version__ = "0.1.0"
__all__ = ["__version__", "Engine", "run_job"]


def __getattr__(name: str) -> Any:
    if name == "Engine":
        from splice.runtime.engine import Engine

        return Engine
    if name == "run_job":
        from splice.cli.run_job import run_sql_job

        return run_sql_job
    raise AttributeError(f"module 'splice' has no attribute {name!r}")
