"""The pool keeper: a small process on the submit node that holds a pool of worker jobs at
N (or between MIN and MAX, following the work) for an analyst's day.

Every few seconds it looks at its jobs in the batch system (:mod:`condor.batch`) and at
the workers in the broker, and (:mod:`condor.keeper_rules` decides):

* replaces jobs that were **held** (the hold reason is logged and shown by ``rhtc
  status``), **removed** or **completed**, jobs **restarted** too often, jobs **idle** in
  the queue past a limit, and running jobs whose worker never reached the broker;
* counts **evictions** (a vacated job hands back its task; HTCondor runs it again);
* submits the replacement of a worker ahead of its **lifetime** drain, so the pool size
  holds across it (worker/lifetime.py);
* in adaptive mode grows the pool while tasks wait and shrinks it when workers idle,
  removing first the workers with the least cached;
* stops with one clear message, naming the cause and the fix, when new jobs fail at
  start-up again and again (a bad environment pack, a wrong Python, an unreachable
  broker), backing off between tries instead of resubmitting forever.

What it did goes to its log file and to the broker (``rhtc status`` shows the pool's
wanted and actual size and the last replacements with their reasons). It sets the pool's
floor in the broker, so idle workers never leave under the minimum. ``rhtc pool stop``,
Ctrl-C, or ``stop_when_idle`` stop it; stopping removes its jobs.

    (not run by the tests: it needs a batch system; tests/scenarios/test_condor.py runs it on the test pool)
    >>> from rhtc.condor import PoolKeeper, KeeperPlan                  # doctest: +SKIP
    >>> keeper = PoolKeeper(KeeperPlan(minimum=2, maximum=50), env_pack="rhtc-env.tar.gz").start()  # doctest: +SKIP
    >>> keeper.stop()                                                    # doctest: +SKIP
"""
from __future__ import annotations

import logging
import logging.handlers
import os
import secrets
import socket
import threading
import time
from pathlib import Path

from ..broker.wire.config import BrokerConfig
from ..broker.errors import BrokerTrouble
from ..broker.storage import Storage
from .batch import Job, batch_for, job_of_worker, startup_error
from .keeper_rules import (KeeperPlan, Tracked, active, mark_served, replace_ahead, shrink_victims,
                           systematic, verdict, wanted_size)
from .schedd import SchedulerUnavailable
from rhtc.errors import RhtcError

log = logging.getLogger("rhtc.keeper")
LOG_BYTES = 5 * 1024 * 1024          # the keeper's log file rotates at this size (one old copy kept)


class PoolFailing(RuntimeError, RhtcError):
    """New worker jobs fail at start-up again and again; the message names the cause and the fix."""


class PoolKeeper:
    """Holds one pool of worker jobs; see the module. ``submit_options`` are those of
    :func:`condor.submit.submit_workers` (env_pack, memory, disk_cache, lifetime, ...)."""

    def __init__(self, plan: KeeperPlan, *, scheduler: str = "condor", config_file: str | os.PathLike | None = None,
                 pool_id: str | None = None, schedd: str | None = None, pool: str | None = None,
                 **submit_options):
        from .submit import broker_config_file
        self.plan = plan
        self.pool_id = pool_id or secrets.token_hex(3)
        log_dir = Path(submit_options.pop("log_dir", "rhtc-logs")).resolve()
        log_dir.mkdir(parents=True, exist_ok=True)
        cfg_path, cfg = broker_config_file(config_file, log_dir)
        if scheduler == "condor" and not submit_options.get("env_pack") and not submit_options.get("python"):
            from .pack import pack_environment      # once for the whole day, not per replacement
            submit_options["env_pack"] = pack_environment(python_version=submit_options.get("python_version"))
        self.batch = batch_for(scheduler, self.pool_id, {**submit_options, "config_file": cfg_path,
                                                         "log_dir": log_dir}, schedd, pool)
        self.config: BrokerConfig = cfg
        self.storage = Storage(cfg)
        self.log_path = log_dir / f"keeper-{self.pool_id}.log"
        self.tracked: dict[str, Tracked] = {}
        self.latencies: list[float] = []          # submission -> serving, of the jobs seen serve
        self.joined_read = 0.0                    # the broker's record of workers read up to (s; 0: never)
        self.failures: list[str] = []             # start-up failures in a row (none served since)
        self.counts = {"submitted": 0, "replaced": 0, "evicted": 0, "left": 0, "removed": 0}
        self.backoff_until = 0.0
        self.wanted = plan.minimum
        self.started = time.time()
        self.idle_since = time.monotonic()
        self.stopped: str = ""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._file_log = _file_logger(self.log_path, self.pool_id)

    # -- running -------------------------------------------------------------------------
    def run(self) -> str:
        """Hold the pool until stopped; returns why it stopped. Raises :class:`PoolFailing`
        (after removing its jobs) when new jobs keep failing at start-up."""
        other = next((k for k in self.storage.pool.keepers() if k.get("pool") == self.pool_id), None)
        if other is not None:
            self.storage.close()
            raise PoolFailing(f"pool {self.pool_id} is already kept by pid {other.get('pid')} on {other.get('host')}: "
                              f"stop it first (`rhtc pool stop {self.pool_id}`) or choose another --name")
        self._event("started", why=f"{self.plan.minimum}:{self.plan.maximum} workers on {self.batch.name}")
        try:
            while not self._stop.is_set():
                t0 = time.monotonic()
                try:
                    self.tick()
                except (SchedulerUnavailable, ConnectionError, *BrokerTrouble) as err:
                    log.warning("pool %s: %s; trying again in %.0f s", self.pool_id, err, self.plan.interval)
                self._stop.wait(max(0.0, self.plan.interval - (time.monotonic() - t0)))
        except PoolFailing as err:
            self._end(str(err))
            raise
        except KeyboardInterrupt:
            self.stopped = "Ctrl-C"
        self._end(self.stopped or "stopped")
        return self.stopped or "stopped"

    def start(self) -> "PoolKeeper":
        """Run in a background thread (a notebook's keeper); :meth:`stop` ends it."""
        self._thread = threading.Thread(target=self._run_quietly, name=f"rhtc-keeper-{self.pool_id}", daemon=True)
        self._thread.start()
        return self

    def _run_quietly(self) -> None:
        try:
            self.run()
        except PoolFailing as err:
            log.error("%s", err)

    def stop(self, why: str = "stopped", wait: float = 60.0) -> None:
        self.stopped = self.stopped or why
        self._stop.set()
        if self._thread is not None:
            self._thread.join(wait)

    def _end(self, why: str) -> None:
        try:
            self.batch.remove_all(why)
        except SchedulerUnavailable as err:
            log.warning("pool %s: could not remove its jobs (%s): remove them with `rhtc submit --rm`", self.pool_id, err)
        self._event("stopped", why=why)
        try:
            self.storage.pool.end_keeper(self.pool_id)
        except BrokerTrouble:
            pass
        self.storage.close()

    # -- one look ------------------------------------------------------------------------
    def tick(self) -> None:
        now = time.time()
        who = self.storage.pool.keeper_stop_requested(self.pool_id)
        if who:
            self.stopped = f"stopped by {who}"
            self._stop.set()
            return
        jobs = self.batch.jobs()
        for jid, job in jobs.items():
            if jid not in self.tracked:                 # ours, submitted by an earlier keeper of this pool
                self.tracked[jid] = Tracked(jid, job.queued or now, starts=job.starts)
        statuses = {job_of_worker(s.name): s for s in self.storage.pool.worker_statuses(queue_depths=False)
                    if not s.forged and job_of_worker(s.name)}
        self._note_served(statuses, now)
        for jid in [j for j in self.tracked if j not in jobs]:
            self._gone(self.tracked.pop(jid))
        for jid, job in jobs.items():
            self._look(self.tracked[jid], job, statuses.get(jid), now)
        message = systematic(self.failures, self.plan.max_failures)
        if message:
            raise PoolFailing(f"pool {self.pool_id}: {message}")
        self._resize(statuses, now)
        self._publish(jobs, statuses, now)

    def _note_served(self, statuses: dict, now: float) -> None:
        """Which tracked jobs' workers reached the broker: the broker's record of their
        claims (it stays after a worker left, so a job that served and was held or removed
        between two looks still counts as started), or a heartbeat seen now."""
        joined = self.storage.pool.workers_joined(since=self.joined_read - 5.0 if self.joined_read else 0.0)
        self.joined_read = now
        when = {job_of_worker(name): t for name, t in joined.items() if job_of_worker(name)}
        for jid, t in self.tracked.items():
            seen = when.get(jid) or (now if jid in statuses else 0.0)
            if mark_served(t, seen):
                # the start-up time replace_ahead plans with: until the keeper knows the job serves
                self.latencies = (self.latencies + [max(0.0, now - t.submitted)])[-50:]
                self.failures = []

    def _look(self, t: Tracked, job: Job, status, now: float) -> None:
        if status is not None:
            t.worker, t.leaving, t.leaves_at = status.name, status.leaving, status.leaves_at
            t.cache_bytes = status.cache_bytes
            t.idle_since = 0.0 if status.task is not None else (t.idle_since or now)
        if t.ending:
            return
        v = verdict(t, job.state, job.reason, job.starts, job.since, now, self.plan)
        if v is not None and v.action == "evicted":
            self.counts["evicted"] += 1
            self._event("evicted", t.id, f"vacated from {job.host or 'its node'}; {self.batch.name} runs it again "
                        "(its worker handed back its task)")
        elif v is not None:
            self._replace(t, v.why, failure=v.failure)
        t.starts, t.state = max(t.starts, job.starts), job.state

    def _gone(self, t: Tracked) -> None:
        """A job left the queue: expected (removed by us, the end of its lifetime, idle)
        or not (removed by someone else, completed): then it is replaced."""
        if t.ending:
            return
        how, why = self.batch.fate(t.id)
        if t.served and how == "completed" and why == "exit code 0":     # only a worker leaving on its own terms
            self.counts["left"] += 1
            lifetime = t.leaving == "lifetime" or (t.leaves_at and time.time() >= t.leaves_at - self.plan.interval)
            self._event("left", t.id, "its worker drained and left at the end of its lifetime" if lifetime
                        else "its worker left after its idle timeout")
            return
        if not t.served:
            cause = startup_error(self.batch.error_file(t.id)) or f"{how}: {why}"
            self._failed(t, cause)
            return
        self.counts["replaced"] += 1
        self._event("replaced", t.id, f"{how}: {why}")

    def _replace(self, t: Tracked, why: str, failure: bool = False) -> None:
        t.ending = why
        self.batch.remove([t.id], why)
        if failure:
            said = startup_error(self.batch.error_file(t.id))
            self._failed(t, f"{why} ({said})" if said else why)
        else:
            self.counts["replaced"] += 1
            self._event("replaced", t.id, why)

    def _failed(self, t: Tracked, cause: str) -> None:
        self.failures.append(cause)
        delay = min(300.0, self.plan.interval * 2 ** len(self.failures))
        self.backoff_until = time.time() + delay
        self._event("failed", t.id, f"failed at start-up: {cause} (next try in {delay:.0f} s)")

    def _resize(self, statuses: dict, now: float) -> None:
        mine = {t.id for t in self.tracked.values()}
        busy = sum(1 for jid, s in statuses.items() if jid in mine and s.task is not None)
        pending = self.storage.pool.pending_tasks() if self.plan.adaptive else 0
        self.wanted = wanted_size(self.plan, busy, pending)
        self._idle_check(busy + pending, now)
        counted = active(self.tracked, now, replace_ahead(self.plan, self.latencies))
        if len(counted) < self.wanted and now >= self.backoff_until:
            self._submit(self.wanted - len(counted))
        elif len(counted) > self.wanted:
            for t in shrink_victims(counted, len(counted) - self.wanted, now, self.plan.shrink_after):
                t.ending = "idle: the pool shrinks"
                self.batch.remove([t.id], t.ending)
                self.counts["removed"] += 1
                self._event("removed", t.id, f"idle for {now - t.idle_since:.0f} s; the pool shrinks to "
                            f"{self.wanted}" if t.served else f"not started; the pool shrinks to {self.wanted}")

    def _submit(self, n: int) -> None:
        ids = self.batch.submit(n)
        now = time.time()
        for jid in ids:
            self.tracked[jid] = Tracked(jid, now)
        self.counts["submitted"] += len(ids)
        self._event("submitted", ",".join(ids[:3]) + ("..." if len(ids) > 3 else ""),
                    f"{len(ids)} job(s): the pool wants {self.wanted}")

    def _idle_check(self, work: int, now: float) -> None:
        if not self.plan.stop_when_idle:
            return                       # nothing to decide: no need to read the maps every look
        if work or self.storage.pool.maps_in_flight(tidy=False):
            self.idle_since = time.monotonic()
        elif self.plan.stop_when_idle and time.monotonic() - self.idle_since > self.plan.stop_when_idle:
            self.stopped = f"idle for {self.plan.stop_when_idle:.0f} s"
            self._stop.set()

    # -- what it says ----------------------------------------------------------------------
    def _publish(self, jobs: dict[str, Job], statuses: dict, now: float) -> None:
        by_state: dict[str, int] = {}
        for job in jobs.values():
            by_state[job.state] = by_state.get(job.state, 0) + 1
        mine = [statuses[j] for j in jobs if j in statuses]
        state = {"scheduler": self.batch.name, "min": self.plan.minimum, "max": self.plan.maximum,
                 "wanted": self.wanted, "jobs": by_state, "serving": len(mine),
                 "leaving": sum(1 for s in mine if s.leaving), "counts": self.counts, "host": socket.gethostname(),
                 "pid": os.getpid(), "started": self.started, "log": str(self.log_path),
                 "failures": len(self.failures), "backoff": max(0.0, self.backoff_until - now)}
        ttl = max(30.0, 4 * self.plan.interval)
        self.storage.pool.publish_keeper(self.pool_id, state, ttl)
        self.storage.pool.set_pool_floor(self.plan.minimum, ttl)

    def _event(self, what: str, job: str = "", why: str = "") -> None:
        self._file_log.info("%-9s %-12s %s", what, job, why)
        try:
            self.storage.pool.keeper_event(self.pool_id, {"what": what, "job": job, "why": why})
        except BrokerTrouble as err:
            log.warning("pool %s: could not log %s to the broker: %s", self.pool_id, what, err)


def _file_logger(path: Path, pool_id: str) -> logging.Logger:
    logger = logging.getLogger(f"rhtc.keeper.{pool_id}")
    if not logger.handlers:
        handler = logging.handlers.RotatingFileHandler(path, maxBytes=LOG_BYTES, backupCount=1)
        handler.setFormatter(logging.Formatter("%(asctime)s %(message)s"))
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
    return logger
