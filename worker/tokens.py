"""Which maps a worker may run tasks of: those whose client holds them alive.

A task frame stays signed forever, and anyone with the Redis password can copy it (and
its map's hash, its function) while the map runs and write them back later. So a frame
alone proves nothing about its map being alive; the proof is the map's *liveness token*
(:func:`broker.wire.protocol.pack_map_token`): the map id, its nonce and a valid-until time,
signed by the client with the session key and renewed every upkeep tick. A worker runs
a task only under a token of the task's map and nonce that has not expired by the
broker's clock (Redis TIME, returned with every take: no dependence on the nodes'
clocks). A replay is therefore refused once the map's last token has expired, at most
``RHTC_TOKEN_TTL`` seconds after the map ended; sooner where the client could say so: when
a map ends, however it ends, its client puts the map's signed *end* in the token's place
(``ended=True``). A worker refuses the map's frames under it (logged, not reported: the
tasks a cancel leaves in flight look the same), and remembers it: a live token of that map
copied earlier and written back afterwards is refused too, and reported (as a replay).

    >>> from rhtc.broker.wire import protocol
    >>> key, nonce = b"k" * 32, protocol.new_nonce()
    >>> frame = protocol.pack_task(key, "0123456789abcdef", 0, nonce, "f" * 32, 1)
    >>> task = protocol.unpack_task(key, frame)
    >>> tokens = MapTokens(key, "w1")
    >>> tokens.judge(task, protocol.pack_map_token(key, task.map_id, nonce, 2_000), now_ms=1_000) is None
    True
    >>> tokens.judge(task, protocol.pack_map_token(key, task.map_id, nonce, 2_000), now_ms=3_000).kind.value
    'expired'
    >>> tokens.judge(task, protocol.pack_map_token(key, task.map_id, nonce, 9_000, ended=True), now_ms=1_000).kind.value
    'expired'
    >>> tokens.judge(task, protocol.pack_map_token(key, task.map_id, nonce, 2_000), now_ms=1_000).kind.value
    'replayed'
"""
from __future__ import annotations

import collections
import dataclasses
import logging
from datetime import datetime, timezone

from ..broker.wire import protocol
from ..broker.wire.messages import FaultKind

log = logging.getLogger("rhtc.worker")

_CACHE = 256                # tokens (and maps) remembered
_ENDED = 4096               # maps whose signed end this worker saw, remembered


@dataclasses.dataclass(frozen=True)
class Refusal:
    """Why a task may not run: ``kind`` None = its map is gone (nothing to say);
    ``report``: the first refusal of its kind for that map (the others stay quiet)."""

    kind: FaultKind | None
    message: str = ""
    report: bool = False


class MapTokens:
    """The tokens a worker has verified, and the maps whose signed end it saw."""

    def __init__(self, key: bytes, worker: str):
        self.key, self.worker = key, worker
        self._verified: collections.OrderedDict[bytes, protocol.MapToken] = collections.OrderedDict()
        self._ended: collections.OrderedDict[str, protocol.MapToken] = collections.OrderedDict()
        self._reported: collections.OrderedDict[tuple[str, FaultKind], None] = collections.OrderedDict()

    def judge(self, task: protocol.Task, token: bytes, now_ms: int) -> Refusal | None:
        """None if ``token`` (as stored for the task's map) lets the task run at broker time
        ``now_ms``; otherwise why not."""
        if not token:
            return Refusal(None)
        tok = self._verified.get(token)
        if tok is None:
            try:
                tok = protocol.unpack_map_token(self.key, token)
            except protocol.BadFrame as err:
                return self._refuse(task, FaultKind.BAD_FRAME, f"worker {self.worker} refused task {task.ref}: "
                                    f"the liveness token stored for map {task.map_id} is not genuine ({err}); "
                                    "someone with write access to Redis forged it")
            self._remember(self._verified, token, tok)
        if tok.map_id != task.map_id:
            return self._refuse(task, FaultKind.BAD_FRAME, f"worker {self.worker} refused task {task.ref}: the "
                                f"liveness token stored for map {task.map_id} is map {tok.map_id}'s (moved there "
                                "by someone with write access to Redis)")
        if tok.nonce != task.nonce:
            return self._refuse(task, FaultKind.REPLAYED, f"worker {self.worker} refused task {task.ref}: its nonce "
                                f"{task.nonce} is not the nonce {tok.nonce} of map {task.map_id} (a task frame "
                                "replayed from an earlier map)")
        if tok.ended:       # logged (once per map), not reported: a cancelled map's leftovers look the same
            message = (f"worker {self.worker} refused task {task.ref}: map {task.map_id} ended (its client "
                       f"signed the end; its last liveness token lasts until {_utc(tok.valid_until_ms)} at "
                       "most): a copy left in a queue, or frames replayed after the map ended; nothing was run")
            if task.map_id not in self._ended:
                self._remember(self._ended, task.map_id, tok, _ENDED)
                log.info(message)
            return Refusal(FaultKind.EXPIRED, message)
        end = self._ended.get(task.map_id)
        if end is not None and end.nonce == tok.nonce:
            return self._refuse(task, FaultKind.REPLAYED, f"worker {self.worker} refused task {task.ref}: the "
                                f"liveness token stored for map {task.map_id} is a copy written back after "
                                "the map ended (this worker saw its client's signed end): someone with write "
                                "access to Redis replays the map's frames; nothing was run")
        if tok.valid_until_ms < now_ms:
            return self._refuse(task, FaultKind.EXPIRED, f"worker {self.worker} refused task {task.ref}: the "
                                f"liveness token of map {task.map_id} expired at {_utc(tok.valid_until_ms)} "
                                f"({(now_ms - tok.valid_until_ms) / 1000:.1f} s ago by the broker's clock): "
                                "frames replayed after the map ended, or a client that stopped renewing its "
                                "map for longer than RHTC_TOKEN_TTL; nothing was run")
        return None

    def _refuse(self, task: protocol.Task, kind: FaultKind, message: str) -> Refusal:
        first = (task.map_id, kind) not in self._reported
        if first:
            self._remember(self._reported, (task.map_id, kind), None)
        return Refusal(kind, message, report=first)

    @staticmethod
    def _remember(cache: collections.OrderedDict, k, v, size: int = _CACHE) -> None:
        cache[k] = v
        cache.move_to_end(k)
        while len(cache) > size:
            cache.popitem(last=False)


def _utc(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, timezone.utc).strftime("%H:%M:%S UTC")
