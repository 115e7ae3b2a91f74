"""Operator state below the operators: keyed state backends and the snapshot codec.

``keyed`` keeps per-key state in memory or in RocksDB; ``codec`` turns a snapshot into data
files (JSON, Arrow IPC, ``.npy``) and back. Checkpoints, their stores and the coordinator that
takes them live in :mod:`splice.runtime`.
"""

from splice.state.codec import decode_state, encode_state

__all__ = ["decode_state", "encode_state"]
