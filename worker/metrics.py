"""Process and node figures a worker carries on its heartbeat (via psutil).

    >>> m = NodeMetrics(); sorted(m.sample())[:3]
    ['cpu', 'disk_read', 'disk_write']
"""
from __future__ import annotations

import psutil


class NodeMetrics:
    """Cheap, non-blocking samples: CPU % since the last call, RSS, I/O counters."""

    def __init__(self):
        self.proc = psutil.Process()
        self.proc.cpu_percent(None)
        psutil.cpu_percent(None)

    def sample(self) -> dict:
        d = {"cpu": self.proc.cpu_percent(None), "rss": self.proc.memory_info().rss,
             "node_cpu": psutil.cpu_percent(None), "node_mem": psutil.virtual_memory().percent}
        try:
            io = self.proc.io_counters()
            d.update(disk_read=io.read_bytes, disk_write=io.write_bytes)
        except (psutil.Error, AttributeError):
            d.update(disk_read=0, disk_write=0)
        try:
            net = psutil.net_io_counters()
            d.update(net_recv=net.bytes_recv, net_sent=net.bytes_sent)
        except (psutil.Error, AttributeError):
            d.update(net_recv=0, net_sent=0)
        return d
