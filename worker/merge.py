"""A worker's running partials: the OK results of each map that merges
(:class:`~broker.wire.merge.MergePlan`), folded in as they come and handed in as one signed
frame per map when the partial covers the plan's number of tasks, is the plan's number
of seconds old, when the worker's queue runs dry, or (up the tree, :mod:`worker.tree`) as
soon as its next task is another map's, whatever its map's backlog: a partial never
waits for another map's task, however long that runs. When these happen is the loop
state's decision (:mod:`worker.loopstate`); this module folds and packs.

A worker never folds a task twice: one it already holds in a partial that comes back (a
broker that restarted lost its lease, and its client sent it again) is not run again
(:meth:`Partials.holds`); it stays leased here and goes in with the partial.

The tasks a partial covers stay leased (and held, so the supervisor's reconcile leaves
them alone) until it is handed in; a worker that dies with a partial loses it and its
tasks run again elsewhere. Errors never come here.

A fold that raises (the reduce function's bug, or a ``MemoryError`` halfway through
``a += b``) leaves the partial as it was before (:func:`fold_aside`): what it could not fold
goes to the client unmerged (a task's result alone, another worker's partial as it came),
with a :class:`~broker.wire.merge.FoldFailure` (this worker, the tasks, the exception and its
traceback) riding along in a :class:`~broker.wire.merge.Noted` value; the client folds it as
``merge=False`` would, and says so. Each task is counted once: in the partial, or sent on.

    >>> from rhtc.broker.wire.merge import MergePlan
    >>> from rhtc.broker.wire.messages import ResultMeta
    >>> from rhtc.broker.wire.protocol import TaskRef
    >>> p = Partials(b"k" * 32, room=100)
    >>> plan = MergePlan(abs, None, 2, 60.0)
    >>> meta = ResultMeta(worker="w1", host="n1", pid=7, start=1.0, stop=2.0)
    >>> p.fold(plan, TaskRef("0123456789abcdef", 0), 1, meta), p.due()
    (True, [])
    >>> p.fold(plan, TaskRef("0123456789abcdef", 1), 2, meta), len(p.due()), p.held()
    (True, 1, [])
    >>> p.fold(plan, TaskRef("fedcba9876543210", 0), 1, meta), p.holds(TaskRef("fedcba9876543210", 0))
    (True, True)
    >>> len(p.close(["fedcba9876543210"])), list(p.open)     # another map's task next: it goes
    (1, [])
"""
from __future__ import annotations

import copy
import dataclasses
import logging
import struct
import time
from typing import Any, Callable

from ..broker.wire import protocol
from ..broker.wire.config import mib
from ..broker.leases import BulkLimits
from ..broker.wire.merge import FoldFailure, MergePlan, Noted, decode_partial, partial_depth, partial_parts, unnoted
from ..broker.wire.messages import ErrorKind, ResultMeta, decode_result, encode_result
from ..broker.wire.resultmeta import result_parts
from .outbox import Outgoing
from .results import ALWAYS_FITS, NO_ARGUMENT, describe_error, pack_result, result_limit, safe_text, task_error

log = logging.getLogger("rhtc.worker")



@dataclasses.dataclass
class Partial:
    """The folded OK results of one map on this worker, not handed in yet: of its own tasks
    (leased here as tasks) and of the partials it folded in as a merger (leased here as
    partials, :mod:`broker.wire.merge`)."""

    plan: MergePlan
    map_id: str
    value: Any
    since: float                                           # monotonic time of its first task
    indices: list[int] = dataclasses.field(default_factory=list)     # every task it covers
    metas: list[ResultMeta] = dataclasses.field(default_factory=list)
    covered: set[int] = dataclasses.field(default_factory=set)    # the indices, to look up
    own: list[int] = dataclasses.field(default_factory=list)      # those of its own tasks
    folded: list[bytes] = dataclasses.field(default_factory=list)  # lease ids of the partials folded in
    again: list[bytes] = dataclasses.field(default_factory=list)   # tasks of those, leased here again
    depth: int = 1                                                 # its level in the tree (broker/wire/merge.py)
    failures: list[FoldFailure] = dataclasses.field(default_factory=list)   # folds that raised, to tell the client

    @property
    def tids(self) -> list[bytes]:
        """What it stands for in this worker's lease: its tasks, the partials folded in."""
        return [protocol.TaskRef(self.map_id, i).task_id for i in self.own] + self.folded + self.again


def owned(value: Any) -> Any:
    """A deep copy of a task's result, for a partial to fold into. An in-place ``reduce``
    (``a += b; return a``) writes into its first argument: never into what a task returned
    (it may be an array a cache serves, or an object the task keeps), only into a value the
    partial owns, so the merge gives what ``merge=False`` gives, cold and warm.

    >>> import numpy as np
    >>> served = np.arange(3.0); served.flags.writeable = False
    >>> mine = owned(served)
    >>> mine += 1; mine.tolist(), served.tolist()
    ([1.0, 2.0, 3.0], [0.0, 1.0, 2.0])
    """
    return copy.deepcopy(value)


def fold_aside(plan: MergePlan, partial: Any, value: Any) -> Any:
    """``plan.fold(partial, value)`` without writing into ``partial``: a reduce that raises
    halfway through ``a += b`` leaves the partial as it was, so what it could not fold can
    go on alone, counted once. The map's own reduce function folds into a copy of the
    partial (for an 8 MB histogram, ~0.5 ms: less than ``a + b`` and ~10 times less than
    pickling it for the client); ``reduce=True``'s :func:`~broker.wire.merge.combine` writes into
    neither argument, so it folds the partial itself.

    >>> import numpy as np
    >>> plan = MergePlan(abs, lambda a, b: a.__iadd__(b) if b[0] < 9 else 1 / 0, 8, 60.0)
    >>> partial = np.zeros(2)
    >>> fold_aside(plan, partial, np.ones(2)).tolist(), partial.tolist()
    ([1.0, 1.0], [0.0, 0.0])
    """
    if plan.reduce is None:
        return plan.fold(partial, value)
    return plan.fold(owned(partial), value)


class Partials:
    """The running partials of one task process (one per map that merges)."""

    def __init__(self, key: bytes, room: int, max_result_bytes: int = 64 * 2**20,
                 broker_limits: Callable[[], BulkLimits] = BulkLimits):
        self.key, self.room = key, room
        self.max_result_bytes, self.broker_limits = max_result_bytes, broker_limits
        self.open: dict[str, Partial] = {}
        self._ready: list[Outgoing] = []
        self.unfolded: list[bytes] = []        # partials folded into one that could not travel
        self.taking: list[bytes] = []          # partials given to this merger, being folded in

    def __bool__(self) -> bool:
        return bool(self.open or self._ready)

    def fold(self, plan: MergePlan, ref: protocol.TaskRef, value: Any, meta: ResultMeta) -> bool:
        """Fold task ``ref``'s OK ``value`` into its map's partial. When the reduce function
        raises, the partial stays as it was and the value goes alone (ready, :meth:`due`),
        noted with the failure. False when it cannot be copied to start a partial: the
        caller sends it alone, as ``merge=False`` does."""
        part = self.open.get(ref.map_id)
        if part is not None and ref.index in part.covered:     # never counted twice (see holds)
            log.warning("map %s: task %d is already in this worker's partial; its second result is "
                        "dropped", ref.map_id, ref.index)
            return True
        if part is None:               # the partial starts from a value of its own (see owned)
            try:
                start = owned(value)
            except Exception as err:
                log.warning("map %s: task %d's result cannot be copied to start a partial (%s); it goes "
                            "alone", ref.map_id, ref.index, safe_text(_short, err, "?"))
                return False
            self.open[ref.map_id] = Partial(plan, ref.map_id, start, time.monotonic(),
                                            [ref.index], [meta], {ref.index}, [ref.index])
            return True
        try:
            folded = fold_aside(plan, part.value, value)
            folded = owned(folded) if folded is value else folded
        except Exception as err:       # the partial is as it was: the value goes on, once
            self._ready.append(self._alone(ref, value, meta, self._failed(part, err, [ref.index], False)))
            return True
        part.value = folded
        part.indices.append(ref.index)
        part.metas.append(meta)
        part.covered.add(ref.index)
        part.own.append(ref.index)
        return True

    def absorb(self, map_id: str, inputs: list[tuple[bytes, bytes]],
               read: Callable[[bytes], bytes | None]) -> tuple[list[bytes], list[bytes]]:
        """Fold the partials given to this worker as a merger (lease id, frame or stub;
        ``read`` gives a stub's frame) into its partial of ``map_id``. Each is verified
        (signed with the session's key, of this map, a result) before it is unpickled.
        Returns (aside: those that go to the client as they are, because they overlap this
        partial or the reduce function refused them; dropped: those that cannot be read,
        whose tasks the map's audit sends again)."""
        part = self.open[map_id]
        aside, dropped = [], []
        for pid, item in inputs:
            frame = read(item)
            try:
                if frame is None:
                    raise protocol.BadFrame("its blob is gone")
                mid, index, status, payload = protocol.unpack_result(self.key, frame)
                if mid != map_id or status not in (protocol.OK, protocol.MERGED):
                    raise protocol.BadFrame(f"it is not a partial of map {map_id}")
                if status == protocol.OK:
                    meta, packed = decode_result(payload)
                    indices, metas, depth = [index], [meta], 0
                else:
                    indices, metas, packed = decode_partial(payload)
                    depth = partial_depth(payload)
            except (protocol.BadFrame, ValueError, struct.error) as err:
                log.warning("map %s: dropped a partial given to merge (%s); its tasks run again", map_id, err)
                dropped.append(pid)
                continue
            if len(set(indices)) != len(indices) or part.covered.intersection(indices):
                aside.append(pid)      # a task twice: the client takes one of them, never both
                continue
            try:
                value, carried = unnoted(protocol.loads(packed))
            except Exception as err:   # (pickled with something this worker lacks): the client may read it
                log.warning("map %s: a partial given to merge does not unpickle here (%s); it goes to the "
                            "client as it is", map_id, safe_text(_short, err, "?"))
                aside.append(pid)
                continue
            try:
                folded = fold_aside(part.plan, part.value, value)
            except Exception as err:   # the partial is as it was: theirs goes to the client as it came
                part.failures.append(self._failed(part, err, indices, True))
                aside.append(pid)
                continue
            part.value = folded            # (what loads gave is ours: folding into it is fine)
            part.failures += carried
            part.indices += indices
            part.metas += metas
            part.covered.update(indices)
            part.folded.append(pid)
            part.depth = max(part.depth, depth + 1)
        return aside, dropped

    def pack_up(self, map_id: str) -> tuple[bytes, bytes] | None:
        """(the lease ids, the signed frame) of the partial of ``map_id`` to hand up; None
        when its value cannot travel: it is closed, its own tasks' errors are ready (:meth:`due`)
        and the partials it folded in are left in :attr:`unfolded`."""
        part = self.open[map_id]
        out = self._pack(part)
        if len(out) == 1 and out[0][2][protocol.FRAME_PREFIX + protocol.TASK_ID_LEN] in (protocol.OK, protocol.MERGED) \
                and b"".join(part.tids) == out[0][1]:
            return out[0][1], out[0][2]
        self.open.pop(map_id)
        self._ready += out
        self.unfolded += part.folded
        return None

    def holds(self, ref: protocol.TaskRef) -> bool:
        """Whether task ``ref`` is folded into an open partial here: delivered again (a
        broker restart lost its lease and the client sent it again), it is not run again
        (its new lease goes with the partial)."""
        part = self.open.get(ref.map_id)
        if part is None or ref.index not in part.covered:
            return False
        if ref.index not in part.own and ref.task_id not in part.again:
            part.again.append(ref.task_id)
        return True

    def watched(self) -> list[str]:
        """The maps of the open partials (the take asks the broker about their backlogs)."""
        return list(self.open)

    def close(self, map_ids: list[str]) -> list[Outgoing]:
        """The frames of the open partials of ``map_ids`` (those still open) and what is
        ready: the worker's loop state (:mod:`worker.loopstate`) says which maps go."""
        for other in map_ids:
            part = self.open.pop(other, None)
            if part is not None:
                self._ready += self._pack(part)
        out, self._ready = self._ready, []
        return out

    def ready_ids(self) -> list[bytes]:
        """The lease ids of the frames ready to go (not in an open partial any more)."""
        n = protocol.TASK_ID_LEN
        return [tids[at:at + n] for _, tids, _ in self._ready for at in range(0, len(tids), n)]

    @property
    def count(self) -> int:
        """How many tasks the open partials cover."""
        return sum(len(part.indices) for part in self.open.values())

    def held(self) -> list[bytes]:
        """The lease ids of the open partials (their tasks, the partials folded in, those
        being folded in now): still leased here."""
        return [tid for part in self.open.values() for tid in part.tids] + self.taking

    def due(self) -> list[Outgoing]:
        """The frames to hand in now: partials full or old, all of them when together they
        cover ``room`` tasks (what the worker may hold), and what is ready."""
        now, total = time.monotonic(), self.count
        for map_id, part in list(self.open.items()):
            if total >= self.room or len(part.indices) >= part.plan.tasks or now - part.since >= part.plan.seconds:
                self._ready += self._pack(self.open.pop(map_id))
        out, self._ready = self._ready, []
        return out

    def flush(self) -> list[Outgoing]:
        """Every partial's frame (the queue ran dry, or the worker stops)."""
        for map_id in list(self.open):
            self._ready += self._pack(self.open.pop(map_id))
        out, self._ready = self._ready, []
        return out

    def _failed(self, part: Partial, err: Exception, tasks: list[int], partial: bool) -> FoldFailure:
        """The note of a fold into ``part`` that raised ``err`` on the value of ``tasks``
        (logged here; the client is told by the value that goes on)."""
        mine = part.metas[0]            # (a partial starts with one of this worker's own tasks)
        failure = FoldFailure(part.map_id, mine.worker, mine.host, tuple(tasks), len(part.indices), partial,
                              dict(describe_error(err, NO_ARGUMENT), exception=None))
        log.warning("map %s: the reduce function raised folding %s into this worker's partial of %d tasks "
                    "(%s); the partial is as it was, and that value goes to the client unmerged",
                    part.map_id, failure.what, failure.into, safe_text(_short, err, "?"))
        return failure

    def _alone(self, ref: protocol.TaskRef, value: Any, meta: ResultMeta, failure: FoldFailure) -> Outgoing:
        """Task ``ref``'s result frame, its value noted with the fold that failed on it."""
        status, payload = pack_result(protocol.OK, value, meta, NO_ARGUMENT, self.max_result_bytes,
                                      self.broker_limits, dumps=lambda v: protocol.dumps_parts(Noted(v, (failure,))))
        return ref.map_id, ref.task_id, protocol.pack_result(self.key, ref.map_id, ref.index, status, payload)

    def _pack(self, part: Partial) -> list[Outgoing]:
        """One MERGED frame; a partial of one task as a plain result; a value that cannot
        travel as one error per task it covers (errors always travel alone)."""
        try:
            packed = protocol.dumps_parts(Noted(part.value, tuple(part.failures)) if part.failures else part.value)
        except BaseException as err:   # noqa: B036 - a value's __reduce__ may raise anything
            why = safe_text(lambda e: f"{type(e).__name__}: {e}", err, type(err).__name__)
            return self._errors(part, ErrorKind.UNPICKLABLE_RESULT,
                                f"the merged result of {len(part.indices)} tasks is a {type(part.value).__name__} "
                                f"that cannot be pickled ({why}); return plain numbers, numpy arrays, hist "
                                "objects or dicts of them")
        size = sum(map(len, packed))
        if size > min(self.max_result_bytes, ALWAYS_FITS):
            limit = result_limit(self.max_result_bytes, self.broker_limits())
            if size > limit.nbytes:
                return self._errors(part, ErrorKind.RESULT_TOO_LARGE,
                                    f"the merged result of {len(part.indices)} tasks is {mib(size)} "
                                    f"compressed, over the limit of {mib(limit.nbytes)} ({limit.setting}): the "
                                    "reduce makes it grow with every task (lists that concatenate?); pass "
                                    f"merge=False, return histograms or sums, {limit.advice}")
        first = part.indices[0]
        if len(part.indices) == 1:
            payload, status = result_parts(packed, part.metas[0]), protocol.OK
        else:
            payload, status = partial_parts(part.indices, part.metas, packed, part.depth), protocol.MERGED
        return [(part.map_id, b"".join(part.tids), protocol.pack_result(self.key, part.map_id, first, status, payload))]

    def _errors(self, part: Partial, kind: ErrorKind, message: str) -> list[Outgoing]:
        """One error per task of its own (the partials it folded in go to the client as they
        are: :meth:`pack_up`; or back to the pool, not held any more)."""
        info = protocol.dumps(task_error(kind, message, "", NO_ARGUMENT))
        metas = dict(zip(part.indices, part.metas))
        return [(part.map_id, protocol.TaskRef(part.map_id, i).task_id,
                 protocol.pack_result(self.key, part.map_id, i, protocol.USER_ERROR, encode_result(info, metas[i])))
                for i in part.own]


def _short(err: BaseException) -> str:
    return f"{type(err).__name__}: {err}"
