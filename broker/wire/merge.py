"""The merge on the workers, as the wire sees it: what a map that reduces asks of its
workers (:class:`MergePlan`, sent as the map's function) and the payload of a *partial*,
one result frame (status :data:`~broker.wire.protocol.MERGED`) that stands for several tasks.

A worker running a map whose function is a :class:`MergePlan` folds each OK result into
a running partial of that map (with the map's reduce function) instead of sending it,
and hands the partial in when it covers ``tasks`` tasks, is ``seconds`` old, when the
worker's queue runs dry, or as soon as its next task is another map's (whatever the
map's backlog: a partial never waits for another map's task, however long it runs;
``worker/loopstate.py`` decides). The tasks of a partial stay leased until it is handed in; the
broker accepts it only while every task it covers is still leased to that worker
(``lua/take.lua``), and the client only when none of them is counted yet. Errors always
travel alone, one frame per task.

**The tree of partials.** A worker whose map has nothing left queued for it (its queue ran
dry while the map's backlog is empty: ``lua/take.lua`` says which maps still have one),
or whose next task is another map's, hands its partial *up* (``lua/merge.lua``) instead
of to the client (a map that goes on finds it in the pool). While the map's *pool* (a list
the map owns) holds partials of other workers, it is given up to ``fanin - 1`` of them to
fold into its own, and hands up again; once the pool is empty its partial goes to the
pool. The last one (with the tasks answered and pooled, it covers every task: the broker
counts them beside the map's size) goes to the client at once, with what the pool holds,
so a map's end brings its client one partial or a few, with no timer. A partial given to a merger is leased to it like a task: an entry of its lease
hash named by :func:`partial_id` (the map id and an index with the top bit set), holding
the partial's frame (or stub); a merger that dies gives it back to the pool (reap, claim,
reconcile: never an attempt), while its own tasks run again as any dead worker's. Its
hand-up counts only while every task and every partial it folded in is still leased to
it. The audit reads the pool and the partial entries as it reads the results list.
A merger verifies each partial's signature and map before it unpickles it; one that
overlaps its own partial, or that its reduce function refuses, goes to the client alone
(which takes a partial only if none of its tasks is counted yet).

**A fold that raises** (a reduce function with a bug, a ``MemoryError`` on a small node
halfway through ``a += b``) leaves the worker's partial as it was before the fold (it
folds into a value it can throw away: :func:`worker.merge.fold_aside`) and sends what it
could not fold to the client unmerged, with a :class:`FoldFailure` riding along in a
:class:`Noted` value: the client folds it as ``merge=False`` would (the same answer, or
the same error) and says which worker failed, on which tasks, with its traceback.

The payload of a partial::

    count (uint32 BE) | count task indices (uint32 BE each) | depth (uint8)
    | metas count (uint32 BE) | their sizes (uint32 BE each) | the tasks' packed ResultMetas
    (in the order of the indices) | packed value

The depth is the partial's level in the tree: 1 for a worker's own tasks, one more than
the deepest partial a merger folded in (what ``bench scale`` prints as the tree's depth).

    >>> meta = ResultMeta(worker="w1", host="n1", pid=7, start=1.0, stop=2.0)
    >>> payload = encode_partial([4, 9], [meta, meta], b"xyz", depth=2)
    >>> indices, metas, packed = decode_partial(payload)
    >>> indices, metas[1].worker, packed, partial_depth(payload)
    ([4, 9], 'w1', b'xyz', 2)
    >>> combine({"n": 1, "h": [1]}, {"n": 2})
    {'n': 3, 'h': [1]}
    >>> from rhtc.broker.wire.protocol import TaskRef
    >>> pid = partial_id("0123456789abcdef", 5)
    >>> len(pid), is_partial_id(pid), is_partial_id(TaskRef("0123456789abcdef", 5).task_id)
    (20, True, False)
"""
from __future__ import annotations

import dataclasses
import struct
from typing import Any, Callable, Sequence

from .protocol import MAP_ID_LEN
from .resultmeta import ResultMeta, pack_meta, unpack_meta

_U32 = struct.Struct(">I")

#: A map whose mergers died this many times with partials in hand merges no more in the
#: tree: its partials (those given back, those handed up later) go to the client as they
#: are. A reduce function that kills the process that runs it (it outgrows memory, it
#: crashes in C) would otherwise kill merger after merger, each death sending the merger's
#: own tasks to run again until they count as poison; one death may be a lost node (the
#: inputs go back to the pool, merged by another), two are the map's doing.
MERGER_DEATHS = 2


def combine(a: Any, b: Any) -> Any:
    """``a + b``, recursing into dicts (keys of either side kept) and tuples: what
    ``reduce=True`` folds results with, on the client and on the workers. It writes into
    neither argument (new dicts, tuples, sums), even when it raises halfway: a worker folds
    its partial with it in place (:func:`worker.merge.fold_aside`)."""
    if a is None:
        return b
    if b is None:
        return a
    if isinstance(a, dict) and isinstance(b, dict):
        out = dict(a)
        for k, v in b.items():
            out[k] = combine(out[k], v) if k in out else v
        return out
    if isinstance(a, tuple) and isinstance(b, tuple) and len(a) == len(b):
        return tuple(combine(x, y) for x, y in zip(a, b))
    try:
        return a + b
    except TypeError as err:
        raise TypeError(f"cannot combine a {type(a).__name__} with a {type(b).__name__} using +: "
                        f"{err}. Return numbers, numpy arrays, hist objects or dicts of them, or "
                        "pass reduce=<your function of two results>") from err


@dataclasses.dataclass(frozen=True)
class FoldFailure:
    """A fold that raised on a worker: folding the value of ``tasks`` (another worker's
    partial if ``partial``, else one task's result) into its partial of ``into`` tasks of
    map ``map_id``, the reduce function raised ``error`` (a
    :class:`~broker.wire.messages.TaskError`'s wire form: type, message, remote traceback). The
    partial stayed as it was; the value went to the client unmerged.

    >>> f = FoldFailure("0123456789abcdef", "w1", "n1", (7,), 3, False, {"type": "MemoryError"})
    >>> f.what
    'the result of task 7'
    """

    map_id: str
    worker: str
    host: str
    tasks: tuple[int, ...]
    into: int
    partial: bool
    error: dict

    @property
    def what(self) -> str:
        """What the worker could not fold, in words."""
        if not self.partial:
            return f"the result of task {self.tasks[0]}"
        shown = ", ".join(map(str, self.tasks[:10])) + (" ..." if len(self.tasks) > 10 else "")
        return f"another worker's partial of {len(self.tasks)} tasks ({shown})"


@dataclasses.dataclass(frozen=True)
class Noted:
    """A merging map's value as it travels with the :class:`FoldFailure` met on its way: a
    task's result that its worker could not fold (the failure is about it), or a partial
    into which its worker could not fold another (the failure is about that other one).
    Whoever reads a merging map's values takes them apart with :func:`unnoted`.

    >>> unnoted(Noted(5, ())), unnoted(5)
    ((5, []), (5, []))
    """

    value: Any
    failures: tuple[FoldFailure, ...]


def unnoted(value: Any) -> tuple[Any, list[FoldFailure]]:
    """(the value itself, the fold failures it carries) of a merging map's value."""
    if type(value) is Noted:
        return value.value, list(value.failures)
    return value, []


@dataclasses.dataclass(frozen=True)
class MergePlan:
    """A map's function when its workers merge: run ``fn``; fold OK results with
    ``reduce`` (None: :func:`combine`); hand a partial in after ``tasks`` tasks or
    ``seconds`` s; at the map's end, up a tree of fan-in ``fanin``. Callable as ``fn`` itself, so a worker that knows no merging runs it
    as a plain function and sends each result alone.

    >>> MergePlan(abs, None, 8, 5.0)(-3)
    3
    """

    fn: Callable
    reduce: Callable | None
    tasks: int
    seconds: float
    fanin: int = 1               # the tree's fan-in (RHTC_MERGE_FANIN); 1: no tree

    def __call__(self, arg):
        return self.fn(arg)

    def fold(self, partial: Any, value: Any) -> Any:
        return (self.reduce or combine)(partial, value)


def encode_partial(indices: Sequence[int], metas: Sequence[ResultMeta], packed_value: bytes,
                   depth: int = 1) -> bytes:
    """The payload of a partial covering ``indices`` (one meta each, packed as a single
    result's: :mod:`broker.wire.resultmeta`) at ``depth`` in the tree."""
    return b"".join(partial_parts(indices, metas, [packed_value], depth))


def partial_parts(indices: Sequence[int], metas: Sequence[ResultMeta], packed_value: list[bytes],
                  depth: int = 1) -> list[bytes]:
    """:func:`encode_partial`'s payload as its parts (the packed value's as given: see
    :func:`broker.wire.protocol.sign`)."""
    raw = [pack_meta(m) for m in metas]
    head = b"".join([_U32.pack(len(indices)), struct.pack(f">{len(indices)}I", *indices),
                     bytes([min(255, max(0, depth))]),
                     _U32.pack(len(raw)), struct.pack(f">{len(raw)}I", *map(len, raw)), *raw])
    return [head, *packed_value]


def decode_partial(payload: bytes | memoryview) -> tuple[list[int], list[ResultMeta], bytes | memoryview]:
    """(indices, metas, packed value) of a verified partial's payload."""
    view = memoryview(payload)
    n = _U32.unpack_from(view)[0]
    indices = list(struct.unpack_from(f">{n}I", view, 4))
    at = 5 + 4 * n                                     # (after the depth)
    m = _U32.unpack_from(view, at)[0]
    sizes = struct.unpack_from(f">{m}I", view, at + 4)
    at += 4 + 4 * m
    metas = []
    for size in sizes:
        metas.append(unpack_meta(view[at:at + size]))
        at += size
    return indices, metas, payload[at:]


def partial_depth(payload: bytes | memoryview) -> int:
    """The depth in the tree of a verified partial's payload (:func:`encode_partial`)."""
    return payload[4 + 4 * _U32.unpack_from(payload)[0]]


_TOP_BIT = 0x80000000


def partial_id(map_id: str, seq: int) -> bytes:
    """The lease field of a partial leased to a merger (``lua/lib.lua`` builds them: the
    map id and ``seq`` with the top bit set, which no task index has), as long as a task
    id, so a worker's held list and a hand-in's ids mix both."""
    return map_id.encode("ascii") + struct.pack(">I", _TOP_BIT | (seq % _TOP_BIT))


def is_partial_id(lease_id: bytes) -> bool:
    """Whether a lease field names a partial leased to a merger (else: a task)."""
    return len(lease_id) > MAP_ID_LEN and lease_id[MAP_ID_LEN] >= 0x80
