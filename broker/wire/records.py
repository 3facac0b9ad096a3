"""The records rhtc reads back from Redis that no signature vouches for (heartbeats, the
maps registry, the dashboard's feed, the pool keepers' state and log, the problem log):
their schemas, and the one check every reader applies before it uses a record.

Anyone with the Redis password can write these keys. A record that does not match its
schema raises :class:`MalformedRecord`, naming the key and the field; the readers in
:mod:`broker` skip it and note it in their storage's :class:`MalformedLog`, which
``rhtc status`` and the dashboard show. A running map, the dashboard and the command
line never fail because of one.

    >>> check({"t": 1.5, "message": "w1 died"}, PROBLEM, "rhtc:me:log")["message"]
    'w1 died'
    >>> check({"t": "soon", "message": "w1 died"}, PROBLEM, "rhtc:me:log")
    Traceback (most recent call last):
    ...
    rhtc.broker.wire.records.MalformedRecord: malformed record rhtc:me:log: field 't' is "soon", not a number; ...
"""
from __future__ import annotations

import json
import logging
import math
import time

from rhtc.errors import RhtcError

log = logging.getLogger("rhtc.broker")

#: the types a schema names: ``float`` is any finite JSON number, ``int`` a whole one,
#: ``None`` a JSON null; neither takes true or false
Types = tuple


class MalformedRecord(ValueError, RhtcError):
    """A record read from Redis does not match its schema (:mod:`broker.wire.records`): ``key``
    (and ``field``, when one field is wrong) say which; ``why`` what is wrong with it."""

    def __init__(self, key: str, field: str | None, why: str):
        self.key, self.field, self.why = key, field, why
        super().__init__(f"malformed record {self.line}; skipped (rhtc does not write this: something else "
                         "with the Redis password did; delete the key, and change the password if it was "
                         "not you)")

    @property
    def line(self) -> str:
        """``key: field 'f' is ..., not ...``: what ``rhtc status`` and the page show."""
        return f"{self.key}: " + (f"field {self.field!r} " if self.field else "") + self.why


_NAMES = {str: "text", int: "a whole number", float: "a number", bool: "true or false", None: "null",
          list: "a list", dict: "an object"}


def _is(value, types: Types) -> bool:
    for t in types:
        if t is None:
            if value is None:
                return True
        elif t is float:
            if type(value) in (int, float) and math.isfinite(value):
                return True
        elif t is int:
            if type(value) is int:
                return True
        elif isinstance(value, t):
            return True
    return False


def _show(value) -> str:
    text = json.dumps(value) if not isinstance(value, (bytes, bytearray)) else repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def field_error(key: str, field: str, value, types: Types) -> MalformedRecord:
    """The error of ``field`` holding ``value`` where the schema takes ``types``."""
    return MalformedRecord(key, field, f"is {_show(value)}, not {' or '.join(_NAMES.get(t, str(t)) for t in types)}")


def loads(raw: bytes | str, key: str):
    """The JSON of ``raw``, or :class:`MalformedRecord` naming ``key``."""
    try:
        return json.loads(raw)
    except (ValueError, TypeError) as err:
        raise MalformedRecord(key, None, f"is not JSON ({err})") from None


def check(record, schema: dict[str, Types], key: str, required: tuple[str, ...] = ()) -> dict:
    """``record`` if it is a JSON object whose fields of ``schema`` have the types it names
    (other fields pass, for the records of newer releases) and that has the ``required``
    ones; else :class:`MalformedRecord` naming ``key`` and the first wrong field."""
    if not isinstance(record, dict):
        raise MalformedRecord(key, None, f"is {_show(record)}, not a JSON object")
    for name in required:
        if name not in record:
            raise MalformedRecord(key, name, "is missing")
    for name, types in schema.items():
        if name in record and not _is(record[name], types):
            raise field_error(key, name, record[name], types)
    return record


def check_items(items, types: Types, key: str, field: str) -> None:
    """Every item of the list or object ``items`` (a field of a record) is of ``types``."""
    if not isinstance(items, (list, dict)):
        raise field_error(key, field, items, (list, dict))
    for at, value in (items.items() if isinstance(items, dict) else enumerate(items)):
        if not _is(value, types):
            raise field_error(key, f"{field}[{at!r}]", value, types)


# -- the schemas -------------------------------------------------------------------------
#: the problem log (``Storage.report``): one JSON object per line
PROBLEM: dict[str, Types] = {"t": (float,), "message": (str,)}
#: a pool keeper's log (``Keepers.keeper_event``)
KEEPER_EVENT: dict[str, Types] = {"t": (float,), "what": (str,), "job": (str,), "why": (str,)}
#: a pool keeper's state (``Keepers.publish_keeper``): one JSON value per hash field
KEEPER_STATE: dict[str, Types] = {
    "pool": (str,), "scheduler": (str,), "min": (int,), "max": (int,), "wanted": (int,), "jobs": (dict,),
    "serving": (int,), "leaving": (int,), "counts": (dict,), "host": (str,), "pid": (int,), "started": (float,),
    "log": (str,), "failures": (int,), "backoff": (float,), "t": (float,)}
#: a map's entry in the registry (``{ns}:map:{id}``, text values): the fields read as numbers
MAP_ENTRY_NUMBERS: dict[str, type] = {"n": int, "started": float}
#: a map's progress note in the dashboard's feed (client/engine/feed.py writes it)
FEED_NOTE: dict[str, Types] = {
    "map_id": (str,), "label": (str,), "n": (int,), "started": (float,), "ended": (float, None), "done": (int,),
    "failed": (int,), "cancelled": (bool,), "events": (int,), "bytes_cache": (int,), "bytes_file": (int,),
    "t": (float,), "errors": (list,)}
#: an error in a progress note
FEED_ERROR: dict[str, Types] = {"index": (int,), "type": (str,), "message": (str,), "worker": (str, None),
                                "argument": (str,), "traceback": (str,)}
#: a task record of the feed: a list of these, in this order (broker.feed.TASK_FIELDS)
FEED_TASK: dict[str, Types] = {"index": (int,), "worker": (str, None), "start": (float,), "stop": (float,),
                               "bytes_cache": (int,), "bytes_file": (int,), "events": (int, None), "error": (int,)}


def checked(storage, key: str, items: list[bytes], schema: dict[str, Types], required=("t",)) -> list[dict]:
    """The JSON entries of the list ``key`` (just read: ``items``) that match ``schema``;
    the others are skipped and noted in ``storage.malformed`` as ``key[i]``."""
    out, malformed = [], []
    for i, raw in enumerate(items):
        try:
            out.append(check(loads(raw, f"{key}[{i}]"), schema, f"{key}[{i}]", required))
        except MalformedRecord as err:
            malformed.append(err)
    if malformed or storage.malformed:
        storage.malformed.read([f"{key}[{i}]" for i in range(len(items))], malformed)
    return out


def keeper_state(raw: dict[bytes, bytes], key: str) -> dict:
    """A keeper's state hash, each field's JSON read and checked."""
    d = {}
    for name, value in raw.items():
        field = name.decode(errors="replace")
        try:
            d[field] = json.loads(value)
        except ValueError:
            raise MalformedRecord(key, field, "is not JSON") from None
    check(d, KEEPER_STATE, key, required=("pool",))
    check_items(d.get("jobs", {}), (int,), key, "jobs")
    return d


def map_entry(raw: dict[bytes, bytes], key: str) -> dict[str, str]:
    """A map's registry hash as text, its numbers checked to read as numbers."""
    try:
        d = {a.decode(): b.decode() for a, b in raw.items()}
    except UnicodeDecodeError:
        raise MalformedRecord(key, None, "is not UTF-8 text") from None
    for name, kind in MAP_ENTRY_NUMBERS.items():
        if name in d:
            try:
                ok = math.isfinite(kind(d[name]))
            except ValueError:
                ok = False
            if not ok:
                raise MalformedRecord(key, name, f"is {d[name][:60]!r}, not {_NAMES[kind]}")
    return d


def feed_entry(raw: bytes, key: str) -> dict:
    """One entry of the dashboard's feed: ``{"map": note, "tasks": [records]}``, checked."""
    entry = check(loads(raw, key), {"map": (dict,), "tasks": (list,)}, key, required=("map",))
    note = check(entry["map"], FEED_NOTE, key, required=("map_id",))
    for k, error in enumerate(note.get("errors") or []):
        check(error, FEED_ERROR, f"{key} errors[{k}]")
    types = tuple(FEED_TASK.values())
    for k, rec in enumerate(entry.get("tasks") or []):
        if not isinstance(rec, list) or len(rec) != len(types):
            raise MalformedRecord(key, f"tasks[{k}]", f"is {_show(rec)}, not a list of {', '.join(FEED_TASK)}")
        for name, value, t in zip(FEED_TASK, rec, types):
            if not _is(value, t):
                raise field_error(key, f"tasks[{k}].{name}", value, t)
    return entry


class MalformedLog:
    """The malformed records a :class:`~broker.storage.Storage`'s readers met in the last
    :attr:`KEEP` seconds, by key (each warned about once), for ``rhtc status`` and the page.

    >>> m = MalformedLog()
    >>> m.read(["ns:hb:w1"], [MalformedRecord("ns:hb:w1", "task", "is [], not a pair")])
    >>> m.lines()
    ["ns:hb:w1: field 'task' is [], not a pair"]
    >>> m.read(["ns:hb:w1"]); m.lines()
    []
    """

    KEEP = 600.0

    def __init__(self):
        self._seen: dict[str, tuple[float, MalformedRecord]] = {}

    def __bool__(self) -> bool:
        return bool(self._seen)

    def read(self, keys=(), malformed: list[MalformedRecord] = ()) -> None:
        """A reader read ``keys`` (or entries of a stream, then ``keys`` is empty), and found
        ``malformed`` among them: the others are well-formed now, these are noted (and
        logged, the first time)."""
        bad = {err.key for err in malformed}
        if self._seen:
            for k in keys:
                if k not in bad:
                    self._seen.pop(k, None)
        for err in malformed:
            if err.key not in self._seen:
                log.warning("%s", err)
            self._seen[err.key] = (time.monotonic(), err)

    def lines(self) -> list[str]:
        now = time.monotonic()
        seen = list(self._seen.items())          # (another thread may note one meanwhile)
        for k, (t, _) in seen:
            if now - t > self.KEEP:
                self._seen.pop(k, None)
        return sorted(err.line for _, (t, err) in seen if now - t <= self.KEEP)
