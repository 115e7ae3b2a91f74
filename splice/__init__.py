"""splice: a stream-processing engine for Python on multicore machines."""

__version__ = "0.1.0"
__all__ = ["__version__"]
