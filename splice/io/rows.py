"""Render result rows for people (a rich table) and machines (one JSON object per row)."""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal
from typing import Any

import pyarrow as pa

__all__ = ["json_rows", "print_table", "json_value"]


def json_value(v: Any) -> Any:
    """A JSON-safe value: decimals as exact strings, dates and times in ISO format."""
    if isinstance(v, Decimal):
        return str(v)
    if isinstance(v, dt.date | dt.datetime | dt.time):
        return v.isoformat()
    if isinstance(v, bytes):
        return v.hex()
    return v


def json_rows(table: pa.Table) -> list[str]:
    return [json.dumps({k: json_value(v) for k, v in row.items()}) for row in table.to_pylist()]


def print_table(table: pa.Table, title: str | None = None, limit: int = 40) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console() if Console().is_terminal else Console(width=200)
    t = Table(title=title)
    for name in table.schema.names:
        t.add_column(name, overflow="fold")
    for row in table.slice(0, limit).to_pylist():
        t.add_row(*[str(json_value(v)) for v in row.values()])
    console.print(t)
    if table.num_rows > limit:
        console.print(f"... {table.num_rows - limit} more rows")
