"""The bytes of one entry of the node's disk tier (:mod:`worker.disk`): an array as its raw
buffers behind a small JSON header, with a checksum over all of it (xxh3, 64 bits: a
tenth of crc32's time; ``xxhash`` comes with uproot); never a pickle.

    magic | xxh3 of the body | body length | body = json length | json | segments

Each buffer is one segment, stored as it is, or LZ4-compressed when that shrinks it to at
most :data:`SHRINK` of its size (a constant branch, a flag). A disk hit must cost much
less than reading the branch from its ROOT file again: LZ4 barely shrinks floats and
decompresses offsets (0.43 of their size) at a few hundred MB/s, which made decompression
70 % of a hit; a raw buffer costs one copy from the page cache. An entry is served from
the bytes read, without another copy.

    >>> import numpy as np
    >>> decode(encode(np.arange(5, dtype=np.int16))).tolist()
    [0, 1, 2, 3, 4]
"""
from __future__ import annotations

import json
import struct
from typing import Any

import lz4.block
from xxhash import xxh3_64_intdigest

MAGIC = b"RHD2"                     # RHD1 (crc32, one LZ4 frame over the body) is read as a miss
_HEAD = struct.Struct("<4sQQ")      # magic, xxh3 of the body, body length
SHRINK = 0.25                       # a buffer is stored compressed when LZ4 makes it at most this big
SAMPLE = 1 << 16                    # bytes of a buffer LZ4 tries first (a float buffer: don't bother)


def encode(value: Any) -> bytes | None:
    """Bytes for a numpy array or an awkward array; None for anything else.

    >>> import numpy as np, awkward as ak
    >>> decode(encode(ak.Array([[1.5], [], [2.5, 3.5]]))).tolist()
    [[1.5], [], [2.5, 3.5]]
    """
    import numpy as np
    if isinstance(value, np.ndarray) and value.dtype.kind in "biufcmM?":
        head = {"kind": "np", "dtype": value.dtype.str, "shape": list(value.shape)}
        buffers = [np.ascontiguousarray(value)]
    elif type(value).__module__.startswith("awkward") and type(value).__name__ == "Array":
        import awkward as ak
        form, length, container = ak.to_buffers(value)
        names = sorted(container)
        head = {"kind": "ak", "form": form.to_dict(), "length": int(length), "names": names}
        buffers = [np.ascontiguousarray(container[n]) for n in names]
    else:
        return None
    segments = [_segment(memoryview(b).cast("B")) for b in buffers]
    head["sizes"] = [int(b.nbytes) for b in buffers]
    head["stored"] = [[len(s), lz4] for s, lz4 in segments]
    text = json.dumps(head).encode()
    body = b"".join([struct.pack("<I", len(text)), text, *[s for s, _ in segments]])
    return _HEAD.pack(MAGIC, xxh3_64_intdigest(body), len(body)) + body


def _segment(buffer: memoryview) -> tuple[bytes | memoryview, bool]:
    """(stored bytes, compressed?) of one buffer: compressed only when LZ4 shrinks it well."""
    if len(buffer) > 1024:
        sample = buffer[:SAMPLE]
        if len(lz4.block.compress(sample, store_size=False)) > SHRINK * len(sample):
            return buffer, False
        packed = lz4.block.compress(buffer, store_size=False)
        if len(packed) <= SHRINK * len(buffer):
            return packed, True
    return buffer, False


def decode(raw: bytes) -> Any | None:
    """The value of :func:`encode`'s bytes, or None when they are truncated or corrupt.

    >>> import numpy as np
    >>> good = encode(np.ones(4))
    >>> flipped = good[:-5] + bytes([good[-5] ^ 1]) + good[-4:]
    >>> decode(good[:-3]) is None, decode(flipped) is None, decode(good) is None
    (True, True, False)
    """
    import numpy as np
    try:
        magic, digest, n = _HEAD.unpack_from(raw)
        body = memoryview(raw)[_HEAD.size:]
        if magic != MAGIC or len(body) != n or xxh3_64_intdigest(body) != digest:
            return None
        (k,) = struct.unpack_from("<I", body)
        head = json.loads(bytes(body[4:4 + k]))
        at, buffers = 4 + k, []
        for size, (stored, packed) in zip(head["sizes"], head["stored"]):
            segment = body[at:at + stored]
            at += stored
            buffers.append(lz4.block.decompress(segment, uncompressed_size=size) if packed else segment)
            if len(buffers[-1]) != size:
                return None
        if at != len(body):
            return None
        if head["kind"] == "np":
            return np.frombuffer(buffers[0], dtype=head["dtype"]).reshape(head["shape"])
        import awkward as ak
        container = {name: np.frombuffer(b, dtype=np.uint8) for name, b in zip(head["names"], buffers)}
        return ak.from_buffers(ak.forms.from_dict(head["form"]), head["length"], container)
    except Exception:                       # any damage: not a value, a miss
        return None
