"""How a Python value becomes the bytes of a frame's body, and back: cloudpickle, then
LZ4 unless it cannot shrink them.

:mod:`broker.wire.protocol` frames and signs what this module packs (a task's argument, a
result's value, a map's function); it calls :func:`dumps` and :func:`loads` once per task
and per result, and re-exports them, so ``protocol.dumps`` stays the name callers use.
A packed body is ``lz4.block`` output (its first four bytes: the uncompressed size, never
0 for a pickle) or :data:`RAW` + the pickle, for a big pickle that LZ4 cannot shrink and for a tiny one.

    >>> loads(dumps({"x": 1}))
    {'x': 1}

Only call :func:`loads` on a body whose frame was verified: unpickling runs code.
"""
from __future__ import annotations

import io
import pickle

import cloudpickle
import lz4.block

#: values that pickle the same with the standard pickler, which is much cheaper to start
#: than cloudpickle's (per task argument and per result)
_PLAIN = frozenset({int, float, str, bytes, bool, type(None)})

#: a packed body stored as is: LZ4's header (the uncompressed size) is never 0 for a pickle
RAW = b"\0\0\0\0"
WIRE_SAMPLE = 1 << 14      # bytes LZ4 tries at the start, middle and end of a big pickle ...
WIRE_SHRINK = 0.875        # ... which goes compressed unless none of them shrinks below this
SMALL = 64                 # a pickle this short goes as is too: LZ4 would only add its header


def dumps(obj) -> bytes:
    """:func:`dumps_parts`, joined.

    >>> loads(dumps(7)), loads(dumps(lambda: 7))()
    (7, 7)
    """
    parts = dumps_parts(obj)
    return parts[0] if len(parts) == 1 else b"".join(parts)


def dumps_parts(obj) -> list[bytes]:
    """cloudpickle then lz4 (raises the pickling error unchanged); a big pickle that LZ4
    cannot shrink (filled histograms of floats) goes as is: compressing and decompressing
    8 MB of it costs the worker and the client ~12 ms each for nothing.

    The parts of the packed bytes, in order: a big one is joined once, into the frame that
    carries it (:func:`~broker.wire.protocol.sign`), not copied here first.

    >>> import numpy as np
    >>> dumps(np.random.default_rng(1).random(100_000))[:4] == RAW, dumps(np.zeros(100_000))[:4] == RAW
    (True, False)
    """
    if type(obj) in _PLAIN:
        raw = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    else:
        with io.BytesIO() as out:
            _Pickler(out, protocol=pickle.HIGHEST_PROTOCOL).dump(obj)
            raw = out.getvalue()
    if len(raw) < SMALL:
        return [RAW + raw]
    if len(raw) > 8 * WIRE_SAMPLE and not _shrinks(memoryview(raw)):
        return [RAW, raw]
    return [lz4.block.compress(raw)]


class _Pickler(cloudpickle.Pickler):
    """cloudpickle, and a read-only numpy array (a view of what a worker's cache serves)
    arrives writable, as any other array does: pickle keeps a read-only buffer read-only,
    and what comes back from a task is the analyst's own to change.

    >>> import numpy as np
    >>> served = np.arange(3.0); served.flags.writeable = False
    >>> loads(dumps({"h": served}))["h"].flags.writeable
    True
    """

    def reducer_override(self, obj):
        if type(obj).__name__ == "ndarray" and type(obj).__module__ == "numpy" \
                and not obj.flags.writeable and obj.dtype.hasobject is False:
            return obj.copy().__reduce_ex__(self.proto)
        return super().reducer_override(obj)


def _shrinks(view: memoryview) -> bool:
    mid = len(view) // 2
    return any(len(lz4.block.compress(part, store_size=False)) <= WIRE_SHRINK * WIRE_SAMPLE
               for part in (view[:WIRE_SAMPLE], view[mid:mid + WIRE_SAMPLE], view[-WIRE_SAMPLE:]))


def loads(data: bytes):
    """Inverse of :func:`dumps`. Only call it on a body whose frame was verified."""
    if data[:4] == RAW:
        return pickle.loads(memoryview(data)[4:])
    return pickle.loads(lz4.block.decompress(data))


def loads_plain(data: bytes):
    """Unpickle bytes that travelled *inside* a verified body (no lz4 layer)."""
    return pickle.loads(data)
