"""How a value becomes a frame's body and back (broker/wire/pickling.py): anything cloudpickle
packs comes back equal (a hypothesis round trip over nested values), functions and lambdas
included; a tiny pickle and a big one LZ4 cannot shrink travel as is (RAW), a big one that
shrinks goes compressed and smaller; the parts join to what ``dumps`` gives; a read-only
array (a view of a worker's cache) arrives writable; and what cannot pickle raises its own
error unchanged. The protocol's use of it (frames, results): tests/unit/broker/wire/test_resultmeta.py."""
from __future__ import annotations

import os
import pickle
import threading

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rhtc.broker.wire.pickling import RAW, SMALL, WIRE_SAMPLE, dumps, dumps_parts, loads, loads_plain
from tests.helpers import examples

VALUES = st.recursive(st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(),
                                st.binary()),
                      lambda inner: st.one_of(st.lists(inner), st.dictionaries(st.text(max_size=5), inner),
                                              st.tuples(inner, inner)), max_leaves=30)


@settings(settings.get_profile("default"), max_examples=examples(300), deadline=None, derandomize=True, database=None)
@given(VALUES)
def test_a_value_comes_back_equal(value):
    assert loads(dumps(value)) == value
    assert b"".join(dumps_parts(value)) == dumps(value)


def test_functions_travel_by_value():
    offset = 5
    assert loads(dumps(lambda x: x + offset))(1) == 6


def test_a_tiny_pickle_goes_as_is():
    packed = dumps(7)
    assert packed[:4] == RAW and len(packed) < SMALL + 4 and loads(packed) == 7


def test_a_big_pickle_that_shrinks_goes_compressed_and_smaller():
    value = np.zeros(100_000)
    packed = dumps(value)
    assert packed[:4] != RAW and len(packed) < value.nbytes // 10
    assert np.array_equal(loads(packed), value)


def test_a_big_pickle_lz4_cannot_shrink_goes_as_is_in_two_parts():
    value = os.urandom(16 * WIRE_SAMPLE)
    parts = dumps_parts(value)
    assert parts[0] == RAW and len(parts) == 2 and parts[1] == pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    assert loads(b"".join(parts)) == value


def test_a_big_pickle_that_shrinks_anywhere_sampled_goes_compressed():
    value = os.urandom(16 * WIRE_SAMPLE) + bytes(2 * WIRE_SAMPLE)       # zeros at the end only
    assert dumps(value)[:4] != RAW and loads(dumps(value)) == value


def test_a_read_only_array_arrives_writable_and_equal():
    served = np.arange(10.0)
    served.flags.writeable = False
    got = loads(dumps({"h": served}))["h"]
    assert got.flags.writeable and np.array_equal(got, served)
    assert not served.flags.writeable                    # the cache's own array unchanged


def test_what_cannot_pickle_raises_its_own_error():
    with pytest.raises(TypeError, match="lock"):
        dumps(threading.Lock())


def test_plain_bytes_inside_a_body_unpickle_without_the_lz4_layer():
    assert loads_plain(pickle.dumps({"a": 1})) == {"a": 1}
