"""Window indexes for band joins: B+-Tree, immutable B+-Tree, chained index, IM-Tree, PIM-Tree."""

from splice.index.bptree import BPlusTree
from splice.index.chain import ChainedIndex
from splice.index.immutable import ImmutableBPlusTree
from splice.index.imtree import IMTree, PIMTree
from splice.index.window_index import (
    INDEX_KINDS,
    IndexKind,
    WindowIndex,
    default_merge_ratio,
    max_insertion_depth,
)

__all__ = [
    "BPlusTree",
    "ChainedIndex",
    "IMTree",
    "INDEX_KINDS",
    "ImmutableBPlusTree",
    "IndexKind",
    "PIMTree",
    "WindowIndex",
    "default_merge_ratio",
    "max_insertion_depth",
]
