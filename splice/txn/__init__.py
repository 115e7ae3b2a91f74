"""txn."""

__all__: list[str] = []
