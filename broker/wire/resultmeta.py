"""What a worker says about one run of a task (:class:`ResultMeta`), and how it travels:
packed in a fixed binary layout beside the pickled value (:func:`encode_result`), so the
client reads it with one ``struct`` call per result instead of a JSON parse (a third of
the client's CPU per result when it was JSON). The layout is derived from the fields:
the numbers in declaration order (``d`` for a float, ``q`` for an int, -1 for an optional
int that is None), then the lengths of the strings and of the extras' JSON, then the
strings (UTF-8) and the extras (JSON; empty when there are none). A field added to
:class:`ResultMeta` travels without another change; the frames carry the protocol
version (:data:`protocol.VERSION`), so a worker and a client that disagree on the layout
refuse each other's frames instead of misreading them.

    >>> meta = ResultMeta(worker="w1", host="n1", pid=7, start=1.0, stop=2.5, events=None,
    ...                   extra={"note": "x"})
    >>> got, value = decode_result(encode_result(b"value", meta))
    >>> got == meta, bytes(value)
    (True, b'value')
    >>> ResultMeta.decode(meta.encode()).worker                  # JSON (records, partial lists)
    'w1'
"""
from __future__ import annotations

import dataclasses
import json
import struct


def _counter(what: str):
    """A count a worker reports about one run of a task: the client's ledger, the run
    record and the timeline each get a column of it (:data:`RUN_COUNTERS`)."""
    return dataclasses.field(default=0, metadata={"counter": what})


@dataclasses.dataclass
class ResultMeta:
    """What a worker says about one run of a task (travels beside the pickled value, so it
    can be read even when the value cannot be unpickled)."""

    worker: str
    host: str
    pid: int
    start: float
    stop: float
    incarnation: str = ""
    bytes_cache: int = _counter("bytes served from the worker's memory (its branch cache)")
    bytes_disk: int = _counter("bytes served from the node's disk tier")
    bytes_file: int = _counter("bytes read from the input files")
    events: int | None = None
    files_opened: int = _counter("files the task had to open (not already open on the worker)")
    #: the branches the task read through its chunks (:mod:`broker.wire.reads`; "" when none):
    #: what ``rhtc warm`` reads again into a new pool's caches
    reads: str = ""
    extra: dict = dataclasses.field(default_factory=dict)

    @property
    def bytes_read(self) -> int:
        return sum(getattr(self, name) for name in BYTES_SOURCES)

    def to_dict(self) -> dict:
        d = {name: getattr(self, name) for name in _META_FIELDS}
        d.update(self.extra)
        d["bytes_read"] = self.bytes_read
        return d

    def encode(self) -> bytes:
        return json.dumps(self.to_dict()).encode()

    @classmethod
    def decode(cls, raw: bytes | dict) -> "ResultMeta":
        if isinstance(raw, (bytes, str)):    # (str first: json's encoding sniffing costs more)
            d = json.loads(raw.decode() if isinstance(raw, bytes) else raw)
            d = d if type(d) is dict else dict(d)
        else:
            d = dict(raw)
        d.pop("bytes_read", None)
        if _META_REQUIRED <= d.keys() <= _META_SET:
            return cls(**d)                  # the common case, once per result: keep it fast
        known = {k: d.pop(k) for k in list(d) if k in _META_SET}
        return cls(**{"worker": "?", "host": "?", "pid": 0, "start": 0.0, "stop": 0.0, **known}, extra=d)


_META_FIELDS = tuple(f.name for f in dataclasses.fields(ResultMeta) if f.name != "extra")
_META_SET = frozenset(_META_FIELDS)
_META_REQUIRED = frozenset({"worker", "host", "pid", "start", "stop"})
#: the counts of a run (``bytes_cache``, ``bytes_disk``, ``bytes_file``, ``files_opened``):
#: a field added to ResultMeta with :func:`_counter` is counted everywhere from here
RUN_COUNTERS = tuple(f.name for f in dataclasses.fields(ResultMeta) if "counter" in f.metadata)
#: ... of which the bytes, by where they came from (their sum is ``bytes_read``)
BYTES_SOURCES = tuple(name for name in RUN_COUNTERS if name.startswith("bytes_"))


_FIELDS = [f for f in dataclasses.fields(ResultMeta) if f.name != "extra"]
_STRINGS = tuple(f.name for f in _FIELDS if f.type == "str")
_NUMBERS = tuple(f.name for f in _FIELDS if f.type in ("int", "float"))
_OPTIONAL = tuple(f.name for f in _FIELDS if f.type == "int | None")      # None travels as -1
assert set(_STRINGS + _NUMBERS + _OPTIONAL) == set(_META_FIELDS), "a ResultMeta field of a type with no wire form"
_WIRE = struct.Struct(">" + "".join("d" if f.type == "float" else "q" for f in _FIELDS if f.name in _NUMBERS)
                      + "q" * len(_OPTIONAL) + "H" * len(_STRINGS) + "I")
_META_LEN = struct.Struct(">I")
_HEAD = _NUMBERS + _OPTIONAL                  # the names of the layout's first values
_new = object.__new__


def pack_meta(meta: ResultMeta) -> bytes:
    """``meta`` in the binary layout (see the module; once per result on the worker)."""
    d = meta.__dict__
    strings = [(d[name] or "").encode() for name in _STRINGS]
    extra = json.dumps(meta.extra).encode() if meta.extra else b""
    values = [d[name] or 0 for name in _NUMBERS]
    values += [-1 if d[name] is None else d[name] for name in _OPTIONAL]
    values += [len(x) for x in strings]
    values.append(len(extra))
    return _WIRE.pack(*values) + b"".join(strings) + extra


def unpack_meta(raw: bytes | memoryview) -> ResultMeta:
    """The :class:`ResultMeta` that :func:`pack_meta` packed (built without ``__init__``:
    once per result, on the client's busiest path)."""
    got = _WIRE.unpack_from(raw)
    fields = dict(zip(_HEAD, got))                 # the numbers and the optional numbers
    for name in _OPTIONAL:
        if fields[name] < 0:
            fields[name] = None
    at = _WIRE.size
    for name, n in zip(_STRINGS, got[len(_HEAD):]):
        fields[name] = str(raw[at:at + n], "utf-8")
        at += n
    n = got[-1]
    fields["extra"] = json.loads(bytes(raw[at:at + n])) if n else {}
    meta = _new(ResultMeta)
    meta.__dict__ = fields
    return meta


def encode_result(packed_value: bytes, meta: ResultMeta) -> bytes:
    """The payload of an OK or USER_ERROR result: meta first, then the packed value."""
    return b"".join(result_parts([packed_value], meta))


def result_parts(packed_value: list[bytes], meta: ResultMeta) -> list[bytes]:
    """:func:`encode_result`'s payload as its parts (the packed value's as given: see
    :func:`broker.wire.protocol.sign`)."""
    raw = pack_meta(meta)
    return [_META_LEN.pack(len(raw)) + raw, *packed_value]


def decode_result(payload: bytes | memoryview) -> tuple[ResultMeta, bytes | memoryview]:
    """(meta, packed value) of a verified result payload; unpickle the value with :func:`loads`."""
    n = _META_LEN.unpack_from(payload)[0]
    return unpack_meta(bytes(payload[4:4 + n])), payload[4 + n:]
