"""One map's state on the client, as a pure state machine: events in, instructions out.

A :class:`MapState` owns everything a map knows per task: each task's state and notes
(:class:`~client.engine.tasks.TaskTable`), the retries waiting out their back-off, the
ledger of finished tasks, the outbox of results not yet handed to the caller, the tasks
the audit saw missing once, and how many accepted partials covered each task. It also
keeps what it learned of the workers (which run our tasks, which hold another key, which
it shuns). :meth:`MapState.handle` takes one event (:mod:`client.engine.events`) and
returns the instructions for its driver (:class:`client.engine.maprun.MapRun`), which
alone talks to Redis. No Redis, no clock, no threads here: time arrives in the events.
dask's ``distributed/worker_state_machine.py`` is the model. The map's life in Redis
(sent, its end signed, its keys dropped; closed) is a phase of the state too
(:mod:`client.engine.lifecycle`), moved by the driver's writes it reports.

Every move of a task goes through :data:`~client.engine.tasks.TRANSITIONS`; a move it
does not allow raises :class:`~client.engine.tasks.InvalidTransition` with the task's
story. A duplicate (a backup's second result, a partial covering a counted task) is
recognised before any move and changes nothing.

    >>> from rhtc.broker.wire.messages import ResultMeta
    >>> from rhtc.client.engine.retry import RetryPolicy
    >>> from rhtc.client.engine.events import Result
    >>> s = MapState(2, "m1", RetryPolicy())
    >>> meta = ResultMeta(worker="w", host="h", pid=1, start=0.0, stop=1.0)
    >>> s.handle(Result(0, "a", meta, now=1.0)), s.handle(Result(0, "a", meta, now=2.0))
    ([], [])
    >>> s.handle(Result(1, "b", meta, now=3.0))
    [Finish()]
    >>> [(r.index, r.value) for r in s.take()], s.delivered
    ([(0, 'a'), (1, 'b')], 2)
"""
from __future__ import annotations

import random
from typing import Callable

from ...broker.wire.messages import ErrorKind, FaultKind
from ..errors import RemoteError, undecodable_error
from .decisions import lost_tasks
from .events import (Audited, Backup, Cancel, CancelMap, Enqueue, Faulted, Finish, GiveUp, MapVanished,
                     NoteError, Observed, Partial, Raised, Report, Result, Results, TakeBack, Tick, Unclaimed,
                     Undecodable, Unverifiable)
from .ledger import Ledger
from .lifecycle import WRITES, Lifecycle
from .retry import RetryPolicy, RetryQueue
from .story import Story
from .tasks import InvalidTransition, TaskResult, TaskState, TaskTable

Q, L, R, B, D, F, C = TaskState
_DONE = int(D)                    # the per-result path moves with a plain int (enum hashing costs)
_WAITING = (Q, L)
_NONE: list = []                  # "no instruction" (never appended to)


_RNG = random.Random()       # the retries' jitter, shared by the maps that bring no rng of their own


class MapState:
    """All per-task state of one map of ``n`` tasks (see the module docstring)."""

    def __init__(self, n: int, map_id: str, policy: RetryPolicy, *, fingerprint: str = "",
                 merging: bool = False, describe: Callable[[int], str] = str,
                 rng: random.Random | None = None, now: float = 0.0):
        self.n, self.map_id, self.policy, self.fingerprint = n, map_id, policy, fingerprint
        self.describe = describe              # an argument as an error names it (pure)
        self.rng = rng or _RNG                # (a Random of its own: ~10 us of os.urandom a map)
        self.tasks = TaskTable(n)
        self.ledger = Ledger(n)
        self.retries = RetryQueue()
        self.outbox: list[TaskResult] = []
        self.delivered = 0                    # results the driver took for the caller
        self.merging = merging
        self.in_partial = bytearray(n if merging else 0)   # per task: accepted partials covering it
        self.missing: set[int] = set()        # seen missing from the broker by one audit
        self.partials_accepted = self.partials_refused = self.resubmissions = 0
        self.workers: dict = {}               # name -> latest WorkerStatus of each live worker
        self.misfits: set[str] = set()        # live workers holding another key
        self.shunned: set[str] = set()        # live-looking workers that took none of their queue
        self.last_progress = now              # when a task last finished
        self.cancelled = self.ended = False
        self.cancelled_by: str | None = None
        self.life = Lifecycle(map_id)         # the map in Redis: sent, ended, dropped; closed
        self._warned_unverified = False
        self._story = Story()
        self._handlers = {Result: self._result, Results: self._results, Raised: self._raised, Undecodable: self._undecodable,
                          Faulted: self._faulted, Partial: self._partial, Unverifiable: self._unverifiable,
                          Observed: self._observed, Audited: self._audited, Backup: self._backup,
                          GiveUp: self._give_up, MapVanished: self._vanished, Unclaimed: self._unclaimed,
                          Tick: self._tick, Cancel: self._cancel}
        self._handlers.update(dict.fromkeys(WRITES, self._wrote))   # the driver's writes: its life in Redis

    # -- the one entry point ------------------------------------------------------------
    def handle(self, event) -> list:
        """Apply one event; return the instructions for the driver (a list, maybe empty)."""
        if type(event) is Results:       # (what story() tells: its indices, never the values)
            self._story.remember_fetch(event.indices)
        else:
            self._story.remember(event)
        out = self._handlers[type(event)](event)
        if self.tasks.unanswered == 0 and not self.ended and not self.cancelled:
            out = (out or []) + self._finish()
        return out

    def take(self) -> list[TaskResult]:
        """The results waiting for the caller (each task's once), handed over now."""
        out, self.outbox = self.outbox, []
        self.delivered += len(out)
        return out

    # -- queries ------------------------------------------------------------------------
    @property
    def done(self) -> bool:
        """Nothing more to wait for: every task answered, or the map was cancelled."""
        return self.cancelled or self.tasks.finished

    def waiting(self) -> list[int]:
        """The tasks still owed an answer from the workers (walks the table)."""
        return self.tasks.indices(Q, L)

    def backed_up(self, index: int) -> bool:
        note = self.tasks.notes.get(index)
        return bool(note and note.backup)

    def good_workers(self) -> list[str]:
        """Live workers known to hold this client's key and not shunned."""
        return sorted(n for n, s in self.workers.items() if n not in self.misfits and n not in self.shunned
                      and not s.forged and s.key_fingerprint == self.fingerprint)

    def story(self, index: int) -> str:
        """What the map knows of task ``index``: its state, note, ledger rows, retries and
        the recent events about it (for an error that must be reported)."""
        note = self.tasks.notes.get(index)
        rows = sum(1 for i in self.ledger._index if i == index)
        seen = self._story.about(index)
        return (f"task {index} of map {self.map_id} is {self.tasks.state(index).name.lower()}; note {note}; "
                f"{rows} ledger row(s); in the retry queue: {index in self.retries}; partials covering it: "
                f"{self.in_partial[index] if self.in_partial else 0}; recent events about it: "
                f"{', '.join(seen[-12:]) or 'none'}")

    # -- moves ----------------------------------------------------------------------------
    def _move(self, index: int, to: TaskState) -> None:
        if not self.tasks.move(index, to):
            raise InvalidTransition(f"{self.tasks.state(index).name.lower()} -> {to.name.lower()} is not in "
                                    f"the transitions table: {self.story(index)}")

    def _requeue(self, indices, *, route: bool = True, fair: bool = False, upload: bool = False,
                 backup: bool = False) -> list:
        """Send the tasks still owed an answer again (a final one stays as it is); nothing
        once the map is closed (its caller is gone: what it sent is being removed)."""
        if self.life.closed:
            return _NONE
        moved = [i for i in indices if 0 <= i < self.n and not self.tasks.is_final(i)]
        for i in moved:
            self._move(i, Q)
            if backup:
                self.tasks.note(i).backup = True
        if not moved and not upload:
            return _NONE
        self.resubmissions += len(moved)
        return [Enqueue(moved, route=route, fair=fair, upload=upload)]

    def _fail(self, index: int, error: RemoteError, meta, now: float) -> list:
        """Give up on a task that is not final yet: it fails with ``error``."""
        if self.tasks.is_final(index):
            return _NONE
        self._move(index, F)
        note = self.tasks.notes.get(index)
        if meta is None and error.remote_type == ErrorKind.WORKER_LOST:      # its last run is its row
            meta = self.ledger.lost_runs(index, error.history, final=True)
        self.ledger.add(index, meta, error=f"{error.remote_type}: {error.message}",
                        retries=note.user_attempts if note else 0, received=now)
        self.last_progress = now
        self.outbox.append(TaskResult(index, None, meta, error))
        return [NoteError(index, error)]

    def _finish(self) -> list:
        """Every task answered: the refused ones fail with their refusal; the map ends."""
        for i in self.tasks.indices(R):
            refusal = self.tasks.note(i).refusal
            self._move(i, F)
            self.ledger.add(i, None, error=f"{refusal.remote_type}: {refusal.message}")
            self.outbox.append(TaskResult(i, None, None, refusal))
        self.ended = True
        return [Finish()]

    # -- events -----------------------------------------------------------------------------
    def _result(self, e: Result) -> list:
        if self._answered(e.index, e.value, e.meta, e.now):
            self.last_progress = e.now
        return _NONE

    def _results(self, e: Results) -> list:
        answered, counted = self._answered, False
        for i, value, meta in e.results:
            counted = answered(i, value, meta, e.now) or counted
        if counted:
            self.last_progress = e.now
        return _NONE

    def _answered(self, i: int, value, meta, now: float) -> bool:
        """Count task ``i``'s result, unless it is a duplicate (a slow worker's or a
        backup's copy); whether it counted."""
        tasks = self.tasks
        if not 0 <= i < self.n or tasks.is_final(i):
            return False
        tasks.move(i, _DONE) or self._move(i, D)  # (the second call raises with the story)
        note = tasks.notes.get(i)
        self.ledger.add(i, meta, retries=note.user_attempts if note else 0, received=now,
                        backup=bool(note and note.backup))
        self.outbox.append(TaskResult(i, value, meta))
        return True

    def _raised(self, e: Raised) -> list:
        i = e.index
        if not 0 <= i < self.n or self.tasks.is_final(i) or self.tasks.state(i) is B:
            return _NONE                          # a duplicate, or a second copy's error: retry planned
        note = self.tasks.note(i)
        if not self.policy.retry_user_error(note, e.info):
            return self._fail(i, RemoteError(i, e.info.type, e.info.message, e.info.traceback,
                                             worker=e.meta.worker, host=e.meta.host,
                                             argument=e.info.argument or None,
                                             exception=self.policy.exception_of(e.info)), e.meta, e.now)
        pause = self.policy.delay(note, self.rng)
        self.ledger.attempt(i, e.meta, e.info.summary(), "retried", backoff=pause)
        said = Report(f"map {self.map_id}: task {i} raised {e.info.type}; retry {note.user_attempts} of "
                      f"{self.policy.retries} in {pause:.1f} s")
        if pause > 0:
            self._move(i, B)
            self.retries.add(i, e.now + pause)
            return [said]
        return [said, *self._requeue([i])]

    def _undecodable(self, e: Undecodable) -> list:
        if not 0 <= e.index < self.n:
            return _NONE
        return self._fail(e.index, e.error, e.meta, e.now)

    def _faulted(self, e: Faulted) -> list:
        i, fault = e.index, e.fault
        if not 0 <= i < self.n or self.tasks.is_final(i):
            return _NONE
        note = self.tasks.note(i)
        if fault.kind is FaultKind.MISSING_FUNCTION and self.policy.retry_fault(note):
            return self._requeue([i], upload=True)
        if fault.kind is FaultKind.REPLAYED:
            return _NONE                          # a replayed copy: the genuine task is on its way
        if fault.kind is FaultKind.EXPIRED:
            return self._requeue([i])             # we are alive: sent again under a fresh token
        name = ErrorKind.WORKER_REFUSED if fault.kind is FaultKind.BAD_FRAME else ErrorKind.WORKER_ERROR
        err = RemoteError(i, name, fault.message, worker=fault.worker or None, argument=self.describe(i))
        if fault.kind is not FaultKind.BAD_FRAME:
            return self._fail(i, err, None, e.now)
        note.refusal = err                        # signed with our key, the frame forged: a
        if self.tasks.state(i) in _WAITING:       # genuine result may still come; wait for it
            self._move(i, R)
        return _NONE

    def _partial(self, e: Partial) -> list:
        """Count a partial's tasks once each, or refuse it whole and send its uncounted
        tasks again (a malformed one costs its own tasks, never the map)."""
        indices, metas, n, table = e.indices, e.metas, self.n, self.tasks
        if not self.merging or len(metas) != len(indices) or len(set(indices)) != len(indices) or \
                not all(0 <= i < n for i in indices):
            again = sorted({i for i in indices if 0 <= i < n and not table.is_final(i)})
            said = Report(f"map {self.map_id}: dropped a malformed partial (tasks {indices[:20]}: "
                          f"{_malformed(indices, metas, n, self.merging)}); sending its {len(again)} uncounted task(s) again",
                          "warning")
            return [said, *self._requeue(again, route=False)]
        counted = [i for i in indices if table.is_final(i)]
        if counted:
            self.partials_refused += 1
            again = [i for i in indices if not table.is_final(i)]
            said = Report(f"map {self.map_id}: refused a partial of {len(indices)} tasks from {metas[0].worker}: "
                          f"task(s) {counted[:10]} were counted already; sending {len(again)} again")
            return [said, *self._requeue(again, route=False)]
        try:
            value = e.load()
        except Exception as err:                  # pickled with something this client lacks
            out = []
            for i, meta in zip(indices, metas):
                out += self._fail(i, _undecodable(i, meta, err, self), meta, e.now)
            return out
        notes = table.notes
        for k, (i, meta) in enumerate(zip(indices, metas)):
            note = notes.get(i)
            self._move(i, D)
            self.ledger.add(i, meta, retries=note.user_attempts if note else 0, received=e.now,
                            backup=bool(note and note.backup))
            self.in_partial[i] += 1
            self.outbox.append(TaskResult(i, value if k == 0 else None, meta, merged=k > 0))
        self.partials_accepted += 1
        self.last_progress = e.now
        return _NONE

    def _unverifiable(self, e: Unverifiable) -> list:
        """A worker holding another key took task ``index`` and sent back its refusal: the
        task is gone from the queues. Send it to a worker that holds our key, if one is live."""
        i = e.index
        if not self.tasks.is_waiting(i):
            return [Report(f"map {self.map_id}: dropped a result that failed verification: {e.error}", "warning")]
        if self.misfits and self.good_workers():  # not the task's fault: no attempt counted
            return [Report(f"map {self.map_id}: task {i} came back from a worker holding another key; "
                           "sending it to a worker that holds ours"), *self._requeue([i])]
        if self._warned_unverified:
            return _NONE
        self._warned_unverified = True
        return [Report(f"map {self.map_id}: task {i} (and maybe more) was answered by a worker holding "
                       f"another key ({e.error}); the audit will send them again", "warning")]

    def _observed(self, e: Observed) -> list:
        self.workers = {s.name: s for s in e.statuses}
        self.misfits = {s.name for s in e.statuses if s.key_fingerprint and s.key_fingerprint != self.fingerprint}
        for s in e.statuses:
            t = s.task
            if t is not None and t.map_id == self.map_id and 0 <= t.index < self.n \
                    and self.tasks.state(t.index) in _WAITING:
                self._move(t.index, L)
        return _NONE

    def _audited(self, e: Audited) -> list:
        waiting = set(self.waiting())
        if not waiting:
            return _NONE
        lost, self.missing = lost_tasks(waiting=waiting, in_broker=e.in_broker, missing_before=self.missing)
        if not lost:
            return _NONE
        return [Report(f"map {self.map_id}: {len(lost)} task(s) vanished from the broker; resubmitting "
                       f"them: {lost[:20]}", "warning"), *self._requeue(lost)]

    def _backup(self, e: Backup) -> list:
        fresh = [i for i in e.indices if 0 <= i < self.n and not self.backed_up(i)]
        out = self._requeue(fresh, route=False, backup=True)
        if e.timed:
            for i in e.indices:
                if 0 <= i < self.n and not self.tasks.is_final(i):
                    note = self.tasks.note(i)
                    note.timed_since = note.timed_since or e.now
        if out:
            out = [Report(f"map {self.map_id}: backed up {len(fresh)} task(s) ({e.why}): {fresh[:20]}"), *out]
        return out

    def _give_up(self, e: GiveUp) -> list:
        if not 0 <= e.index < self.n:
            return _NONE
        return self._fail(e.index, e.error, None, e.now)

    def _vanished(self, e: MapVanished) -> list:
        if self.done:
            return _NONE
        return [Report(f"map {self.map_id} vanished from the broker (did it restart?); resubmitting "
                       f"{self.tasks.unfinished} tasks", "warning"),
                *self._requeue(self.waiting(), fair=True, upload=True)]

    def _unclaimed(self, e: Unclaimed) -> list:
        self.shunned.add(e.worker)
        return [TakeBack(e.worker), Report(e.why, "warning", broker=True)]

    def _wrote(self, e) -> list:
        self.life.apply(e)
        return _NONE

    def _tick(self, e: Tick) -> list:
        if self.life.closed:                            # (its retries wait for nothing now)
            return _NONE
        due = [i for i in self.retries.pop_due(e.now) if self.tasks.state(i) is B]
        return self._requeue(due) if due else _NONE     # (a task sent again meanwhile is not sent twice)

    def _cancel(self, e: Cancel) -> list:
        if self.cancelled:
            return _NONE
        self.cancelled, self.cancelled_by = True, e.by
        self.life.close()
        for i in self.tasks.indices(Q, L, R, B):
            self._move(i, C)
        self.retries.clear()
        return [CancelMap(e.by)]


def _undecodable(index: int, meta, err: Exception, state: MapState) -> RemoteError:
    return undecodable_error(index, meta, err, state.workers.get(meta.worker), state.describe(index))


def _malformed(indices: list[int], metas: list, n: int, merging: bool = True) -> str:
    """What is wrong with a partial's list of tasks."""
    if not merging:
        return "the map does not merge on the workers"
    if len(metas) != len(indices):
        return f"{len(indices)} task indices but {len(metas)} task metadata"
    if len(set(indices)) != len(indices):
        return f"task(s) {sorted({i for i in indices if indices.count(i) > 1})[:10]} covered twice"
    return f"indices outside the map's {n} tasks"
