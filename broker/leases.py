"""The worker's lease: claiming a name for one incarnation, heartbeats, taking and leasing
tasks, handing in results, merging partials up the tree, reconciling the lease with what
runs, giving tasks back (reap, retire, crash) and leaving. ``storage.lease`` of
:class:`broker.storage.Storage`; the atomic steps are the Lua scripts, each called through
its wrapper in :mod:`broker.scriptargs`.

    >>> from rhtc.broker.embedded import EmbeddedBroker
    >>> from rhtc.broker.wire.messages import WorkerStatus
    >>> from rhtc.broker.storage import Storage
    >>> status = WorkerStatus(name="w1", host="n1", pid=1, incarnation="0" * 16, key_fingerprint="f")
    >>> with EmbeddedBroker() as b:
    ...     s = Storage(b.config)
    ...     s.lease.claim("w1", "0" * 16, status).ok, s.lease.take("w1", "0" * 16, max_tasks=1)[2]
    (True, [])
"""
from __future__ import annotations

import dataclasses
import time
from typing import TYPE_CHECKING, Callable, Iterable, Sequence

from . import scriptargs
from .wire import blobs, messages, protocol
from .errors import BrokerRefused
from .functions import missing
from .wire.records import MalformedRecord

if TYPE_CHECKING:  # pragma: no cover
    from .link import Link


def clock_ms(reply) -> int:
    """The broker's clock (ms) from a ``TIME`` reply (seconds, microseconds)."""
    return int(reply[0]) * 1000 + int(reply[1]) // 1000


@dataclasses.dataclass(frozen=True)
class Claim:
    """The answer to a claim: ``ok``, or the incarnation that holds the name."""

    ok: bool
    holder: str = ""
    duties: int = 0                          # a heartbeat's duties that are due (beat.lua): +1 reap, +2 sweep
    leased: int = 0                          # entries in the worker's lease (a heartbeat's answer)

    @property
    def reap_due(self) -> bool:
        return bool(self.duties & 1)

    @property
    def sweep_due(self) -> bool:
        return bool(self.duties & 2)


@dataclasses.dataclass(frozen=True)
class BulkLimits:
    """What one command to the broker may carry: ``proto-max-bulk-len`` bounds one value
    (one result), ``client-query-buffer-limit`` one whole command (a batch of results).
    Redis closes the connection of a client that sends more, so a worker must never try."""

    bulk: int = 512 * 1024 * 1024            # Redis' defaults, when CONFIG GET is refused
    query_buffer: int = 1024 * 1024 * 1024
    known: bool = False                      # read from the broker (not the defaults)

    @property
    def one_value(self) -> tuple[int, str]:
        """(bytes, the broker setting that bounds one value)."""
        if self.query_buffer < self.bulk:
            return self.query_buffer, "client-query-buffer-limit"
        return self.bulk, "proto-max-bulk-len"


LIMITS_SECONDS = 60.0       # how long a worker trusts the broker's limits it read
_limits_seen: dict[str, tuple[float, "BulkLimits"]] = {}   # by broker URL: one read per process
FULL_BEAT = 30.0            # a heartbeat renews the worker's entry in the workers set and its holds this often (s)


def now_text() -> str:
    """Local time with milliseconds, for attempt histories."""
    return time.strftime("%H:%M:%S", time.localtime()) + ("%.3f" % (time.time() % 1))[1:]


#: how long a worker may stay past the keeper's floor once it said it leaves (s): the leaving set's expiry
LEAVING_TTL = 86400


class Lease:
    """The worker's side of the broker (``storage.lease``), over the shared connection."""

    def __init__(self, link: "Link"):
        self.link = link
        self.r, self.keys, self.settings, self.config = link.r, link.keys, link.settings, link.config
        self.scripts, self.fast, self.malformed = link.scripts, link.fast, link.malformed
        self._full_beats: dict[str, float] = {}       # worker -> when its last full heartbeat went
        self._routed: int | None = None               # SCARD routed, read as the last wait ended
        self._lease_args: list = []                   # the lease_one call of the last wait's task

    # -- the name and its incarnation ----------------------------------------------------
    def claim(self, worker: str, incarnation: str, status: messages.WorkerStatus,
              mode: str = "claim", expected: str = "") -> Claim:
        """Claim ``worker`` for ``incarnation`` (``mode`` 'claim', or 'force' to take over from
        ``expected``, a holder seen dead; :meth:`heartbeat` renews it). A claim requeues
        what a predecessor held, at once."""
        st = self.settings
        why = f"{worker} was restarted (new incarnation {incarnation}) at {now_text()}"
        ok, info = self.scripts["claim"](args=scriptargs.claim(
            ns=self.keys.ns, worker=worker, incarnation=incarnation, status=status.encode(self.config.key),
            lease_ms=int(st.lease * 1000), mode=mode, expected=expected, max_attempts=st.max_attempts,
            result_ttl=st.result_ttl, why=why, holds_ttl=st.holds_ttl, scan_step=st.scan_step))[:2]
        if not ok:
            return Claim(False, info.decode() if isinstance(info, bytes) else str(info))
        left = int(info)
        drain = scriptargs.drain(ns=self.keys.ns, worker=worker, scan_step=st.scan_step)
        while left:
            left = int(self.scripts["drain"](args=drain))
        self._full_beats[worker] = time.monotonic()   # in the workers set now
        return Claim(True)

    def heartbeat(self, worker: str, incarnation: str, status: messages.WorkerStatus,
                  duties: float = 0.0) -> Claim:
        """Say this incarnation is alive (renews its name and lease) and publish its status;
        ``ok`` is False when another incarnation took the name over. With ``duties`` (s),
        the answer also says whether this worker should reap and sweep now (one round
        trip for all three: :meth:`Supervisor.beat`). Its entry in the workers set and
        its holds' expiry are renewed every :data:`FULL_BEAT` s (beat.lua)."""
        st, now = self.settings, time.monotonic()
        beats = self._full_beats
        full = now - beats.get(worker, -FULL_BEAT) >= FULL_BEAT
        ok, info, *rest = self.scripts["beat"](args=scriptargs.beat(
            ns=self.keys.ns, worker=worker, incarnation=incarnation, status=status.encode(self.config.key),
            lease_ms=int(st.lease * 1000), duties_ms=int(duties * 1000), holds_ttl=st.holds_ttl, full=int(full)))
        if not ok:
            return Claim(False, info.decode() if isinstance(info, bytes) else str(info))
        if full:
            beats[worker] = now
        return Claim(True, duties=int(rest[0]), leased=int(rest[1]))

    def claim_ms_left(self, worker: str) -> int:
        """Milliseconds until the claim on ``worker`` expires (-2: nobody holds it); a live
        holder's renewals make it grow."""
        return int(self.r.pttl(self.keys.incarnation(worker)))

    def holder_status(self, worker: str) -> messages.WorkerStatus | None:
        """The published status of whoever holds ``worker`` now (None if nobody)."""
        key = self.keys.heartbeat(worker)
        raw = self.r.get(key)
        try:
            return messages.WorkerStatus.decode(raw, key) if raw else None
        except MalformedRecord as err:           # said where it is read; the holder is unknown
            self.malformed.read([key], [err])
            return None

    # -- taking tasks ----------------------------------------------------------------------
    def bulk_limits(self) -> BulkLimits:
        """The broker's limits on one value and one command (read at most once a minute
        per process: the light workers of ``bench scale`` are a hundred to a process; Redis'
        defaults when CONFIG GET is not allowed or the broker does not answer)."""
        seen = _limits_seen.get(self.config.url)
        if seen is not None and time.monotonic() - seen[0] < LIMITS_SECONDS:
            return seen[1]
        limits = seen[1] if seen is not None else BulkLimits()
        try:
            got = {**self.r.config_get("proto-max-bulk-len"), **self.r.config_get("client-query-buffer-limit")}
            limits = BulkLimits(int(got.get("proto-max-bulk-len", limits.bulk)),
                                int(got.get("client-query-buffer-limit", limits.query_buffer)), known=True)
        except Exception:       # NOPERM, a renamed CONFIG, no connection: keep what we knew
            pass
        _limits_seen[self.config.url] = (time.monotonic(), limits)
        return limits

    def take(self, worker: str, incarnation: str, max_tasks: int,
             results: Sequence[tuple[str, bytes, bytes]] = ()) -> tuple[bool, int, list[tuple[bytes, bytes]]]:
        """Hand in (map id, task id, result frame) triples, then lease up to ``max_tasks``
        tasks: own queue and shared queue (in turns), and when both are empty one task
        stolen from the tail of a backed-up, stuck or dead worker's queue. One round trip.
        Returns (still holding the name, the broker's clock in ms,
        [(frame, its map's signed liveness token)])."""
        return self.take_watching(worker, incarnation, max_tasks, results)[:3]

    def take_watching(self, worker: str, incarnation: str, max_tasks: int,
                      results: Sequence[tuple[str, bytes, bytes]] = (), watch: Sequence[str] = ()
                      ) -> tuple[bool, int, list[tuple[bytes, bytes]], set[str]]:
        """:meth:`take`, also saying which maps still have tasks in their backlog, of those
        in ``watch`` (a worker's open partials) and of the tasks taken: (held, clock ms,
        batch, those map ids). A worker whose queue ran dry hands the partials of those maps
        in, and the others' up the tree (:mod:`worker.loopstate`)."""
        st = self.settings
        handed: list = []
        for map_id, tid, frame in results:
            if len(frame) >= blobs.BLOB_FROM:      # set as is beside, its stub handed in (blobs.py)
                key = self.keys.blob(blobs.blob_name(map_id))
                self.fast.send("SET", key, frame, "EX", st.result_ttl + st.result_grace, flush=False)
                frame = blobs.stub(frame, key)
            handed += [map_id, tid, frame]
        args = scriptargs.take(ns=self.keys.ns, worker=worker, incarnation=incarnation, result_grace=st.result_grace,
                               max_tasks=max_tasks, leases=int(st.leases), scan_step=st.scan_step,
                               steal_min_queue=st.steal_min_queue, steal_home_min_queue=st.steal_home_min_queue,
                               steal_stuck_seconds=st.steal_stuck_seconds, watch=watch, results=handed)
        # the clock a token is judged by: TIME, read beside the script rather than from its
        # reply (a function library can be replaced by anyone with the password; TIME cannot)
        # the reply is the last two: a result big enough for a blob sent its SET before the script
        *_, got, now = self.fast.script_with(self.scripts["take"], [], args, ("TIME",))
        if not got[0]:
            return False, 0, [], set()
        batch, token = [], b""
        for i in range(3, len(got), 2):
            token = got[i + 1] or token           # '': the previous frame's token (or foreign bytes)
            batch.append((got[i], token))
        ids, n = got[2], protocol.MAP_ID_LEN
        return True, clock_ms(now), batch, {ids[j:j + n].decode("ascii", "replace") for j in range(0, len(ids), n)}

    def wait_for_task(self, worker: str, incarnation: str, timeout: float,
                      leasing: Callable[[], None] = lambda: None) -> bytes | None:
        """Block until a task arrives in this worker's queue or the shared one; lease it
        (calling ``leasing`` first: the worker's supervisor must not judge its lease until
        it knows the task). None after ``timeout`` s.

        The lease is sent without waiting for its reply; :meth:`leased_token` reads the
        reply (the map's liveness token) while the caller verifies the frame."""
        self.fast.client_id()                     # known before it blocks: unblock_wait()
        self.fast.drain()
        self.fast.send("BRPOP", self.keys.queue(worker), self.keys.shared_queue, timeout, flush=False)
        self.fast.send("SCARD", self.keys.routed)   # answered as the wait ends: stealable()
        got, routed = self.fast.collect_all()
        self._routed = int(routed)
        if not got:
            return None
        shared = int(got[0] in (self.keys.shared_queue, self.keys.shared_queue.encode()))
        self._lease_args = scriptargs.lease_one(ns=self.keys.ns, worker=worker, incarnation=incarnation,
                                                leases=int(self.settings.leases), frame=got[1], from_shared=shared)
        leasing()
        self.fast.script(self.scripts["lease_one"], [], self._lease_args, wait=False, flush=False)
        self.fast.send("TIME")
        return got[1]

    def unblock_wait(self) -> bool:
        """End a :meth:`wait_for_task` in progress now (from a signal handler or another
        thread), as if it had timed out. False if it could not (it ends by its timeout)."""
        return self.fast.unblock()

    def stealable(self) -> bool:
        """Whether some worker's own queue may hold tasks to steal (an idle worker with
        nothing to steal goes back to waiting without a take: see ``take.lua``). Known
        without a round trip right after :meth:`wait_for_task`, which reads it as its wait
        ends (an idle worker's SCARD every 5 s was a fifth of an idle broker's requests)."""
        routed, self._routed = self._routed, None
        return bool(routed if routed is not None else self.fast.call("SCARD", self.keys.routed))

    def leased_token(self) -> tuple[bytes, int]:
        """(the liveness token of the map of the task :meth:`wait_for_task` returned, b''
        if the map is gone; the broker's clock in ms)."""
        try:
            (token, _), now = self.fast.collect_all()
        except BrokerRefused as err:
            if not missing(err):
                raise
            self.fast.forget(self.scripts.name)                   # the broker lost the library:
            (token, _), now = self.fast.script_with(self.scripts["lease_one"], [], self._lease_args, ("TIME",))
        return token, clock_ms(now)

    # -- the tree of partials (broker/wire/merge.py) ---------------------------------------------
    def merge_up(self, worker: str, incarnation: str, map_id: str, fanin: int, ids: bytes = b"",
                 frame: bytes = b"", aside: bytes = b"", covers: int = 1
                 ) -> tuple[bool, messages.HandedUp | None, list[tuple[bytes, bytes]]]:
        """Hand a partial of ``map_id`` up the tree (``lua/merge.lua``): ``frame`` covering
        ``ids`` (its tasks and the partials folded into it, 20 bytes each); ``aside``, partials
        leased here that go to the client as they are; ``covers``, how many tasks the partial
        covers. Without ``frame``, only asks for partials to fold in. Returns (still holding
        the name, what became of it, [(partial id, its frame or stub)]): with
        :attr:`~broker.wire.messages.HandedUp.INPUTS`, fold these in and hand up again (the
        frame was not taken)."""
        st, lane = self.settings, self.fast
        if lane.pending:                           # (a reply owed: an idle wake-up's lease, read later)
            lane = None
        if len(frame) >= blobs.BLOB_FROM:          # set as is beside, its stub handed up (blobs.py)
            key = self.keys.blob(blobs.blob_name(map_id))
            if lane:                               # (in the script's write; the partial not copied)
                lane.send("SET", key, frame, "EX", st.result_ttl + st.result_grace, flush=False)
            else:
                self.r.set(key, frame, ex=st.result_ttl + st.result_grace)
            frame = blobs.stub(frame, key)
        args = scriptargs.merge_up(ns=self.keys.ns, worker=worker, incarnation=incarnation,
                                   result_grace=st.result_grace, fanin=fanin, map_id=map_id, ids=ids, frame=frame,
                                   aside=aside, covers=covers)
        got = lane.script_with(self.scripts["merge"], [], args)[-1] if lane else self.scripts["merge"](args=args)
        if not int(got[0]):
            return False, None, []
        return True, messages.HandedUp(got[1].decode()), [(got[i], got[i + 1]) for i in range(2, len(got), 2)]

    def partial_frame(self, item: bytes) -> bytes | None:
        """The frame of a partial given to this merger: ``item`` itself, or the blob its
        stub names, read and kept (it is deleted when the merged partial is taken in, and
        must outlive this merger); None when the blob is gone or is not the map's."""
        if not blobs.is_stub(item):
            return item
        try:
            _, key = blobs.parse_stub(item)
        except (ValueError, IndexError, UnicodeDecodeError):
            return None
        if not key.startswith(self.keys.blob(f"{blobs.stub_map(item)}:")):
            return None
        return self.r.get(key)

    def release(self, worker: str, task_ids: Iterable[bytes]) -> None:
        """Drop leases without a result (a frame the worker refused and reported; a partial
        given to it to merge whose frame it could not read)."""
        ids = list(task_ids)
        if ids:
            self.fast.call("HDEL", self.keys.lease(worker), *ids)

    # -- giving tasks back -------------------------------------------------------------------
    def reconcile(self, worker: str, incarnation: str, held: Iterable[bytes] = (), *,
                  gone: bool = False, crashed: bytes = b"", why: str = "") -> tuple[int, str]:
        """Requeue this worker's lease entries that nobody runs: of another incarnation, or
        older than one lease and not in ``held`` (every entry not held when the task process
        is ``gone``); ``crashed`` goes back counted as an attempt, with ``why`` in its history.
        Returns (how many, the crashed task's fate: a :class:`~broker.wire.messages.Requeued`
        value, or '' when it was not leased)."""
        st = self.settings
        n, outcome = self.scripts["reconcile"](args=scriptargs.reconcile(
            ns=self.keys.ns, worker=worker, incarnation=incarnation, grace_ms=int(st.lease * 1000), gone=int(gone),
            crashed=crashed, why=why, max_attempts=st.max_attempts, result_ttl=st.result_ttl, held=list(held)))
        return int(n), outcome.decode() if isinstance(outcome, bytes) else str(outcome)

    def retire(self, worker: str) -> None:
        """A worker leaves: its leased and queued tasks go back to the shared queue."""
        try:
            self.fast.drain()
        finally:
            self._reap(worker)
            while self.r.llen(self.keys.queue(worker)):
                self._reap(worker)

    def reap(self, every: float = 1.0) -> list[str]:
        """Recover the tasks of workers whose incarnation expired (at most once per
        ``every`` s across all processes), counting an attempt against what they ran. A
        name that expired while the broker refused commands or was down is no death:
        nobody is reaped until the broker has refused nothing and not restarted for a
        whole lease (``reap.lua``). Returns the names of the workers found dead."""
        return self._reap("", every)

    def _reap(self, retiring: str, every: float = 0.0) -> list[str]:
        st = self.settings
        if every > 0 and not self.r.set(self.keys.reap_due, 1, nx=True, px=int(every * 1000)):
            return []     # reaped within `every` by someone: one SET, not a script run (~40 us of Redis each)
        got = self.scripts["reap"](args=scriptargs.reap(
            ns=self.keys.ns, now_text=now_text(), max_attempts=st.max_attempts, every_ms=0, result_ttl=st.result_ttl,
            retiring=retiring, scan_step=st.scan_step, lease_ms=int(st.lease * 1000), refusals_ttl=st.holds_ttl))
        return [w.decode() for w in got]

    # -- leaving ----------------------------------------------------------------------------
    def may_leave(self, worker: str, force: bool = False) -> bool:
        """Whether ``worker`` may leave now: always with ``force`` (its lifetime is up),
        else only above the pool's floor; a yes counts it as leaving."""
        now = int(time.time() * 1000)
        return bool(int(self.scripts["leave"](args=scriptargs.leave(
            ns=self.keys.ns, worker=worker, now_ms=now, force="1" if force else "0", leaving_ttl=LEAVING_TTL))))

    # -- what a worker publishes -------------------------------------------------------------
    def advertise(self, worker: str, added: Iterable[str] = (), removed: Iterable[str] = (),
                  tier: str = "") -> None:
        """Publish which chunks (routing keys) this worker holds in its cache; with
        ``tier``, the added ones are also held by its node's disk tier (which outlives it)."""
        added, removed = list(added), list(removed)
        pipe = self.r.pipeline(transaction=False)
        if removed:
            pipe.srem(self.keys.holds(worker), *removed)
        if added:
            pipe.sadd(self.keys.holds(worker), *added)
            pipe.expire(self.keys.holds(worker), self.settings.holds_ttl)
            if tier:
                pipe.sadd(self.keys.disk_holds(tier), *added)
                pipe.expire(self.keys.disk_holds(tier), self.settings.disk_holds_ttl)
        if added or removed:
            pipe.execute()

    def get_function(self, fn_hash: str) -> bytes | None:
        return self.r.get(self.keys.function(fn_hash))

    def map_info(self, map_id: str) -> dict[str, str]:
        return {a.decode(): b.decode() for a, b in self.r.hgetall(self.keys.map(map_id)).items()}
