"""The key schema: every Redis key the project writes, its type and its owner; and the
states a task goes through. The Lua scripts get these names from here (see
:mod:`broker.scripts`), so each name is spelled once.

All keys live under the namespace (``rhtc:<user>`` by default).

==============================  ======  ===============================================
key                             type    what / who deletes it
==============================  ======  ===============================================
``{ns}:q:shared``               list    queued tasks any worker may take (LPUSH in, RPOP out);
                                        owned by the namespace (tasks of ended maps are
                                        dropped by whoever pops them). Fair: each map has
                                        at most ``fair_window`` tasks here, the rest wait
                                        in its backlog, so maps take turns (round-robin)
``{ns}:q:m:{map}``              list    a map's backlog: its unrouted tasks beyond its window
                                        in the shared queue; each task taken from the shared
                                        queue moves the next one of its map in. Owned by the map
``{ns}:pin:{map}``              string  a bitmap of a map's tasks queued for the worker that holds
                                        their chunk (bit = task index, set by the enqueue): a
                                        thief leaves them to a live owner that makes progress
                                        (steal_one in lua/lib.lua). Owned by the map
``{ns}:client:{client}``        string  a client process is alive (set with the map, renewed by
                                        the client's beacon thread); expires after
                                        ``client_ttl``: then its maps are dropped with their
                                        queued tasks by the first worker that meets one
                                        (take) or by the sweep
``{ns}:q:w:{worker}``           list    queued tasks routed to one live worker (the enqueue
                                        script routes to the shared queue instead when the
                                        worker is not live); emptied when it is reaped or
                                        retires, and only then is it removed from ``workers``
``{ns}:q:routed``               set     workers whose own queue may hold tasks (the enqueue script
                                        adds the worker it routes to; a thief removes a name whose
                                        queue it finds empty), so an idle worker looks for work to
                                        steal in the few routed queues, not in every worker's:
                                        bounded by the registered workers, gone when all are empty
``{ns}:lease:{worker}``         hash    task id -> incarnation | taken-at ms | task frame: in
                                        flight on that worker (or finished and folded into a
                                        partial it has not handed in, broker/wire/merge.py);
                                        reconciled by the worker, requeued
                                        by the reaper, by a new incarnation, or on a task-process crash
``{ns}:inc:{worker}``           string  the incarnation that holds the name; expires after the lease
                                        time unless the worker's supervisor renews it
``{ns}:hb:{worker}``            string  live status (:class:`~broker.wire.messages.WorkerStatus` JSON);
                                        same expiry as ``inc``
``{ns}:workers``                set     registered workers; the reaper removes dead ones
``{ns}:holds:{worker}``         set     routing keys of chunks the worker has cached; expires
``{ns}:disk:{tier}``            set     routing keys of chunks a node's disk tier holds (see
                                        worker/disk.py): outlives the workers, so a replaced
                                        worker of the node is routed to; expires
                                        ``disk_holds_ttl`` after the last addition
``{ns}:reap-due``               string  throttle: one reaper pass per second per namespace; expires
``{ns}:sweep-due``              string  throttle: one sweep for maps of dead clients per second; expires
``{ns}:refusals``               hash    the reaper's note of the broker: its run id, how many commands it
                                        has refused (OOM, READONLY, LOADING, BUSY...) and since when (ms)
                                        it has refused none and not restarted; expires
``{ns}:map:{map}``              hash    a map in flight (function hash, nonce, versions, size);
                                        expires unless its client keeps it alive; deleted when done
``{ns}:live:{map}``             string  the map's latest signed liveness token (broker/wire/protocol.py);
                                        renewed every upkeep tick, same expiry as ``map``,
                                        deleted with the map
``{ns}:maps``                   zset    map ids by start time, for ``rhtc status`` (entries of
                                        maps whose hash is gone are removed by whoever lists them)
``{ns}:res:{map}``              list    finished and failed results; expires; deleted when read
``{ns}:q:p:{map}``              list    the map's *pool*: partials handed up the tree of partials
                                        (broker/wire/merge.py), waiting for a merger (frames or stubs);
                                        owned by the map (its expiry renewed, deleted with it), a
                                        few at a time (each hand-up takes up to the fan-in out)
``{ns}:blob:{map}:{random}``    string  a result frame of 256 KiB or more, whose stub is in ``res:``
                                        (broker/wire/blobs.py); read and deleted by the client (GETDEL),
                                        deleted by take when its stub is dropped and with its map's
                                        results list; expires with that list
``{ns}:routed:{map}``           set     the workers whose own queue the map's tasks were routed to (the
                                        enqueue script adds each), so its audit and its cancel walk
                                        those queues, not every registered worker's; a name whose
                                        queue the audit reads whole with none of the map's tasks
                                        leaves it. Owned by the map
``{ns}:leased:{map}``           set     the workers whose lease may hold entries of the map: its tasks,
                                        or its partials leased to a merger (take, lease_one, a
                                        steal and the merge's hand-up add the worker in the step
                                        that writes the entry), so the audit reads every place of
                                        the map's tasks past its queues in one call however many
                                        workers there are (lua/audit.lua); a name whose lease holds
                                        nothing of the map leaves it there. Owned by the map
``{ns}:tries:{map}``            hash    task index -> attempt history text (which worker, how it died)
``{ns}:attempts:{map}``         hash    task index -> number of runs that killed their worker
``{ns}:dead:{map}``             list    task frames that exhausted their attempts (poison tasks)
``{ns}:fn:{hash}``              string  a packed function, by content hash; expires
``{ns}:log``                    list    recent problems workers saw (bad frames...), capped; expires
``{ns}:feed``                   stream  how the maps go, for the dashboard: JSON entries (a map's
                                        progress, new errors, tasks finished since) its client
                                        adds once a second; capped at ``feed_entries``, expires
                                        ``feed_ttl`` after the last one
``{ns}:dashboard``              string  the address of a dashboard serving this namespace; its
                                        server renews it and deletes it when it stops; expires
``{ns}:leaving``                zset    workers that said they leave on their own terms (lifetime,
                                        idle), by when (ms); entries older than a lease after their
                                        worker's last heartbeat are dropped by the next leaver
``{ns}:pool-floor``             string  the least number of workers the pool keeps (its keeper's
                                        minimum): an idle worker leaves only above it; expires
                                        unless the keeper renews it
``{ns}:joined``                 zset    worker name -> when (broker ms) an incarnation last claimed it
                                        (claim.lua): a worker that served and left stays known, so a
                                        pool keeper never takes its job's end for a failed start-up
                                        (condor/keeper.py); capped at ``JOINED_CAP`` names, expires a
                                        day after the last claim
``{ns}:keepers``                zset    pool keepers by start time (entries whose ``keeper`` hash is
                                        gone are removed by whoever lists them)
``{ns}:keeper:{pool}``          hash    a pool keeper's state (wanted, min, max, jobs by state, host,
                                        pid, last tick); expires unless the keeper renews it
``{ns}:keeper-log:{pool}``      list    what the keeper did and why (JSON), newest first, capped at
                                        200; expires a day after the last entry
``{ns}:keeper-stop:{pool}``     string  ``rhtc pool stop`` asks the keeper to stop; expires
``{ns}:floor:q`` / ``:res``     list    ``bench overhead``'s bare-queue floor; deleted after it
``{ns}:floor:lease``            hash    the guarded floor's leases (a list when the take moves the
                                        task into it); deleted after it
``{ns}:floor:live``             string  the guarded floor's liveness token; deleted after it
==============================  ======  ===============================================

A task's states and moves (one table; the client's map keeps the same names)
-----------------------------------------------------------------------------

=========  ====================================  =========================================
state      where it is                           moves (who)
=========  ====================================  =========================================
queued     ``q:shared``, ``q:m:{map}``           -> leased: take (which also steals) / wait_for_task (worker)
           or ``q:w:{worker}``
                                                 -> cancelled: purge (client cancels), or its
                                                 client's beacon expired (take, sweep)
leased     ``lease:{worker}``                    -> done/failed: take hands in its result (worker;
                                                 a partial only while all its tasks are leased there)
                                                 (with the merge, its partial may go up the tree:
                                                 the map's ``pool``, then leased to a merger as a
                                                 partial entry, see broker/wire/merge.py)
                                                 -> queued: reconcile (entry older than a lease
                                                 that the worker does not run), reap (worker
                                                 dead), claim (new incarnation), task-process
                                                 crash; counted as an attempt unless never run
                                                 -> failed: attempts >= ``max_attempts`` (``dead:``)
done       ``res:{map}`` (OK result)             end (client reads it)
failed     ``res:{map}`` (error/fault) or        end (client reads it)
           ``dead:{map}``
cancelled  nowhere                               end
=========  ====================================  =========================================

The client's table (:mod:`client.engine.tasks`) uses the same names and adds ``refused``: a
worker refused a frame (bad signature, replayed nonce); provisional until a genuine
copy of the task answers.

Bounds: a lease entry nobody runs is requeued within two leases while its worker lives
(the supervisor reconciles once a lease, sparing entries younger than a lease), and
within a lease plus one second when the worker dies (reaper) or at once when a new
incarnation claims the name.
"""
from __future__ import annotations

import dataclasses

#: key templates; ``{ns}`` is the namespace, other fields are the method's argument
TEMPLATES: dict[str, str] = {
    "shared_queue": "{ns}:q:shared",
    "queue": "{ns}:q:w:{worker}",
    "routed": "{ns}:q:routed",
    "lease": "{ns}:lease:{worker}",
    "incarnation": "{ns}:inc:{worker}",
    "heartbeat": "{ns}:hb:{worker}",
    "workers": "{ns}:workers",
    "holds": "{ns}:holds:{worker}",
    "disk_holds": "{ns}:disk:{tier}",
    "reap_due": "{ns}:reap-due",
    "sweep_due": "{ns}:sweep-due",
    "backlog": "{ns}:q:m:{map_id}",
    "pinned": "{ns}:pin:{map_id}",
    "client": "{ns}:client:{client_id}",
    "refusals": "{ns}:refusals",
    "map": "{ns}:map:{map_id}",
    "live": "{ns}:live:{map_id}",
    "maps": "{ns}:maps",
    "results": "{ns}:res:{map_id}",
    "pool": "{ns}:q:p:{map_id}",
    "blob": "{ns}:blob:{map_id}",
    "map_routed": "{ns}:routed:{map_id}",
    "map_leased": "{ns}:leased:{map_id}",
    "tries": "{ns}:tries:{map_id}",
    "attempts": "{ns}:attempts:{map_id}",
    "dead": "{ns}:dead:{map_id}",
    "function": "{ns}:fn:{fn_hash}",
    "log": "{ns}:log",
    "feed": "{ns}:feed",
    "dashboard": "{ns}:dashboard",
    "leaving": "{ns}:leaving",
    "pool_floor": "{ns}:pool-floor",
    "joined": "{ns}:joined",
    "keepers": "{ns}:keepers",
    "keeper": "{ns}:keeper:{pool}",
    "keeper_log": "{ns}:keeper-log:{pool}",
    "keeper_stop": "{ns}:keeper-stop:{pool}",
    "floor_queue": "{ns}:floor:q",
    "floor_results": "{ns}:floor:res",
    "floor_lease": "{ns}:floor:lease",
    "floor_live": "{ns}:floor:live",
}

#: the map's field holding its function hash; its nonce (the workers read it from the map's
#: liveness token; the field is kept for workers of earlier releases during an upgrade)
MAP_FN = "fn"
MAP_NONCE = "nonce"
#: the map's field naming its client's beacon (``client`` key); a map without it never dies early
MAP_CLIENT = "client_id"
#: ... and the life of that beacon (ms): how long the broker must say yes before its absence counts
MAP_CLIENT_TTL = "client_ttl"
#: the map's field holding the sequence number of the last enqueue call it ran (a call
#: sent again after a broken connection is then not queued twice)
MAP_SENT = "sent"
#: the map's field counting the partials the broker refused (a task they cover was no longer
#: leased to their worker: see lua/take.lua); read by the tests and the run's invariants
MAP_REFUSED = "partials_refused"
#: the map's fields for the tree of partials (lua/merge.lua, broker/wire/merge.py): its number of
#: tasks (the client's ``n``), how many were answered (results handed in, dead), how many the
#: partials in its pool cover, and the counter that names each partial leased to a merger
MAP_TASKS = "n"
MAP_ANSWERED = "answered"
MAP_POOLED = "pooled"
MAP_PARTIAL_SEQ = "partial_seq"
#: ... and how many of its mergers died with partials in hand (lua/lib.lua's requeue_lease):
#: from ``broker.wire.merge.MERGER_DEATHS`` on, the map merges no more in the tree
MAP_MERGER_DEATHS = "merger_deaths"
#: the ``joined`` record keeps this many names at most (the newest), for this many seconds
JOINED_CAP = 10_000
JOINED_TTL = 86400
#: lease values: incarnation (this many chars) | taken-at ms (this many digits) | task frame
INCARNATION_LEN = 16
LEASE_TIME_LEN = 13
#: the map keys whose expiry the client renews while the map runs
MAP_DATA = ("results", "tries", "attempts", "dead", "backlog", "pinned", "pool", "map_routed", "map_leased")
#: every key a map owns (deleted together when the map ends)
MAP_OWNED = ("map", "live", *MAP_DATA)


def _key(name: str):
    template = TEMPLATES[name]

    def build(self, arg: str | None = None) -> str:
        return template.format(ns=self.ns, worker=arg, map_id=arg, fn_hash=arg, client_id=arg, tier=arg, pool=arg)
    build.__name__ = name
    build.__doc__ = f"``{template}``"
    return build


def _const(name: str):
    template = TEMPLATES[name]
    return property(lambda self: template.format(ns=self.ns), doc=f"``{template}``")


@dataclasses.dataclass(frozen=True)
class Keys:
    """Key names under one namespace.

    >>> Keys("rhtc:alice").queue("w1")
    'rhtc:alice:q:w:w1'
    >>> Keys("rhtc:alice").shared_queue
    'rhtc:alice:q:shared'
    """

    ns: str

    def map_keys(self, map_id: str) -> list[str]:
        """Every key a map owns (deleted together when the map ends)."""
        return [getattr(self, k)(map_id) for k in MAP_OWNED]


for _name, _template in TEMPLATES.items():
    setattr(Keys, _name, _key(_name) if "{" in _template.replace("{ns}", "") else _const(_name))
