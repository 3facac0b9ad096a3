"""A full broker refuses a map with one clean error, whichever of the map's first writes
meets the full Redis, and nothing of the map stays in Redis.

Which write of a map's start meets ``maxmemory`` first used to be luck (the enqueue, or
the registry's renewal after it: ``BrokerOutOfMemory: Command # 1 (ZADD ...) of pipeline``
instead of ``BrokerFull``). Here it is chosen: right before the chosen write, on the same
connection and so in order with it, the test sends ``CLIENT REPLY SKIP`` and ``CONFIG SET
maxmemory 1`` (their replies skipped, the client none the wiser), and the real Redis
refuses that write, and every write after it, with a real OOM. Real redis-server, no
workers (the map never starts)."""
from __future__ import annotations

import dataclasses
import re
import threading

import pytest
from redis.connection import HiredisRespSerializer, PythonRespSerializer

from rhtc.broker.wire import protocol
from rhtc.client import BrokerFull, remote_map, submit
from rhtc.client.api import storage_for
from rhtc.client.engine import maprun
from tests.helpers import identity

SCRIPTS = ("FCALL", "EVALSHA", "EVAL")       # our functions have no allow-oom: a full Redis refuses them


def _name(args) -> str:
    return " ".join(str(a, "latin-1") if isinstance(a, bytes) else str(a) for a in args[:2]).upper()


class RefuseOneWrite:
    """While :attr:`on`, watches the commands this thread packs for Redis; the first write
    that ``chosen`` accepts gets ``CLIENT REPLY SKIP`` + ``CONFIG SET maxmemory 1`` packed
    in front of it: from there on Redis refuses writes (out of memory), that one first.
    Every write a full Redis refuses (a ``denyoom`` command, a script call) is listed in
    :attr:`writes`."""

    def __init__(self, r, monkeypatch, chosen=lambda args: False):
        self.r, self.chosen, self.on, self.fired = r, chosen, False, False
        self.writes: list[str] = []
        self.thread = threading.get_ident()
        self._flags: dict[str, bool] = {}
        for cls in (HiredisRespSerializer, PythonRespSerializer):
            monkeypatch.setattr(cls, "pack", self._wrap(cls.pack))

    def deniable(self, args) -> bool:
        """Whether a full Redis refuses this command."""
        head = _name(args[:1])
        if head in SCRIPTS:
            return True
        name = _name(args).replace(" ", "|") if head in ("FUNCTION", "CONFIG", "CLIENT") else head
        if name not in self._flags:
            self.on, was = False, self.on             # (COMMAND INFO itself is not watched)
            try:
                info = self.r.execute_command("COMMAND", "INFO", name)
                flags = next(iter(info.values()))["flags"]
            except TypeError:                          # not a command Redis knows (a subcommand's option)
                flags = []
            finally:
                self.on = was
            self._flags[name] = "denyoom" in flags
        return self._flags[name]

    def _wrap(self, pack):
        def packed(serializer, *args):
            if not self.on or threading.get_ident() != self.thread or not self.deniable(args):
                return pack(serializer, *args)
            self.writes.append(_kind(args))
            if self.fired or not self.chosen(args):
                return pack(serializer, *args)
            self.fired = True
            return [*pack(serializer, "CLIENT", "REPLY", "SKIP"), *pack(serializer, "CONFIG", "SET", "maxmemory", "1"),
                    *pack(serializer, *args)]
        return packed


def _kind(args) -> str:
    """What a write of a map's start is, in the words of :data:`START`."""
    text = [a.decode("latin-1") if isinstance(a, bytes) else str(a) for a in args[:2]] + [""]
    head = text[0].upper()
    for kind, (command, part) in KINDS.items():
        if head == command and (part in text[1] or command == "FUNCTION" and text[1].upper() == part):
            return kind
    return " ".join(text).strip()


#: the kinds of write a map's start makes: (command, what its first argument holds)
KINDS = {"SET live": ("SET", ":live:"), "FUNCTION LOAD": ("FUNCTION", "LOAD"),
         "FCALL enqueue": ("FCALL", "enqueue_"), "ZADD maps": ("ZADD", ":maps")}


def _nth(kind: str, nth: int = 1):
    """Chooses the ``nth`` write of ``kind``."""
    seen = []

    def chosen(args) -> bool:
        if _kind(args) == kind:
            seen.append(args)
            return len(seen) == nth
        return False
    return chosen


#: every write of a map's start (test_these_are_the_writes_of_a_map_start), and how to pick it
START = {
    "the signed liveness token (SET live)": ("SET live", 1),
    "loading the scripts on a fresh broker (FUNCTION LOAD)": ("FUNCTION LOAD", 1),
    "the enqueue: function blob, registration, tasks (FCALL enqueue)": ("FCALL enqueue", 1),
    "the enqueue's second call (a map of more than scan_step tasks)": ("FCALL enqueue", 2),
    "the registry's renewal (ZADD XX maps)": ("ZADD maps", 1),
}


def _in_calls_of_two(broker, monkeypatch):
    """The client's storage for ``broker``, sending a map in enqueue calls of two tasks
    (``scan_step``): a map of 5 tasks goes in three."""
    client = storage_for(broker)
    two = dataclasses.replace(client.settings, scan_step=2)
    monkeypatch.setattr(client, "settings", two)
    monkeypatch.setattr(client.maps, "settings", two)        # the map queue's, which sends the calls
    return client


def _snapshot(storage) -> dict[bytes, int]:
    """Every key under the namespace, with its time to live."""
    return {k: storage.r.ttl(k) for k in storage.r.scan_iter(match=f"{storage.keys.ns}:*")}


def _frames_of(storage, map_id: str) -> list[bytes]:
    """The frames of ``map_id`` queued anywhere (the shared queue, a worker's)."""
    queues = [storage.keys.shared_queue, *(k.decode() for k in storage.r.scan_iter(match=storage.keys.queue("*")))]
    return [f for q in queues for f in storage.r.lrange(q, 0, -1)
            if (ref := protocol.frame_ref(f)) is not None and ref.map_id == map_id]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("write", list(START))
def test_a_map_whose_start_meets_a_full_broker_raises_broker_full_and_leaves_nothing(write, broker, storage,
                                                                                      monkeypatch):
    client = _in_calls_of_two(broker, monkeypatch)
    before = _snapshot(storage)
    refuse = RefuseOneWrite(storage.r, monkeypatch, _nth(*START[write]))
    refuse.on = True
    try:
        with pytest.raises(BrokerFull) as got:
            remote_map(identity, [0.0] * 5, broker=broker, progress=False, timeout=60)
        refuse.on = False
        assert refuse.fired, f"the map's start made no such write ({write}): {refuse.writes}"
        text = str(got.value)
        assert "out of memory" in text and "127.0.0.1" in text and "maxmemory" in text, text
        assert "nothing of it was left" in text and "run the map again" in text, text
        after = _snapshot(storage)                       # (the broker still refuses writes meanwhile)
    finally:
        refuse.on = False
        broker.refuse_writes(False)
    new = {k.decode(): ttl for k, ttl in after.items() if k not in before}
    # the client's beacon and the function's blob (by content; maybe another map's) are not the map's: both expire
    others = {k: ttl for k, ttl in new.items() if k.startswith((client.keys.client(""), client.keys.function("")))}
    assert all(ttl > 0 for ttl in others.values()), others
    assert set(new) == set(others), f"left in Redis after {write} was refused: {sorted(set(new) - set(others))}"
    map_id = _map_id_of(got.value)
    assert storage.r.zscore(storage.keys.maps, map_id) is None
    assert _frames_of(storage, map_id) == [], "its queued tasks stayed"


def _map_id_of(err: BaseException) -> str:
    return re.search(r"start map ([0-9a-f]{16})", str(err)).group(1)


@pytest.mark.timeout(120)
def test_these_are_the_writes_of_a_map_start(broker, storage, monkeypatch):
    """Every write of a map's start that a full broker refuses has its case above: a new
    one fails here until it gets one."""
    _in_calls_of_two(broker, monkeypatch)
    watch = RefuseOneWrite(storage.r, monkeypatch)
    real = maprun.MapRun.submit

    def submit_watched(run, *a, **k):
        watch.on = True
        try:
            return real(run, *a, **k)
        finally:
            watch.on = False
    monkeypatch.setattr(maprun.MapRun, "submit", submit_watched)
    submit(identity, [0.0] * 5, broker=broker).cancel()
    assert watch.writes == ["SET live", "FUNCTION LOAD", "FCALL enqueue", "FCALL enqueue", "FCALL enqueue",
                            "ZADD maps"], watch.writes
    assert {kind for kind, _ in START.values()} == set(watch.writes)
