"""One dedicated connection for a worker's (or a client's) hot path, where a command can
be sent without waiting for its reply: the reply is read before the next command's, or
collected when the caller needs it. This is what keeps a round trip to one network
round trip.

A connection the broker closed while it sat idle (Redis restarted, ``CLIENT KILL``, a
firewall that dropped it) is noticed before the next command is written and replaced,
so that command is never lost in a dead socket; one closed under the lane while replies
were owed (its pool's ``disconnect()``) raises ``ConnectionError`` at the next command, which
would otherwise wait out the socket timeout for replies that went with the old socket;
:meth:`FastLane.retrying` runs a step again on a fresh connection, with back-off, when the
connection breaks under it.

    >>> from rhtc.broker.fastlane import FastLane
    >>> from rhtc.broker.embedded import EmbeddedBroker
    >>> from rhtc.broker.storage import connect
    >>> b = EmbeddedBroker().start()
    >>> lane = FastLane(connect(b.config))
    >>> lane.send("PING"); lane.collect()
    b'PONG'
    >>> b.stop()
"""
from __future__ import annotations

import logging
import threading
import time
from collections import deque
from typing import Callable, TypeVar

import redis

from .errors import ConnectionProblem
from .functions import missing

log = logging.getLogger("rhtc.broker")
T = TypeVar("T")
BIG_ARG = 64 * 1024        # an argument this long goes out as it is (pack_command)


def pack_command(conn, *args) -> list[bytes]:
    """``conn.pack_command(*args)``, except that an argument of ``BIG_ARG`` bytes or more
    is a chunk of its own, written to the socket as it is: redis-py's packer (hiredis')
    copies every argument into one buffer, and for a big result's blob that is a copy of
    up to 8 MB, on fresh pages, per result.

    >>> import redis
    >>> conn = redis.Redis().connection_pool.make_connection()
    >>> big = b"x" * BIG_ARG
    >>> b"".join(pack_command(conn, "SET", "k", big, "EX", 5)) == b"".join(conn.pack_command("SET", "k", big, "EX", 5))
    True
    >>> any(chunk is big for chunk in pack_command(conn, "SET", "k", big))
    True
    """
    if not any(isinstance(a, bytes) and len(a) >= BIG_ARG for a in args):
        return conn.pack_command(*args)
    out, head = [], [b"*%d\r\n" % len(args)]
    for arg in args:
        data = arg if isinstance(arg, bytes) else conn.encoder.encode(arg)
        head.append(b"$%d\r\n" % len(data))
        if len(data) >= BIG_ARG:
            out += [b"".join(head), data]
            head = [b"\r\n"]
        else:
            head += [data, b"\r\n"]
    out.append(b"".join(head))
    return out


def _hand(handler, reply) -> None:
    """Give a reply read later to the handler its command was sent with; what the handler
    raises is logged, never raised into the unrelated command that read the reply."""
    try:
        handler(reply)
    except Exception:                  # (a bug of the handler's: its caller's reply is whole)
        log.exception("a reply's handler failed")


class FastLane:
    """One dedicated connection for a worker's hot path, where a command can be sent
    without waiting for its reply (the reply is read before the next command's)."""

    def __init__(self, r: redis.Redis):
        self.r = r
        self.conn = None
        self.pending = 0
        #: per reply owed: False (returned by collect), True (dropped, errors too: send(quiet=True)),
        #: or a callable that gets it (send(on_reply=...); an error reply is dropped)
        self._quiet: deque = deque()
        self._out: list[bytes] = []       # packed commands not written yet (send(flush=False))
        self._health = False              # check the connection before writing them
        self._loaded = set()
        self._client_id: tuple[object, int] | None = None    # (connection, its CLIENT ID)
        self.lock = threading.RLock()     # for clients with several maps in threads

    def _connection(self):
        if self.conn is not None and self.pending and not getattr(self.conn, "_sock", True):
            owed = self.pending           # closed under the lane (its pool's disconnect()) with
            self.reset()                  # replies owed: redis-py would write the next command on
            raise redis.ConnectionError(  # a new socket, and its reply would be read as theirs
                f"the connection was closed with {owed} repl{'y' if owed == 1 else 'ies'} owed; they are "
                "lost with it (the next command goes out on a fresh connection)")
        if self.conn is not None and not self.pending and self._closed_by_peer():
            self.reset()                  # closed while idle: nothing was owed, nothing lost
        if self.conn is None:
            self.conn = self.r.connection_pool.get_connection()
        return self.conn

    def _closed_by_peer(self) -> bool:
        """Something to read while no reply is owed: the broker closed the connection (a
        restart, CLIENT KILL, an idle timeout). A cheap poll, no round trip."""
        try:
            return bool(self.conn.can_read(timeout=0))
        except (*ConnectionProblem, OSError):
            return True

    def drain(self) -> None:
        """Read (and drop) the replies of commands sent without waiting."""
        self.collect()

    def collect(self):
        """Read the replies of every command sent without waiting; return the last one.
        An error reply is raised after all replies are read."""
        replies = self.collect_all()
        return replies[-1] if replies else None

    def collect_all(self) -> list:
        """:meth:`collect`, returning every reply (not the quiet ones), in order."""
        error, replies = None, []
        try:
            self._flush()
            while self.pending:
                quiet = self._quiet.popleft() if self._quiet else False
                try:
                    got = self.conn.read_response()
                    if quiet is False:
                        replies.append(got)
                    elif quiet is not True:
                        _hand(quiet, got)
                except redis.ResponseError as err:
                    if quiet is False:
                        error = error or err
                self.pending -= 1
        except BaseException:      # a lost connection, or an interrupt between two replies:
            self.reset()           # never leave a reply behind for the next command to read
            raise
        if error is not None:
            raise error
        return replies

    def settle(self) -> None:
        """Read the replies owed so far when each goes to a handler or to nobody (quiet),
        so that the handlers have theirs; when a caller still waits for one (a reply, or
        an error, that its :meth:`collect` must see), leave them all to that caller."""
        if self.pending and len(self._quiet) == self.pending and all(q is not False for q in self._quiet):
            self.collect_all()

    def send(self, *args, flush: bool = True, quiet: bool = False, on_reply=None) -> None:
        """Send a command without waiting for its reply; ``flush=False`` keeps it to go out
        with the next command in one write (one wake-up of the broker, not two);
        ``quiet``: its reply, error or not, is read and dropped (a best-effort write whose
        refusal must not be raised by an unrelated later command); ``on_reply``: as quiet,
        but the reply is given to it when it is read (with the next command's, or at
        :meth:`collect`), in the thread that reads it; never if the connection is lost
        first, nor for an error reply."""
        try:
            conn = self._connection()
            if not self._out:      # (a health-check PING may only go out when no reply is owed)
                self._health = not self.pending
            self._out.append(pack_command(conn, *args))
            self.pending += 1
            self._quiet.append(on_reply if on_reply is not None else bool(quiet))
            if flush:
                self._flush()
        except BaseException:      # half a command may have gone out: start afresh
            self.reset()
            raise

    def _flush(self) -> None:
        if not self._out:
            return
        out, self._out = self._out, []
        chunks = [c for packed in out for c in (packed if isinstance(packed, list) else [packed])]
        if len(chunks) > 1 and sum(len(c) for c in chunks) <= 1 << 16:
            chunks = [b"".join(chunks)]
        self.conn.send_packed_command(chunks, check_health=self._health)

    def call(self, *args):
        self.drain()
        conn = self._connection()
        try:
            conn.send_command(*args)
            return conn.read_response()
        except BaseException as err:   # also KeyboardInterrupt: its reply must not stay unread
            if not isinstance(err, redis.ResponseError) or isinstance(err, ConnectionProblem):
                self.reset()
            raise

    def call_behind(self, *args):
        """Send a command behind those still owed a reply, in the same network round trip,
        and return its reply (:meth:`collect`: an error reply of an earlier command is
        raised instead, after every reply is read). Only for a command whose reply may be
        lost if an earlier one failed (the client's wait for a new map's first result: a
        map that failed to queue has no results)."""
        self.send(*args)
        return self.collect()

    def script(self, script, keys: list, args: list, wait: bool = True, flush: bool = True,
               quiet: bool = False, on_reply=None):
        """Run a script of :mod:`broker.functions` (loading the library if the broker lost
        it). With ``wait=False`` the reply is read before the next command instead (the
        library is then loaded first on this connection, so that a missing function cannot
        go unnoticed); ``flush``, ``quiet`` and ``on_reply`` as :meth:`send`."""
        if not wait:
            if script.lib.name not in self._loaded:
                script.lib.ensure(self.call)
                self._loaded.add(script.lib.name)
            self.send(*script.command(keys, args), flush=flush, quiet=quiet, on_reply=on_reply)
            return None
        try:
            return self.call(*script.command(keys, args))
        except redis.ResponseError as err:
            if not missing(err):                       # a restarted broker forgot it
                raise
            script.lib.ensure(self.call)
            return self.call(*script.command(keys, args))

    def forget(self, library: str) -> None:
        """The broker lost ``library`` (restarted, flushed): load it again before the next
        script sent without waiting."""
        self._loaded.discard(library)

    def client_id(self) -> int | None:
        """The broker's id of this lane's connection (``CLIENT ID``, asked once per
        connection), for :meth:`unblock` from another thread or a signal handler; None
        when the broker does not say."""
        conn = self._connection()
        if self._client_id is None or self._client_id[0] is not conn:
            try:
                self._client_id = (conn, int(self.call("CLIENT", "ID")))
            except redis.ResponseError:          # CLIENT not allowed to this user
                self._client_id = (conn, -1)
        return None if self._client_id[1] < 0 else self._client_id[1]

    def unblock(self) -> bool:
        """End this lane's blocking command now, as if it had timed out (``CLIENT UNBLOCK
        ... TIMEOUT``, sent on another connection: callable from a signal handler while the
        lane waits). False when it could not (no id known, not allowed, no broker)."""
        known = self._client_id
        if known is None or known[1] < 0:
            return False
        try:
            return bool(self.r.execute_command("CLIENT", "UNBLOCK", known[1], "TIMEOUT"))
        except redis.RedisError:
            return False

    def script_with(self, script, keys: list, args: list, *also: tuple) -> list:
        """Run a script and the commands ``also`` in one write; every reply, in order. A
        script the broker lost (restarted, flushed) is loaded and the lot sent again, once
        (a missing function ran nothing)."""
        for attempt in (0, 1):
            self.script(script, keys, args, wait=False, flush=False)
            for command in also:
                self.send(*command, flush=False)
            try:
                return self.collect_all()
            except redis.ResponseError as err:
                if attempt or not missing(err):
                    raise
                self._loaded.discard(script.lib.name)
        raise AssertionError("unreachable")      # pragma: no cover

    def retrying(self, step: Callable[[], T], patience: float, what: str, where: str) -> T:
        """Run ``step`` (which sends on this lane); when the connection breaks or the broker
        is restarting (ConnectionError, timeout, LOADING...), run it again on a fresh
        connection, backing off from 0.1 s to 2 s, for up to ``patience`` seconds. Only for
        a step that is safe to send twice (idempotent, or deduplicated by the broker).
        ``what`` (e.g. "queue map 1f2e") and ``where`` (the redacted URL) name the failure."""
        deadline, delay, said = time.monotonic() + patience, 0.1, False
        while True:
            try:
                got = step()
            except ConnectionProblem as err:
                self.reset()
                if time.monotonic() + delay > deadline:
                    raise redis.ConnectionError(
                        f"could not {what}: the broker at {where} has not taken it for {patience:.0f} s "
                        f"({type(err).__name__}: {err}). Is it running (`rhtc broker`) and reachable? "
                        "Run the call again once it is.") from err
                if not said:
                    log.warning("%s: the broker at %s did not take it (%s: %s); trying again on a "
                                "fresh connection for up to %.0f s", what, where, type(err).__name__, err,
                                patience)
                    said = True
                time.sleep(delay)
                delay = min(2 * delay, 2.0)
                continue
            if said:
                log.warning("%s: done, the broker at %s answers again", what, where)
            return got

    def reset(self) -> None:
        if self.conn is not None:
            try:
                self.conn.disconnect()
                self.r.connection_pool.release(self.conn)
            except Exception:
                pass
        self.conn = None
        self.pending = 0
        self._quiet.clear()
        self._out = []
        self._loaded = set()
