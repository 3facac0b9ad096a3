"""How a map's function and arguments become signed frames (client/engine/packing.py): each
frame verifies under the session key and carries its map, index, nonce, function hash and
argument; frames are packed when asked for (a million-task map never holds a million), a
frame checked early is the one sent, a replaced frame is sent instead; and what cannot travel
(not a function, a function or argument that does not pickle, an argument over the size
limit) is refused before anything is sent, naming it and saying what to do."""
from __future__ import annotations

import os
import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rhtc.broker.wire import protocol
from rhtc.client.engine.packing import Frames, pack_function
from tests.helpers import examples

KEY, MAP, NONCE = b"k" * 32, "0123456789abcdef", "a" * 16
FN_HASH = protocol.function_hash(pack_function(KEY, abs, "abs"))


def test_the_packed_function_is_signed_and_runs():
    fn = protocol.loads(protocol.verify(KEY, pack_function(KEY, lambda x: x + 1, "inc")))
    assert fn(1) == 2
    with pytest.raises(protocol.BadFrame):
        protocol.verify(b"x" * 32, pack_function(KEY, abs, "abs"))


def test_what_is_not_a_function_is_refused():
    with pytest.raises(TypeError, match=r"remote_map needs a function as its first argument, got \[1, 2\]"):
        pack_function(KEY, [1, 2], "list")


def test_a_function_that_holds_a_lock_cannot_travel_and_says_why():
    lock = threading.Lock()
    with pytest.raises(TypeError, match=r"cannot pickle the function 'locked' .* open them inside the function"):
        pack_function(KEY, lambda x: lock, "locked")


@settings(settings.get_profile("default"), max_examples=examples(100), deadline=None, derandomize=True, database=None)
@given(st.lists(st.one_of(st.integers(), st.text(max_size=30), st.none(), st.binary(max_size=100)),
                min_size=1, max_size=20))
def test_every_frame_says_its_map_index_nonce_function_and_argument(args):
    frames = Frames(KEY, MAP, NONCE, FN_HASH, args)
    for i, arg in enumerate(args):
        task = protocol.unpack_task(KEY, frames[i])
        assert (task.map_id, task.index, task.nonce, task.fn_hash) == (MAP, i, NONCE, FN_HASH)
        assert protocol.loads(task.packed_arg) == arg


class Counted:
    """An argument that counts how often it is pickled."""

    pickled = 0

    def __reduce__(self):
        Counted.pickled += 1
        return (Counted, ())


def test_frames_are_packed_when_sent_and_a_checked_one_once():
    Counted.pickled = 0
    frames = Frames(KEY, MAP, NONCE, FN_HASH, [Counted() for _ in range(1000)])
    assert Counted.pickled == 0                    # nothing is packed ahead
    frames.check([0, 1])
    assert Counted.pickled == 2
    frames[0], frames[1]
    assert Counted.pickled == 2                    # the checked ones are sent as checked
    frames[0]
    assert Counted.pickled == 3                    # ... once: sent again, it is packed again


def test_a_replaced_frame_is_sent_instead():
    frames = Frames(KEY, MAP, NONCE, FN_HASH, [1, 2])
    frames[1] = b"tampered"
    assert frames[1] == b"tampered" and protocol.unpack_task(KEY, frames[0]).index == 0


def test_an_argument_that_cannot_travel_is_refused_at_check_naming_it():
    frames = Frames(KEY, MAP, NONCE, FN_HASH, [1, threading.Lock(), 3])
    with pytest.raises(TypeError, match=r"cannot pickle argument 1 \(lock: <unlocked _thread.lock"):
        frames.check(range(3))


def test_an_argument_over_the_limit_is_refused_saying_to_pass_chunks():
    frames = Frames(KEY, MAP, NONCE, FN_HASH, [b"small", os.urandom(2 << 20)], max_task_bytes=1 << 20)
    frames.check([0])
    with pytest.raises(ValueError, match=r"argument 1 \(bytes\) is 2\.0 MiB after compression, over the "
                                         r"1\.0 MiB limit per task: pass file paths and entry ranges"):
        frames.check([1])
