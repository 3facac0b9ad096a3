"""How a map's function and arguments become signed frames, with errors that name the
argument that cannot travel and say what to do.

Example::

    >>> from rhtc.broker.wire import protocol
    >>> key = b"k" * 32
    >>> packed_fn = pack_function(key, abs, "abs")
    >>> frames = Frames(key, "0123456789abcdef", protocol.new_nonce(), protocol.function_hash(packed_fn), [-3])
    >>> protocol.loads(protocol.unpack_task(key, frames[0]).packed_arg)
    -3
"""
from __future__ import annotations

from typing import Iterable, Sequence

from ...broker.wire import protocol
from ...broker.wire.config import mib
from ..errors import describe


def pack_function(key: bytes, fn, label: str) -> bytes:
    """The signed, packed function of a map (raises TypeError saying why it cannot travel)."""
    if not callable(fn):
        raise TypeError(f"remote_map needs a function as its first argument, got {describe(fn)}")
    try:
        return protocol.sign(key, protocol.dumps(fn))
    except Exception as err:
        raise TypeError(f"cannot pickle the function {label!r} to send it to the workers "
                        f"({type(err).__name__}: {err}). Functions that hold open files, locks, "
                        "sockets or generators cannot travel: open them inside the function.") from err


class Frames:
    """The signed task frames of a map, packed when they are sent (a map of a million
    tasks never holds a million frames). ``frames[i] = raw`` sends ``raw`` instead (tests
    tamper with frames this way)."""

    def __init__(self, key: bytes, map_id: str, nonce: str, fn_hash: str, args: Sequence,
                 max_task_bytes: int = protocol.MAX_TASK_BYTES):
        self.key, self.map_id, self.nonce, self.fn_hash = key, map_id, nonce, fn_hash
        self.args = args
        self.max_task_bytes = max_task_bytes
        self._replaced: dict[int, bytes] = {}
        self._checked: dict[int, bytes] = {}     # packed by check(), sent once from here

    def __getitem__(self, index: int) -> bytes:
        raw = self._replaced.get(index)
        if raw is None:
            raw = self._checked.pop(index, None)
        return raw if raw is not None else self._pack(index)

    def __setitem__(self, index: int, raw: bytes) -> None:
        self._replaced[index] = raw

    def check(self, indices: Iterable[int]) -> None:
        """Raise now, before anything is sent, if one of these arguments cannot travel."""
        for i in indices:
            self._checked[i] = self._pack(i)

    def _pack(self, index: int) -> bytes:
        arg = self.args[index]
        try:
            packed = protocol.dumps(arg)
        except Exception as err:
            raise TypeError(f"cannot pickle argument {index} ({type(arg).__name__}: {describe(arg)}): "
                            f"{type(err).__name__}: {err}") from err
        if len(packed) > self.max_task_bytes:
            raise ValueError(
                f"argument {index} ({type(arg).__name__}) is {mib(len(packed))} after "
                f"compression, over the {mib(self.max_task_bytes)} limit per task: pass file "
                "paths and entry ranges (make_chunks) and let the worker read the data, not the data itself")
        return protocol.sign(self.key, protocol.pack_task_body(self.map_id, index, self.nonce,
                                                               self.fn_hash, packed))
