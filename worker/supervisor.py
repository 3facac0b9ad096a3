"""The worker's supervisor (the model is dask's nanny): a small process that owns the
worker's name and liveness and watches the process that runs the user's code.

It claims the name for a fresh *incarnation* (refusing to start while another live
process holds it, taking over from a dead one once its claim is seen
not renewed for about 2.5 heartbeats), renews the claim and publishes
the status every heartbeat, reconciles the lease with what the task process holds, and
reaps dead workers. When the task process dies (segfault, OOM kill, ``os._exit``) it
notices at once, requeues the task it was running (counted as an attempt: after
``max_attempts`` the task fails with the signal named) and starts a fresh one. It is
not on the hot path: the task process takes tasks and hands in results itself.

The task process is not daemonic, so a task may start processes of its own
(``multiprocessing.Pool``, ``ProcessPoolExecutor``); the task process stops what a task
left running when the task ends, and the supervisor (a child subreaper, see
:mod:`worker.children`) what a task process that died or was stopped left behind.

    (not run by the tests: it serves until SIGTERM)
    >>> from rhtc.worker.supervisor import Supervisor         # doctest: +SKIP
    >>> Supervisor(config, name="w1").run()                   # doctest: +SKIP
    0
"""
from __future__ import annotations

import logging
import multiprocessing
import multiprocessing.connection
import os
import secrets
import signal
import socket
import sys
import time


from ..broker.wire import protocol

from ..broker.wire import messages
from ..broker.wire.config import BrokerConfig, Settings, redact, settings, validate_worker_name
from ..broker.errors import BrokerTrouble
from ..broker.storage import AuthenticationError, Storage
from rhtc.credentials import describe as describe_credentials, find_credentials
from rhtc.versions import stack_versions
from .children import (become_subreaper, default_signals_in_children, describe_exit, die_with, end_children,
                       pickle_main_by_value)
from .disk import disk_tier_of
from .backoff import Backoff
from .lifetime import LeavePlan, job_walltime
from .main import TaskProcess, default_name
from .metrics import NodeMetrics
from .shared import SharedState
from rhtc.errors import RhtcError

log = logging.getLogger("rhtc.worker")

EXIT_NAME_HELD = 3         # the exit code when another live process holds the name
EXIT_REFUSED = 2           # the exit code when the broker refuses the password
DUTIES_EVERY = 1.0         # seconds between two reaps (and two sweeps of dead clients' maps) in a pool
STOP_GRACE = 10.0          # seconds a task process gets to hand back its task on SIGTERM


class NameHeld(RuntimeError, RhtcError):
    """Another live process holds this worker name."""


def _run_task_process(config, name, incarnation, shared, cache_bytes, max_batch, st, parent) -> None:
    die_with(parent)
    become_subreaper()          # what a task's children orphan is stopped after the task
    pickle_main_by_value()      # a task's Pool.map(f) of the analyst's __main__ function works
    default_signals_in_children()   # ... and its pool stops as it would in the analyst's process
    signal.signal(signal.SIGINT, signal.SIG_IGN)       # the supervisor decides when to stop
    code = TaskProcess(config, name, incarnation, shared, cache_bytes, max_batch, st).run()
    sys.stdout.flush()
    os._exit(code)


class Supervisor:
    """One worker: its name, liveness and the process that runs its tasks."""

    def __init__(self, config: BrokerConfig, name: str | None = None, cache_bytes: int = 4_000_000_000,
                 max_batch: int = 64, settings_: Settings | None = None, storage: Storage | None = None):
        self.name = validate_worker_name(name or default_name())
        self.config = config
        self.settings = settings_ or settings()
        self.incarnation = secrets.token_hex(8)
        self.cache_bytes, self.max_batch = cache_bytes, max_batch
        self.storage = storage or Storage(config, self.settings)
        self.shared = SharedState.create()
        self.host, self.pid = socket.gethostname(), os.getpid()
        self.started = time.time()
        self.fingerprint = protocol.key_fingerprint(config.key)
        self.versions = {**stack_versions(), **protocol.versions()}
        self.proc: multiprocessing.process.BaseProcess | None = None
        self.metrics: NodeMetrics | None = None
        self.crashes = 0
        self.disk_tier = disk_tier_of(self.settings)
        self.stopping = False
        self.plan = LeavePlan.make(self.settings.lifetime or job_walltime() or 0, self.settings.lifetime_margin,
                                   self.settings.lifetime_stagger, self.started)
        self.leaving = ""                   # why it leaves on its own terms (lifetime, idle), once it does
        self.drain_until = 0.0              # ... and until when the task in hand may run
        self._idle_since, self._last_done = time.monotonic(), 0
        self._credential, self._credential_at = {}, -1e9
        self._next_reconcile = 0.0
        self.beat_every = self.settings.heartbeat        # until the next beat (beat())
        # retry at least once a heartbeat: a longer pause could let the claim expire
        self.backoff = Backoff(f"worker {self.name}", cap=self.settings.heartbeat)

    # -- the status it publishes --------------------------------------------------------
    def status(self) -> messages.WorkerStatus:
        now = time.time()
        task, since = self.shared.current()
        return messages.WorkerStatus(
            name=self.name, host=self.host, pid=self.pid, incarnation=self.incarnation,
            key_fingerprint=self.fingerprint, task_pid=self.proc.pid if self.proc else None, t=now,
            started=self.started, task=task, task_seconds=(now - since) if since else None,
            crashes=self.crashes, versions=self.versions, disk_tier=self.disk_tier,
            leaving=self.leaving, leaves_at=self.plan.leaves_at, credential=self.credential(),
            metrics=self.metrics.sample() if self.metrics else {}, **self.shared.counters())

    def credential(self) -> dict:
        """The data credential this worker's reads use (kind, file, mode, expiry), looked at
        once a minute: HTCondor replaces a renewed proxy in a running job."""
        if time.monotonic() - self._credential_at > 60:
            self._credential, self._credential_at = describe_credentials(find_credentials()), time.monotonic()
        return self._credential

    # -- claiming the name -----------------------------------------------------------------
    def claim(self) -> None:
        """Claim the name; raise :class:`NameHeld` if another live process holds it, and
        :class:`PermissionError` if the broker refuses the password (waiting cannot cure
        that). Gives up quietly when the worker is told to stop meanwhile."""
        while not self.stopping:
            try:
                got = self.storage.lease.claim(self.name, self.incarnation, self.status())
                if got.ok:
                    return
                holder = self.storage.lease.holder_status(self.name)
                if self._holder_renews():
                    who = (f"{holder.host} pid {holder.pid} (incarnation {holder.incarnation})" if holder
                           else f"incarnation {got.holder}")
                    raise NameHeld(f"worker name {self.name!r} is already held by {who}, which is alive: "
                                   "stop it first, or start this worker under another --name")
                got = self.storage.lease.claim(self.name, self.incarnation, self.status(), mode="force",
                                         expected=got.holder)
                if got.ok:
                    log.warning("worker %s: took over the name from a dead predecessor (incarnation %s); "
                                "what it held was requeued", self.name, holder.incarnation if holder else "?")
                    return
            except AuthenticationError:
                self.storage.ping()             # raises PermissionError, naming the broker
                raise
            except BrokerTrouble as err:
                self.backoff.wait(err, redact(self.config.url))

    def _holder_renews(self) -> bool:
        """Watch the holder's claim for up to 2.5 heartbeats: a live holder renews it."""
        deadline = time.monotonic() + 2.5 * self.settings.heartbeat
        last = self.storage.lease.claim_ms_left(self.name)
        while time.monotonic() < deadline:
            time.sleep(0.05)
            now = self.storage.lease.claim_ms_left(self.name)
            if now == -2:
                return False
            if now > last + 20:
                return True
            last = now
        return False

    # -- running ---------------------------------------------------------------------------
    def run(self) -> int:
        """Serve until SIGTERM/SIGINT; returns the exit code (0, or 3 if the name is held)."""
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)
        become_subreaper()    # a killed task process's children come here, to be stopped
        try:
            return self._serve()
        finally:              # the task process is not daemonic: never leave it behind
            self._kill_task_process()

    def _serve(self) -> int:
        try:
            self.claim()
        except NameHeld as err:
            print(f"rhtc worker: {err}", file=sys.stderr, flush=True)
            return EXIT_NAME_HELD
        except PermissionError as err:
            print(f"rhtc worker {self.name}: {err}", file=sys.stderr, flush=True)
            return EXIT_REFUSED
        if self.stopping:
            return 0
        log.info("worker %s (incarnation %s) serving %s (namespace %s)", self.name, self.incarnation,
                 redact(self.config.url), self.config.namespace)
        self._start_task_process()
        next_beat = 0.0
        fast_crashes = 0
        while not self.stopping:
            timeout = max(0.0, next_beat - time.monotonic())
            if multiprocessing.connection.wait([self.proc.sentinel], timeout):
                if self.stopping or self.leaving:
                    break
                fast_crashes = fast_crashes + 1 if time.time() - self._proc_started < 2 else 0
                self._task_process_died()
                if fast_crashes > 1:        # a crash loop: restart at most once a heartbeat
                    time.sleep(self.settings.heartbeat)
                self._start_task_process()
                next_beat = 0.0             # publish the new task process at once
                continue
            if time.monotonic() < next_beat:
                continue
            next_beat = time.monotonic() + self.settings.heartbeat
            try:
                if not self.beat():
                    return self._superseded()
                self._leave_when_due()
                next_beat += self.beat_every - self.settings.heartbeat
                self.backoff.ok()
            except BrokerTrouble as err:
                self.storage.reset_connection()
                self.backoff.wait(err, redact(self.config.url))
        self._stop()
        return 0

    # -- leaving on its own terms (worker/lifetime.py) ------------------------------------
    def _leave_when_due(self) -> None:
        """Start to drain when the lifetime is up or the worker idled past its timeout;
        hand back the task in hand if the drain outlasts the lifetime."""
        if self.leaving:
            if time.time() >= self.drain_until and self.proc.exitcode is None:
                log.warning("worker %s: its lifetime is up; handing back the task it still runs", self.name)
                self.drain_until = float("inf")
                os.kill(self.proc.pid, signal.SIGTERM)
            return
        why = self._why_leave()
        if not why:
            return
        self.leaving = why
        grace = self.plan.ends_at - time.time() - 1 if why == "lifetime" else STOP_GRACE
        self.drain_until = time.time() + max(STOP_GRACE, grace)
        log.warning("worker %s leaves (%s): it takes no new task, finishes the one it runs and exits",
                    self.name, "its lifetime is up" if why == "lifetime"
                    else f"no task for {self.settings.idle_timeout:.0f} s")
        self.storage.lease.heartbeat(self.name, self.incarnation, self.status())   # seen leaving at once
        os.kill(self.proc.pid, signal.SIGUSR1)

    def _why_leave(self) -> str:
        if self.plan.due():
            self.storage.lease.may_leave(self.name, force=True)
            return "lifetime"
        timeout = self.settings.idle_timeout
        if timeout <= 0:
            return ""
        task, _ = self.shared.current()
        done, now = self.shared.counters()["tasks_done"], time.monotonic()
        held = self.shared.held()                  # (None: cannot tell; not idle, then)
        if task is not None or done != self._last_done or held is None or held:
            self._idle_since, self._last_done = now, done
        elif now - self._idle_since >= timeout:
            if self.storage.lease.may_leave(self.name):
                return "idle"
            self._idle_since = now - 0.75 * timeout       # the pool is at its floor: ask again later
        return ""

    def beat(self) -> bool:
        """One heartbeat: renew the name and the lease, publish the status, reap dead
        workers, drop the maps of dead clients, and reconcile the lease once per
        ``settings.reconcile``. False when another incarnation took the name over. Sets
        :attr:`beat_every`, when the next beat is due: an idle worker (no task, nothing
        leased) beats every ``settings.idle_heartbeat`` s."""
        status = self.status()
        beat = self.storage.lease.heartbeat(self.name, self.incarnation, status, duties=DUTIES_EVERY)
        if not beat.ok:
            return False
        idle = status.task is None and not beat.leased and not self.leaving
        self.beat_every = self.settings.idle_heartbeat if idle else self.settings.heartbeat
        if beat.reap_due:             # at most once a second across the pool (beat.lua)
            self.storage.lease.reap(every=0)
        if beat.sweep_due:
            self.storage.maps.drop_dead_clients(every=0)
        if time.monotonic() >= self._next_reconcile and beat.leased:    # (nothing leased: nothing to check)
            if self._reconcile():
                self._next_reconcile = time.monotonic() + self.settings.reconcile
        return True

    def _on_signal(self, signum, frame) -> None:
        self.stopping = True
        if self.proc is not None and self.proc.pid and self.proc.exitcode is None:
            try:
                os.kill(self.proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass

    def _start_task_process(self) -> None:
        self.shared.reset()
        ctx = multiprocessing.get_context("fork")
        # not daemonic: a task may start its own processes (multiprocessing.Pool,
        # ProcessPoolExecutor); the supervisor stops it and what it left (see _stop)
        self.proc = ctx.Process(target=_run_task_process, name=f"rhtc-task-{self.name}", daemon=False,
                                args=(self.config, self.name, self.incarnation, self.shared, self.cache_bytes,
                                      self.max_batch, self.settings, os.getpid()))
        self.proc.start()
        self._proc_started = time.time()
        self.metrics = NodeMetrics(pid=self.proc.pid)

    def _reconcile(self) -> bool:
        """Requeue what is leased here and not held by the task process; False (try at the
        next beat) when what it holds cannot be read now (its writer is inside a write)."""
        held = self.shared.held()
        if held is None:
            log.info("worker %s: its task process is inside a write of what it holds (frozen, or its "
                     "thread waits for the GIL); the lease is reconciled at a later beat", self.name)
            return False
        n, _ = self.storage.lease.reconcile(self.name, self.incarnation, held)
        if n:
            log.warning("worker %s: %d leased task(s) were not running here (a lost reply?); requeued",
                        self.name, n)
        return True

    def _task_process_died(self) -> None:
        self.proc.join(5)
        code = self.proc.exitcode
        self._end_orphans()
        task, since = self.shared.current(settled=True)     # (nothing writes it any more)
        self.crashes += 1
        try:        # the status says so before the task is handed back and may finish elsewhere
            self.storage.lease.heartbeat(self.name, self.incarnation, self.status())
        except BrokerTrouble:
            pass    # the main loop's next beat publishes it
        why = (f"the task process of worker {self.name} (pid {self.proc.pid}) died with {describe_exit(code)}"
               + (f" while running task {task}" if task else ""))
        if task and since:
            why = messages.lost_run_line(why, self.name, since, time.time())
        fate = ""
        while not self.stopping:         # on the way out, retire() hands everything back
            try:
                _, fate = self.storage.lease.reconcile(self.name, self.incarnation, gone=True,
                                                 crashed=task.task_id if task else b"", why=why)
                break
            except BrokerTrouble as err:
                self.backoff.wait(err, redact(self.config.url))
        then = {messages.Requeued.QUEUED: "requeued", messages.Requeued.DEAD: "failed: it used up its attempts",
                messages.Requeued.GONE: "dropped (map ended)"}
        log.warning("%s; the task was %s; starting a fresh task process", why, then.get(fate, "not leased"))
        try:
            self.storage.report(why)
        except BrokerTrouble:
            pass

    def _superseded(self) -> int:
        holder = self.storage.lease.holder_status(self.name)
        print(f"rhtc worker: incarnation {self.incarnation} of {self.name!r} lost its name to "
              f"{holder.host + ' pid ' + str(holder.pid) if holder else 'another process'}; stopping",
              file=sys.stderr, flush=True)
        self._kill_task_process()
        return EXIT_NAME_HELD

    def _kill_task_process(self) -> None:
        if self.proc is not None and self.proc.exitcode is None:
            self.proc.kill()
            self.proc.join(5)
        self._end_orphans()

    def _end_orphans(self) -> None:
        """Stop the processes the dead task process's tasks left (reparented here)."""
        alive = self.proc is not None and self.proc.exitcode is None
        stopped = end_children(exclude=frozenset({self.proc.pid}) if alive else frozenset())
        if stopped:
            log.warning("worker %s: stopped %d process(es) left by its task process: pids %s",
                        self.name, len(stopped), stopped)

    def _stop(self) -> None:
        """Let the task process hand back its task, then give back everything still leased."""
        if self.proc is not None:
            self.proc.join(STOP_GRACE)
            self._kill_task_process()
        deadline = time.monotonic() + STOP_GRACE
        while True:
            try:
                self.storage.lease.retire(self.name)
                break
            except BrokerTrouble as err:
                if time.monotonic() > deadline:       # the reaper of another worker will do it
                    log.warning("worker %s: could not give back its tasks (%s); they are requeued "
                                "when its name expires", self.name, err)
                    break
                self.backoff.wait(err, redact(self.config.url))
        log.info("worker %s stopped (%d task-process crashes)", self.name, self.crashes)
