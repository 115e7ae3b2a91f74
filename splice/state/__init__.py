"""state."""

__all__: list[str] = []
