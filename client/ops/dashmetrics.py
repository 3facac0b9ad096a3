"""``/metrics``: the broker's figures in the Prometheus text format, read on each scrape
(a custom collector of ``prometheus-client``, the ``dashboard`` extra).

Per worker (labels ``worker``, ``host``; one series per worker process, never summed
across the workers of a process): tasks started, finished and failed, bytes read from
the branch cache and from files (counters of the worker's current incarnation), CPU,
RSS and cache size. For the namespace: workers by state, queue depths, the cache hit
ratio of the live workers, maps in flight, each map's tasks by state, and each ended map's
efficiency by the wall clock and per worker (defined in :mod:`client.reports.efficiency`).

    >>> from rhtc.client.api import storage_for
    >>> from rhtc.client.ops.dashstate import DashState
    >>> print(render(DashState(storage_for())).decode())
    # HELP rhtc_workers ...
"""
from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
STATES = ("busy", "idle", "stalled")


class BrokerCollector:
    """Reads a :class:`~client.ops.dashstate.DashState` snapshot on each collect."""

    def __init__(self, state):
        self.state = state

    def collect(self):
        snap = self.state.snapshot()
        workers, maps = snap["workers"], snap["maps"]
        by_state = GaugeMetricFamily("rhtc_workers", "Live workers by state (busy, idle, stalled), and forged.",
                                     labels=["state"])
        for state in STATES:
            by_state.add_metric([state], sum(1 for w in workers if w["state"] == state))
        by_state.add_metric(["forged"], sum(1 for w in workers if any(p.startswith("forged") for p in w["problems"])))
        yield by_state
        depth = GaugeMetricFamily("rhtc_queue_depth", "Tasks queued: in the shared queue, in the workers' own "
                                  "queues, in the maps' backlogs.", labels=["queue"])
        depth.add_metric(["shared"], snap["shared_queue"])
        depth.add_metric(["workers"], sum(w["queued"] or 0 for w in workers))
        depth.add_metric(["backlog"], sum(max(0, (m["queued"] or 0)) for m in maps if m["state"] == "running"))
        yield depth
        labels = ["worker", "host"]
        fams = {
            "started": CounterMetricFamily("rhtc_worker_tasks_started", "Tasks the worker started.", labels=labels),
            "finished": CounterMetricFamily("rhtc_worker_tasks_finished", "Tasks the worker finished without error.",
                                            labels=labels),
            "failed": CounterMetricFamily("rhtc_worker_tasks_failed", "Tasks whose function raised or whose "
                                          "result could not be sent.", labels=labels),
            "cache": CounterMetricFamily("rhtc_worker_bytes_from_cache", "Bytes of branches read from the "
                                         "worker's cache.", labels=labels),
            "file": CounterMetricFamily("rhtc_worker_bytes_from_files", "Bytes of branches read from files.",
                                        labels=labels),
            "cpu": GaugeMetricFamily("rhtc_worker_cpu_percent", "CPU use of the worker's processes (%).", labels=labels),
            "rss": GaugeMetricFamily("rhtc_worker_rss_bytes", "Resident memory of the worker's processes.",
                                     labels=labels),
            "cache_bytes": GaugeMetricFamily("rhtc_worker_cache_bytes", "Bytes held in the worker's branch cache.",
                                             labels=labels),
        }
        hits = reads = 0
        for w in workers:
            lv = [w["name"], str(w["host"])]
            done, errors = w["tasks_done"] or 0, w["errors"] or 0
            fams["started"].add_metric(lv, done + (w["state"] == "busy"))
            fams["finished"].add_metric(lv, done - errors)
            fams["failed"].add_metric(lv, errors)
            fams["cache"].add_metric(lv, w["bytes_from_cache"] or 0)
            fams["file"].add_metric(lv, w["bytes_from_file"] or 0)
            if w["cpu"] is not None:
                fams["cpu"].add_metric(lv, w["cpu"])
            if w["rss"] is not None:
                fams["rss"].add_metric(lv, w["rss"])
            fams["cache_bytes"].add_metric(lv, w["cache_bytes"] or 0)
            hits += w["bytes_from_cache"] or 0
            reads += (w["bytes_from_cache"] or 0) + (w["bytes_from_file"] or 0)
        yield from fams.values()
        ratio = GaugeMetricFamily("rhtc_cache_hit_ratio", "Bytes read from the cache over bytes read, "
                                  "live workers since they started (NaN before any read).")
        ratio.add_metric([], hits / reads if reads else float("nan"))
        yield ratio
        yield GaugeMetricFamily("rhtc_maps_in_flight", "Maps whose client is running them.",
                                value=sum(1 for m in maps if m["state"] == "running"))
        tasks = GaugeMetricFamily("rhtc_map_tasks", "Tasks of each recent map, by state (as its client reports).",
                                  labels=["map", "label", "state"])
        for m in maps:
            left = max(0, m["n"] - m["done"] - m["failed"])
            for state, value in (("done", m["done"]), ("failed", m["failed"]), ("waiting", left)):
                tasks.add_metric([m["map_id"], m["label"], state], value)
        yield tasks
        wall = GaugeMetricFamily("rhtc_map_wall_clock_efficiency", "Each ended map's busy task time over its "
                                 "workers x its wall time (submission to last result), 0..1.", labels=["map", "label"])
        worker = GaugeMetricFamily("rhtc_map_per_worker_efficiency", "Each ended map's busy task time over its "
                                   "workers' spans (each from its first task to its last), 0..1.",
                                   labels=["map", "label"])
        for m in maps:
            if m["efficiency_wall"] is not None:
                wall.add_metric([m["map_id"], m["label"]], m["efficiency_wall"])
                worker.add_metric([m["map_id"], m["label"]], m["efficiency"])
        yield wall
        yield worker


def render(state) -> bytes:
    """The text a scrape gets."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(BrokerCollector(state))
    return generate_latest(registry)
