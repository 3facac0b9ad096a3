"""Talk to an HTCondor schedd through the ``htcondor2`` bindings: submit, list, remove.

Every failure to reach the pool becomes :class:`SchedulerUnavailable`, whose message says
what to set (``CONDOR_CONFIG``, ``COLLECTOR_HOST``, ``--schedd``/``--pool``) instead of a
traceback.
"""
from __future__ import annotations

import os
import sys
from typing import Any
from rhtc.errors import RhtcError

# The attribute `workers.sub` puts on every worker job (`+RhtcWorker = true`).
WORKER_FLAG = "RhtcWorker"
LIST_ATTRS = ["ClusterId", "ProcId", "JobStatus", "Owner", "RemoteHost", "HoldReason",
              "EnteredCurrentStatus", "QDate"]
JOB_STATUS = {1: "idle", 2: "running", 3: "removed", 4: "completed", 5: "held",
              6: "transferring", 7: "suspended"}

_UNSET = object()
_loaded_config: object = _UNSET


class SchedulerUnavailable(RuntimeError, RhtcError):
    """No schedd (or Slurm controller) could be reached; the message says what to set."""


def bindings():
    """``import htcondor2``, re-reading the configuration if ``$CONDOR_CONFIG`` changed."""
    global _loaded_config
    imported_before = "htcondor2" in sys.modules
    try:
        import htcondor2
    except ImportError as err:
        raise SchedulerUnavailable(
            "the htcondor Python bindings are not installed: `pip install htcondor` "
            "(or `pip install redis-htcondor[condor]`)") from err
    current = os.environ.get("CONDOR_CONFIG")
    if _loaded_config is _UNSET:
        if imported_before:      # someone imported it earlier, maybe under another CONDOR_CONFIG
            htcondor2.reload_config()
        _loaded_config = current
    elif current != _loaded_config:
        htcondor2.reload_config()
        _loaded_config = current
    return htcondor2


def _where() -> str:
    htcondor2 = bindings()
    config = os.environ.get("CONDOR_CONFIG")
    collector = htcondor2.param.get("COLLECTOR_HOST")
    parts = [f"CONDOR_CONFIG={config}" if config else "CONDOR_CONFIG is not set",
             f"COLLECTOR_HOST={collector}" if collector else "COLLECTOR_HOST is not set"]
    return ", ".join(parts)


def unavailable(err: BaseException | str, schedd: str | None = None, pool: str | None = None) -> SchedulerUnavailable:
    target = f"schedd {schedd!r}" if schedd else "a schedd"
    if pool:
        target += f" in pool {pool!r}"
    return SchedulerUnavailable(
        f"cannot reach {target}: {err} ({_where()}).\n"
        "Run this on an HTCondor submit node, or point the bindings at your pool: set "
        "CONDOR_CONFIG to your site's condor_config (e.g. /etc/condor/condor_config), or set "
        "COLLECTOR_HOST / _CONDOR_COLLECTOR_HOST=<central manager host:port> and pass "
        "--schedd NAME; `condor_q` must work from this shell. To submit anyway from here, "
        "use `condor_submit condor/workers.sub` on the submit node.")


def find_schedd(schedd: str | None = None, pool: str | None = None):
    """The ``htcondor2.Schedd`` to use: the local one, or ``schedd`` located in ``pool``."""
    htcondor2 = bindings()
    if not pool and not schedd and not htcondor2.param.get("COLLECTOR_HOST") \
            and not htcondor2.param.get("SCHEDD_HOST"):
        raise unavailable("no HTCondor configuration found")
    try:
        collector = htcondor2.Collector(pool) if pool else htcondor2.Collector()
        if schedd:
            ad = collector.locate(htcondor2.DaemonType.Schedd, schedd)
        else:
            ad = collector.locate(htcondor2.DaemonType.Schedd)
        return htcondor2.Schedd(ad)
    except Exception as err:  # HTCondorException, ValueError, IOError depending on the failure
        raise unavailable(err, schedd, pool) from None


def submit(sub, count: int, schedd: str | None = None, pool: str | None = None) -> int:
    """Queue ``count`` jobs of the ``htcondor2.Submit`` ``sub``; return the cluster id."""
    target = find_schedd(schedd, pool)
    sub.setQArgs(str(count))
    try:
        result = target.submit(sub)
    except Exception as err:
        raise SchedulerUnavailable(f"the schedd refused the workers: {err}") from None
    return int(result.cluster())


def query(cluster: int | None = None, schedd: str | None = None, pool: str | None = None) -> list[dict[str, Any]]:
    """The worker jobs in the queue (optionally of one cluster), as plain dicts."""
    target = find_schedd(schedd, pool)
    constraint = f"{WORKER_FLAG} =?= true"
    if cluster is not None:
        constraint += f" && ClusterId == {int(cluster)}"
    try:
        ads = target.query(constraint=constraint, projection=LIST_ATTRS)
    except Exception as err:
        raise unavailable(err, schedd, pool) from None
    jobs = []
    for ad in ads:
        row = {k: ad.get(k) for k in LIST_ATTRS}
        row["id"] = f"{row['ClusterId']}.{row['ProcId']}"
        row["status"] = JOB_STATUS.get(row["JobStatus"], str(row["JobStatus"]))
        jobs.append(row)
    return sorted(jobs, key=lambda r: (r["ClusterId"], r["ProcId"]))


def remove(cluster: int | str, schedd: str | None = None, pool: str | None = None) -> int:
    """``condor_rm`` the worker jobs of ``cluster`` (or ``"all"``); return how many were removed."""
    htcondor2 = bindings()
    target = find_schedd(schedd, pool)
    constraint = f"{WORKER_FLAG} =?= true"
    if str(cluster) != "all":
        spec = str(cluster)
        if "." in spec:
            c, p = spec.split(".", 1)
            constraint += f" && ClusterId == {int(c)} && ProcId == {int(p)}"
        else:
            constraint += f" && ClusterId == {int(spec)}"
    try:
        result = target.act(htcondor2.JobAction.Remove, constraint)
    except Exception as err:
        raise unavailable(err) from None
    return int(result.get("TotalSuccess", 0)) if result is not None else 0
