"""The floors under our round trip, measured in the same run as ours (``bench overhead``):

* **bare**: a Redis list queue with one echo process (LPUSH, BRPOP, RPUSH, BLPOP), no
  pickling, no signing, no leases: what this machine's loopback and Redis cost;
* **guarded**: the least a queue with our guarantees must do, in the same style: the task
  pickled and signed naming its map, verified by the echo before it unpickles it, leased
  before it runs, run only under an unexpired signed liveness token of its map (judged by
  the broker's clock), the result signed, handed in only while its lease holds, verified by
  the client. With ``token="fetched"`` (ours) the echo leases the task and reads the map's
  token in one script after its blocking pop: a round trip more, and a frame copied and
  written back after its map ended meets the signed end. With ``token="in-frame"`` the
  blocking pop itself records the lease (BLMOVE into the echo's own list, rq's pattern) and
  the token travels in the frame: four one-way trips, and such a copy runs until its token
  expires.

No map state, no records, no routing, no retries: what is left between ``guarded`` and ours
is the map's own machinery (a one-task ``remote_map`` is a whole map).

    >>> from rhtc.broker.embedded import EmbeddedBroker
    >>> with EmbeddedBroker() as b:
    ...     min(bare_round_trips(b.config, 50)) < 0.01, min(guarded_round_trips(b.config, 50)) < 0.01
    (True, True)
"""
from __future__ import annotations

import multiprocessing
import time

import redis

from ..broker.wire import protocol
from ..broker.wire.config import BrokerConfig
from ..broker.wire.keys import Keys

TOKEN_MODES = ("fetched", "in-frame")
_MAP, _NONCE = "f1005f1005f1005f", "0" * protocol.NONCE_LEN
_LEASE = "redis.call('HSET', KEYS[1], ARGV[1], ARGV[2]) return redis.call('GET', KEYS[2])"
_HAND_IN = {   # the result goes in only while the task's lease holds (a fenced hand-in)
    "fetched": "if redis.call('HDEL', KEYS[1], ARGV[1]) == 1 then redis.call('RPUSH', KEYS[2], ARGV[2]) end",
    "in-frame": "if redis.call('LREM', KEYS[1], 1, ARGV[1]) == 1 then redis.call('RPUSH', KEYS[2], ARGV[2]) end",
}


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


def _guarded_keys(keys: Keys) -> tuple[str, str]:
    """The guarded floor's lease and token keys (an older revision's broker, which ``bench
    overhead --against`` runs beside this file, names only the bare floor's: beside those)."""
    lease, live = getattr(keys, "floor_lease", None), getattr(keys, "floor_live", None)
    return (lease, live) if lease and live else (keys.floor_queue + ":lease", keys.floor_queue + ":live")


def _guarded_echo(url: str, key: bytes, keys: Keys, token: str) -> None:
    r = redis.Redis.from_url(url)
    lease, hand_in = r.script_load(_LEASE), r.script_load(_HAND_IN[token])     # (a redis-py Script in a pipeline
    # asks SCRIPT EXISTS first, a round trip more)
    queue, (leased, live) = keys.floor_queue, _guarded_keys(keys)
    while True:
        if token == "fetched":
            got = r.brpop([queue], timeout=10)
            frame = got and got[1]
        else:                      # the broker's clock read as the take ends (a pipeline waits in order)
            frame, now = r.pipeline(transaction=False).blmove(queue, leased, 10, "RIGHT", "LEFT").time().execute()
        if frame is None or frame == b"stop":
            return
        body = protocol.verify(key, frame)
        tid, rest = body[:20], body[20:]
        if token == "fetched":
            signed, now = r.pipeline(transaction=False).evalsha(lease, 2, leased, live, tid, frame).time().execute()
            packed = rest
        else:
            n = int.from_bytes(rest[:4], "big")
            signed, packed = rest[4:4 + n], rest[4 + n:]
        alive = protocol.unpack_map_token(key, signed)
        if alive.ended or alive.valid_until_ms <= int(now[0]) * 1000 + int(now[1]) // 1000:
            raise RuntimeError("the guarded floor's token expired")
        value = protocol.loads(packed)                    # the task: echo its argument
        r.evalsha(hand_in, 2, leased, keys.floor_results, tid if token == "fetched" else frame,
                  protocol.sign(key, tid + protocol.dumps(value)))


def guarded_round_trips(config: BrokerConfig, n: int, warmup: int = 20, token: str = "fetched") -> list[float]:
    """Seconds per round trip, ``n`` of them, through the guarded floor (module docstring)."""
    if token not in TOKEN_MODES:
        raise ValueError(f"token must be one of {TOKEN_MODES}, not {token!r}")
    keys, key = Keys(config.namespace), config.key
    live = _guarded_keys(keys)[1]
    proc = multiprocessing.get_context("fork").Process(target=_guarded_echo, args=(config.url, key, keys, token))
    proc.start()
    r = redis.Redis.from_url(config.url)
    s, us = r.time()
    valid_until = int(s) * 1000 + int(us) // 1000 + 600_000
    out = []
    try:
        for i in range(n + warmup):
            t = time.perf_counter()
            signed = protocol.pack_map_token(key, _MAP, _NONCE, valid_until)
            tid = b"%s%04d" % (_MAP.encode(), i % 10000)
            body = protocol.dumps(i)
            if token == "in-frame":
                body = len(signed).to_bytes(4, "big") + signed + body
            pipe = r.pipeline(transaction=False)
            if token == "fetched":
                pipe.set(live, signed, px=600_000)
            pipe.lpush(keys.floor_queue, protocol.sign(key, tid + body))
            pipe.blpop([keys.floor_results], timeout=10)
            got = pipe.execute()[-1]
            back = protocol.verify(key, got[1])
            assert back[:20] == tid and protocol.loads(back[20:]) == i, "the guarded floor echoed another task"
            out.append(time.perf_counter() - t)
    finally:
        r.lpush(keys.floor_queue, b"stop")
        proc.join(10)
        r.delete(keys.floor_queue, keys.floor_results, *_guarded_keys(keys))
        r.close()
    return out[warmup:]
