"""A result's metadata on the wire (broker/wire/resultmeta.py): whatever a worker can say about
a run comes back to the client as it was said, alone or many to a partial."""
from __future__ import annotations

import dataclasses

from hypothesis import given, settings, strategies as st

from rhtc.broker.wire.merge import decode_partial, encode_partial
from rhtc.broker.wire.resultmeta import ResultMeta, decode_result, encode_result, pack_meta, unpack_meta
from tests.helpers import examples

_INT = st.integers(min_value=0, max_value=2 ** 62)
_TIME = st.floats(min_value=0, max_value=4e9, allow_nan=False)
_JSON = st.recursive(st.none() | st.booleans() | st.integers(-2 ** 53, 2 ** 53) | st.text(max_size=20),
                     lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
                     max_leaves=8)
metas = st.builds(ResultMeta, worker=st.text(max_size=40), host=st.text(max_size=40), pid=_INT,
                  start=_TIME, stop=_TIME, incarnation=st.text(max_size=16), bytes_cache=_INT, bytes_disk=_INT,
                  bytes_file=_INT, events=st.none() | _INT, files_opened=_INT,
                  extra=st.dictionaries(st.text(max_size=10).filter(
                      lambda k: k not in {f.name for f in dataclasses.fields(ResultMeta)}), _JSON, max_size=3))


@settings(max_examples=examples(300), derandomize=True, deadline=None)
@given(metas, st.binary(max_size=64))
def test_a_result_comes_back_as_the_worker_said_it(meta, value):
    got, packed = decode_result(encode_result(value, meta))
    assert got == meta and bytes(packed) == value
    assert unpack_meta(memoryview(pack_meta(meta))) == meta


@settings(max_examples=examples(100), derandomize=True, deadline=None)
@given(st.lists(metas, min_size=1, max_size=6), st.binary(max_size=64))
def test_a_partial_carries_every_tasks_meta(many, value):
    indices = list(range(3, 3 + len(many)))
    got_indices, got, packed = decode_partial(encode_partial(indices, many, value))
    assert got_indices == indices and got == many and bytes(packed) == value


@settings(max_examples=examples(200), derandomize=True, deadline=None)
@given(metas, st.lists(st.binary(max_size=300), min_size=1, max_size=4), st.integers(0, 2 ** 32 - 1),
       st.sampled_from([0, 3]), st.lists(st.integers(0, 2 ** 32 - 1), min_size=1, max_size=5))
def test_a_frame_signed_from_its_parts_is_the_frame_signed_whole(meta, value, index, status, indices):
    """A big result is joined once, into its frame (protocol.sign's parts): the bytes on the
    wire are the ones a joined body gives, byte for byte, small or big (JOIN_BELOW)."""
    from rhtc.broker.wire import protocol
    from rhtc.broker.wire.merge import partial_parts
    from rhtc.broker.wire.resultmeta import result_parts

    key, mid = b"k" * 32, "0123456789abcdef"
    big = [*value, b"x" * protocol.JOIN_BELOW]
    for packed in (value, big):
        whole = b"".join(packed)
        for parts, joined in ((result_parts(packed, meta), encode_result(whole, meta)),
                              (partial_parts(indices, [meta] * len(indices), packed, 2),
                               encode_partial(indices, [meta] * len(indices), whole, 2))):
            frame = protocol.pack_result(key, mid, index, status, parts)
            assert frame == protocol.pack_result(key, mid, index, status, joined)
            assert protocol.unpack_result(key, frame)[3] == joined
    assert protocol.sign(key, value) == protocol.sign(key, b"".join(value))


def test_a_value_packed_in_parts_is_the_value_packed_whole():
    import numpy as np
    from rhtc.broker.wire import protocol

    for value in (7, np.zeros(100_000), np.random.default_rng(1).random(100_000), {"h": np.arange(10.0)}):
        parts = protocol.dumps_parts(value)
        assert b"".join(parts) == protocol.dumps(value)
        got = protocol.loads(b"".join(parts))
        assert (np.array_equal(got, value) if isinstance(value, np.ndarray)
                else repr(got) == repr(value))
