"""What the join families share: sliding windows and the rows they retain, the arrival merge of
two inputs, key codes and hashing, the vectorized match of two code sets, and output batches
assembled through Arrow's C data interface."""

__all__: list[str] = []
