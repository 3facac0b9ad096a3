"""Big results travel beside the results list: the frame as a string key of its own (a
*blob*), and a small *stub* in the list.

A Redis list copies each element into its packed nodes on the way in and out, and a Lua
script copies its arguments twice more: an 8 MB result handed in through ``take.lua`` and
popped by the client cost the broker ~46 ms of CPU. A string set from one command's last
argument is kept without a copy and sent back from the same memory: ``SET`` + ``GETDEL``
of 8 MB cost ~16 ms. So a worker sets each frame of at least :data:`BLOB_FROM` bytes as
``{ns}:blob:{map}:{random}`` (expiring as its results list would) and hands in a stub.

A stub is the frame's own head with the magic ``RB`` and no signature: map id, index,
status and, for a partial, the indices of every task it covers, all at the offsets of a
frame (so ``audit.lua`` and the rest of the Lua read a stub as they read a frame); then
the frame's length (uint64 BE) and the blob's key. ``take.lua`` keeps the blob while it
accepts the stub (setting the blob's expiry to its list's) and deletes it when it drops
the stub (map gone, partial refused). The client reads the blob with ``GETDEL``
(:meth:`broker.mapqueue.MapQueue.resolve`) and verifies the frame as any other; a stub whose blob is gone (expired) loses nothing: its
task is nowhere, and the map's audit sends it again.

    >>> from rhtc.broker.wire import protocol
    >>> frame = protocol.pack_result(b"k" * 32, "0123456789abcdef", 7, protocol.OK, b"x" * 10)
    >>> s = stub(frame, "ns:blob:0123456789abcdef:ab")
    >>> is_stub(s), is_stub(frame), parse_stub(s)
    (True, False, (66, 'ns:blob:0123456789abcdef:ab'))
    >>> s[:2], s[protocol.FRAME_PREFIX:protocol.FRAME_PREFIX + 16]
    (b'RB', b'0123456789abcdef')
"""
from __future__ import annotations

import logging
import secrets
import struct

from . import protocol

log = logging.getLogger("rhtc.broker")

BLOB_FROM = 256 * 1024          # a result frame at least this big travels as a blob
MAGIC = b"RB"
_SIZE = struct.Struct(">Q")
_U32 = struct.Struct(">I")
_STATUS = protocol.FRAME_PREFIX + protocol.TASK_ID_LEN       # 0-based offset of the status byte


def _head_len(frame: bytes | memoryview) -> int:
    """Bytes of a result frame's head that a stub keeps (a partial's covered indices too)."""
    n = _STATUS + 1
    if frame[_STATUS] == protocol.MERGED and len(frame) >= n + 4:
        n += 4 + 4 * _U32.unpack_from(frame, n)[0]
    return n


def blob_name(map_id: str) -> str:
    """A fresh blob name of map ``map_id`` (the argument of ``Keys.blob``: ``{map}:{random}``)."""
    return f"{map_id}:{secrets.token_hex(8)}"


def stub(frame: bytes, key: str) -> bytes:
    """The stub standing for ``frame`` stored under ``key``."""
    n = _head_len(frame)
    return b"".join([MAGIC, frame[2:protocol.HEADER_LEN], bytes(protocol.SIG_LEN),
                     frame[protocol.FRAME_PREFIX:n], _SIZE.pack(len(frame)), key.encode()])


def is_stub(item: bytes) -> bool:
    return item[:2] == MAGIC


def parse_stub(item: bytes) -> tuple[int, str]:
    """(the frame's length, the blob's key) of a stub."""
    n = _head_len(item)
    return _SIZE.unpack_from(item, n)[0], bytes(item[n + _SIZE.size:]).decode()


def stub_map(item: bytes) -> str:
    """The map id a stub (or a frame) names."""
    return bytes(item[protocol.FRAME_PREFIX:protocol.FRAME_PREFIX + protocol.MAP_ID_LEN]).decode("ascii", "replace")
