"""Errors a map can raise on the client, carrying what the worker saw."""
from __future__ import annotations

from typing import Any


def describe(obj: Any) -> str:
    """A short repr for error messages (never raises)."""
    try:
        text = repr(obj)
    except Exception:
        text = f"<{type(obj).__name__}>"
    return text if len(text) < 200 else text[:197] + "..."


class RemoteError(Exception):
    """A task failed on a worker: the user's exception, with the remote traceback, the
    worker and the chunk (argument) it was running.

    >>> e = RemoteError(3, "ValueError", "bad", "Traceback ...", worker="w1", host="n1", argument="Chunk(...)")
    >>> "task 3" in str(e) and "w1" in str(e)
    True
    """

    def __init__(self, index: int, remote_type: str, message: str, traceback: str = "",
                 worker: str | None = None, host: str | None = None, argument: str | None = None,
                 history: str = "", exception: BaseException | None = None):
        self.index = index
        self.remote_type = remote_type
        self.message = message
        self.remote_traceback = traceback
        self.worker = worker
        self.host = host
        self.argument = argument
        self.history = history
        self.exception = exception
        self.more: list["RemoteError"] = []
        super().__init__(self._text())

    def _text(self) -> str:
        where = f" on worker {self.worker}" + (f" ({self.host})" if self.host else "") if self.worker else ""
        s = f"task {self.index}{where} failed: {self.remote_type}: {self.message}"
        if self.argument:
            s += f"\n  argument: {self.argument}"
        if self.history:
            s += f"\n  attempts: {self.history}"
        if self.remote_traceback:
            s += "\n\nRemote traceback:\n" + self.remote_traceback.rstrip()
        return s

    def __str__(self) -> str:
        s = self._text()
        if self.more:
            s += f"\n\n(and {len(self.more)} more failed task(s): " + ", ".join(
                str(e.index) for e in self.more[:20]) + (" ..." if len(self.more) > 20 else "") + \
                "; see .more, or pass errors='return' to get them in place of results)"
        return s

    def __reduce__(self):
        return (RemoteError, (self.index, self.remote_type, self.message, self.remote_traceback,
                              self.worker, self.host, self.argument, self.history))


class MapCancelled(RuntimeError):
    """The map was cancelled before all its results came back."""


class BrokerLost(ConnectionError):
    """The broker stayed unreachable longer than the map was willing to wait."""


class BrokerFull(RuntimeError):
    """Redis reached its maxmemory and refused the map's writes."""
