"""index."""

from splice.index.bptree import BPlusTree
from splice.index.chain import ChainedIndex
from splice.index.immutable import ImmutableBPlusTree
from splice.index.imtree import IMTree, PIMTree
from splice.index.window import INDEX_KINDS, IndexKind, WindowIndex, max_insertion_depth

__all__: list[str] = []
__all__ += [
    "BPlusTree",
    "ImmutableBPlusTree",
    "ChainedIndex",
    "IMTree",
    "PIMTree",
    "WindowIndex",
    "IndexKind",
    "INDEX_KINDS",
    "max_insertion_depth",
]
