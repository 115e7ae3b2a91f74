"""Sources and files: Parquet/CSV, replayable sources, join arrival order, TPC-H data, result rows."""

from splice.io.arrival import interleave
from splice.io.files import read_table, write_table
from splice.io.sources import file_source, round_robin, table_source

__all__ = ["file_source", "interleave", "read_table", "round_robin", "table_source", "write_table"]
