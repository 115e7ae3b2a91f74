"""The delegated match of the time-bounded joins: equi-key pairs within a time band.

``Matcher.pairs`` returns every pair ``(i, j)`` of a probe set ``P`` and a build set ``B`` with

    key(P[i]) = key(B[j])  and  t(P[i]) + lo <= t(B[j]) <= t(P[i]) + hi

(null keys never match), ordered by ``i`` then ``j``. Three interchangeable engines compute it:

``"numba"``
    a chained hash table over ``B``'s key codes built per call, then probed with the band
    (:func:`~splice.joins.temporal._interval_kernels.hash_band_pairs`).
``"acero"``
    pyarrow's Acero hash join (``pyarrow.Table.join``) on the key codes, then the time band as a
    vectorized filter.
``"datafusion"``
    DataFusion's ``HashJoinExec`` with the band as join filter, in one long-lived
    ``SessionContext`` (``target_partitions=1``) that reads the inputs with ``read_batches``, so no
    table is registered and the catalog never grows.

``"auto"`` picks ``"numba"``: on every fixture of ``benchmarks/interval_probe.py`` it measured
fastest. A DataFusion or Acero call pays a fixed cost of planning and execution, even on a
handful of rows, and that cost alone exceeds the operator's whole push with the numba probe
(figures: docs/benchmarks.md, "Time-bounded joins and event time"). The key index of
:class:`~splice.joins.temporal.interval_join.IntervalJoin` always probes with the numba kernel.
"""

from __future__ import annotations

from typing import Any, Literal, get_args

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from splice.core.errors import PlanError
from splice.joins.temporal._interval_kernels import hash_band_pairs

__all__ = ["Matcher", "MatchMethod"]

MatchMethod = Literal["auto", "numba", "acero", "datafusion"]

_EMPTY = np.zeros(0, dtype=np.int64)


def _sorted_pairs(pi: np.ndarray, pj: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    order = np.lexsort((pj, pi))
    return pi[order], pj[order]


class Matcher:
    """Computes band-limited equi-join pairs with one engine (see the module docstring)."""

    def __init__(self, method: MatchMethod = "auto"):
        if method not in get_args(MatchMethod):
            raise PlanError(f"unknown match method {method!r}; expected one of {get_args(MatchMethod)}")
        self.method: MatchMethod = "numba" if method == "auto" else method
        self._ctx: Any = None

    def pairs(
        self,
        p_codes: np.ndarray,
        p_times: np.ndarray,
        b_codes: np.ndarray,
        b_times: np.ndarray,
        lo: int,
        hi: int,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Pairs ``(i, j)`` of equal key codes within the band, ordered by ``i`` then ``j``.

        Rows with null keys must already be left out. The engines join on the ``int64`` codes;
        where codes are not exact (strings, several key columns) the caller checks real key
        equality of the pairs (:func:`~splice.joins.common.key_codec.keys_equal`).
        """
        if len(p_codes) == 0 or len(b_codes) == 0:
            return _EMPTY, _EMPTY
        if self.method == "numba":
            return hash_band_pairs(p_codes, p_times, b_codes, b_times, lo, hi)
        pk = [pa.array(p_codes)]
        bk = [pa.array(b_codes)]
        if self.method == "acero":
            return self._acero(pk, p_times, bk, b_times, lo, hi)
        return self._datafusion(pk, p_times, bk, b_times, lo, hi)

    def _acero(
        self, pk: list[pa.Array], p_times: np.ndarray, bk: list[pa.Array], b_times: np.ndarray,
        lo: int, hi: int,
    ) -> tuple[np.ndarray, np.ndarray]:
        pnames = [f"k{n}" for n in range(len(pk))]
        bnames = [f"bk{n}" for n in range(len(bk))]
        pt = pa.table(pk + [pa.array(np.arange(len(p_times)))], names=pnames + ["i"])
        bt = pa.table(bk + [pa.array(np.arange(len(b_times)))], names=bnames + ["j"])
        joined = pt.join(bt, keys=pnames, right_keys=bnames, join_type="inner",
                         use_threads=False)
        pi = joined.column("i").to_numpy()
        pj = joined.column("j").to_numpy()
        tb = b_times[pj]
        tp = p_times[pi]
        ok = (tb >= tp + lo) & (tb <= tp + hi)
        return _sorted_pairs(pi[ok], pj[ok])

    def _datafusion(
        self, pk: list[pa.Array], p_times: np.ndarray, bk: list[pa.Array], b_times: np.ndarray,
        lo: int, hi: int,
    ) -> tuple[np.ndarray, np.ndarray]:
        from datafusion import SessionConfig, SessionContext, col, lit

        if self._ctx is None:
            self._ctx = SessionContext(SessionConfig().with_target_partitions(1))
        pnames = [f"k{n}" for n in range(len(pk))]
        bnames = [f"bk{n}" for n in range(len(bk))]
        pb = pa.record_batch(pk + [pa.array(p_times), pa.array(np.arange(len(p_times)))],
                             names=pnames + ["t", "i"])
        bb = pa.record_batch(bk + [pa.array(b_times), pa.array(np.arange(len(b_times)))],
                             names=bnames + ["bt", "j"])
        dp = self._ctx.read_batches([pb])
        db = self._ctx.read_batches([bb])
        df = (
            dp.join(db, left_on=pnames, right_on=bnames, how="inner")
            .filter((col("bt") >= col("t") + lit(lo)) & (col("bt") <= col("t") + lit(hi)))
            .select("i", "j")
        )
        table = df.to_arrow_table()
        if table.num_rows == 0:
            return _EMPTY, _EMPTY
        pi = pc.cast(table.column("i"), pa.int64()).to_numpy()
        pj = pc.cast(table.column("j"), pa.int64()).to_numpy()
        return _sorted_pairs(pi, pj)
