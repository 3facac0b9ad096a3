"""The bytes of one entry of the node's disk tier (:mod:`worker.disk`): an array as its raw
buffers behind a small JSON header, a checksum, and a tag that only the tier's own
workers can make; never a pickle.

    magic | xxh3-64 of the body | tag | body length | body = json length | json | segments

* the **checksum** (xxh3, 64 bits, unkeyed: ``xxhash`` comes with uproot) tells a damaged
  entry (a node that crashed) from a foreign one: it is computed only when the tag fails;
* the **tag** is HMAC-SHA256 (first 16 bytes) under the tier's secret
  (:func:`worker.tierdir.tier_secret`) over the magic, the cache key, the body's length
  and its 128-bit xxh3 digest seeded from the secret: an entry written by anyone without
  the secret, or moved to another key (an index row pointed at another chunk's file), is
  refused (:class:`NotOurs`). A MAC over the key and a fast digest rather than over the
  body: HMAC-SHA256 runs at 1.3 GB/s here, xxh3 at 30 GB/s, and a disk hit must stay cheap.
  (xxh3 is not collision-resistant: one who could both read a genuine entry and write
  the tier might make another body with its digest; :mod:`worker.tierdir` lets nobody
  else do either.)

Each buffer is one segment, stored as it is, or LZ4-compressed when that shrinks it to at
most :data:`SHRINK` of its size (a constant branch, a flag). A disk hit must cost much
less than reading the branch from its ROOT file again: LZ4 barely shrinks floats and
decompresses offsets (0.43 of their size) at a few hundred MB/s, which made decompression
70 % of a hit; a raw buffer costs one copy from the page cache. An entry is served from
the bytes read, without another copy.

    >>> import numpy as np
    >>> seal = Seal(bytes(32))
    >>> decode(encode(np.arange(5, dtype=np.int16), "k", seal), "k", seal).tolist()
    [0, 1, 2, 3, 4]
"""
from __future__ import annotations

import hmac
import json
import struct
from typing import Any

import lz4.block
from xxhash import xxh3_64_intdigest, xxh3_128_digest

from rhtc.errors import RhtcError

MAGIC = b"RHD3"                     # RHD2 (no tag), RHD1 (crc32, one LZ4 frame) are read as misses
_HEAD = struct.Struct("<4sQ16sQ")   # magic, xxh3-64 of the body, tag, body length
TAG = 16                            # bytes of HMAC-SHA256 kept
SHRINK = 0.25                       # a buffer is stored compressed when LZ4 makes it at most this big
SAMPLE = 1 << 16                    # bytes of a buffer LZ4 tries first (a float buffer: don't bother)


class NotOurs(RhtcError):
    """An entry whose tag is wrong for its key: not written by a worker holding the tier's
    secret, or moved from another key."""


class Seal:
    """What authenticates the entries of one tier: its secret.

    >>> s = Seal(bytes(32))
    >>> s.tag("a", b"body") == s.tag("a", b"body") != s.tag("b", b"body")
    True
    """

    def __init__(self, secret: bytes):
        self._secret = bytes(secret)
        self._seed = int.from_bytes(hmac.digest(self._secret, b"rhtc tier: digest seed", "sha256")[:8], "little")

    def tag(self, key: str, body) -> bytes:
        """The tag of ``body`` stored under ``key``."""
        k = key.encode()
        digest = xxh3_128_digest(body, seed=self._seed)
        message = b"".join([MAGIC, struct.pack("<QQ", len(k), len(body)), k, digest])
        return hmac.digest(self._secret, message, "sha256")[:TAG]


def encode(value: Any, key: str, seal: Seal) -> bytes | None:
    """Bytes for a numpy array or an awkward array stored under ``key``; None for anything else.

    >>> import numpy as np, awkward as ak
    >>> seal = Seal(bytes(32))
    >>> decode(encode(ak.Array([[1.5], [], [2.5, 3.5]]), "k", seal), "k", seal).tolist()
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
    return _HEAD.pack(MAGIC, xxh3_64_intdigest(body), seal.tag(key, body), len(body)) + body


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


def decode(raw: bytes, key: str, seal: Seal) -> Any | None:
    """The value of :func:`encode`'s bytes for ``key``; None when they are truncated or
    corrupt (or of an older format); :class:`NotOurs` when intact but their tag is wrong.

    >>> import numpy as np
    >>> seal = Seal(bytes(32))
    >>> good = encode(np.ones(4), "k", seal)
    >>> flipped = good[:-5] + bytes([good[-5] ^ 1]) + good[-4:]
    >>> decode(good[:-3], "k", seal) is None, decode(flipped, "k", seal) is None, decode(good, "k", seal) is None
    (True, True, False)
    >>> try:
    ...     decode(good, "another key", seal)
    ... except NotOurs as refused:
    ...     print(refused)
    an entry under 'another key' with a wrong tag
    """
    import numpy as np
    try:
        magic, checksum, tag, n = _HEAD.unpack_from(raw)
        body = memoryview(raw)[_HEAD.size:]
        if magic != MAGIC or len(body) != n:
            return None
        if not hmac.compare_digest(seal.tag(key, body), tag):
            if xxh3_64_intdigest(body) != checksum:
                return None                 # damaged (the checksum is only needed here)
            raise NotOurs(f"an entry under {key!r} with a wrong tag")
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
    except NotOurs:
        raise
    except Exception:                       # any damage: not a value, a miss
        return None
