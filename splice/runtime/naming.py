"""Errors in users' words: an operator names its inputs by stream id, a user by stream name.

Operators are built from stream ids (``IntervalJoin(left=2, right=3, ...)``), so their messages
say ``stream 2``. Where such a message leaves the engine, :func:`name_streams` puts the name the
user gave the stream in place of its id.

>>> name_streams("hash_window_join: stream 2 has no key column 'zz'", {2: "left"})
"hash_window_join: stream 'left' has no key column 'zz'"
"""

from __future__ import annotations

import re
from collections.abc import Mapping

__all__ = ["name_streams"]

_STREAM_ID = re.compile(r"\bstream '?(\d+)'?")


def name_streams(text: str, names: Mapping[int, str]) -> str:
    """``text`` with each ``stream <id>`` of a known id written ``stream '<name>'``."""

    def named(m: re.Match[str]) -> str:
        name = names.get(int(m.group(1)))
        return m.group(0) if name is None else f"stream {name!r}"

    return _STREAM_ID.sub(named, text)
