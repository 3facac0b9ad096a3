"""The typed messages between processes: what a worker says about a result
(:class:`ResultMeta`, with its wire form in :mod:`broker.wire.resultmeta`), why it could not
run a task (:class:`Fault`), and what it publishes with every heartbeat
(:class:`WorkerStatus`). One encode and one decode each; the frames that carry them are
:mod:`rhtc.broker.wire.protocol`'s.

    >>> meta = ResultMeta(worker="w1", host="n1", pid=7, start=1.0, stop=2.5)
    >>> ResultMeta.decode(meta.encode()).worker
    'w1'
"""
from __future__ import annotations

import dataclasses
import enum
import hmac
import json

from . import records
from .history import lost_run_line, parse_lost_run  # noqa: F401  (imported from here too)
from .protocol import TaskRef, key_fingerprint
from .resultmeta import (BYTES_SOURCES, RUN_COUNTERS, ResultMeta, decode_result,  # noqa: F401
                         encode_result)       # (imported from here too)

# -- a cancel request (`rhtc cancel MAP`) -------------------------------------------------
#: what starts the message that asks a map's client to cancel it (pushed among its results;
#: never a frame: frames start with protocol.MAGIC)
CANCEL_MARK = b"\x00rhtc-cancel\x00"


def cancel_request(by: str) -> bytes:
    """The message that asks a map's client to cancel the map, saying who asked.

    >>> cancelled_by(cancel_request("rhtc cancel on n1"))
    'rhtc cancel on n1'
    >>> cancelled_by(b"RH...") is None
    True
    """
    return CANCEL_MARK + by.encode()


def cancelled_by(frame: bytes) -> str | None:
    """Who asked, if ``frame`` is a cancel request; None for anything else."""
    if not frame.startswith(CANCEL_MARK):
        return None
    return frame[len(CANCEL_MARK):].decode(errors="replace")


# -- errors -----------------------------------------------------------------------------
class ErrorKind(str, enum.Enum):
    """The kinds of :class:`~client.errors.RemoteError` that are not an exception of the
    user's function (whose kind is its exception's type name, e.g. ``"ValueError"``).
    A ``str`` enum: ``err.remote_type == "WorkerLost"`` holds for ``ErrorKind.WORKER_LOST``.

    >>> ErrorKind.WORKER_LOST == "WorkerLost", str(ErrorKind.RESULT_TOO_LARGE)
    (True, 'ResultTooLarge')
    """

    WORKER_LOST = "WorkerLost"                # the process running it died every time it ran
    WORKER_REFUSED = "WorkerRefused"          # a worker refused the frame (forged, replayed)
    WORKER_ERROR = "WorkerError"              # a worker could not run it (function missing, versions...)
    RESULT_TOO_LARGE = "ResultTooLarge"       # over max_result_bytes or what the broker accepts
    UNPICKLABLE_RESULT = "UnpicklableResult"  # the function returned something that does not pickle
    UNDECODABLE_RESULT = "UndecodableResult"  # the result does not unpickle on the client
    TASK_TIMEOUT = "TaskTimeout"              # ran past task_timeout on every copy

    def __str__(self) -> str:
        return self.value


@dataclasses.dataclass(frozen=True)
class TaskError:
    """What travels back when the user's function raised (a USER_ERROR result): the
    exception's type name and message, the traceback text, a short description of the
    argument, and the exception itself pickled when it pickles and loads back. On the wire
    it is a plain dict (:meth:`to_wire`), which any version of the client reads.

    >>> e = TaskError("OSError", "gone", "Traceback ...", argument="Chunk(a.root 0-10)")
    >>> TaskError.from_wire(e.to_wire()) == e
    True
    >>> TaskError.from_wire({"type": "ValueError"}).message
    ''
    """

    type: str
    message: str = ""
    traceback: str = ""
    argument: str = ""
    exception: bytes | None = None

    def to_wire(self) -> dict:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    @classmethod
    def from_wire(cls, value) -> "TaskError":
        """From :meth:`to_wire`'s dict (missing fields take their defaults), or as is."""
        if isinstance(value, cls):
            return value
        d = dict(value) if isinstance(value, dict) else {"type": "Error", "message": repr(value)[:500]}
        fields = {f.name: d[f.name] for f in dataclasses.fields(cls) if d.get(f.name) is not None}
        fields["type"] = str(fields.get("type") or "Error")
        return cls(**fields)

    def summary(self) -> str:
        """``"OSError: gone"``."""
        return f"{self.type}: {self.message}"


class Requeued(str, enum.Enum):
    """What became of a task a worker gave back (lua/lib.lua's ``requeue``; the Lua
    scripts get these names from here): queued again, dead (it used up its attempts),
    or gone (its map ended)."""

    QUEUED = "queued"
    DEAD = "dead"
    GONE = "gone"


class HandedUp(str, enum.Enum):
    """What became of a partial a worker handed up the tree (lua/merge.lua; the Lua gets
    these names from here): fold these others' partials in first (it was not taken),
    nothing to fold and nothing handed, parked in the map's pool, delivered to the client,
    refused (a task it covers is not leased to it any more), or gone (its map ended)."""

    INPUTS = "inputs"
    NONE = "none"
    PARKED = "parked"
    DELIVERED = "delivered"
    REFUSED = "refused"
    GONE = "gone"


#: What a map samples of each live worker every upkeep tick for its run record (the
#: heartbeat's counters and the process and node figures of worker/metrics.py): name ->
#: type. The run record's MetricSample and the client's sampling derive theirs from here.
WORKER_METRICS: dict[str, type] = {
    "cpu": float, "rss": int,                               # the task process
    "cache_bytes": int, "cache_entries": int, "bytes_read": int, "disk_bytes": int,
    "net_recv": int, "net_sent": int, "disk_read": int, "disk_write": int,
    "node_cpu": float, "node_mem": float,                   # the node
}



# -- faults -----------------------------------------------------------------------------
class FaultKind(str, enum.Enum):
    """Why a worker could not run a task (the SYSTEM_ERROR results)."""

    BAD_FRAME = "bad-frame"                  # signature, magic or protocol version wrong
    REPLAYED = "replayed"                    # a task frame whose nonce is not its map's
    EXPIRED = "expired"                      # the map's liveness token expired (ended map, or a client
                                             # that stopped renewing it)
    MISSING_FUNCTION = "missing-function"    # the function blob expired or the broker restarted
    FUNCTION_MISMATCH = "function-mismatch"  # the blob is not the function the task names
    VERSION_MISMATCH = "version-mismatch"    # client and worker Python differ
    FUNCTION_LOAD = "function-load"          # the function does not unpickle on the worker
    CRASHED = "crashed"                      # the task process died every time it ran the task


@dataclasses.dataclass
class Fault:
    """A system error about one task, sent as its result.

    >>> f = Fault(FaultKind.REPLAYED, "nonce differs", worker="w1")
    >>> Fault.decode(f.encode()) == f
    True
    """

    kind: FaultKind
    message: str
    worker: str = ""
    incarnation: str = ""

    def encode(self) -> bytes:
        return json.dumps({"kind": self.kind.value, "message": self.message, "worker": self.worker,
                           "incarnation": self.incarnation}).encode()

    @classmethod
    def decode(cls, raw: bytes | memoryview) -> "Fault":
        d = json.loads(bytes(raw))
        try:
            kind = FaultKind(d.get("kind"))
        except ValueError:
            kind = FaultKind.BAD_FRAME
        return cls(kind, d.get("message", ""), d.get("worker", ""), d.get("incarnation", ""))


# -- worker status ----------------------------------------------------------------------
@dataclasses.dataclass
class WorkerStatus:
    """What a worker publishes with every heartbeat (``rhtc status``, routing, stealing).

    >>> s = WorkerStatus(name="w1", host="h", pid=1, incarnation="ab", key_fingerprint="f",
    ...                  task=TaskRef("0123456789abcdef", 2))
    >>> WorkerStatus.decode(s.encode()).task
    TaskRef(map_id='0123456789abcdef', index=2)
    """

    name: str
    host: str
    pid: int                                  # the supervisor's pid (stays while the name lives)
    incarnation: str
    key_fingerprint: str
    task_pid: int | None = None               # the process that runs the tasks (changes on a crash)
    t: float = 0.0
    started: float = 0.0
    task: TaskRef | None = None
    task_seconds: float | None = None
    tasks_done: int = 0
    errors: int = 0
    crashes: int = 0
    cache_bytes: int = 0
    cache_entries: int = 0
    cache_limit: int = 0
    disk_tier: str = ""                       # the node's disk tier it uses (worker.disk.tier_id), or ""
    disk_bytes: int = 0                       # bytes in that tier (all the node's workers together)
    disk_limit: int = 0                       # its cap
    bytes_read: int = 0
    bytes_from_cache: int = 0
    merged: int = 0                           # finished tasks its open partials hold (broker/wire/merge.py)
    versions: dict = dataclasses.field(default_factory=dict)
    metrics: dict = dataclasses.field(default_factory=dict)
    leaving: str = ""                         # why it is leaving on its own terms ("lifetime", "idle"), or ""
    leaves_at: float = 0.0                    # when it starts to drain at the end of its lifetime, 0: never
    credential: dict = dataclasses.field(default_factory=dict)   # its data credential (rhtc.credentials)
    queued: int | None = None                 # length of its own queue, filled in by the reader
    forged: str = ""                          # why its heartbeat is not genuine (the reader's verdict)

    @property
    def state(self) -> str:
        return "busy" if self.task is not None else "idle"

    @staticmethod
    def task_seconds_field() -> str:
        """The JSON field ``steal_one`` (lua/lib.lua) reads to tell a stuck worker."""
        return "task_seconds"

    def to_dict(self) -> dict:
        """A flat dict (the public ``live_workers()`` form): task as its ``map:index`` label."""
        d = dataclasses.asdict(self)
        d.update(d.pop("metrics"))
        d.update(self.versions)
        d["task"] = str(self.task) if self.task is not None else None
        d["state"] = self.state
        return d

    def encode(self, key: bytes | None = None) -> str:
        """JSON; with ``key`` (what a worker publishes), signed: :func:`status_forgery`."""
        d = {name: getattr(self, name) for name in _STATUS_PUBLISHED}    # (asdict deep-copies: 4x slower)
        d["task"] = list(self.task) if self.task is not None else None
        text = json.dumps(d)
        return text if key is None else text[:-1] + _SIG_OPEN + _status_mac(key, text) + '"}'


    @classmethod
    def decode(cls, raw: bytes | str, key: str = "a heartbeat") -> "WorkerStatus":
        """The status in ``raw`` (read from ``key``), checked against the fields' types
        (missing fields take their defaults, unknown ones are ignored); a record that does
        not match raises :class:`~broker.wire.records.MalformedRecord` naming ``key`` and the field
        (``{"task": ["x"]}``: field 'task' is ["x"], not a [map id, task index] pair)."""
        d = records.check(records.loads(raw, key), _STATUS_TYPES, key)
        d = {k: v for k, v in d.items() if k in _STATUS_TYPES}
        d["task"] = _task_ref(d.get("task"), key)
        records.check_items(d.get("versions", {}), (str,), key, "versions")
        metrics = d.get("metrics", {})
        records.check_items(metrics, (float, None), key, "metrics")
        if not metrics.keys().isdisjoint(_STATUS_TYPES):
            raise records.MalformedRecord(key, "metrics", f"names a field of the status ({sorted(metrics.keys() & _STATUS_TYPES)[0]})")
        records.check_items(d.get("credential", {}), (dict,), key, "credential")
        for kind, c in d.get("credential", {}).items():
            records.check(c, _CREDENTIAL, key)
        d.setdefault("name", "?")
        d.setdefault("host", "?")
        d.setdefault("pid", 0)
        d.setdefault("incarnation", "")
        d.setdefault("key_fingerprint", "")
        return cls(**d)


def _task_ref(task, key: str) -> TaskRef | None:
    """A status's ``task``: null, ``[map id, index]`` or the ``map:index`` label of :meth:`WorkerStatus.to_dict`."""
    if not task:
        return None
    if isinstance(task, str):
        map_id, _, index = task.partition(":")
        task = [map_id, int(index) if index.isdigit() else index]
    if not (isinstance(task, list) and len(task) == 2 and isinstance(task[0], str) and type(task[1]) is int):
        raise records.field_error(key, "task", task, ("a [map id, task index] pair",))
    return TaskRef(task[0], task[1])


_TYPE_NAMES = {"str": str, "int": int, "float": float, "dict": dict, "None": None, "TaskRef": list}
#: each field of a status and the JSON types it takes (from the dataclass's annotations)
_STATUS_TYPES = {f.name: tuple(_TYPE_NAMES[t.strip()] for t in f.type.split("|"))
                 for f in dataclasses.fields(WorkerStatus)} | {"task": (list, str, None)}
#: a data credential's description (rhtc.credentials.Credential.summary)
_CREDENTIAL = {"kind": (str,), "file": (str,), "mode": (str,), "expires": (float,)}


_STATUS_PUBLISHED = tuple(f.name for f in dataclasses.fields(WorkerStatus) if f.name not in ("queued", "forged"))
"""The fields a worker publishes (``queued`` and ``forged`` are the reader's)."""


# -- signed heartbeats ------------------------------------------------------------------
_SIG_OPEN = ', "sig": "'
_SIG_TAIL = len(_SIG_OPEN) + 64 + 2          # the signature field closes the JSON object


def _status_mac(key: bytes, text: str) -> str:
    return hmac.new(key, b"rhtc worker status\0" + text.encode(), "sha256").hexdigest()


def status_forgery(key: bytes, raw: bytes | str, name: str, status: WorkerStatus) -> str:
    """Why the heartbeat ``raw`` published under worker ``name`` is forged, or '' if a holder
    of ``key`` signed it for that name. A heartbeat claiming another key's fingerprint cannot
    be judged here: it is a misfit (routed around), not a forgery.

    >>> key = b"k" * 32
    >>> s = WorkerStatus(name="w1", host="h", pid=1, incarnation="i", key_fingerprint=key_fingerprint(key))
    >>> status_forgery(key, s.encode(key), "w1", s)
    ''
    >>> status_forgery(key, s.encode(key), "w2", s).split(" (")[0]
    "its heartbeat is a copy of w1's"
    """
    text = raw.decode(errors="replace") if isinstance(raw, bytes) else raw
    signed = len(text) > _SIG_TAIL and text[-_SIG_TAIL:].startswith(_SIG_OPEN)
    if signed and hmac.compare_digest(text[-_SIG_TAIL + len(_SIG_OPEN):-2],
                                      _status_mac(key, text[:-_SIG_TAIL] + "}")):
        if status.name == name:
            return ""
        return (f"its heartbeat is a copy of {status.name}'s (signed for {status.name}, "
                f"published under {name})")
    if status.key_fingerprint and status.key_fingerprint != key_fingerprint(key):
        return ""
    return ("its heartbeat claims this key's fingerprint but is " + ("not signed with the key" if signed
                                                                      else "unsigned"))
