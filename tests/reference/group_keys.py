"""Plain-Python references of the group-key kernels (:mod:`splice.kernels.group_keys`): a dict
from key tuples to group ids in place of the open-addressing table."""

from __future__ import annotations

import numpy as np


def py_pack_strings(values: list[bytes | None]) -> list[int]:
    """Reference of ``pack_strings``, over Python byte strings."""
    out = []
    for v in values:
        if v is None:
            out.append(0)
        elif len(v) > 7:
            out.append(-1)
        else:
            out.append((len(v) << 56) | int.from_bytes(v, "little"))
    return out


def py_assign_groups(
    keys: np.ndarray, skip: np.ndarray, table: dict[tuple[int, ...], int]
) -> np.ndarray:
    """Reference of ``assign_groups``, with a dict as the table (updated in place)."""
    gids = np.empty(keys.shape[0], dtype=np.int64)
    for i in range(keys.shape[0]):
        if len(skip) and skip[i]:
            gids[i] = -1
            continue
        k = tuple(int(x) for x in keys[i])
        gids[i] = table.setdefault(k, len(table))
    return gids


def py_lookup_rows(keys: np.ndarray, table: dict[tuple[int, ...], int]) -> np.ndarray:
    """Reference of ``lookup_rows``, over a dict table."""
    return np.array([table.get(tuple(int(x) for x in row), -1) for row in keys], dtype=np.int64)
