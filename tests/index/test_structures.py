"""Every index structure against a sorted-list reference under random operation sequences."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from splice.core.errors import PlanError
from splice.index import (
    INDEX_KINDS,
    BPlusTree,
    ChainedIndex,
    ImmutableBPlusTree,
    IMTree,
    PIMTree,
    WindowIndex,
    max_insertion_depth,
)
from splice.index._bptree import new_pool, pool_bytes
from splice.index._window import M_NEXT, M_PLEVEL, merge_into
from tests.reference.sorted_index import SlidingWindowReference, SortedListIndex

small_keys = st.integers(-20, 20)


@settings(max_examples=30)
@given(
    ops=st.lists(
        st.tuples(st.sampled_from(["ins", "ins", "ins", "del", "find"]), small_keys, small_keys),
        max_size=400,
    ),
    as_int=st.booleans(),
)
def test_bptree_matches_sorted_list(ops, as_int):
    dtype = np.int64 if as_int else np.float64
    tree = BPlusTree(dtype, capacity=8)
    ref = SortedListIndex()
    live: list[tuple[int, int]] = []
    for pos, (op, a, b) in enumerate(ops):
        if op == "ins":
            tree.insert(np.array([a]), np.array([pos]))
            ref.insert(a, pos)
            live.append((a, pos))
        elif op == "del" and live:
            k, p = live.pop(b % len(live))
            assert tree.delete(np.array([k]), np.array([p])) == 1
            assert ref.delete(k, p)
            assert tree.delete(np.array([k]), np.array([p])) == 0
        else:
            lo, hi = min(a, b), max(a, b)
            assert tree.search(lo, hi).tolist() == ref.search(lo, hi)
        assert len(tree) == len(ref.entries)
    assert tree.search(-100, 100).tolist() == ref.search(-100, 100)


def test_bptree_grows_and_empties():
    rng = np.random.default_rng(1)
    keys = rng.integers(0, 1000, 20_000).astype(np.float64)
    pos = np.arange(len(keys))
    tree = BPlusTree(capacity=8)
    tree.insert(keys, pos)
    assert tree.height >= 3
    order = np.lexsort((pos, keys))
    assert tree.search(-1, 2000).tolist() == pos[order].tolist()
    assert tree.delete(keys, pos) == len(keys)
    assert len(tree) == 0 and tree.height == 0
    assert tree.search(-1, 2000).tolist() == []


@settings(max_examples=30)
@given(
    keys=st.lists(st.floats(-1e6, 1e6, allow_nan=False), max_size=3000),
    probes=st.lists(st.tuples(st.floats(-1e6, 1e6), st.floats(0, 1e5)), max_size=20),
)
def test_immutable_matches_sorted_list(keys, probes):
    ks = np.array(keys, np.float64)
    tree = ImmutableBPlusTree(ks, np.arange(len(ks)))
    ref = SortedListIndex()
    for p, k in enumerate(keys):
        ref.insert(k, p)
    for lo, width in probes:
        assert tree.search(lo, lo + width).tolist() == ref.search(lo, lo + width)


def test_immutable_many_levels_with_duplicates():
    ks = np.repeat(np.arange(2000, dtype=np.int64), 40)  # 80k entries, long runs of equal keys
    tree = ImmutableBPlusTree(ks, np.arange(len(ks)))
    assert tree.levels >= 3
    for k in (0, 1, 777, 1999):
        assert tree.search(k, k).tolist() == list(range(40 * k, 40 * k + 40))
    assert tree.search(5000, 6000).size == 0


window_kinds = st.sampled_from(INDEX_KINDS)


@settings(max_examples=40)
@given(
    kind=window_kinds,
    window=st.integers(1, 80),
    keys=st.lists(st.integers(0, 30), max_size=600),
    merge_ratio=st.sampled_from([0.01, 0.1, 0.5, 1.0]),
    depth=st.integers(0, 2),
    chain=st.integers(2, 5),
    batch=st.sampled_from([1, 2, 7, 50]),
    as_int=st.booleans(),
)
def test_window_indexes_match_reference(kind, window, keys, merge_ratio, depth, chain, batch, as_int):
    dtype = np.int64 if as_int else np.float64
    ix = WindowIndex(kind, window, dtype, merge_ratio=merge_ratio, insertion_depth=depth,
                     chain_length=chain)
    ref = SlidingWindowReference(window)
    for start in range(0, len(keys), batch):
        part = keys[start : start + batch]
        ix.insert(np.array(part, dtype))
        for k in part:
            ref.insert(k)
        for lo in (0, 7, 15):
            assert ix.search(lo, lo + 4).tolist() == ref.search(lo, lo + 4), (kind, start)
    assert len(ix) == len(keys)


@pytest.mark.parametrize("kind", ["bptree", "ibchain", "bchain", "imtree", "pimtree"])
def test_large_window_random(kind):
    rng = np.random.default_rng(7)
    w = 5000
    keys = rng.random(40_000)
    ix = WindowIndex(kind, w, merge_ratio=0.125, insertion_depth=1, chain_length=4)
    ix.insert(keys)
    lo_pos = len(keys) - w
    for lo in rng.random(20):
        want = np.flatnonzero((keys >= lo) & (keys <= lo + 0.01))
        want = want[want >= lo_pos]
        assert ix.search(lo, lo + 0.01).tolist() == want.tolist()
    if kind == "pimtree":
        assert ix.partitions > 1 and ix.merges > 0


@pytest.mark.parametrize("kind", ["ibchain", "imtree", "pimtree"])
def test_positions_past_four_billion(kind):
    """Immutable trees store positions as 4-byte offsets from a base: a stream already past
    2^32 arrivals (as a restored job's can be) searches as one that started at 0."""
    rng = np.random.default_rng(3)
    w = 700
    keys = rng.random(5000)
    start = 5 * (1 << 32) + 11
    ix = WindowIndex(kind, w, merge_ratio=0.125, insertion_depth=1, chain_length=3)
    ix.meta[M_NEXT] = start
    ix.insert(keys)
    for lo in rng.random(20):
        want = np.flatnonzero((keys >= lo) & (keys <= lo + 0.02))
        want = want[want >= len(keys) - w] + start
        assert ix.search(lo, lo + 0.02).tolist() == want.tolist()


@settings(max_examples=40)
@given(
    kind=st.sampled_from(["imtree", "pimtree"]),
    window=st.integers(1, 300),
    keys=st.lists(st.integers(0, 40), min_size=1, max_size=900),
    merge_ratio=st.sampled_from([0.05, 0.3, 1.0]),
    depth=st.integers(0, 2),
    cut=st.integers(0, 300),
    slack=st.integers(-2, 2),
)
def test_merge_into_matches_sorted_entries(kind, window, keys, merge_ratio, depth, cut, slack):
    """``merge_into``: the window's entries at positions >= lo, in (key, pos) order (entries of
    ``T_S`` before lo dropped), into a buffer of exactly the needed size plus its scratch slot,
    or a bit more; one entry short (or an empty buffer) returns -1."""
    depth = min(depth, max_insertion_depth(window))
    ix = WindowIndex(kind, window, np.int64, merge_ratio=merge_ratio, insertion_depth=depth)
    ix.insert(np.array(keys, np.int64))
    lo = max(0, len(keys) - window) + min(cut, window)
    want = sorted((k, p) for p, k in enumerate(keys) if p >= lo)
    for size in (len(want) + 3, max(len(want) + 1 + slack, 0)):
        out_k = np.zeros(size, np.int64)
        out_p = np.zeros(size, np.int64)
        n = merge_into(ix.state, out_k, out_p, lo)
        if size > len(want):
            assert n == len(want)
            # positions come out as offsets from lo, the base of the row they are written to
            got = list(zip(out_k[:n].tolist(), (out_p[:n] + lo).tolist(), strict=True))
            assert got == want
        else:
            assert n == -1


@settings(max_examples=25, deadline=None)
@given(
    window=st.integers(1100, 1700),
    n=st.integers(2500, 4000),
    domain=st.sampled_from([40, 3000, 10**9]),
    depth=st.integers(1, 2),
    merge_ratio=st.sampled_from([0.05, 0.3, 1.0]),
    batch=st.sampled_from([1, 97, 4000]),
    seed=st.integers(0, 2**32 - 1),
)
def test_pim_searches_across_partitions(window, n, domain, depth, merge_ratio, batch, seed):
    """Windows of a few partitions (``T_S`` over 32 leaves): searches that start on a partition
    boundary, end on one or span several, with keys repeated across boundaries, against the
    window's entries; the search finds its first partition on its ``T_S`` descent."""
    rng = np.random.default_rng(seed)
    keys = rng.integers(0, domain, n)
    ix = WindowIndex("pimtree", window, np.int64, merge_ratio=merge_ratio, insertion_depth=depth)
    ref = SlidingWindowReference(window)
    for start in range(0, n, batch):
        part = keys[start : start + batch]
        ix.insert(part)
        for k in part.tolist():
            ref.insert(k)
        if ix.partitions < 2:
            continue
        st_ = ix.state
        lvl = int(st_.meta[M_PLEVEL])  # the level whose nodes are the partitions
        bounds = [int(st_.ibt_inner[0, st_.ibt_loff[0, lvl] + q * 32])
                  for q in range(ix.partitions)]
        spans = [(b, b) for b in bounds] + [(b - 1, b + 1) for b in bounds]
        spans += [(bounds[0], bounds[-1]), (bounds[1], bounds[-1] + 5)]
        spans += [tuple(sorted(rng.integers(-5, domain + 5, 2).tolist())) for _ in range(4)]
        for lo, hi in spans:
            assert ix.search(lo, hi).tolist() == ref.search(lo, hi), (lo, hi, bounds)
    assert ix.partitions >= 2 and ix.merges > 0


def test_pim_partitions_follow_depth():
    w = 1 << 16
    ix = PIMTree(w, merge_ratio=0.5, insertion_depth=1)
    ix.insert(np.random.default_rng(0).random(w))
    assert ix.partitions == 2  # 2048 leaf blocks -> 64 level-0 nodes -> 2 nodes at depth 1
    assert max_insertion_depth(w) == 2
    deep = PIMTree(w, merge_ratio=0.5, insertion_depth=2)
    deep.insert(np.random.default_rng(0).random(w))
    assert deep.partitions == 64


def test_classes_and_bad_input():
    assert isinstance(IMTree(10), WindowIndex)
    assert ChainedIndex(10, 3, immutable=False).kind == "bchain"
    with pytest.raises(PlanError, match="window"):
        WindowIndex("bptree", 0)
    with pytest.raises(PlanError, match="merge ratio"):
        WindowIndex("imtree", 10, merge_ratio=0.0)
    with pytest.raises(PlanError, match="merge ratio"):
        WindowIndex("imtree", 10, merge_ratio=1.5)
    with pytest.raises(PlanError, match="chain length"):
        WindowIndex("bchain", 10, chain_length=1)
    with pytest.raises(PlanError, match="unknown index"):
        WindowIndex("btree", 10)  # type: ignore[arg-type]
    with pytest.raises(PlanError, match="NaN"):
        WindowIndex("bptree", 10).insert(np.array([np.nan]))
    # immutable trees store positions as 4-byte offsets from a base: the window bounds them
    # (checked before any memory is allocated)
    for kind in ("imtree", "pimtree", "ibchain"):
        with pytest.raises(PlanError, match=r"below 2\^32"):
            WindowIndex(kind, 1 << 32)  # type: ignore[arg-type]
    # the estimate the check uses is the pool's own layout
    for cap, dt in ((1, np.int64), (1000, np.float64)):
        assert pool_bytes(cap, np.dtype(dt)) == sum(a.nbytes for a in new_pool(cap, 3, dt)[:6])
    # a window no machine holds: a clear error before any allocation, not numpy's MemoryError
    for kind in ("nlwj", "bptree", "bchain"):
        with pytest.raises(PlanError, match=r"needs about .* GiB of index memory"):
            WindowIndex(kind, 1 << 40)  # type: ignore[arg-type]
