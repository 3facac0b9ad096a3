"""The text behind ``rhtc status``: workers, queues, maps in flight, recent problems.

    >>> from rhtc.client.api import storage_for                     # doctest: +SKIP
    >>> print(render_status(storage_for()))                    # doctest: +SKIP
"""
from __future__ import annotations

import time
from datetime import datetime

from rhtc.broker.storage import Storage


def _mb(x) -> str:
    return f"{(x or 0) / 1e6:,.0f}"


def render_status(storage: Storage, max_workers: int = 60) -> str:
    now = time.time()
    workers = storage.live_workers()
    lines = [f"broker {storage.config!r}   {datetime.now():%H:%M:%S}",
             f"{len(workers)} live workers, {storage.shared_depth()} tasks in the shared queue", ""]
    if workers:
        hdr = (f"{'worker':<28} {'host':<14} {'state':<5} {'task':<22} {'run s':>6} {'hb s':>5} "
               f"{'cpu%':>5} {'rss MB':>7} {'cache MB':>9} {'entries':>7} {'read MB':>8} {'queued':>6} {'done':>6} {'err':>4}")
        lines.append(hdr)
        for w in sorted(workers, key=lambda w: w["name"])[:max_workers]:
            run = f"{w['task_seconds']:.1f}" if w.get("task_seconds") is not None else ""
            lines.append(
                f"{w['name'][:28]:<28} {str(w.get('host', ''))[:14]:<14} {w.get('state', '?'):<5} "
                f"{(w.get('task') or '-')[:22]:<22} {run:>6} {now - w.get('t', now):>5.1f} "
                f"{w.get('cpu', 0):>5.0f} {_mb(w.get('rss')):>7} {_mb(w.get('cache_bytes')):>9} "
                f"{w.get('cache_entries', 0):>7} {_mb(w.get('bytes_read')):>8} {w.get('queued', 0):>6} {w.get('tasks_done', 0):>6} "
                f"{w.get('errors', 0):>4}")
        if len(workers) > max_workers:
            lines.append(f"... and {len(workers) - max_workers} more")
    else:
        lines.append("no workers: start some with `rhtc workers -n 4` or `condor_submit condor/workers.sub`")
    maps = storage.maps_in_flight()
    lines += ["", f"{len(maps)} maps in flight"]
    for m in maps:
        lines.append(f"  {m['map_id']}  {m.get('label', '?'):<20} {m.get('n', '?'):>6} tasks  "
                     f"{m['unread_results']:>6} unread results  client {m.get('client', '?')}")
    problems = storage.recent_problems(5)
    if problems:
        lines += ["", "recent problems:"]
        for p in problems:
            lines.append(f"  {datetime.fromtimestamp(p['t']):%H:%M:%S} {p['message'][:150]}")
    return "\n".join(lines)
