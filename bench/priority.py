"""The bench's share of the machine: ``bench scale`` measures how the client, Redis and a
thousand light workers share this machine's cores, so other work on the machine must not
decide its figures, and its own harness (the light workers' task threads) must not starve
what it measures.

With Linux's cgroup v1 ``cpu`` controller writable (root, as on the development machine and
in CI), the bench runs in a control group of its own, :data:`BENCH_SHARES` against the
1,024 of every other process group on the machine: another busy job gets a third of the CPU
while the bench is busy, not more. Inside it, the task halves of the light workers
(:func:`bench.lightworkers.yield_cpu`) share one child group of :data:`TASKS_SHARES`,
an eighth of one of the bench's own threads however many task threads wake at once. At
256 and at 1,024 the supervisors' heartbeats lapsed in the 1,000-worker x 8 MB cell
(its tasks failed as WorkerLost after three workers "stopped heartbeating"); at 128 the
cell ran, every worker with its first task within 0.3 s.

Measured side by side (``bench scale --cpu-group both --busy 2``, docs/scale.md, "The ramp
on a shared machine"): beside two busy processes on the two cores, with the task halves
in scheduling groups of their own at the lowest weight, 1,000 light workers waited up to a
minute for their first task. Without the controller (not root, cgroup v2 only) the bench
says so and runs as before: its ramp is then exposed to whatever else runs.

Every group it makes is removed when the bench ends; one left by a bench that was killed
(its pid in the name, dead) is removed by the next.

    >>> Share.path_of(4242)
    '/sys/fs/cgroup/cpu/rhtc-bench-4242'
"""
from __future__ import annotations

import logging
import os
import re
import time

log = logging.getLogger("rhtc.bench")

ROOT = "/sys/fs/cgroup/cpu"
PREFIX = "rhtc-bench-"
BENCH_SHARES = 2048          # against 1,024 for each other process group (autogroup) on the machine
TASKS_SHARES = 128           # the light workers' task halves together, against 1,024 per bench thread
TASKS_GROUP_ENV = "RHTC_BENCH_TASKS_CGROUP"   # the task halves' group, for the light processes


class Share:
    """A context manager: this process (and what it starts) in the bench's own control group,
    when the machine lets us; :attr:`active` says whether it did, :attr:`why_not` why not."""

    def __init__(self, enabled: bool = True):
        self.enabled = enabled
        self.path: str | None = None
        self.home: str | None = None           # this process's cpu group before
        self.why_not: str | None = None

    @staticmethod
    def path_of(pid: int) -> str:
        return f"{ROOT}/{PREFIX}{pid}"

    @property
    def active(self) -> bool:
        return self.path is not None

    @property
    def tasks(self) -> str | None:
        """The task halves' child group, or None."""
        return f"{self.path}/halves" if self.path else None

    def __enter__(self) -> "Share":
        if not self.enabled:
            self.why_not = "not asked for (--cpu-group none)"
            return self
        if not os.access(f"{ROOT}/cgroup.procs", os.W_OK):
            self.why_not = (f"{ROOT} is not writable here (it needs root and the cgroup v1 cpu controller): "
                            "other work on this machine shares the cores with the bench and can slow its ramp")
            return self
        sweep()
        path = self.path_of(os.getpid())
        try:
            os.makedirs(f"{path}/halves", exist_ok=True)
            _write(f"{path}/cpu.shares", BENCH_SHARES)
            _write(f"{path}/halves/cpu.shares", TASKS_SHARES)
            self.home = _own_group()
            _write(f"{path}/cgroup.procs", os.getpid())
        except OSError as err:
            self.why_not = f"could not make the bench's cpu group {path} ({err}): it runs in the machine's"
            _remove(path)
            return self
        self.path = path
        os.environ[TASKS_GROUP_ENV] = self.tasks
        return self

    def __exit__(self, *exc) -> None:
        if self.path is None:
            return
        os.environ.pop(TASKS_GROUP_ENV, None)
        try:
            _write(f"{ROOT}{self.home or ''}/cgroup.procs", os.getpid())
        except OSError as err:
            log.warning("bench: could not move back to the cpu group %s: %s", self.home, err)
        _remove(self.path)
        self.path = None


def join_tasks_group() -> bool:
    """In a light worker's task half: join the bench's task group if it has one."""
    group = os.environ.get(TASKS_GROUP_ENV)
    if not group:
        return False
    try:
        _write(f"{group}/cgroup.procs", os.getpid())
        return True
    except OSError:
        return False


def sweep() -> list[str]:
    """Remove the groups of benches that are gone (their pid dead); returns their paths."""
    gone = []
    try:
        names = os.listdir(ROOT)
    except OSError:
        return gone
    for name in names:
        m = re.fullmatch(re.escape(PREFIX) + r"(\d+)", name)
        if m and not _alive(int(m.group(1))):
            _remove(f"{ROOT}/{name}")
            gone.append(f"{ROOT}/{name}")
    return gone


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def _own_group() -> str:
    """This process's group in the cpu hierarchy ('/' for the root)."""
    with open("/proc/self/cgroup") as fh:
        for line in fh:
            _, controllers, path = line.rstrip("\n").split(":", 2)
            if "cpu" in controllers.split(","):
                return path.rstrip("/")
    return ""


def _write(path: str, value) -> None:
    with open(path, "w") as fh:
        fh.write(str(value))


def _remove(path: str) -> None:
    """Remove ``path`` (a group and its ``halves`` child), its processes moved to the root
    group first (a stray one left by a killed bench must not keep it)."""
    for group in (f"{path}/halves", path):
        if not os.path.isdir(group):
            continue
        for _ in range(50):
            try:
                os.rmdir(group)
                break
            except OSError:
                try:
                    with open(f"{group}/cgroup.procs") as fh:
                        pids = [p for p in fh.read().split() if p]
                    for pid in pids:
                        try:
                            _write(f"{ROOT}/cgroup.procs", pid)
                        except OSError:
                            pass
                except OSError:
                    pass
                time.sleep(0.1)
        else:
            log.warning("bench: could not remove the cpu group %s", group)
