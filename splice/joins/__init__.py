"""joins."""

__all__: list[str] = []
