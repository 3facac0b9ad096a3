"""What the pool keeper decides, as plain functions of what it sees (no scheduler, no
broker): which jobs to replace and why, how big the pool should be, which workers leave
first when it shrinks, and when failures are systematic, with the fix to name.

    >>> wanted_size(KeeperPlan(minimum=2, maximum=10), busy=3, pending=40)
    10
    >>> wanted_size(KeeperPlan(minimum=2, maximum=10), busy=0, pending=0)
    2
    >>> fix_for("the worker environment was packed for Python 3.11 but this node (n1) has no python3.11")
    "repack for the nodes' Python: `rhtc pack --python-version X.Y` (their python3), or pass --python"
"""
from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class KeeperPlan:
    """How a keeper holds its pool (the knobs of ``rhtc pool start``)."""

    minimum: int                      # workers at least (fixed size: minimum == maximum)
    maximum: int
    interval: float = 5.0             # seconds between looks at the queue and the broker
    idle_limit: float = 1800.0        # a job idle in the queue this long is replaced
    startup_limit: float = 600.0      # a running job whose worker never reached the broker in this long failed
    max_starts: int = 3               # a job started more often than this (evicted, restarted) is replaced
    max_failures: int = 3             # start-up failures in a row, none serving since: stop, naming the cause
    shrink_after: float = 300.0       # adaptive: a worker idle this long may go (never under the minimum)
    stop_when_idle: float = 0.0       # stop the pool after this long with no map and no busy worker (0: never)

    def __post_init__(self):
        if self.minimum < 0 or self.maximum < max(1, self.minimum):
            raise ValueError(f"a pool of {self.minimum}:{self.maximum} workers: give 0 <= MIN <= MAX and MAX >= 1")

    @property
    def adaptive(self) -> bool:
        return self.minimum != self.maximum


@dataclasses.dataclass
class Tracked:
    """A job of the pool, as the keeper follows it from submission to its end."""

    id: str
    submitted: float
    served: float = 0.0               # when its worker first reached the broker (the broker's record)
    worker: str = ""
    starts: int = 0
    leaving: str = ""                 # its worker said it leaves (lifetime, idle)
    leaves_at: float = 0.0            # when its worker drains at the end of its lifetime
    ending: str = ""                  # the keeper removed it, and why (its end is no failure)
    state: str = ""                   # its state at the last look (idle, running, held)
    idle_since: float = 0.0           # its worker has had no task since (0: busy or unknown)
    cache_bytes: int = 0


def mark_served(t: Tracked, when: float) -> bool:
    """Note that ``t``'s worker reached the broker at ``when`` (0: not known to have). The
    broker says so (its record of the worker's claim, which outlives the worker), not
    whether a look of the keeper fell while the worker ran. True the first time: then the
    job counts as started, whatever becomes of it.

    >>> t = Tracked("7.0", submitted=100.0)
    >>> mark_served(t, 0.0), mark_served(t, 103.5), mark_served(t, 110.0), t.served
    (False, True, False, 103.5)
    """
    if not when or t.served:
        return False
    t.served = when
    return True


@dataclasses.dataclass(frozen=True)
class Verdict:
    """What one look decides about a job: ``replace`` it (a start-up ``failure`` or not),
    or note it was ``evicted``; ``why`` is the log's reason."""

    action: str
    why: str
    failure: bool = False


def verdict(t: Tracked, state: str, reason: str, starts: int, since: float, now: float,
            plan: KeeperPlan) -> Verdict | None:
    """The keeper's decision about a job in the queue (``state``, hold ``reason``, how often
    it ``starts``, in that state ``since``), or None: leave it. Only a job whose worker
    never reached the broker (:func:`mark_served`) fails at start-up.

    >>> plan = KeeperPlan(1, 1)
    >>> verdict(Tracked("7.0", 100.0, served=103.5), "held", "via condor_hold", 1, 104.0, 105.0, plan)
    Verdict(action='replace', why='held: via condor_hold', failure=False)
    >>> verdict(Tracked("7.1", 100.0), "held", "memory", 1, 104.0, 105.0, plan).failure
    True
    >>> verdict(Tracked("7.2", 100.0, starts=1, state="running"), "running", "", 2, 104.0, 105.0, plan).action
    'evicted'
    """
    if state == "held":
        return Verdict("replace", f"held: {reason}", failure=not t.served)
    if t.state == "running" and (state == "idle" or (state == "running" and starts > t.starts)):
        return Verdict("evicted", "")     # (back on a node between two looks: it started again)
    if starts > plan.max_starts:
        return Verdict("replace", f"started {starts} times")
    if state == "idle" and not t.served and now - t.submitted > plan.idle_limit:
        return Verdict("replace", f"idle in the queue for {now - t.submitted:.0f} s")
    if state == "running" and not t.served and since and now - since > plan.startup_limit:
        return Verdict("replace", f"running for {now - since:.0f} s but its worker never reached the broker",
                       failure=True)
    return None


def wanted_size(plan: KeeperPlan, busy: int, pending: int) -> int:
    """The pool's size: fixed, or (adaptive) a worker per running and waiting task, within
    MIN and MAX."""
    if not plan.adaptive:
        return plan.maximum
    return max(plan.minimum, min(plan.maximum, busy + pending))


def replace_ahead(plan: KeeperPlan, latencies: list[float]) -> float:
    """How long before a worker's lifetime drain its replacement is submitted: twice the
    longest time one of the last ten jobs took from submission to serving (a minute until
    one is measured), and at least two looks. Start-up times swing with the load of the
    pool (a schedd that negotiates slowly, a node that unpacks the environment while others
    compute): planning with the median left the pool empty between the last worker's drain
    and its replacement's start when one start took twice the usual.

    >>> replace_ahead(KeeperPlan(3, 3, interval=5), [10, 20, 30])
    60.0
    >>> replace_ahead(KeeperPlan(3, 3, interval=5), [])
    120.0
    """
    longest = max(latencies[-10:]) if latencies else 60.0
    return max(2 * plan.interval, 2.0 * longest)


def active(tracked: dict[str, Tracked], now: float, ahead: float) -> list[Tracked]:
    """The jobs that count towards the pool's size: not being removed, not leaving, and
    not due to drain within ``ahead`` seconds (their replacement starts now)."""
    return [t for t in tracked.values()
            if not t.ending and not t.leaving and not (t.leaves_at and t.leaves_at - now <= ahead)]


def shrink_victims(jobs: list[Tracked], surplus: int, now: float, shrink_after: float) -> list[Tracked]:
    """Which jobs leave when the pool is ``surplus`` too big: jobs whose worker never
    started first, then workers idle for ``shrink_after`` with the smallest caches (the
    ones the current maps need least); never a busy worker.

    >>> a = Tracked("1.0", 0, served=1, idle_since=10, cache_bytes=5)
    >>> b = Tracked("1.1", 0, served=1, idle_since=10, cache_bytes=1)
    >>> c = Tracked("1.2", 0)
    >>> [t.id for t in shrink_victims([a, b, c], 2, now=400, shrink_after=300)]
    ['1.2', '1.1']
    """
    if surplus <= 0:
        return []
    unstarted = [t for t in jobs if not t.served]
    idle = sorted((t for t in jobs if t.served and t.idle_since and now - t.idle_since >= shrink_after),
                  key=lambda t: (t.cache_bytes, -(now - t.idle_since)))
    return (unstarted + idle)[:surplus]


#: start-up failure causes (a phrase of the job's error or hold reason) and their fix
FIXES = (
    ("packed for Python", "repack for the nodes' Python: `rhtc pack --python-version X.Y` (their python3), "
                          "or pass --python"),
    ("cannot import the worker", "the environment lacks the project: rebuild it with `rhtc pack` (or install "
                                 "redis-htcondor into the --python you gave)"),
    ("cannot unpack", "the environment tarball is damaged: rebuild it with `rhtc pack --rebuild`"),
    ("not found (make it with", "give an existing environment: `rhtc pack` writes rhtc-env.tar.gz"),
    ("no broker config", "the broker config did not reach the job: check --config names a readable 0600 file"),
    ("waiting for the broker", "the nodes cannot reach the broker: start it with `rhtc broker --host 0.0.0.0 "
                               "--allow-remote` and check that the execute nodes may connect to its port"),
    ("never reached the broker", "the nodes cannot reach the broker: start it with `rhtc broker --host 0.0.0.0 "
                                 "--allow-remote` and check that the execute nodes may connect to its port"),
    ("memory", "ask for more memory (--memory) or a smaller branch cache (--cache-size)"),
    ("transfer", "a file to transfer is missing or unreadable: check the environment pack and the config file"),
)


def fix_for(cause: str) -> str:
    """What to do about a start-up failure, from its cause."""
    low = cause.lower()
    for phrase, fix in FIXES:
        if phrase.lower() in low:
            return fix
    return "read the jobs' stderr in the log directory, fix the cause, and start the pool again"


def systematic(failures: list[str], max_failures: int) -> str | None:
    """The message to stop with when the last ``max_failures`` start-up failures in a row
    (none serving since) make a pattern; None while they do not.

    >>> systematic(["held: out of memory"] * 3, 3)  # doctest: +ELLIPSIS
    'every new worker job failed at start-up (3 in a row, none served): held: out of memory. Fix: ask for more memory...'
    """
    if len(failures) < max_failures:
        return None
    cause = max(set(failures[-max_failures:]), key=failures[-max_failures:].count)
    return (f"every new worker job failed at start-up ({len(failures)} in a row, none served): {cause}. "
            f"Fix: {fix_for(cause)}")
