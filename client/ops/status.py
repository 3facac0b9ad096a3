"""The text behind ``rhtc status``: workers, queues, maps in flight, recent problems.

    >>> from rhtc.client.api import storage_for
    >>> print(render_status(storage_for()))
    broker BrokerConfig(url='redis://:***@...', namespace='...')   ...
    0 live workers, 0 tasks in the shared queue
    ...
"""
from __future__ import annotations

import time
from datetime import datetime

from ...broker.wire.protocol import key_fingerprint
from ...broker.wire.messages import WorkerStatus
from ...broker.storage import Storage
from rhtc.versions import stack_versions


def _mb(x) -> str:
    return f"{(x or 0) / 1e6:,.0f}"


def _same(package: str, ours: str, theirs: str) -> bool:
    """Python pickles agree across patch releases; packages must match exactly."""
    if package == "python":
        return ours.split(".")[:2] == theirs.split(".")[:2]
    return ours == theirs


def misfits(statuses: list[WorkerStatus], key: bytes, versions: dict[str, str] | None = None) -> list[str]:
    """One line per live worker that cannot serve this client well: it holds another
    signing key (its tasks are refused), or its analysis stack differs (results may not
    unpickle here).

    >>> from rhtc.broker.wire.protocol import key_fingerprint
    >>> from rhtc.broker.wire.messages import WorkerStatus
    >>> w = WorkerStatus(name="w1", host="h", pid=1, incarnation="i", key_fingerprint="x" * 16,
    ...                  versions={"numpy": "2.1.0"})
    >>> print("\\n".join(misfits([w], b"k" * 32, {"numpy": "1.26.4"})))
    w1: holds another signing key (fingerprint xxxxxxxxxxxxxxxx, this client's ...)
    w1: numpy 2.1.0 (this client: 1.26.4)
    """
    ours = key_fingerprint(key)
    versions = stack_versions() if versions is None else versions
    lines = []
    for w in sorted(statuses, key=lambda w: w.name):
        if w.key_fingerprint and w.key_fingerprint != ours:
            lines.append(f"{w.name}: holds another signing key (fingerprint {w.key_fingerprint}, "
                         f"this client's {ours})")
        for package, theirs in sorted((w.versions or {}).items()):
            mine = versions.get(package)
            if mine and theirs and not _same(package, mine, str(theirs)):
                lines.append(f"{w.name}: {package} {theirs} (this client: {mine})")
    return lines


def disk_tiers(statuses) -> list[str]:
    """One line per node disk tier in use: its hosts, workers, bytes held and cap.

    >>> from rhtc.broker.wire.messages import WorkerStatus
    >>> w = WorkerStatus(name="w1", host="n1", pid=1, incarnation="i", key_fingerprint="f",
    ...                  disk_tier="3f2a", disk_bytes=5 * 10**9, disk_limit=20 * 10**9)
    >>> disk_tiers([w])[2]
    '  node disk 3f2a on n1: 1 workers, 5.0 GB of 20.0 GB (25%)'
    """
    tiers: dict[str, list] = {}
    for w in statuses:
        if w.disk_tier:
            tiers.setdefault(w.disk_tier, []).append(w)
    if not tiers:
        return []
    out = ["", "node disk tiers (the branch cache on each node's disk, kept across worker restarts):"]
    for tier, ws in sorted(tiers.items()):
        used, cap = max(w.disk_bytes for w in ws), max(w.disk_limit for w in ws)
        hosts = ",".join(sorted({w.host for w in ws}))
        share = f" ({100 * used / cap:.0f}%)" if cap else ""
        out.append(f"  node disk {tier} on {hosts}: {len(ws)} workers, {used / 1e9:.1f} GB of {cap / 1e9:.1f} GB{share}")
    return out


def _state(w: dict) -> str:
    """busy, idle, or leave (draining at the end of its lifetime or idle timeout)."""
    return "leave" if w.get("leaving") else w.get("state", "?")


def credential_lines(statuses, now: float | None = None) -> list[str]:
    """The workers' data credentials: which kind, on how many workers, when they expire;
    a warning an hour before (and after).

    >>> from rhtc.broker.wire.messages import WorkerStatus
    >>> w = WorkerStatus(name="w1", host="h", pid=1, incarnation="a", key_fingerprint="f",
    ...                  credential={"x509 proxy": {"kind": "x509 proxy", "file": "x509up_u1000", "mode": "0600",
    ...                                             "expires": 1800.0}})
    >>> print("\\n".join(credential_lines([w], now=0.0)))   # doctest: +ELLIPSIS
    <BLANKLINE>
    credentials: x509 proxy (x509up_u1000, mode 0600) on 1 worker(s): expires in 30 min (...)
      WARNING: the x509 proxy expires in 30 min (...): renew it where you submit (voms-proxy-init, ...
    """
    from rhtc.credentials import WARN_BEFORE, until
    now = time.time() if now is None else now
    groups: dict[tuple, int] = {}
    for st in statuses:
        for c in (st.credential or {}).values():
            key = (c.get("kind"), c.get("file"), c.get("mode"), float(c.get("expires") or 0))
            groups[key] = groups.get(key, 0) + 1
    lines = []
    for (kind, name, mode, expires), n in sorted(groups.items(), key=lambda kv: kv[0][3]):
        lines.append(f"credentials: {kind} ({name}, mode {mode}) on {n} worker(s): {until(expires, now)}")
        if expires and expires - now < WARN_BEFORE:
            lines.append(f"  WARNING: the {kind} {until(expires, now)}: renew it where you submit "
                         "(voms-proxy-init, or your token tool); HTCondor forwards a renewed proxy to running "
                         "jobs, other workers need restarting")
    return ([""] + lines) if lines else []


def render_pools(storage: Storage, events: int = 5) -> str:
    """The pools that keep themselves (``rhtc pool start``): wanted and actual size, jobs by
    state, and the last things each keeper did, with their reasons.

    >>> from rhtc.broker.embedded import EmbeddedBroker
    >>> with EmbeddedBroker() as b:
    ...     s = Storage(b.config)
    ...     s.pool.publish_keeper("a1b2c3", {"scheduler": "condor", "min": 3, "max": 3, "wanted": 3, "serving": 2,
    ...                                 "jobs": {"running": 2, "held": 1}, "host": "login1", "pid": 7}, ttl=30)
    ...     s.pool.keeper_event("a1b2c3", {"what": "replaced", "job": "12.1", "why": "held: memory exceeded"})
    ...     print(render_pools(s))       # doctest: +ELLIPSIS
    pool a1b2c3 (condor, keeper pid 7 on login1): wants 3, 2 serving; jobs: 1 held, 2 running
      ... replaced  12.1         held: memory exceeded
    """
    lines = []
    for k in storage.pool.keepers():
        size = k.get("wanted")
        span = "" if k.get("min") == k.get("max") else f" (adaptive {k.get('min')}:{k.get('max')})"
        jobs = ", ".join(f"{n} {state}" for state, n in sorted((k.get("jobs") or {}).items())) or "no jobs"
        lines.append(f"pool {k['pool']} ({k.get('scheduler')}, keeper pid {k.get('pid')} on {k.get('host')}): "
                     f"wants {size}{span}, {k.get('serving', 0)} serving; jobs: {jobs}")
        if k.get("leaving"):
            lines.append(f"  {k['leaving']} worker(s) leaving at the end of their lifetime or idle")
        if k.get("failures"):
            lines.append(f"  {k['failures']} start-up failure(s) in a row; next try in {k.get('backoff', 0):.0f} s")
        for e in storage.pool.keeper_events(k["pool"], events):
            lines.append(f"  {datetime.fromtimestamp(e['t']):%H:%M:%S} {e.get('what', ''):<9} {e.get('job', ''):<12} "
                         f"{e.get('why', '')[:160]}")
    return "\n".join(lines)


def render_status(storage: Storage, max_workers: int = 60) -> str:
    """The whole ``rhtc status`` screen: workers, misfits, maps in flight, recent problems."""
    now = time.time()
    statuses = storage.pool.worker_statuses()
    workers = [s.to_dict() for s in statuses]
    lines = [f"broker {storage.config!r}   {datetime.now():%H:%M:%S}",
             f"{len(workers)} live workers, {storage.pool.shared_depth()} tasks in the shared queue", ""]
    if workers:
        hdr = (f"{'worker':<28} {'host':<14} {'state':<5} {'task':<22} {'run s':>6} {'hb s':>5} "
               f"{'cpu%':>5} {'rss MB':>7} {'cache MB':>9} {'entries':>7} {'read MB':>8} {'queued':>6} {'done':>6} {'err':>4}")
        lines.append(hdr)
        for w in sorted(workers, key=lambda w: w["name"])[:max_workers]:
            run = f"{w['task_seconds']:.1f}" if w.get("task_seconds") is not None else ""
            lines.append(
                f"{w['name'][:28]:<28} {str(w.get('host', ''))[:14]:<14} {_state(w):<5} "
                f"{(w.get('task') or '-')[:22]:<22} {run:>6} {now - w.get('t', now):>5.1f} "
                f"{w.get('cpu', 0):>5.0f} {_mb(w.get('rss')):>7} {_mb(w.get('cache_bytes')):>9} "
                f"{w.get('cache_entries', 0):>7} {_mb(w.get('bytes_read')):>8} {w.get('queued', 0):>6} {w.get('tasks_done', 0):>6} "
                f"{w.get('errors', 0):>4}")
        if len(workers) > max_workers:
            lines.append(f"... and {len(workers) - max_workers} more")
    else:
        lines.append("no workers: start some with `rhtc workers -n 4` or `condor_submit condor/workers.sub`")
    lines += disk_tiers(statuses)
    lines += credential_lines(statuses, now)
    pools = render_pools(storage)
    if pools:
        lines += ["", pools]
    odd = misfits(statuses, storage.config.key)
    if odd:
        lines += ["", "misfits (restart them with this client's key and versions):"]
        lines += [f"  {line}" for line in odd[:max_workers]]
    forged = sorted((w.name, w.forged) for w in statuses if w.forged)
    if forged:
        lines += ["", "forged workers (no holder of this key published them; never routed to; "
                      "someone has the Redis password: change it):"]
        lines += [f"  {name}: {why}" for name, why in forged[:max_workers]]
    maps = storage.pool.maps_in_flight()
    lines += ["", f"{len(maps)} maps in flight (of every client; they take turns in the shared queue)"]
    for m in maps:
        alive = {True: "alive", False: "dead: its tasks are being dropped", None: "no beacon"}[m.get("client_alive")]
        lines.append(f"  {m['map_id']}  {m.get('label', '?'):<20} {m.get('n', '?'):>6} tasks  "
                     f"{m.get('queued', 0):>6} queued unrouted  {m['unread_results']:>6} unread results  "
                     f"client {m.get('client', '?')} ({alive})")
    problems = storage.recent_problems(5)
    if problems:
        lines += ["", "recent problems:"]
        for p in problems:
            lines.append(f"  {datetime.fromtimestamp(p['t']):%H:%M:%S} {p['message'][:150]}")
    return "\n".join(lines + malformed_lines(storage, max_workers))


#: what ``rhtc status`` and the page say above the malformed records they skipped
MALFORMED_NOTE = ("malformed records, skipped (rhtc does not write these: something else with the Redis "
                  "password did; delete them, and change the password if it was not you):")


def malformed_lines(storage: Storage, at_most: int = 60) -> list[str]:
    """The records its readers skipped because they do not match their schema
    (:mod:`broker.wire.records`), each naming its key and field."""
    bad = storage.malformed.lines()
    more = [f"  ... and {len(bad) - at_most} more"] if len(bad) > at_most else []
    return (["", MALFORMED_NOTE] + [f"  {line[:300]}" for line in bad[:at_most]] + more) if bad else []
