"""What goes into a worker's loop state and what comes out of it (:mod:`worker.loopstate`).

*Events* are what happened, as plain data: a take answered with its batch, a task ran
(and how it ended: a result, a fold into a partial, a fold that failed), partials went
into the outbox or up the tree, the outbox was handed in, the idle wait ended, the broker
was in trouble, the worker was told to stop. Each carries ``now`` (monotonic seconds):
the state reads no clock.

*Instructions* are what the state asks its driver (:class:`worker.main.TaskProcess`) to
do: take a batch of this size, run the batch's k-th task, hand the outbox in, send
partials up the tree or into the outbox, wait idle, pause, exit. An instruction whose
doing answers with an event (:data:`ANSWERED`) has that event handled at once, and the
instructions it returns are done before the rest.

Task ids are the 20 bytes that name a task in leases (map id + index).

    >>> Take(8)
    Take(n=8)
"""
from __future__ import annotations

import dataclasses

_event = dataclasses.dataclass(slots=True)     # plain, slotted: one is built per task


# -- how a run ended (Ran.outcome) ------------------------------------------------------
RESULT = 0       # its result (or its error) waits in the outbox
FOLDED = 1       # its OK result is folded into its map's partial
ALONE = 2        # the fold raised: its result waits with the partials, to go alone
REFUSED = 3      # refused before it ran (bad frame, a dead map's token...): its fault waits in the outbox
DROPPED = 4      # its map is gone (or the bytes were no task): nothing to send; left to the supervisor
AGAIN = 5        # leased again while folded here already: not run again, it goes with the partial


# -- events: what happened --------------------------------------------------------------
@_event
class Start:
    """The loop begins."""

    now: float


@_event
class Took:
    """A take returned: what the outbox held is handed in; ``batch`` (task ids) is leased
    here (if ``holding``: this incarnation still holds the worker's name); ``backlogged``:
    the maps whose backlog still held tasks."""

    holding: bool
    batch: list
    backlogged: set
    now: float


@_event
class Ran:
    """The batch's task ``tid`` ran (or was refused, dropped...): ``outcome``; ``seconds``
    its user code took (None when none ran)."""

    tid: bytes
    outcome: int
    seconds: float | None
    now: float


@_event
class PartialsOut:
    """These task ids (of frames the partials gave up) went into the outbox; ``flush``:
    the outbox goes in now (echoes :class:`Close` / :class:`FlushPartials`)."""

    tids: list
    flush: bool
    now: float


@_event
class WentUp:
    """These task ids left with their partials up the tree (handed in by the merge)."""

    tids: list
    now: float


@_event
class HandedIn:
    """The outbox was handed in (nothing leased)."""

    now: float


@_event
class Woke:
    """The idle wait ended with task ``tid`` leased (its frame kept by the driver), or None."""

    tid: bytes | None
    now: float


@_event
class Probed:
    """Whether some worker's queue may hold tasks to steal."""

    stealable: bool
    now: float


@_event
class Trouble:
    """The broker refused or was away (the driver reset the connection)."""

    now: float


@_event
class Tick:
    """A pause ended."""

    now: float


@_event
class Stop:
    """The worker was told to stop (SIGTERM, SIGUSR1 or the bench's thread): finish the task
    in hand, take no more."""

    now: float


@_event
class HandedBack:
    """SIGTERM inside the user's function: the task goes back to the queue; the worker exits."""

    now: float


# -- instructions: what to do ------------------------------------------------------------
@_event
class Take:
    """Hand the outbox in and lease up to ``n`` tasks, in one round trip -> :class:`Took`."""

    n: int


@_event
class Run:
    """Verify and run the ``k``-th task of the last batch -> :class:`Ran`."""

    k: int


@_event
class Hold:
    """Tell the supervisor this process holds ``batch`` (and what its outbox and partials keep)."""

    batch: list


@_event
class HandIn:
    """Hand the outbox in now, leasing nothing -> :class:`HandedIn`."""


@_event
class PartialsDue:
    """Move the partials that are due (full, old, too many) into the outbox -> :class:`PartialsOut`."""


@_event
class Close:
    """Move the partials of ``maps`` and what is ready into the outbox -> :class:`PartialsOut`."""

    maps: list
    flush: bool = True


@_event
class FlushPartials:
    """Move every partial into the outbox -> :class:`PartialsOut`."""


@_event
class GoUp:
    """Send the partials of ``maps`` up the tree (at most ``rounds`` rounds of folding
    others' in; None: as long as there are some) -> :class:`WentUp`."""

    maps: list
    rounds: int | None


@_event
class IdleWait:
    """Wait for a task at most ``timeout`` s (the preload imports meanwhile) -> :class:`Woke`."""

    timeout: float


@_event
class Probe:
    """Ask whether anything may be stolen -> :class:`Probed`."""


@_event
class Publish:
    """Publish the counters to the supervisor."""


@_event
class Pause:
    """Sleep until ``until`` (monotonic); ``backoff``: the broker is in trouble (say so) -> :class:`Tick`."""

    until: float
    backoff: bool = False


@_event
class Recovered:
    """The broker answers again after trouble (say so)."""


@_event
class Exit:
    """Hand in what is left, stop."""


#: the instructions whose doing answers with an event
ANSWERED = (Take, Run, HandIn, PartialsDue, Close, FlushPartials, GoUp, IdleWait, Probe, Pause)
