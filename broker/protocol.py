"""The wire protocol: how functions, tasks and results are framed, signed and packed.

Every payload that crosses Redis is a *frame*::

    b"RH" | version (1 byte) | HMAC-SHA256 of the body (32 bytes) | body

A receiver checks the magic, the version and the signature *before* it looks at the
body, so bytes that were not signed with the session's key are never unpickled.
Bodies:

* task:   map id (16 ascii) | index (uint32 BE) | function hash (32 ascii) | lz4(cloudpickle(argument))
  (the function itself is stored once per map under its content hash)
* result: map id (16 ascii) | index (uint32 BE) | status (1 byte) | payload
* function: lz4(cloudpickle(function))

The map id sits at a fixed offset in every version, so a worker can always say which
map sent it a frame it cannot read.

Example::

    >>> from rhtc.broker import protocol
    >>> key = b"k" * 32
    >>> frame = protocol.pack_task(key, "0123456789abcdef", 7, "f" * 32, {"x": 1})
    >>> map_id, index, fn_hash, arg = protocol.unpack_task(key, frame)
    >>> map_id, index, protocol.loads(arg)
    ('0123456789abcdef', 7, {'x': 1})
"""
from __future__ import annotations

import hashlib
import hmac
import pickle
import struct
import sys

import cloudpickle
import lz4.block

VERSION = 1
MAGIC = b"RH"
HEADER_LEN = 3
SIG_LEN = 32
MAP_ID_LEN = 16
FRAME_PREFIX = HEADER_LEN + SIG_LEN            # where the body starts
TASK_ID_LEN = MAP_ID_LEN + 4                    # map id + index: names a task
FN_HASH_LEN = 32
MAX_TASK_BYTES = 2 * 1024 * 1024                # compressed argument limit

# result status byte
OK, USER_ERROR, SYSTEM_ERROR = 0, 1, 2

_INDEX = struct.Struct(">I")
_HEADER = MAGIC + bytes([VERSION])


class BadFrame(ValueError):
    """A frame that is not ours: wrong magic, truncated, or signed with another key."""


class VersionMismatch(BadFrame):
    """A frame from a peer that speaks another protocol version."""

    def __init__(self, theirs: int):
        super().__init__(
            f"peer speaks redis-htcondor protocol {theirs}, this process speaks {VERSION}: "
            "install the same redis-htcondor version on the client and the workers"
        )
        self.theirs = theirs


def versions() -> dict[str, str]:
    """What a peer needs to know to judge whether our pickles will load on its side."""
    return {
        "python": "%d.%d.%d" % sys.version_info[:3],
        "cloudpickle": cloudpickle.__version__,
        "protocol": str(VERSION),
    }


def dumps(obj) -> bytes:
    """cloudpickle then lz4 (raises the pickling error unchanged)."""
    return lz4.block.compress(cloudpickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL))


def loads(data: bytes):
    """Inverse of :func:`dumps`. Only call it on a body whose frame was verified."""
    return pickle.loads(lz4.block.decompress(data))


def sign(key: bytes, body: bytes) -> bytes:
    """Frame ``body``: header, HMAC-SHA256 signature with ``key``, body."""
    return _HEADER + hmac.new(key, body, hashlib.sha256).digest() + body


def verify(key: bytes, frame: bytes) -> bytes:
    """Return the body of a frame signed with ``key``; raise :class:`BadFrame` otherwise."""
    if len(frame) < FRAME_PREFIX or frame[:2] != MAGIC:
        raise BadFrame("not a redis-htcondor frame (no magic bytes); something else wrote to the queue")
    if frame[2] != VERSION:
        raise VersionMismatch(frame[2])
    body = frame[FRAME_PREFIX:]
    expected = hmac.new(key, body, hashlib.sha256).digest()
    if not hmac.compare_digest(expected, frame[HEADER_LEN:FRAME_PREFIX]):
        raise BadFrame("signature does not match: the sender used another key "
                       "(client and workers must share RHTC_KEY) or the bytes were altered")
    return body


def frame_map_id(frame: bytes) -> str | None:
    """The map id of a task or result frame, read without trusting the frame."""
    raw = frame[FRAME_PREFIX:FRAME_PREFIX + MAP_ID_LEN]
    try:
        text = raw.decode("ascii")
    except UnicodeDecodeError:
        return None
    return text if len(text) == MAP_ID_LEN and text.isalnum() else None


def frame_index(frame: bytes) -> int | None:
    raw = frame[FRAME_PREFIX + MAP_ID_LEN:FRAME_PREFIX + TASK_ID_LEN]
    return _INDEX.unpack(raw)[0] if len(raw) == 4 else None


def task_id(frame: bytes) -> bytes:
    """map id + index bytes: the name of a task inside leases and attempt records."""
    return frame[FRAME_PREFIX:FRAME_PREFIX + TASK_ID_LEN]


def pack_task_body(map_id: str, index: int, fn_hash: str, packed_arg: bytes) -> bytes:
    return map_id.encode("ascii") + _INDEX.pack(index) + fn_hash.encode("ascii") + packed_arg


def pack_task(key: bytes, map_id: str, index: int, fn_hash: str, arg) -> bytes:
    return sign(key, pack_task_body(map_id, index, fn_hash, dumps(arg)))


def unpack_task(key: bytes, frame: bytes) -> tuple[str, int, str, bytes]:
    """Verify a task frame; return (map id, index, function hash, packed argument)."""
    body = verify(key, frame)
    end = TASK_ID_LEN + FN_HASH_LEN
    return (body[:MAP_ID_LEN].decode("ascii"), _INDEX.unpack_from(body, MAP_ID_LEN)[0],
            body[TASK_ID_LEN:end].decode("ascii"), body[end:])


def pack_result(key: bytes, map_id: str, index: int, status: int, payload: bytes) -> bytes:
    return sign(key, map_id.encode("ascii") + _INDEX.pack(index) + bytes([status]) + payload)


def unpack_result(key: bytes, frame: bytes) -> tuple[str, int, int, bytes]:
    """Verify a result frame; return (map id, index, status, payload)."""
    body = verify(key, frame)
    return (body[:MAP_ID_LEN].decode("ascii"), _INDEX.unpack_from(body, MAP_ID_LEN)[0],
            body[TASK_ID_LEN], body[TASK_ID_LEN + 1:])


def function_hash(packed_fn: bytes) -> str:
    """Content hash naming a packed function in Redis."""
    return hashlib.sha256(packed_fn).hexdigest()[:32]


def loads_plain(data: bytes):
    """Unpickle bytes that travelled *inside* a verified body (no lz4 layer)."""
    return pickle.loads(data)
