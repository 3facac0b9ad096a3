"""When a worker leaves on its own terms: at the end of its lifetime, or when idle.

**Lifetime.** A batch job has a walltime (CERN's ``JobFlavour``, a site's maximum, Slurm's
``--time``); killed at the end, a worker loses its cache and the task it runs. A worker
that knows its lifetime (``--lifetime 8h``, else what the job says: the HTCondor job ad's
``MaxRuntime`` or ``MaxWallTimeMins``, Slurm's time left) starts to **drain** a margin
before the end (``lifetime_margin``, at most a tenth of the lifetime): it takes no new
task, finishes the one it runs, hands in its results and exits 0. Each worker cuts its
lifetime by a random part of ``lifetime_stagger`` of it, so a pool started at once does
not leave at once; it publishes when it will drain (``leaves_at``), so a pool keeper can
start its replacement ahead.

**Idle.** A worker with no task for ``idle_timeout`` leaves and releases its slot, unless
the pool would fall under its keeper's minimum (the broker's ``pool-floor``).

    >>> plan = LeavePlan.make(lifetime=3600, margin=600, stagger=0.0, started=1000.0)
    >>> plan.leaves_at, plan.ends_at          # the margin is at most a tenth of the lifetime
    (4240.0, 4600.0)
    >>> LeavePlan.make(lifetime=0, margin=300, stagger=0.1, started=0.0).leaves_at
    0.0
"""
from __future__ import annotations

import dataclasses
import os
import random
import re
import shutil
import subprocess
import time

#: job-ad attributes that give a job's walltime, in seconds or minutes, in the order tried
#: (CERN's JobFlavour sets MaxRuntime; some sites set MaxWallTimeMins)
AD_WALLTIME = (("MaxRuntime", 1), ("MaxWallTimeMins", 60))


@dataclasses.dataclass(frozen=True)
class LeavePlan:
    """When this worker starts to drain (``leaves_at``) and when its lifetime ends, as
    ``time.time()`` values; 0 for a worker without a lifetime."""

    leaves_at: float = 0.0
    ends_at: float = 0.0

    @classmethod
    def make(cls, lifetime: float, margin: float, stagger: float, started: float) -> "LeavePlan":
        if not lifetime or lifetime <= 0:
            return cls()
        life = lifetime * (1.0 - random.uniform(0.0, max(0.0, min(stagger, 0.5))))
        margin = min(margin, lifetime / 10)
        return cls(leaves_at=started + life - margin, ends_at=started + life)

    def due(self, now: float | None = None) -> bool:
        return bool(self.leaves_at) and (now or time.time()) >= self.leaves_at


def job_walltime(environ=None) -> float | None:
    """The seconds the batch system gives this job, where it says; None where it does not.

    >>> import tempfile
    >>> ad = tempfile.NamedTemporaryFile("w", suffix=".ad", delete=False)
    >>> _ = ad.write('ClusterId = 7\\nMaxRuntime = 1200\\n'); ad.close()
    >>> job_walltime({"_CONDOR_JOB_AD": ad.name})
    1200.0
    >>> job_walltime({}) is None
    True
    """
    environ = os.environ if environ is None else environ
    path = environ.get("_CONDOR_JOB_AD")
    if path and os.path.isfile(path):
        with open(path) as fh:
            ad = dict(line.split(" = ", 1) for line in fh.read().splitlines() if " = " in line)
        for attr, unit in AD_WALLTIME:
            try:
                return float(ad[attr].strip()) * unit
            except (KeyError, ValueError):
                continue
    job = environ.get("SLURM_JOB_ID")
    if job and shutil.which("squeue"):
        try:
            out = subprocess.run(["squeue", "--noheader", "--jobs", job, "--format=%L"], capture_output=True,
                                 text=True, timeout=30).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return None
        return slurm_time_left(out)
    return None


def slurm_time_left(text: str) -> float | None:
    """Slurm's ``%L`` (``[days-]hours:minutes:seconds``, ``minutes:seconds``) in seconds.

    >>> slurm_time_left("1-02:00:00"), slurm_time_left("05:30"), slurm_time_left("UNLIMITED")
    (93600.0, 330.0, None)
    """
    m = re.fullmatch(r"(?:(\d+)-)?(?:(\d+):)?(\d+):(\d+)", text.strip())
    if not m:
        return None
    days, hours, minutes, seconds = (int(g) if g else 0 for g in m.groups())
    return float(((days * 24 + hours) * 60 + minutes) * 60 + seconds)
