"""The figures a worker carries on its heartbeat (worker/metrics.py), read from this process
by psutil: its own CPU, RSS and I/O on every sample; the node's CPU, memory and network
re-read only every ``node_every`` samples (150 workers on a node share them), the same
figures carried in between. Which names the heartbeat and the dashboard know:
tests/unit/broker/wire/test_messages.py."""
from __future__ import annotations

import mmap
import os

import psutil

from rhtc.worker.metrics import NodeMetrics
from tests.helpers import wait_until

OWN = {"cpu", "rss", "disk_read", "disk_write"}
NODE = {"node_cpu", "node_mem", "net_recv", "net_sent"}


def test_a_sample_holds_the_process_and_the_node_figures():
    sample = NodeMetrics().sample()
    assert set(sample) == OWN | NODE
    assert sample["rss"] > 10 << 20                      # this Python, with pytest loaded
    assert abs(sample["rss"] - psutil.Process().memory_info().rss) < 64 << 20
    assert 0 <= sample["node_mem"] <= 100 and sample["cpu"] >= 0 and sample["node_cpu"] >= 0


def test_the_node_figures_are_reread_every_node_every_samples(monkeypatch):
    """psutil's node-wide reads, counted (the real ones run): one per ``node_every`` samples,
    and the samples between carry the figures of the last."""
    reads = []
    real = psutil.virtual_memory

    def counted():
        reads.append(real())
        return reads[-1]
    monkeypatch.setattr(psutil, "virtual_memory", counted)
    m = NodeMetrics(node_every=3)
    samples = [m.sample() for _ in range(7)]
    assert len(reads) == 3                                # samples 0, 3 and 6
    assert [s["node_mem"] for s in samples] == [reads[i // 3].percent for i in range(7)]
    assert all(samples[i][k] == samples[i - 1][k] for i in (1, 2, 4, 5) for k in NODE)


def test_the_own_figures_are_read_on_every_sample():
    """A later sample sees the process grow by 64 MB of new pages. They are mapped from the
    kernel (``mmap``), not allocated: a ``bytearray`` may reuse heap memory an earlier test in
    this process freed but the allocator kept resident, and the RSS did not grow (it failed so
    in CI). The kernel's resident count may still lag the page faults, so a few more samples
    are taken; a cached figure would never move."""
    m = NodeMetrics(node_every=1000)
    first = m.sample()["rss"]
    with mmap.mmap(-1, 64 << 20) as fresh:
        for page in range(0, len(fresh), mmap.PAGESIZE):  # every page touched: resident
            fresh[page] = 1
        wait_until(lambda: m.sample()["rss"] >= first + (48 << 20), 5, "the sample to count the 64 MB touched")


def test_another_process_is_watched_by_its_pid():
    parent = psutil.Process(os.getppid())
    assert abs(NodeMetrics(pid=parent.pid).sample()["rss"] - parent.memory_info().rss) < 4 << 20
