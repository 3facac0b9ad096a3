"""The client's map queue: a map registered and its tasks queued, kept alive, its results
fetched (big ones read from their blobs), its end signed, its keys deleted; the registry
entry renewed and the maps of dead clients dropped. Walks across every queue (audit,
cancel) are in :mod:`broker.inflight`; the frames' format in :mod:`broker.wire.protocol`.

    >>> from rhtc.broker.embedded import EmbeddedBroker
    >>> from rhtc.broker.storage import Storage
    >>> with EmbeddedBroker() as b:
    ...     s = Storage(b.config)
    ...     s.maps.unread_results("0123456789abcdef"), s.maps.renew_entry("0123456789abcdef")
    (0, 0)
"""
from __future__ import annotations

import functools
import struct
import time
from typing import TYPE_CHECKING, Callable, Iterable

from . import scriptargs
from .wire import blobs, protocol
from .wire.config import redact
from .errors import BrokerRefused, BrokerTrouble, ConnectionProblem
from .functions import missing
from .inflight import InFlight
from .wire.keys import MAP_DATA, MAP_NONCE, MAP_REFUSED

if TYPE_CHECKING:  # pragma: no cover
    from .link import Link

#: what one fetch of results brings at most, roughly (the count follows the last sizes)
FETCH_BYTES = 64 * 2**20
#: commands per round trip when a refused start is taken back (Redis serves others between them)
UNSTART_BATCH = 1000

Groups = list  # flat: kind (0 shared, 1 routed, 2 at home), worker or '', n, n frames, ...


def enqueue_groups(routed: dict[str | None, list[bytes]], home: dict[str, list[bytes]] | None,
                   step: int) -> list[Groups]:
    """The task frames of a map cut into calls of at most ``step`` frames each, every call's
    groups flat (kind, worker or '', n, frames...): the ``home`` ones first (kind 2), then
    ``routed`` (kind 1 to a worker, 0 for ``None``: the shared queue).

    >>> enqueue_groups({None: [b"a", b"b", b"c"]}, {"w1": [b"h"]}, 2)
    [[2, 'w1', 1, b'h'], [0, '', 2, b'a', b'b'], [0, '', 1, b'c']]
    """
    calls: list[Groups] = []
    current: Groups = []
    room = step
    parts = [(2, worker, frames) for worker, frames in (home or {}).items()] + \
        [(int(worker is not None), worker, frames) for worker, frames in routed.items()]
    for kind, worker, frames in parts:
        for at in range(0, len(frames), step):
            part = frames[at:at + step]
            if len(part) > room:
                calls.append(current)
                current, room = [], step
            current += [kind, worker or "", len(part), *part]
            room -= len(part)
    calls.append(current)
    return calls


class MapQueue:
    """The client's side of the broker, one map at a time (``storage.maps``)."""

    def __init__(self, link: "Link"):
        self.link = link
        self.r, self.keys, self.settings, self.config = link.r, link.keys, link.settings, link.config
        self.scripts, self.fast = link.scripts, link.fast
        self.inflight = InFlight(link)
        self._finished: list[str] = []          # ended lazily: deleted with the next enqueue (or flush)
        self._sent = 0                          # sequence number of the last enqueue call
        self._result_bytes = FETCH_BYTES / 8    # mean size of the result frames fetched last (a first guess)

    # -- a map's start ----------------------------------------------------------------
    def enqueue(self, map_id: str, fn_hash: str, packed_fn: bytes | None, info: dict,
                routed: dict[str | None, list[bytes]], wait_first: float = 0.0, *,
                nonce: str, client: str = "", fair: bool = True,
                home: dict[str, list[bytes]] | None = None) -> list[bytes]:
        """Register a map, store its function (if given) and queue its tasks.

        ``routed`` maps a worker name (or None for the shared queue) to task frames;
        ``home`` a worker name to frames of chunks it holds: queued before its ``routed``
        ones and marked, so a thief leaves them to it while it makes progress
        (``steal_one`` in lua/lib.lua);
        ``nonce`` is the map's nonce (:func:`protocol.new_nonce`) its task frames carry: the
        map's liveness token (signed here, see :meth:`keep_alive`) names it;
        ``client`` names the submitting process's beacon (:meth:`renew_client`): when it
        expires, the map and its queued tasks are dropped ('': the map never dies early).
        Unrouted tasks beyond ``settings.fair_window`` wait in the map's backlog, so the
        maps of all clients take turns in the shared queue; ``fair=False`` (a resubmission
        of lost tasks) puts them straight into the shared queue.
        A big map goes in calls of at most ``settings.scan_step`` frames (the first one
        registers the map), sent back to back without waiting for each reply. With
        ``wait_first`` > 0 the same round trip also waits that long for the first
        results, which are returned.
        """
        st = self.settings
        window = st.fair_window if fair else 0
        groups = enqueue_groups(routed, home, st.scan_step)
        finished, self._finished = self._finished, []
        info_flat = [x for kv in dict(info, **{MAP_NONCE: nonce}).items() for x in (kv[0], str(kv[1]))]
        set_token = ("SET", self.keys.live(map_id), self.token(map_id, nonce), "PX", int(st.map_ttl * 1000))
        with self.fast.lock:
            calls = []
            for k, part in enumerate(groups):
                self._sent += 1
                if k == 0:
                    calls.append(scriptargs.enqueue_first(
                        ns=self.keys.ns, map_id=map_id, seq=self._sent, window=window, fn_hash=fn_hash,
                        packed_fn=packed_fn or b"", map_ttl=st.map_ttl, function_ttl=st.function_ttl,
                        start=time.time(), client=client, client_ttl_ms=int(st.client_ttl * 1000),
                        info=info_flat, finished=finished, groups=part))
                else:
                    calls.append(scriptargs.enqueue_more(ns=self.keys.ns, map_id=map_id, seq=self._sent,
                                                         window=window, groups=part))
            return self.fast.retrying(functools.partial(self._send_enqueue, map_id, set_token, calls, wait_first),
                                      st.broker_patience, f"queue map {map_id}", redact(self.config.url))

    def _send_enqueue(self, map_id: str, set_token: tuple, calls: list[list], wait_first: float) -> list[bytes]:
        """Send a map's token and enqueue calls in one write (a one-call map's with its wait
        for the first results). Sent again whole after a broken connection: the calls keep
        their sequence numbers, so the broker skips those it already ran (enqueue.lua)."""
        script = self.scripts["enqueue"]
        try:
            self.fast.send(*set_token, flush=False)
            for k, argv in enumerate(calls):
                self.fast.script(script, [], argv, wait=False, flush=k > 0 or len(calls) > 1 or wait_first <= 0)
            if wait_first <= 0:
                self.fast.drain()
                return []
            got = self.fast.call_behind("BLPOP", self.keys.results(map_id), wait_first)
        except BrokerRefused as err:
            if not missing(err):
                raise
            self.fast.reset()                    # the broker lost the library: once more, loaded
            self.fast.call(*set_token)
            for argv in calls:
                self.fast.script(script, [], argv)
            return []
        return self._resolve_or_put_back(map_id, [got[1]], FETCH_BYTES) if got else []

    def renew_entry(self, map_id: str, now: float | None = None) -> int:
        """Mark ``map_id`` alive in the maps registry (if it is there), remove the entries
        nobody renewed within ``map_ttl`` and renew the registry's expiry (so a namespace
        whose clients all died is left clean); returns how many were removed."""
        now = time.time() if now is None else now
        ttl, key = int(self.settings.map_ttl), self.keys.maps
        pipe = self.r.pipeline(transaction=False)
        pipe.zadd(key, {map_id: now}, xx=True)
        pipe.zremrangebyscore(key, "-inf", now - ttl)
        pipe.expire(key, ttl + 10)
        return int(pipe.execute()[1])

    def renew_client(self, client: str) -> None:
        """Say the client process ``client`` is alive for ``settings.client_ttl`` more seconds
        (its maps are dropped, queued tasks and all, once it stops saying so)."""
        self.r.set(self.keys.client(client), 1, px=int(self.settings.client_ttl * 1000))

    def drop_dead_clients(self, every: float = 1.0) -> list[str]:
        """Drop the maps whose client's beacon expired, with their queued tasks (at most
        once per ``every`` s across all processes). Returns their ids."""
        if every > 0 and not self.r.set(self.keys.sweep_due, 1, nx=True, px=int(every * 1000)):
            return []     # swept within `every` by someone (as in reap: a SET, not a script run)
        got = self.scripts["sweep"](args=scriptargs.sweep(ns=self.keys.ns, every_ms=0,
                                                          scan_step=self.settings.scan_step, ended=()))
        return [m.decode() for m in got]

    def function_present(self, fn_hash: str) -> bool:
        return bool(self.r.exists(self.keys.function(fn_hash)))

    # -- a map alive --------------------------------------------------------------------
    def keep_alive(self, map_id: str, fn_hash: str, nonce: str | None = None) -> bool:
        """Renew a map's expiry and, given its ``nonce``, its liveness token (a fresh one,
        valid ``settings.token_ttl`` s by the broker's clock); False if the map is gone
        (cancelled, or the broker restarted)."""
        k, st = self.keys, self.settings
        pipe = self.r.pipeline(transaction=False)
        pipe.time()
        pipe.expire(k.map(map_id), st.map_ttl)
        pipe.expire(k.function(fn_hash), st.function_ttl)
        for name in MAP_DATA:
            pipe.expire(getattr(k, name)(map_id), st.result_ttl)
        if nonce is not None:          # XX: never brings back the token of a map that ended
            pipe.set(k.live(map_id), self.token(map_id, nonce), xx=True, px=int(st.map_ttl * 1000))
        got = pipe.execute()
        self.link.set_clock(got[0])
        return bool(got[1])

    def token(self, map_id: str, nonce: str) -> bytes:
        """A signed token saying the map is alive for ``settings.token_ttl`` s more (broker clock)."""
        return protocol.pack_map_token(self.config.key, map_id, nonce,
                                       self.link.broker_ms() + int(self.settings.token_ttl * 1000))

    def sign_end(self, map_id: str, nonce: str, drop: bool = False,
                 lost_runs: Callable[[dict[int, str]], None] | None = None) -> None:
        """Put a map's signed end in its liveness token's place (kept as long as its last
        token could be valid): workers refuse its frames from now on (worker/tokens.py).
        Written at once on the hot lane, its reply read with the next command's: the map's
        return does not wait a round trip for it (the broker runs it in order all the same).
        ``drop``: the map's keys are deleted in the same write (:meth:`end`, ``lost_runs``
        as there)."""
        ttl = int(self.settings.token_ttl * 1000)
        with self.fast.lock:
            self.fast.send("SET", self.keys.live(map_id), protocol.pack_map_token(
                self.config.key, map_id, nonce, self.link.broker_ms() + ttl, ended=True), "PX", ttl, quiet=True,
                flush=not drop)
            if drop:
                self.end(map_id, lazy=True, lost_runs=lost_runs)

    # -- its results -------------------------------------------------------------------
    def fetch_results(self, map_id: str, timeout: float, count: int = 1000) -> list[bytes]:
        """Result frames of a map, waiting up to ``timeout`` seconds for the first one: at
        most ``count``, and about :data:`FETCH_BYTES` when the last ones were big (one pop
        of a thousand 8 MB results held Redis, and every heartbeat, for seconds)."""
        key = self.keys.results(map_id)
        got = self.r.lpop(key, max(1, min(count, int(FETCH_BYTES // self._result_bytes))))
        if got:
            got = self._resolve_or_put_back(map_id, got, FETCH_BYTES)
            if got:
                self._result_bytes = max(1.0, sum(len(f) for f in got) / len(got))
            return got
        if timeout <= 0:
            return []
        got = self.r.blpop([key], timeout=timeout)
        return self._resolve_or_put_back(map_id, [got[1]], FETCH_BYTES) if got else []

    def resolve(self, map_id: str, items: list[bytes], budget: int) -> list[bytes]:
        """The frames of ``items`` (just popped from map ``map_id``'s results list): each stub
        replaced by its blob, read and deleted with ``GETDEL``. Stubs past the first
        ``budget`` bytes go back to the head of the list, in order (the client is the list's
        only reader), so one fetch never holds gigabytes. A stub whose blob is gone (expired)
        is dropped: its task is nowhere, and the map's audit sends it again."""
        if not any(blobs.is_stub(item) for item in items):
            return items
        prefix, total = self.keys.blob(f"{map_id}:"), 0
        kept: list[tuple[bytes, str | None]] = []
        for k, item in enumerate(items):
            key = None
            if blobs.is_stub(item):
                try:
                    size, key = blobs.parse_stub(item)
                except (struct.error, UnicodeDecodeError, ValueError, IndexError) as err:   # not ours
                    blobs.log.warning("map %s: dropped a malformed result stub in %s (%s: %s); its task runs "
                                      "again if it was one", map_id, self.keys.results(map_id), type(err).__name__, err)
                    continue
                if kept and total + size > budget:
                    self.r.lpush(self.keys.results(map_id), *reversed(items[k:]))
                    break
                total += size
                if not key.startswith(prefix):
                    blobs.log.warning("map %s: dropped a result stub that names %r, not a blob of its own",
                                      map_id, key[:80])
                    continue
            kept.append((item, key))
        pipe = self.r.pipeline(transaction=False)
        for _, key in kept:
            if key is not None:
                pipe.getdel(key)
        read = iter(pipe.execute())
        out = []
        for item, key in kept:
            frame = item if key is None else next(read)
            if frame is None:
                blobs.log.warning("map %s: a big result's blob %s expired before it was read; its task runs again",
                                  map_id, key)
                continue
            out.append(frame)
        return out

    def _resolve_or_put_back(self, map_id: str, items: list[bytes], budget: int) -> list[bytes]:
        """:meth:`resolve`; when it is interrupted (Ctrl-C, a broken connection), ``items`` go
        back to the head of the list first: the next fetch reads them, or the map's end finds
        their stubs and deletes their blobs (popped stubs would leave them behind)."""
        try:
            return self.resolve(map_id, items, budget)
        except BaseException:         # noqa: B036 - KeyboardInterrupt above all
            if any(blobs.is_stub(item) for item in items):
                try:
                    self.r.lpush(self.keys.results(map_id), *reversed(items))
                except Exception:     # the broker is away: the blobs expire with their list
                    pass
            raise

    def unread_results(self, map_id: str) -> int:
        """How many result frames of a map wait for its client."""
        return int(self.r.llen(self.keys.results(map_id)))

    def dead_tasks(self, map_id: str) -> list[bytes]:
        """Task frames of a map that used up their attempts (poison tasks)."""
        return self.r.lpop(self.keys.dead(map_id), 1000) or []

    def attempt_history(self, map_id: str, task_id: bytes) -> str:
        """How the runs of a task ended (one line per run that killed its worker)."""
        raw = self.r.hget(self.keys.tries(map_id), task_id[protocol.MAP_ID_LEN:protocol.TASK_ID_LEN])
        return raw.decode() if raw else ""

    def attempt_histories(self, map_id: str) -> dict[int, str]:
        """Every task of the map whose runs killed their worker: index -> its history (one
        line per such run; a few entries: only tasks that crashed have one)."""
        raw = self.r.hgetall(self.keys.tries(map_id))
        return {protocol.TaskRef.from_task_id(map_id.encode("ascii") + k).index: v.decode()
                for k, v in raw.items()}

    def partials_refused(self, map_id: str) -> int:
        """How many partials of the map the broker refused (a task they cover had been
        requeued away from their worker: ``lua/take.lua``)."""
        return int(self.r.hget(self.keys.map(map_id), MAP_REFUSED) or 0)

    # -- across the queues (broker/inflight.py) -------------------------------------------
    def audit(self, map_id: str) -> set[int]:
        """:meth:`broker.inflight.InFlight.audit`: the indices of a map's tasks that are somewhere."""
        return self.inflight.audit(map_id)

    def leased_to(self, worker: str, map_id: str) -> set[int]:
        """:meth:`broker.inflight.InFlight.leased_to`."""
        return self.inflight.leased_to(worker, map_id)

    def drain_pool(self, map_id: str, at_least: int) -> int:
        """:meth:`broker.inflight.InFlight.drain_pool`."""
        return self.inflight.drain_pool(map_id, at_least)

    def cancel(self, map_id: str) -> int:
        """:meth:`broker.inflight.InFlight.cancel`: end a map, its queued tasks removed."""
        return self.inflight.cancel(map_id)

    # -- its end ---------------------------------------------------------------------------
    def end(self, map_id: str, lazy: bool = False,
            lost_runs: Callable[[dict[int, str]], None] | None = None) -> None:
        """Delete every key a map owns, and the blobs of its unread results (a late hand-in
        after the end finds the map gone: take.lua deletes its blob); its queued tasks are
        dropped by whoever takes them. ``lazy``: sent without waiting for the reply (read
        with the next command's, or at :meth:`settle`), or, when the broker cannot be
        reached now, with this client's next map (the keys expire anyway). It used to wait
        for the next map always: a notebook idle after its map kept the map's keys, and the
        next map's registration deleted them on its critical path. ``lost_runs`` gets the
        map's :meth:`attempt_histories` as they were when its keys went, when the reply is
        read (never if the connection is lost first)."""
        args = scriptargs.sweep(ns=self.keys.ns, every_ms=0, scan_step=self.settings.scan_step, ended=[map_id])
        handler = (lambda reply: lost_runs(self._histories(map_id, reply))) if lost_runs else None
        if not lazy:
            got = self.scripts["sweep"](args=args)
            if handler:
                handler(got)
            return
        try:
            with self.fast.lock:
                self.fast.script(self.scripts["sweep"], [], args, wait=False, quiet=True, on_reply=handler)
        except ConnectionProblem:
            self._finished.append(map_id)

    def settle(self) -> None:
        """Read the replies still owed on the hot lane (so that what waits for them, the
        runs lost in a map that just ended, is in), unless one is owed to a caller
        (:meth:`FastLane.settle`); a broker that cannot answer now is left as it is (they
        are read with the next command's, or lost with the connection)."""
        try:
            with self.fast.lock:
                self.fast.settle()
        except BrokerTrouble:
            pass

    @staticmethod
    def _histories(map_id: str, reply) -> dict[int, str]:
        """:meth:`attempt_histories` from the reply of an ended map's sweep (``lua/sweep.lua``)."""
        for entry in reply or ():
            if entry and entry[0] in (map_id, map_id.encode("ascii")):
                flat = entry[1]
                return {protocol.TaskRef.from_task_id(map_id.encode("ascii") + flat[i]).index: flat[i + 1].decode()
                        for i in range(0, len(flat), 2)}
        return {}

    def flush(self) -> None:
        """Delete the keys of maps ended lazily."""
        done, self._finished = self._finished, []
        for m in done:
            self.end(m)

    def unstart(self, map_id: str, queued: Iterable[tuple[str | None, bytes]] = ()) -> None:
        """Remove what a refused start of map ``map_id`` may have left, with commands a full
        Redis still runs (``UNLINK``, ``ZREM``, ``LREM``; a full broker refuses our scripts):
        its keys, the blobs of its results, its registry entry and ``queued``, the (worker or
        None, frame) pairs it sent (a frame routed to a worker may have gone to the shared
        queue instead: the worker was not live). What stays is not the map's: the function
        blob (by content; it expires) and the client's beacon (it expires). Raises what the
        connection raises (the keys expire anyway)."""
        k = self.keys
        pipe = self.r.pipeline(transaction=False)
        pipe.lrange(k.results(map_id), 0, -1)
        pipe.lrange(k.pool(map_id), 0, -1)
        prefix = k.blob(f"{map_id}:")
        found = [_blob_key(item) for items in pipe.execute() for item in items if blobs.is_stub(item)]
        pipe = self.r.pipeline(transaction=False)
        pipe.unlink(*k.map_keys(map_id), *(key for key in found if key and key.startswith(prefix)))
        pipe.zrem(k.maps, map_id)
        for n, (worker, frame) in enumerate(queued, 1):
            if worker:
                pipe.lrem(k.queue(worker), 1, frame)
            pipe.lrem(k.shared_queue, 1, frame)
            if n % UNSTART_BATCH == 0:
                pipe.execute()
        pipe.execute()


def _blob_key(stub: bytes) -> str | None:
    try:
        return blobs.parse_stub(stub)[1]
    except (ValueError, IndexError, UnicodeDecodeError, struct.error):   # not ours: not deleted
        return None
