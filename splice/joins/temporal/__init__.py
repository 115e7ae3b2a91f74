"""Time-bounded joins: the interval join and the window join, matched by a maintained
vectorized hash join and evicted by watermark."""

__all__: list[str] = []
