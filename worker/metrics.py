"""Process and node figures a worker carries on its heartbeat (via psutil).

    >>> m = NodeMetrics(); sorted(m.sample())[:3]
    ['cpu', 'disk_read', 'disk_write']
"""
from __future__ import annotations

import psutil


class NodeMetrics:
    """Cheap, non-blocking samples: CPU % since the last call, RSS, I/O counters.

    The node-wide figures (node CPU and memory, network) are the same for every worker
    on a node, so they are re-read only every ``node_every`` samples: with 150 workers
    on a node, sampling costs stay a rounding error."""

    def __init__(self, node_every: int = 5, pid: int | None = None):
        self.proc = psutil.Process(pid)
        self.proc.cpu_percent(None)
        psutil.cpu_percent(None)
        self.node_every = node_every
        self._n = 0
        self._node: dict = {}

    def sample(self) -> dict:
        try:
            d = {"cpu": self.proc.cpu_percent(None), "rss": self.proc.memory_info().rss}
        except psutil.Error:          # the process it watches has just ended
            return {"cpu": 0.0, "rss": 0}
        try:
            io = self.proc.io_counters()
            d.update(disk_read=io.read_bytes, disk_write=io.write_bytes)
        except (psutil.Error, AttributeError):
            d.update(disk_read=0, disk_write=0)
        if self._n % self.node_every == 0:
            self._node = {"node_cpu": psutil.cpu_percent(None), "node_mem": psutil.virtual_memory().percent}
            try:
                net = psutil.net_io_counters()
                self._node.update(net_recv=net.bytes_recv, net_sent=net.bytes_sent)
            except (psutil.Error, AttributeError):
                self._node.update(net_recv=0, net_sent=0)
        self._n += 1
        d.update(self._node)
        return d
