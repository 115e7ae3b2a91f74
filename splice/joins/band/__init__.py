"""Band (theta) joins over sliding windows with the index family (IBWJ): count and time windows,
the parallel join, and drivers that run them over two whole tables."""

__all__: list[str] = []
