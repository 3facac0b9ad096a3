"""The arguments of each Lua script, by name: one keyword-only wrapper per script (or per
mode of a script) that builds its ``ARGV`` in the one order the script reads it.

No script takes ``KEYS``: each builds its keys from the namespace, ``ARGV[1]``
(:func:`broker.scripts.body`). Each script names its arguments on a header line at its top,
in a fixed format that ``tests/unit/broker/test_scriptargs.py`` checks every wrapper against, name
by name and in order::

    -- ARGV: ns, worker, incarnation, watch#, results...
    -- ARGV(mode): ns, 'mode', map_id, ...

``name``: one value; ``name#``: a counted list (its length, then its items); ``name...``:
the rest of ``ARGV``; ``'text'`` or a number: a constant the wrapper writes. A script with
several modes has one line per mode, and one wrapper each (``<script>_<mode>``).

A wrapper is a plain function that returns a list (the per-task path pays one call), and
the caller sends it as it must (:class:`broker.functions.Library`, or the fast lane):

    >>> take(ns="rhtc", worker="w1", incarnation="0" * 16, result_grace=30, max_tasks=8,
    ...      leases=1, scan_step=1000, steal_min_queue=4, steal_home_min_queue=16,
    ...      steal_stuck_seconds=60, watch=["m1"], results=[])[:3]
    ['rhtc', 'w1', '0000000000000000']
    >>> SCRIPT_OF["merge_drain"]
    ('merge', 'drain')
"""
from __future__ import annotations

from typing import Callable, Sequence

#: wrapper name -> (script, mode or None): every wrapper of this module
SCRIPT_OF: dict[str, tuple[str, str | None]] = {}
WRAPPERS: dict[str, Callable[..., list]] = {}


def _of(script: str, mode: str | None = None) -> Callable[[Callable[..., list]], Callable[..., list]]:
    def register(fn: Callable[..., list]) -> Callable[..., list]:
        SCRIPT_OF[fn.__name__] = (script, mode)
        WRAPPERS[fn.__name__] = fn
        return fn
    return register


# -- the worker's lease ----------------------------------------------------------------------
@_of("claim")
def claim(*, ns: str, worker: str, incarnation: str, status: bytes, lease_ms: int, mode: str,
          expected: str, max_attempts: int, result_ttl: int, why: str, holds_ttl: int,
          scan_step: int) -> list:
    """``lua/claim.lua``: claim (``mode`` 'claim') or take over (``'force'``, from ``expected``)
    a worker's name for ``incarnation``."""
    return [ns, worker, incarnation, status, lease_ms, mode, expected, max_attempts, result_ttl, why,
            holds_ttl, scan_step]


@_of("beat")
def beat(*, ns: str, worker: str, incarnation: str, status: bytes, lease_ms: int, duties_ms: int,
         holds_ttl: int, full: int) -> list:
    """``lua/beat.lua``: an incarnation's heartbeat."""
    return [ns, worker, incarnation, status, lease_ms, duties_ms, holds_ttl, full]


@_of("take")
def take(*, ns: str, worker: str, incarnation: str, result_grace: int, max_tasks: int, leases: int,
         scan_step: int, steal_min_queue: int, steal_home_min_queue: int, steal_stuck_seconds: float,
         watch: Sequence[str], results: Sequence) -> list:
    """``lua/take.lua``: hand in ``results`` (map id, task id, frame: flat) and lease tasks;
    ``watch``: map ids whose backlog the worker asks about."""
    return [ns, worker, incarnation, result_grace, max_tasks, leases, scan_step, steal_min_queue,
            steal_home_min_queue, steal_stuck_seconds, len(watch), *watch, *results]


@_of("lease_one")
def lease_one(*, ns: str, worker: str, incarnation: str, leases: int, frame: bytes, from_shared: int) -> list:
    """``lua/lease_one.lua``: lease the task an idle worker's blocking pop returned."""
    return [ns, worker, incarnation, leases, frame, from_shared]


@_of("reconcile")
def reconcile(*, ns: str, worker: str, incarnation: str, grace_ms: int, gone: int, crashed: bytes,
              why: str, max_attempts: int, result_ttl: int, held: Sequence[bytes]) -> list:
    """``lua/reconcile.lua``: requeue the lease entries nobody runs."""
    return [ns, worker, incarnation, grace_ms, gone, crashed, why, max_attempts, result_ttl, *held]


@_of("reap")
def reap(*, ns: str, now_text: str, max_attempts: int, every_ms: int, result_ttl: int, retiring: str,
         scan_step: int, lease_ms: int, refusals_ttl: int) -> list:
    """``lua/reap.lua``: recover the tasks of dead workers (or of ``retiring``)."""
    return [ns, now_text, max_attempts, every_ms, result_ttl, retiring, scan_step, lease_ms, refusals_ttl]


@_of("drain")
def drain(*, ns: str, worker: str, scan_step: int) -> list:
    """``lua/drain.lua``: move a step of a worker's own queue to the shared queue."""
    return [ns, worker, scan_step]


@_of("merge", "up")
def merge_up(*, ns: str, worker: str, incarnation: str, result_grace: int, fanin: int, map_id: str,
             ids: bytes, frame: bytes, aside: bytes, covers: int) -> list:
    """``lua/merge.lua`` 'up': hand a partial up the tree (or ask for partials to fold)."""
    return [ns, "up", worker, incarnation, result_grace, fanin, map_id, ids, frame, aside, covers]


@_of("leave")
def leave(*, ns: str, worker: str, now_ms: int, force: str, leaving_ttl: int) -> list:
    """``lua/leave.lua``: may a worker leave now."""
    return [ns, worker, now_ms, force, leaving_ttl]


# -- the client's map queue -----------------------------------------------------------------
@_of("enqueue", "first")
def enqueue_first(*, ns: str, map_id: str, seq: int, window: int, fn_hash: str, packed_fn: bytes,
                  map_ttl: int, function_ttl: int, start: float, client: str, client_ttl_ms: int,
                  info: Sequence[str], finished: Sequence[str], groups: Sequence) -> list:
    """``lua/enqueue.lua``, the call that registers the map: ``info`` flat field/value
    pairs, ``finished`` the ids of the client's maps to delete, ``groups`` flat
    (kind, worker or '', n, n frames)."""
    return [ns, map_id, 1, seq, window, fn_hash, packed_fn, map_ttl, function_ttl, start, client,
            client_ttl_ms, len(info), *info, len(finished), *finished, *groups]


@_of("enqueue", "more")
def enqueue_more(*, ns: str, map_id: str, seq: int, window: int, groups: Sequence) -> list:
    """``lua/enqueue.lua``, a later call of a big map: more ``groups`` (as :func:`enqueue_first`)."""
    return [ns, map_id, 0, seq, window, *groups]


@_of("sweep")
def sweep(*, ns: str, every_ms: int, scan_step: int, ended: Sequence[str]) -> list:
    """``lua/sweep.lua``: drop ``ended`` maps now, or (none) the maps of dead clients."""
    return [ns, every_ms, scan_step, *ended]


@_of("audit", "lists")
def audit_lists(*, ns: str, map_id: str, scan_step: int, start: int, lists: Sequence[str]) -> list:
    """``lua/audit.lua`` 'lists': a map's task indices in ``lists`` (keys), from item
    ``start`` of the first, ``scan_step`` items at most."""
    return [ns, "lists", map_id, scan_step, start, *lists]


@_of("audit", "routed")
def audit_routed(*, ns: str, map_id: str, scan_step: int, start: int, workers: Sequence[str]) -> list:
    """``lua/audit.lua`` 'routed': as :func:`audit_lists`, in the own queues of ``workers``
    (the map's ``routed`` index)."""
    return [ns, "routed", map_id, scan_step, start, *workers]


@_of("audit", "rest")
def audit_rest(*, ns: str, map_id: str, scan_step: int, start: int, last: int) -> list:
    """``lua/audit.lua`` 'rest': a window of the shared queue from ``start``; the one that
    reaches its end (or ``last`` = 1: the rest of it) with the map's leases and pool."""
    return [ns, "rest", map_id, scan_step, start, last]


@_of("audit", "lease")
def audit_lease(*, ns: str, map_id: str, worker: str) -> list:
    """``lua/audit.lua`` 'lease': a map's task indices leased to ``worker``'s live incarnation."""
    return [ns, "lease", map_id, worker]


@_of("purge")
def purge(*, ns: str, map_id: str, queue: str, scan_step: int) -> list:
    """``lua/purge.lua``: remove a cancelled map's tasks from one step of ``queue``."""
    return [ns, map_id, queue, scan_step]


@_of("merge", "drain")
def merge_drain(*, ns: str, map_id: str, at_least: int, result_grace: int) -> list:
    """``lua/merge.lua`` 'drain': the map's pool to its client, if it covers ``at_least`` tasks."""
    return [ns, "drain", map_id, at_least, result_grace]
