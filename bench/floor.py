"""The floor under our round trip: a bare Redis list queue with one echo process
(LPUSH, BRPOP, RPUSH, BLPOP), no pickling, no signing, no leases. ``bench overhead``
prints it beside ours, measured in the same run, so that a round-trip figure can be read
against what this machine's loopback and Redis cost.

    >>> from rhtc.broker.embedded import EmbeddedBroker
    >>> with EmbeddedBroker() as b:
    ...     min(bare_round_trips(b.config, 50)) < 0.01
    True
"""
from __future__ import annotations

import multiprocessing
import time

import redis

from ..broker.config import BrokerConfig
from ..broker.keys import Keys


def _echo(url: str, queue: str, replies: str) -> None:
    r = redis.Redis.from_url(url)
    while True:
        got = r.brpop([queue], timeout=10)
        if got is None or got[1] == b"stop":
            return
        r.rpush(replies, got[1])


def bare_round_trips(config: BrokerConfig, n: int, warmup: int = 20) -> list[float]:
    """Seconds per round trip, ``n`` of them, through a bare list queue."""
    keys = Keys(config.namespace)
    queue, replies = keys.floor_queue, keys.floor_results
    proc = multiprocessing.get_context("fork").Process(target=_echo, args=(config.url, queue, replies))
    proc.start()
    r = redis.Redis.from_url(config.url)
    out = []
    try:
        for _ in range(n + warmup):
            t = time.perf_counter()
            r.lpush(queue, b"x")
            r.blpop([replies], timeout=10)
            out.append(time.perf_counter() - t)
    finally:
        r.lpush(queue, b"stop")
        proc.join(10)
        r.delete(queue, replies)
        r.close()
    return out[warmup:]
