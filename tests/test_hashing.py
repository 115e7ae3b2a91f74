"""splice's hash functions against their plain-Python references and mmh3."""

from __future__ import annotations

import mmh3
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from splice.kernels.hashing import combine_codes, fmix64, hash_words, murmur3_32
from tests.reference.hashing import _fmix64_py, combine_codes_py, hash_words_py

_I64 = st.integers(-(2**63), 2**63 - 1)


@settings(max_examples=200, deadline=None)
@given(arrays(np.int64, st.tuples(st.integers(1, 6), st.integers(1, 4)), elements=_I64))
def test_hash_words_matches_reference(keys):
    for i in range(keys.shape[0]):
        assert int(hash_words(keys, i)) == hash_words_py(keys, i)


def test_equal_rows_hash_equal_and_words_in_other_order_differ():
    keys = np.array([[1, 2], [1, 2], [2, 1]], np.int64)
    assert hash_words(keys, 0) == hash_words(keys, 1)
    assert hash_words(keys, 0) != hash_words(keys, 2)


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 4).flatmap(lambda k: st.lists(
    arrays(np.uint64, 7, elements=st.integers(0, 2**64 - 1)), min_size=k, max_size=k)))
def test_combine_codes_matches_reference(cols):
    assert combine_codes(cols).tolist() == combine_codes_py(cols).tolist()


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 2**64 - 1))
def test_fmix64_matches_reference(h):
    assert int(fmix64(np.uint64(h))) == _fmix64_py(h)


@settings(max_examples=200, deadline=None)
@given(_I64, st.sampled_from([0, 1, 0x9747B28C, 2**32 - 1]))
def test_murmur3_32_is_mmh3(key, seed):
    want = mmh3.hash(int(key).to_bytes(8, "little", signed=True), seed, signed=False)
    assert murmur3_32(key, seed) == want
    assert murmur3_32.py_func(key, seed) == want
