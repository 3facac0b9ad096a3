"""A task's states in Redis and every move between them, in one table: which place holds
it, and which script (``broker/lua/``) or plain command moves it, and why.

The client's side of the same life (what a map knows of each task) is
:data:`rhtc.client.engine.tasks.TRANSITIONS`; the keys are in :mod:`broker.wire.keys`.
``tests/unit/broker/test_taskmoves.py`` checks that every script named here exists, that every script
of :data:`broker.scripts.NAMES` is either here or in :data:`STILL` (it moves no task), and
that each move a script makes through the shared steps of ``lua/lib.lua`` (requeue,
refill, deliver, ...) is listed for it.

    >>> sorted({m.by for m in MOVES if m.target == LEASED})
    ['lease_one', 'merge', 'take']
    >>> [m.target for m in moves_from(POPPED)]
    ['leased', 'shared', 'dropped']
"""
from __future__ import annotations

from typing import NamedTuple

# -- the states: where a task (or a partial, covering tasks) is --------------------------------
NEW = "new"            #: with its client, not in Redis yet
BACKLOG = "backlog"    #: in its map's backlog ``q:m:{map}``, waiting for its map's turn (fair window)
SHARED = "shared"      #: in the shared FIFO ``q:shared``, for any worker
ROUTED = "routed"      #: in a worker's own queue ``q:w:{worker}`` (it holds the chunk)
POPPED = "popped"      #: popped by an idle worker's blocking pop, not leased yet (a wake-up)
LEASED = "leased"      #: in a worker's lease ``lease:{worker}``: running, batched, or folded into a partial it holds
POOLED = "pooled"      #: covered by a partial waiting in its map's pool ``pool:{map}`` for a merger
RESULT = "result"      #: its result (or a partial covering it) in ``res:{map}``, for the client
DEAD = "dead"          #: used up its attempts: in ``dead:{map}``
READ = "read"          #: read by the client (gone from Redis)
DROPPED = "dropped"    #: its map ended, was cancelled or its client died: removed

STATES = (NEW, BACKLOG, SHARED, ROUTED, POPPED, LEASED, POOLED, RESULT, DEAD, READ, DROPPED)

#: movers that are plain commands of the adapter, not scripts
COMMANDS = {"BRPOP": "Lease.wait_for_task", "LPOP": "MapQueue.fetch_results / dead_tasks",
            "UNLINK": "MapQueue.request_cancel, broker/unstart.py", "LREM": "broker/unstart.py"}

#: scripts that move no task (they read or keep time), and why
STILL = {"audit": "reads where a map's tasks are, and forgets the workers its indexes name that hold none",
         "beat": "renews a worker's name and status",
         "leave": "records that a worker leaves"}


class Move(NamedTuple):
    """One move: a task from ``source`` to ``target``, made by ``by`` (a script of
    ``broker/lua/``, or a plain command of :data:`COMMANDS`), because ``why``."""

    source: str
    target: str
    by: str
    why: str


_REQUEUE = "a lease nobody runs goes back"
MOVES: tuple[Move, ...] = (
    Move(NEW, BACKLOG, "enqueue", "past its map's fair window in the shared queue"),
    Move(NEW, SHARED, "enqueue", "within the window, a resubmission, or routed to a worker that is not live"),
    Move(NEW, ROUTED, "enqueue", "routed to the live worker that holds its chunk"),
    Move(BACKLOG, SHARED, "take", "a task of its map left the shared queue (refill: fair turns)"),
    Move(BACKLOG, SHARED, "lease_one", "a task of its map left the shared queue (refill, doubled when idle workers wait)"),
    Move(SHARED, LEASED, "take", "a worker takes a batch"),
    Move(ROUTED, LEASED, "take", "a worker takes from its own queue, or steals from a backed-up, stuck or dead one"),
    Move(SHARED, POPPED, "BRPOP", "an idle worker wakes up with it"),
    Move(ROUTED, POPPED, "BRPOP", "an idle worker wakes up with a task of its own queue"),
    Move(POPPED, LEASED, "lease_one", "the woken worker leases it"),
    Move(POPPED, SHARED, "lease_one", "the woken worker's incarnation no longer holds its name"),
    Move(POPPED, DROPPED, "lease_one", "its map is gone or its client died"),
    Move(SHARED, DROPPED, "take", "taken while its map is gone or its client died"),
    Move(ROUTED, DROPPED, "take", "taken (or stolen) while its map is gone or its client died"),
    Move(LEASED, RESULT, "take", "its result (or a partial covering it) handed in"),
    Move(LEASED, SHARED, "take", "a partial refused (a task it covers was requeued meanwhile): its tasks go back"),
    Move(LEASED, POOLED, "take", "a refused partial's folded-in partials go back to the pool"),
    Move(LEASED, DROPPED, "take", "handed in after its map ended"),
    Move(POOLED, RESULT, "take", "a hand-in completed the map: the pool goes to the client"),
    Move(BACKLOG, DROPPED, "take", "its client died (seen by a take)"),
    Move(POOLED, DROPPED, "take", "its client died (seen by a take)"),
    Move(RESULT, DROPPED, "take", "its client died (seen by a take): unread results go"),
    Move(BACKLOG, DROPPED, "lease_one", "its client died (seen by a wake-up)"),
    Move(POOLED, DROPPED, "lease_one", "its client died (seen by a wake-up)"),
    Move(RESULT, DROPPED, "lease_one", "its client died (seen by a wake-up)"),
    Move(ROUTED, SHARED, "claim", "a new incarnation of the worker gives its queue back"),
    Move(LEASED, SHARED, "claim", "a predecessor's lease, counted as an attempt"),
    Move(LEASED, DEAD, "claim", "a predecessor's lease that used up its attempts"),
    Move(LEASED, POOLED, "claim", "a partial a dead merger held goes back to the pool"),
    Move(LEASED, RESULT, "claim", "a partial a dead merger held, of a map that merges no more"),
    Move(POOLED, RESULT, "claim", "a requeued partial completed the map"),
    Move(ROUTED, SHARED, "drain", "a worker that looks live takes none of its queue"),
    Move(ROUTED, SHARED, "reap", "a dead (or retiring) worker's queue"),
    Move(LEASED, SHARED, "reap", "a dead worker's lease, counted as an attempt"),
    Move(LEASED, DEAD, "reap", "a dead worker's lease that used up its attempts"),
    Move(LEASED, POOLED, "reap", "a partial a dead merger held goes back to the pool"),
    Move(LEASED, RESULT, "reap", "a partial a dead merger held, of a map that merges no more"),
    Move(POOLED, RESULT, "reap", "a requeued partial completed the map"),
    Move(LEASED, SHARED, "reconcile", _REQUEUE + " (another incarnation's, stale, or its process crashed)"),
    Move(LEASED, DEAD, "reconcile", "a crashed task that used up its attempts"),
    Move(LEASED, POOLED, "reconcile", "a partial whose merging process is gone goes back to the pool"),
    Move(LEASED, RESULT, "reconcile", "such a partial, of a map that merges no more"),
    Move(POOLED, RESULT, "reconcile", "a requeued partial completed the map"),
    Move(LEASED, POOLED, "merge", "a worker parks its partial for a merger"),
    Move(POOLED, LEASED, "merge", "a merger is given partials to fold into its own"),
    Move(LEASED, RESULT, "merge", "the last partial, or one set aside, goes to the client"),
    Move(POOLED, RESULT, "merge", "the last partial takes the pool with it, or the client drains a stalled pool"),
    Move(LEASED, SHARED, "merge", "a refused partial: its tasks go back"),
    Move(LEASED, DROPPED, "merge", "its map ended"),
    Move(SHARED, DROPPED, "purge", "its map was cancelled"),
    Move(ROUTED, DROPPED, "purge", "its map was cancelled"),
    Move(BACKLOG, DROPPED, "sweep", "its map ended, or its client died"),
    Move(POOLED, DROPPED, "sweep", "its map ended, or its client died"),
    Move(RESULT, DROPPED, "sweep", "its map ended unread, or its client died"),
    Move(BACKLOG, DROPPED, "enqueue", "the client's earlier map ended: deleted with its next map"),
    Move(POOLED, DROPPED, "enqueue", "the client's earlier map ended: deleted with its next map"),
    Move(RESULT, DROPPED, "enqueue", "the client's earlier map ended: deleted with its next map"),
    Move(BACKLOG, DROPPED, "UNLINK", "its map was cancelled (rhtc cancel), or its start refused"),
    Move(SHARED, DROPPED, "LREM", "its map's start was refused (a full broker)"),
    Move(ROUTED, DROPPED, "LREM", "its map's start was refused (a full broker)"),
    Move(RESULT, READ, "LPOP", "the client fetched it"),
    Move(DEAD, READ, "LPOP", "the client fetched it, as a failure"),
)


def moves_from(state: str) -> list[Move]:
    """The moves out of ``state``, in the table's order."""
    return [m for m in MOVES if m.source == state]


def moves_by(mover: str) -> list[Move]:
    """The moves that script (or command) ``mover`` makes."""
    return [m for m in MOVES if m.by == mover]
