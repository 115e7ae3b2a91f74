"""index."""

__all__: list[str] = []
