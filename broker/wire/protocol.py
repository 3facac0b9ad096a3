"""The wire protocol: how functions, tasks and results are framed and signed (the values
inside are packed by :mod:`broker.wire.pickling`: cloudpickle + lz4).

Every payload that crosses Redis is a *frame*::

    b"RH" | version (1 byte) | HMAC-SHA256 of the body (32 bytes) | body

A receiver checks the magic, the version and the signature *before* it looks at the
body, so bytes that were not signed with the session's key are never unpickled.
Bodies:

* task:   map id (16 ascii) | index (uint32 BE) | map nonce (16 ascii) | function hash (32 ascii)
          | lz4(cloudpickle(argument)) (everywhere: or ``RAW`` + the pickle, when LZ4 cannot shrink it)
  (the function itself is stored once per map under its content hash; the nonce is drawn
  when the map is created, so a frame replayed into a map created again is refused)
* result: map id (16 ascii) | index (uint32 BE) | status (1 byte) | payload
  payload of OK / USER_ERROR: meta length (uint32 BE) | meta JSON (:class:`ResultMeta`)
          | lz4(cloudpickle(value or error dict)); of SYSTEM_ERROR: :class:`Fault` JSON;
          of MERGED (a partial: the index is its first task's): the tasks it covers, their
          metas and the merged value (:mod:`broker.wire.merge`)
* function: lz4(cloudpickle(function)); its name is the hash of the whole signed frame
* map token: ``rhtc-map-live:`` | map id (16 ascii) | map nonce (16 ascii) | valid-until
  (13 ascii digits: ms of the broker's clock). The client signs a fresh one every upkeep
  tick; a worker runs a task only under a token of its map and nonce that has not expired
  by the broker's clock, so frames copied from a live map are dead soon after it ends.
  A map's signed *end*: tagged ``rhtc-map-ended``, put in the token's place when the map
  ends; a worker that sees it refuses the map's frames, and remembers (:mod:`worker.tokens`).

The map id sits at a fixed offset in every version, so a worker can always say which
map sent it a frame it cannot read.

Example::

    >>> from rhtc.broker.wire import protocol
    >>> key = b"k" * 32
    >>> nonce = protocol.new_nonce()
    >>> frame = protocol.pack_task(key, "0123456789abcdef", 7, nonce, "f" * 32, {"x": 1})
    >>> task = protocol.unpack_task(key, frame)
    >>> task.map_id, task.index, task.nonce == nonce, protocol.loads(task.packed_arg)
    ('0123456789abcdef', 7, True, {'x': 1})
"""
from __future__ import annotations

import dataclasses
import hashlib
import hmac
import secrets
import struct
import sys
from typing import NamedTuple, Sequence

import cloudpickle
from rhtc.errors import RhtcError

# how a value becomes a body (cloudpickle + lz4): its own module, named here as ever
# (``protocol.dumps``); bound once at import, so a call costs no more than before
from .pickling import RAW, WIRE_SAMPLE, WIRE_SHRINK, dumps, dumps_parts, loads, loads_plain  # noqa: F401

VERSION = 6          # 3: a big pickle that LZ4 cannot shrink travels as is (RAW); 4: result metadata packed (resultmeta.py); 5: the tree of partials (merge.py); 6: what a task read (ResultMeta.reads)
MAGIC = b"RH"
HEADER_LEN = 3
SIG_LEN = 32
MAP_ID_LEN = 16
INDEX_LEN = 4
NONCE_LEN = 16
FN_HASH_LEN = 32
FRAME_PREFIX = HEADER_LEN + SIG_LEN            # where the body starts
TASK_ID_LEN = MAP_ID_LEN + INDEX_LEN           # map id + index: names a task
NONCE_AT = FRAME_PREFIX + TASK_ID_LEN          # where a task frame's nonce starts
FN_HASH_AT = NONCE_AT + NONCE_LEN
TASK_HEADER_LEN = FN_HASH_AT + FN_HASH_LEN     # a task frame is at least this long
MAX_TASK_BYTES = 2 * 1024 * 1024                # compressed argument limit

# result status byte; MERGED: a partial standing for several tasks (broker/wire/merge.py)
OK, USER_ERROR, SYSTEM_ERROR, MERGED = 0, 1, 2, 3

_INDEX = struct.Struct(">I")
_HEADER = MAGIC + bytes([VERSION])
JOIN_BELOW = 64 * 1024      # a result body shorter than this is joined, then signed in one call


def lua_layout() -> dict[str, int | str]:
    """The frame layout as the Lua scripts need it (1-based, inclusive positions);
    :mod:`broker.scripts` writes it into the prelude of every script."""
    return {"MAGIC": MAGIC.decode(), "TASK_MIN_LEN": TASK_HEADER_LEN,
            "MAP_FROM": FRAME_PREFIX + 1, "MAP_TO": FRAME_PREFIX + MAP_ID_LEN,
            "IDX_FROM": FRAME_PREFIX + MAP_ID_LEN + 1, "IDX_TO": FRAME_PREFIX + TASK_ID_LEN,
            "TID_LEN": TASK_ID_LEN, "MAP_ID_LEN": MAP_ID_LEN,
            "STATUS_AT": FRAME_PREFIX + TASK_ID_LEN + 1, "STATUS_MERGED": MERGED}


class BadFrame(ValueError, RhtcError):
    """A frame that is not ours: wrong magic, truncated, or signed with another key."""


class VersionMismatch(BadFrame):
    """A frame from a peer that speaks another protocol version."""

    def __init__(self, theirs: int):
        super().__init__(
            f"peer speaks redis-htcondor protocol {theirs}, this process speaks {VERSION}: "
            "install the same redis-htcondor version on the client and the workers"
        )
        self.theirs = theirs


class FunctionMismatch(BadFrame):
    """A function blob whose hash is not the one the signed task names."""


def versions() -> dict[str, str]:
    """What a peer needs to know to judge whether our pickles will load on its side."""
    return {
        "python": "%d.%d.%d" % sys.version_info[:3],
        "cloudpickle": cloudpickle.__version__,
        "protocol": str(VERSION),
    }


def new_nonce() -> str:
    """A fresh per-map nonce (16 hex chars), drawn when a map is created."""
    return secrets.token_hex(NONCE_LEN // 2)


def key_fingerprint(key: bytes) -> str:
    """A short public name of a signing key (never the key): workers publish it so that a
    client can tell that they hold another key.

    >>> key_fingerprint(b"k" * 32) == key_fingerprint(b"k" * 32) != key_fingerprint(b"j" * 32)
    True
    """
    return hashlib.sha256(b"rhtc key fingerprint\0" + key).hexdigest()[:16]


# -- signing -------------------------------------------------------------------------
def sign(key: bytes, body: bytes | Sequence[bytes]) -> bytes:
    """Frame ``body``: header, HMAC-SHA256 signature with ``key``, body. ``body`` may be
    given as its parts: a big result's packed value is then copied once, into the frame
    (each copy of 8 MB costs ~1 ms and 8 MB of fresh pages).

    >>> sign(b"k", [b"ab", b"c"]) == sign(b"k", b"abc")
    True
    """
    mac = _mac(key)
    if isinstance(body, bytes):
        mac.update(body)
        return _HEADER + mac.digest() + body
    for part in body:
        mac.update(part)
    return b"".join([_HEADER, mac.digest(), *body])


try:                                    # OpenSSL's HMAC object itself (what hmac.HMAC wraps in
    from _hashlib import hmac_new as _hmac_new      # Python, at ~0.5 us a copy and a digest)
except ImportError:                     # pragma: no cover (a Python built without OpenSSL)
    _hmac_new = hmac.new
_KEYED: dict[bytes, object] = {}       # a key's HMAC state after the key's blocks, by key


def _mac(key: bytes):
    """A fresh HMAC-SHA256 of ``key`` (``update``, ``digest``), copied from the key's state
    kept here: a copy skips hashing the key's inner and outer blocks and looking the digest
    up by name (a small frame's MAC: ~1.1 us against ~2.9, twice a task on each side). At
    most a few keys are kept.

    >>> _mac(b"k").digest() == hmac.new(b"k", digestmod="sha256").digest()
    True
    """
    if type(key) is not bytes:
        key = bytes(key)
    base = _KEYED.get(key)
    if base is None:
        if len(_KEYED) >= 8:
            _KEYED.clear()
        base = _KEYED[key] = _hmac_new(key, digestmod="sha256")
    return base.copy()


def parts_of(data: bytes | Sequence[bytes]) -> list[bytes]:
    """``data`` as a list of parts (:func:`sign`, :func:`dumps_parts`)."""
    return [data] if isinstance(data, (bytes, bytearray, memoryview)) else list(data)


def verify(key: bytes, frame: bytes) -> bytes:
    """Return the body of a frame signed with ``key``; raise :class:`BadFrame` otherwise."""
    return bytes(verified_view(key, frame))


def verified_view(key: bytes, frame: bytes) -> memoryview:
    """:func:`verify` without copying the body (a result's can be 8 MB: every copy of it
    costs the client ~1 ms)."""
    if len(frame) < FRAME_PREFIX or frame[:2] != MAGIC:
        raise BadFrame("not a redis-htcondor frame (no magic bytes); something else wrote to the queue")
    if frame[2] != VERSION:
        raise VersionMismatch(frame[2])
    body = memoryview(frame)[FRAME_PREFIX:]
    mac = _mac(key)                                      # per task and result
    mac.update(body)
    if not hmac.compare_digest(mac.digest(), frame[HEADER_LEN:FRAME_PREFIX]):
        raise BadFrame("signature does not match: the sender used another key "
                       "(client and workers must share RHTC_KEY) or the bytes were altered")
    return body


def is_task_frame(frame: bytes) -> bool:
    """Long enough and with our magic: worth verifying (says nothing about the signature)."""
    return len(frame) >= TASK_HEADER_LEN and frame[:2] == MAGIC


# -- naming tasks -----------------------------------------------------------------------
class TaskRef(NamedTuple):
    """Names one task: (map id, index). ``str()`` gives the ``map:index`` label people read.

    >>> str(TaskRef("0123456789abcdef", 3))
    '0123456789abcdef:3'
    >>> TaskRef.from_task_id(TaskRef("0123456789abcdef", 3).task_id)
    TaskRef(map_id='0123456789abcdef', index=3)
    """

    map_id: str
    index: int

    def __str__(self) -> str:
        return f"{self.map_id}:{self.index}"

    @property
    def task_id(self) -> bytes:
        """The bytes that name the task inside leases (map id + index)."""
        return self.map_id.encode("ascii") + _INDEX.pack(self.index)

    @classmethod
    def from_task_id(cls, tid: bytes) -> "TaskRef":
        return cls(tid[:MAP_ID_LEN].decode("ascii"), _INDEX.unpack(tid[MAP_ID_LEN:TASK_ID_LEN])[0])


def task_name(map_id: str, index: int) -> str:
    """The label of a task in logs and messages: ``map:index``."""
    return str(TaskRef(map_id, index))


def frame_map_id(frame: bytes) -> str | None:
    """The map id of a task or result frame, read without trusting the frame."""
    raw = frame[FRAME_PREFIX:FRAME_PREFIX + MAP_ID_LEN]
    try:
        text = raw.decode("ascii")
    except UnicodeDecodeError:
        return None
    return text if len(text) == MAP_ID_LEN and text.isalnum() else None


def frame_index(frame: bytes) -> int | None:
    """The index of a task or result frame, read without trusting the frame."""
    raw = frame[FRAME_PREFIX + MAP_ID_LEN:FRAME_PREFIX + TASK_ID_LEN]
    return _INDEX.unpack(raw)[0] if len(raw) == INDEX_LEN else None


def frame_ref(frame: bytes) -> TaskRef | None:
    """(map id, index) of a frame, read without trusting it; None for foreign bytes."""
    map_id, index = frame_map_id(frame), frame_index(frame)
    return TaskRef(map_id, index) if map_id is not None and index is not None else None


def task_id(frame: bytes) -> bytes:
    """map id + index bytes: the name of a task inside leases and attempt records."""
    return frame[FRAME_PREFIX:FRAME_PREFIX + TASK_ID_LEN]


# -- tasks ------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Task:
    """A verified task frame: which map, which index, the map's nonce, the function's hash."""

    map_id: str
    index: int
    nonce: str
    fn_hash: str
    packed_arg: bytes

    @property
    def ref(self) -> TaskRef:
        return TaskRef(self.map_id, self.index)


def pack_task_body(map_id: str, index: int, nonce: str, fn_hash: str, packed_arg: bytes) -> bytes:
    """The signed bytes of a task: the map, the index, the map's nonce, the function hash."""
    if len(nonce) != NONCE_LEN or len(fn_hash) != FN_HASH_LEN or len(map_id) != MAP_ID_LEN:
        raise ValueError(f"task {task_name(map_id, index)}: map id, nonce and function hash must be "
                         f"{MAP_ID_LEN}, {NONCE_LEN} and {FN_HASH_LEN} characters")
    return (map_id.encode("ascii") + _INDEX.pack(index) + nonce.encode("ascii")
            + fn_hash.encode("ascii") + packed_arg)


def pack_task(key: bytes, map_id: str, index: int, nonce: str, fn_hash: str, arg) -> bytes:
    """A signed task frame for ``arg`` (see the module example)."""
    return sign(key, pack_task_body(map_id, index, nonce, fn_hash, dumps(arg)))


def unpack_task(key: bytes, frame: bytes) -> Task:
    """Verify a task frame; return it as a :class:`Task`."""
    body = verify(key, frame)
    if len(body) < TASK_HEADER_LEN - FRAME_PREFIX:
        raise BadFrame(f"a task frame of {len(frame)} bytes is shorter than its header")
    at = TASK_ID_LEN
    return Task(body[:MAP_ID_LEN].decode("ascii"), _INDEX.unpack_from(body, MAP_ID_LEN)[0],
                body[at:at + NONCE_LEN].decode("ascii"),
                body[at + NONCE_LEN:at + NONCE_LEN + FN_HASH_LEN].decode("ascii"),
                body[at + NONCE_LEN + FN_HASH_LEN:])


# -- map liveness tokens -------------------------------------------------------------------
TOKEN_TAG, END_TAG = b"rhtc-map-live:", b"rhtc-map-ended"     # same length
UNTIL_LEN = 13
TOKEN_BODY_LEN = len(TOKEN_TAG) + MAP_ID_LEN + NONCE_LEN + UNTIL_LEN


class MapToken(NamedTuple):
    """A verified map token: the map, its nonce, until when (ms of the broker's clock) it
    says the map is alive; ``ended``: the map's signed end (:func:`pack_map_token`).

    >>> key, m, n = b"k" * 32, "0123456789abcdef", "n" * 16
    >>> unpack_map_token(key, pack_map_token(key, m, n, 1700000000000))
    MapToken(map_id='0123456789abcdef', nonce='nnnnnnnnnnnnnnnn', valid_until_ms=1700000000000, ended=False)
    >>> unpack_map_token(key, pack_map_token(key, m, n, 1700000000000, ended=True)).ended
    True
    """

    map_id: str
    nonce: str
    valid_until_ms: int
    ended: bool = False


def pack_map_token(key: bytes, map_id: str, nonce: str, valid_until_ms: int, ended: bool = False) -> bytes:
    """A signed token saying map ``map_id`` (with ``nonce``) is alive until ``valid_until_ms``
    (``ended``: that it ended, and none of its live tokens is valid after that)."""
    if len(map_id) != MAP_ID_LEN or len(nonce) != NONCE_LEN:
        raise ValueError(f"map token of {map_id}: map id and nonce must be {MAP_ID_LEN} and {NONCE_LEN} characters")
    return sign(key, (END_TAG if ended else TOKEN_TAG) + map_id.encode("ascii") + nonce.encode("ascii")
                + b"%013d" % int(valid_until_ms))


def unpack_map_token(key: bytes, frame: bytes) -> MapToken:
    """Verify a map token (or end); raise :class:`BadFrame` if it is not one signed with ``key``."""
    body = verify(key, frame)
    at = len(TOKEN_TAG)
    if len(body) != TOKEN_BODY_LEN or body[:at] not in (TOKEN_TAG, END_TAG):
        raise BadFrame("a signed frame that is not a map liveness token was stored as one")
    return MapToken(body[at:at + MAP_ID_LEN].decode("ascii"),
                    body[at + MAP_ID_LEN:at + MAP_ID_LEN + NONCE_LEN].decode("ascii"),
                    int(body[at + MAP_ID_LEN + NONCE_LEN:]), body[:at] == END_TAG)


# -- functions --------------------------------------------------------------------------
def function_hash(packed_fn: bytes) -> str:
    """Content hash naming a packed (signed) function in Redis."""
    return hashlib.sha256(packed_fn).hexdigest()[:FN_HASH_LEN]


def check_function(packed_fn: bytes, fn_hash: str) -> None:
    """Raise :class:`FunctionMismatch` unless ``packed_fn`` hashes to ``fn_hash`` (the hash a
    signed task names); call it before unpickling the blob.

    >>> check_function(b"blob", function_hash(b"blob"))
    """
    got = function_hash(packed_fn)
    if not hmac.compare_digest(got, fn_hash):
        raise FunctionMismatch(f"the function blob stored for function {fn_hash} hashes to {got}: it does "
                               "not match the function the signed task names (someone with write access "
                               "to Redis replaced it); refused before unpickling")


# -- results ----------------------------------------------------------------------------
def pack_result(key: bytes, map_id: str, index: int, status: int, payload: bytes | Sequence[bytes]) -> bytes:
    """A signed result frame; ``payload`` may be given as its parts (:func:`sign`)."""
    head = map_id.encode("ascii") + _INDEX.pack(index) + bytes([status])
    parts = parts_of(payload)
    if sum(map(len, parts)) < JOIN_BELOW:       # (one C call signs a small one: the per-task path)
        return sign(key, b"".join([head, *parts]))
    return sign(key, [head, *parts])


def unpack_result(key: bytes, frame: bytes) -> tuple[str, int, int, memoryview]:
    """Verify a result frame; return (map id, index, status, payload: a view into
    ``frame``, not a copy; its parts are read by :func:`messages.decode_result`,
    :func:`merge.decode_partial`, :meth:`messages.Fault.decode` and :func:`loads`)."""
    body = verified_view(key, frame)
    return (bytes(body[:MAP_ID_LEN]).decode("ascii"), _INDEX.unpack_from(body, MAP_ID_LEN)[0],
            body[TASK_ID_LEN], body[TASK_ID_LEN + 1:])
