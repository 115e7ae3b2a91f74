"""A nested-loop equi-join of two tables on their first column, every SQL join type: the
obvious reference for the join of finite inputs."""

from __future__ import annotations

import pyarrow as pa


def equi_join_rows(left: pa.Table, right: pa.Table, how: str) -> list[tuple]:
    """Rows of ``left {how} JOIN right ON left[0] = right[0]`` (nulls match nothing), sorted."""
    lrows = list(zip(*[c.to_pylist() for c in left.columns], strict=True))
    rrows = list(zip(*[c.to_pylist() for c in right.columns], strict=True))
    lpad, rpad = (None,) * left.num_columns, (None,) * right.num_columns
    out, used = [], set()
    for lr in lrows:
        hits = [j for j, rr in enumerate(rrows) if lr[0] is not None and lr[0] == rr[0]]
        used.update(hits)
        out += [lr + rrows[j] for j in hits]
        if not hits and how in ("left", "full"):
            out.append(lr + rpad)
    if how in ("right", "full"):
        out += [lpad + rr for j, rr in enumerate(rrows) if j not in used]
    return sorted(out, key=lambda r: tuple((v is None, v) for v in r))
