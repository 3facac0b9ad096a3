"""A worker's task loop as a pure state machine: events in, instructions out.

A :class:`LoopState` owns what one task process decides about the tasks in its hands:
the state of each task leased here (:class:`WorkerTaskState`, one table of moves,
:data:`TRANSITIONS`), the batch in hand and where in it the loop is, the batch size (from
an average of the tasks' run times), the idle and steal timing (an idle worker with
nothing to steal only waits on its queue for a while), when partials go into the outbox
or up the tree (every other map's before a map's task, when the queue runs dry, when due
after a task), how long to back off while the broker is in trouble, and what a stop does.
:meth:`LoopState.handle` takes one event (:mod:`worker.loopevents`) and returns the
instructions for its driver (:class:`worker.main.TaskProcess`), which alone talks to
Redis, runs the user's code and folds results (:mod:`worker.merge`). No Redis, no clock,
no threads here: time arrives in the events (``now``, monotonic seconds). dask's
``distributed/worker_state_machine.py`` is the model, as for the map's
:class:`~client.engine.state.MapState`.

Every move of a task goes through :data:`TRANSITIONS`; a move it does not allow raises
:class:`InvalidMove` with the task's id and the move.

States (``WorkerTaskState``)::

    FREE       not in this worker's hands (before its take; after its hand-in or hand-back)
    LEASED     leased here by a take (or the idle wait), not started
    RUNNING    being verified and run
    DONE       its result (or fault) waits in the outbox for the next hand-in
    FOLDED     its OK result is folded into its map's partial (or waits with the partials)
    ALONE      its fold raised: its result waits with the partials, to go alone
    BACK       not run, or dropped: handed back to the supervisor at the next take

    >>> from rhtc.worker.loopevents import Start, Took, Ran, RESULT, Take, Run, Hold, Publish
    >>> s = LoopState(max_batch=4)
    >>> s.handle(Start(0.0))
    [Take(n=1)]
    >>> s.handle(Took(True, [b"t" * 20], set(), 0.1))
    [Hold(batch=[b'tttttttttttttttttttt']), Run(k=0)]
    >>> s.handle(Ran(b"t" * 20, RESULT, 0.001, 0.2))       # (1 s a task so far: one at a time)
    [Publish(), Take(n=1)]
    >>> s.state(b"t" * 20).name
    'DONE'
"""
from __future__ import annotations

import enum

from rhtc.errors import RhtcError
from ..broker.wire.protocol import MAP_ID_LEN
from .loopevents import (AGAIN, ALONE as _ALONE, DROPPED, FOLDED as _FOLDED, REFUSED, RESULT, Close, Exit,
                         FlushPartials, GoUp, HandedBack, HandedIn, HandIn, Hold, IdleWait, PartialsDue,
                         PartialsOut, Pause, Probe, Probed, Publish, Ran, Recovered, Run, Start, Stop, Take,
                         Tick, Took, Trouble, WentUp, Woke)

BATCH_SECONDS = 0.005      # take as many tasks as fit in this much time (fast tasks only)
IDLE_WAIT = 5.0            # an idle worker's blocking pop (s); a stop or a drain ends it at once (wake)
QUIET_RETAKE = 10.0        # with nothing to steal, an idle worker still takes (checks its name) this often (s)
NOT_HOLDING_PAUSE = 0.2    # the name is not ours (yet/any more): the supervisor claims or stops (s)
BACKOFF_FIRST, BACKOFF_CAP = 0.1, 5.0     # the pauses while the broker is in trouble double (s)


class InvalidMove(RhtcError, RuntimeError):
    """The worker's loop tried a move of a task that :data:`TRANSITIONS` does not allow: a
    bug in rhtc (please report it with the message)."""


class WorkerTaskState(enum.IntEnum):
    """The state of one task in a worker's hands (see the module docstring)."""

    FREE = 0
    LEASED = 1
    RUNNING = 2
    DONE = 3
    FOLDED = 4
    ALONE = 5
    BACK = 6


FREE, LEASED, RUNNING, DONE, FOLDED, ALONE, BACK = WorkerTaskState

#: Every allowed move, with why it happens. Nothing else changes a task's state here.
TRANSITIONS: dict[tuple[WorkerTaskState, WorkerTaskState], str] = {
    (FREE, LEASED): "a take (or the idle wait) leased it here",
    (LEASED, RUNNING): "its turn in the batch came: verified, then run",
    (RUNNING, DONE): "its result, error or refusal waits in the outbox",
    (RUNNING, FOLDED): "its OK result was folded into its map's partial (or, leased again, a partial "
                       "folded in here from another worker covers it: not run, it goes with that partial)",
    (RUNNING, ALONE): "the reduce raised folding it: its result goes alone, noted",
    (RUNNING, BACK): "its map is gone, the broker failed while it was verified, or SIGTERM stopped it",
    (LEASED, BACK): "not run: the worker stops, or the broker failed",
    (FOLDED, FOLDED): "leased again while folded here (a restarted broker lost its lease): not run again",
    (FOLDED, DONE): "its partial went into the outbox",
    (ALONE, DONE): "its unmerged result went into the outbox",
    (FOLDED, FREE): "handed in: its partial went up the tree",
    (DONE, FREE): "handed in: the outbox went to the broker",
    (BACK, FREE): "handed back: no longer held, the supervisor requeues it",
}
_ALLOWED = frozenset((int(a), int(b)) for a, b in TRANSITIONS)
_F, _L, _R, _D, _FO, _A, _B = (int(s) for s in WorkerTaskState)
_OUTCOME_TO = {RESULT: _D, REFUSED: _D, _FOLDED: _FO, _ALONE: _A, DROPPED: _B}
_NONE: list = []           # "no instruction" (never appended to)
_STEP, _RUN = "step", "run"  # what comes after the partials went out: the batch's next step, or its run


class LoopState:
    """Everything one task process decides about the tasks in its hands (see the module
    docstring). ``max_batch``: the most tasks one take leases."""

    def __init__(self, max_batch: int = 64):
        self.max_batch = max_batch
        self.tasks: dict[bytes, int] = {}     # task id -> its state (FREE ones are not kept)
        self.counts = [0] * len(WorkerTaskState)
        self.partial_maps: dict[str, int] = {}  # map id -> its tasks FOLDED here
        self.batch: list[bytes] = []          # the batch in hand (what the supervisor is told)
        self.next = 0                         # the index in it of the next task to run
        self.backlogged: set[str] = set()     # maps whose backlog held tasks at the last take
        self.ewma = 1.0                       # seconds per task, for the batch size
        self.quiet_until = 0.0                # idle with nothing to steal: only wait until then
        self._quiet = False                   # (the last idle wait began in a quiet spell)
        self.delay = BACKOFF_FIRST            # the next pause while the broker is in trouble
        self.troubled = False
        self.stopping = self.exited = False
        self._then = None                     # what PartialsOut resumes: the next step, or the run
        self._handlers = {Start: self._start, Took: self._took, Ran: self._ran, PartialsOut: self._out,
                          WentUp: self._went_up, HandedIn: self._handed_in, Woke: self._woke,
                          Probed: self._probed, Trouble: self._trouble, Tick: self._tick, Stop: self._stop,
                          HandedBack: self._handed_back}

    # -- the one entry point ------------------------------------------------------------
    def handle(self, event) -> list:
        """Apply one event; return the instructions for the driver (a list, maybe empty)."""
        return self._handlers[type(event)](event)

    # -- queries ------------------------------------------------------------------------
    def state(self, tid: bytes) -> WorkerTaskState:
        """Task ``tid``'s state here (FREE: not in this worker's hands)."""
        return WorkerTaskState(self.tasks.get(tid, _F))

    def with_partials(self) -> list[bytes]:
        """The task ids whose results are with the partials (FOLDED, ALONE)."""
        return [t for t, s in self.tasks.items() if s == _FO or s == _A]

    def folded(self, maps: list[str]) -> list[bytes]:
        """The task ids FOLDED here of the partials of ``maps``."""
        return [t for t, s in self.tasks.items() if s == _FO and t[:MAP_ID_LEN].decode("ascii", "replace") in maps]

    def batch_size(self) -> int:
        """How many tasks the next take leases: as many as fit in ``BATCH_SECONDS`` at the
        average run time so far, 1 to ``max_batch``."""
        return max(1, min(self.max_batch, int(BATCH_SECONDS / max(self.ewma, 1e-6))))

    # -- moves ----------------------------------------------------------------------------
    def _move(self, tid: bytes, to: int) -> None:
        tasks = self.tasks
        now = tasks.get(tid, _F)
        if (now, to) not in _ALLOWED:
            raise InvalidMove(f"task {tid!r}: {WorkerTaskState(now).name.lower()} -> "
                              f"{WorkerTaskState(to).name.lower()} is not in the worker's transitions table")
        counts = self.counts
        counts[now] -= 1
        counts[to] += 1
        if to == _F:
            del tasks[tid]
        else:
            tasks[tid] = to
        if now == _FO and to != _FO:
            self._unfold(tid)
        elif to == _FO and now != _FO:
            m = tid[:MAP_ID_LEN].decode("ascii", "replace")
            self.partial_maps[m] = self.partial_maps.get(m, 0) + 1

    def _unfold(self, tid: bytes) -> None:
        m = tid[:MAP_ID_LEN].decode("ascii", "replace")
        left = self.partial_maps[m] - 1
        if left:
            self.partial_maps[m] = left
        else:
            del self.partial_maps[m]

    def _free(self, state: int) -> None:
        """Every task in ``state`` goes (DONE: handed in; BACK: handed back)."""
        if self.counts[state]:
            for tid in [t for t, s in self.tasks.items() if s == state]:
                self._move(tid, _F)

    def _lease(self, batch: list[bytes]) -> None:
        tasks, move = self.tasks, self._move
        for tid in batch:
            s = tasks.get(tid, _F)
            if s == _F:                       # (the common case, inline)
                tasks[tid] = _L
                self.counts[_F] -= 1
                self.counts[_L] += 1
            elif s == _FO:
                move(tid, _FO)                # sent again: it goes with the partial (Ran says AGAIN)
            else:
                move(tid, _L)                 # held twice: raises

    # -- what comes next ----------------------------------------------------------------
    def _loop(self, now: float) -> list:
        """The top of the loop: take a batch, or (idle with nothing to steal) only wait."""
        if self.stopping:
            return self._exit()
        if now < self.quiet_until:
            self._quiet = True
            return self._idle()
        self._quiet = False
        return [Take(self.batch_size())]

    def _idle(self) -> list:
        """The queue ran dry: the partials of maps at their end go up the tree, the rest in;
        then wait for a task (the preload imports meanwhile)."""
        if self.stopping:
            return self._exit()
        out = []
        if self.counts[_FO] or self.counts[_A]:
            ending = self._ending()
            self.batch, self.next = [], 0
            out = [HandIn(), GoUp(ending, None), Hold([])] if ending else [HandIn(), Hold([])]
            out.append(FlushPartials())      # (what it gives goes in at once: see _out)
        out.append(IdleWait(IDLE_WAIT))
        return out

    def _ending(self) -> list[str]:
        """The maps whose partials go up the tree when the queue ran dry: those whose
        backlog was empty at the last take (the others' go in)."""
        backlogged = self.backlogged
        return [m for m in self.partial_maps if m not in backlogged]

    def _others(self, map_id: str) -> list[str]:
        """The maps whose partials go before a task of ``map_id``: every other map's,
        whatever its backlog. Kept open, a partial waits for that task however long it
        runs, and its client with it: the backlog a take reported says nothing of how long
        the next task takes, nor of who else runs the map's last tasks meanwhile (the other
        workers' partials end in the pool, waiting for this one). Up the tree, a partial
        whose map goes on is pooled, for the next merger to fold: the client still reads a
        few partials, not one per turn the maps take."""
        return [m for m in self.partial_maps if m != map_id]

    def _step(self, now: float) -> list:
        """The batch's next task, or (the batch done) the counters and the next take. Before
        another map's task, the open partials go up or in (and what is ready goes in):
        whether the task then runs is decided when they have (:meth:`_run_next`), since
        they may take a task of the batch with them."""
        k, batch, tasks = self.next, self.batch, self.tasks
        while k < len(batch) and tasks.get(batch[k], _F) not in (_L, _FO):
            k += 1                            # (its partial left while it waited: see _run_next)
        self.next = k
        if k >= len(batch):
            return [Publish(), *self._loop(now)]
        if self.stopping:                     # the rest is still leased: handed back at the exit
            for tid in batch[k:]:
                if tasks.get(tid) == _L:
                    self._move(tid, _B)
            self.next = len(batch)
            return [Publish(), *self._exit()]
        if self.partial_maps or self.counts[_A]:
            others = self._others(batch[k][:MAP_ID_LEN].decode("ascii", "replace"))
            if others or self.counts[_A]:     # another map's task next: no other map waits for it
                self._then = _RUN
                out = [HandIn(), GoUp(others, 1), Hold(batch)] if others else []
                out.append(Close(others))
                return out
        return self._run_next(now)

    def _run_next(self, now: float) -> list:
        """Run the batch's next task, unless it is no longer this worker's to run: a task
        leased again while folded here (a restarted broker lost its lease) whose partial
        left (up the tree, or into the outbox) before its turn went, or goes, in with that
        partial; run again, it would be counted twice, and handed in without its lease."""
        k, tasks = self.next, self.tasks
        tid = self.batch[k]
        s = tasks.get(tid, _F)
        if s == _L and not self.stopping:     # (inline: LEASED -> RUNNING)
            tasks[tid] = _R
            self.counts[_L] -= 1
            self.counts[_R] += 1
            return [Run(k)]
        if s == _FO and not self.stopping:    # sent again: the driver finds it folded (AGAIN)
            return [Run(k)]
        return self._step(now)

    def _exit(self) -> list:
        self._free(_B)
        self.batch, self.next, self._then = [], 0, None
        self.exited = True
        return [Exit()]

    def _recovered(self) -> list:
        if not self.troubled:
            return _NONE
        self.troubled, self.delay = False, BACKOFF_FIRST
        return [Recovered()]

    # -- events -----------------------------------------------------------------------------
    def _start(self, e: Start) -> list:
        return self._loop(e.now)

    def _took(self, e: Took) -> list:
        self._free(_D)                        # what the outbox held went in with the take
        self._free(_B)                        # not in the new hold: the supervisor requeues it
        self._lease(e.batch)
        self.batch, self.next, self.backlogged, self._then = e.batch, 0, e.backlogged, None
        out = [*self._recovered(), Hold(e.batch)]
        if not e.holding:
            out.append(Pause(e.now + NOT_HOLDING_PAUSE))
        elif e.batch:
            out += self._step(e.now)
        else:
            out += self._idle()
        return out

    def _ran(self, e: Ran) -> list:
        tid, outcome, k, batch, tasks = e.tid, e.outcome, self.next, self.batch, self.tasks
        if k >= len(batch) or batch[k] != tid:
            raise InvalidMove(f"task {tid!r} ran, but the batch's next task is "
                              f"{batch[k] if k < len(batch) else None!r}")
        s = tasks.get(tid, _F)
        if s == _R and outcome == RESULT:     # (the common case, inline: RUNNING -> DONE)
            tasks[tid] = _D
            counts = self.counts
            counts[_R] -= 1
            counts[_D] += 1
        elif s == _FO:
            if outcome not in (AGAIN, REFUSED, DROPPED):
                raise InvalidMove(f"task {tid!r} is folded here already, but it ran again ({outcome})")
        elif outcome == AGAIN:                # covered by a partial this worker folded in from
            self._move(tid, _FO)              # another (a merger's): its new lease goes with it
        else:
            self._move(tid, _OUTCOME_TO[outcome])
        if e.seconds is not None:
            self.ewma = 0.8 * self.ewma + 0.2 * e.seconds
        self.next = k + 1
        if self.counts[_FO] or self.counts[_A]:   # (open partials, or ready ones): what is due goes
            self._then = _STEP                    # out first, and may take a task of the batch along
            return [PartialsDue()]
        return self._step(e.now)

    def _out(self, e: PartialsOut) -> list:
        tasks = self.tasks
        for tid in e.tids:
            s = tasks.get(tid)
            if s == _FO or s == _A:
                self._move(tid, _D)
        out = [HandIn(), Hold(self.batch)] if e.flush and e.tids else _NONE
        then, self._then = self._then, None
        if then is _STEP:
            return [*out, *self._step(e.now)]
        if then is _RUN:
            return [*out, *self._run_next(e.now)]
        return out

    def _went_up(self, e: WentUp) -> list:
        for tid in e.tids:
            self._move(tid, _F)
        return _NONE

    def _handed_in(self, e: HandedIn) -> list:
        self._free(_D)
        return self._recovered()

    def _woke(self, e: Woke) -> list:
        if e.tid is None:
            return [Probe()]
        self.quiet_until = 0.0
        self._free(_B)
        self._lease([e.tid])
        self.batch, self.next = [e.tid], 0
        return [*self._recovered(), Hold(self.batch), *self._step(e.now)]

    def _probed(self, e: Probed) -> list:
        if e.stealable:                       # (a take per idle second costs the broker a script
            self.quiet_until = 0.0            # run per worker-second: 25 % of a core at 1,000
        elif not self._quiet:                 # workers; a SCARD, ~1 %)
            self.quiet_until = e.now + QUIET_RETAKE
        return [*self._recovered(), *self._loop(e.now)]

    def _trouble(self, e: Trouble) -> list:
        """What was leased but not run is handed back (the supervisor reconciles it); the
        results and partials not handed in are kept and sent again."""
        for tid in self.batch:
            if self.tasks.get(tid) in (_L, _R):
                self._move(tid, _B)
        self._free(_B)
        self.batch, self.next, self._then = [], 0, None
        self.troubled = True
        until, self.delay = e.now + self.delay, min(self.delay * 2, BACKOFF_CAP)
        return [Hold([]), Pause(until, backoff=True)]

    def _tick(self, e: Tick) -> list:
        return self._loop(e.now)

    def _stop(self, e: Stop) -> list:
        self.stopping = True
        return _NONE

    def _handed_back(self, e: HandedBack) -> list:
        self.stopping = True
        for tid in self.batch:
            if self.tasks.get(tid) in (_L, _R):
                self._move(tid, _B)
        return self._exit()


def transitions_table() -> str:
    """The moves of a task inside a worker as a text table (for docs and ``help``).

    >>> print(transitions_table().splitlines()[1])
    free       leased     a take (or the idle wait) leased it here
    """
    rows = [f"{'from':<10} {'to':<10} why"]
    rows += [f"{a.name.lower():<10} {b.name.lower():<10} {why}" for (a, b), why in TRANSITIONS.items()]
    return "\n".join(rows)
