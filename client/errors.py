"""Errors a map can raise on the client, carrying what the worker saw."""
from __future__ import annotations

import re

from typing import TYPE_CHECKING, Any
from rhtc.errors import RhtcError

from ..broker.wire.messages import ErrorKind

if TYPE_CHECKING:  # pragma: no cover
    from ..broker.wire.messages import ResultMeta, WorkerStatus


def describe(obj: Any, limit: int = 200) -> str:
    """A short repr for error messages, at most ``limit`` characters (never raises)."""
    try:
        text = repr(obj)
    except Exception:
        text = f"<{type(obj).__name__}>"
    return text if len(text) < limit else text[:limit - 3] + "..."


class BranchNotFound(KeyError, RhtcError):
    """A branch the function asked for is not in the tree."""

    def __str__(self) -> str:
        return self.args[0]


class ChunkFileError(OSError, RhtcError):
    """A chunk's file is missing, unreadable, not ROOT, or changed since make_chunks.

    ``reason`` says which, always one of :attr:`REASONS` (the README lists them too), and
    ``transient`` whether a retry may cure it. Every error of ``make_chunks`` about its
    files is one, whether the files were opened here or on the workers (``remote=True``).
    """

    #: every reason a ChunkFileError can carry
    REASONS = ("no such file", "no such tree", "not ROOT", "permission denied", "bad URL",
               "server unreachable", "timed out", "read failed", "unreadable", "changed",
               "no XRootD client", "is a directory")

    def __init__(self, message: str, reason: str = "unreadable", transient: bool = False):
        super().__init__(message)
        self.reason, self.transient = reason, transient

    def __str__(self) -> str:
        return self.args[0]

    def __reduce__(self):   # with its __dict__: its notes (and what a coffea item's error carries) travel too
        return (ChunkFileError, (self.args[0], self.reason, self.transient), self.__dict__ or None)


class RemoteError(RhtcError):
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
        self.remote_type = str(remote_type)          # an ErrorKind, or the exception's type name
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


class MapCancelled(RuntimeError, RhtcError):
    """The map was cancelled before all its results came back."""


class BrokerLost(ConnectionError, RhtcError):
    """The broker stayed unreachable longer than the map was willing to wait."""


class BrokerFull(RuntimeError, RhtcError):
    """Redis reached its maxmemory and refused the map's writes."""

    @classmethod
    def refused(cls, broker: Any, used: float, limit: float, what: str) -> "BrokerFull":
        """The error for ``what`` the full ``broker`` refused: how full it is, what to do.

        >>> e = BrokerFull.refused("redis://node:6379", 9e6, 8e6, "it refused to start map 0123")
        >>> "'redis://node:6379' is out of memory (9 MB used of maxmemory 8 MB)" in str(e), str(e)[-23:]
        (True, 'then run the map again.')
        """
        return cls(f"the broker {broker!r} is out of memory ({used / 1e6:.0f} MB used of maxmemory {limit / 1e6:.0f} "
                   f"MB): {what}. Free memory in Redis (other maps' unread results?), raise its maxmemory, or send "
                   "fewer/smaller tasks; then run the map again.")


class KeyMismatch(RuntimeError, RhtcError):
    """The live workers hold another signing key than this client: they cannot verify
    its tasks, and it cannot verify their results. Give both the same ``RHTC_KEY`` (or
    the same config file), then run the map again."""


class WorkItemFailed(RuntimeError, RhtcError):
    """A coffea WorkItem failed on a worker, and its own exception cannot be raised here:
    it did not pickle (its type name, message and the remote traceback came back), or the
    task failed for a reason of ours (``WorkerLost``, ``TaskTimeout``, ``ResultTooLarge``),
    or it is no ``Exception`` (``SystemExit``). Otherwise ``rhtc.coffea.RedisExecutor``
    raises what coffea's IterativeExecutor raises, the original type with a note naming
    the item and the worker (:func:`item_failure_note`). Defined here so that ``except
    WorkItemFailed`` needs no coffea.

    ``.item`` is the item, ``.remote`` the :class:`RemoteError` (worker, task, traceback);
    ``__cause__`` is the remote exception when one came back, else the RemoteError.

    >>> e = WorkItemFailed("item", RemoteError(0, "WorkerLost", "died 3 times", worker="w1"), "file a.root")
    >>> "file a.root" in str(e) and "w1" in str(e)
    True
    """

    def __init__(self, item: Any, error: RemoteError, described: str | None = None):
        self.item, self.remote = item, error
        text = item_failure_note(item, error, described)
        if error.remote_traceback:
            text += "\n\nRemote traceback:\n" + error.remote_traceback.rstrip()
        super().__init__(text)


def item_failure_note(item: Any, error: RemoteError, described: str | None = None) -> str:
    """Which coffea item failed, on which worker, and what to do: the note on the error a
    failed item raises (the remote traceback is in the :class:`RemoteError` at the end of
    its ``__cause__`` chain).

    >>> print(item_failure_note("item", RemoteError(2, "OSError", "gone", worker="w1"), "file a.root"))
    coffea work item failed on worker w1: file a.root
      OSError: gone
      Fix the processor or the file, or pass skipbadfiles=True (any OSError) or skipbadfiles=(OSError,)
      to processor.Runner to skip the files that raise it; rerun just this item with
      processor.IterativeExecutor() on [item] to debug it locally.
    """
    where = f"worker {error.worker}" + (f" ({error.host})" if error.host else "") if error.worker \
        else "a worker"
    if error.remote_type in {str(kind) for kind in ErrorKind}:       # not the processor's exception
        todo = "  The processor did not raise: rhtc could not run this item to its end (the message says why)."
    else:
        todo = _missing_tree_advice(item, error) or (
            f"  Fix the processor or the file, or pass skipbadfiles=True (any OSError) or "
            f"skipbadfiles=({error.remote_type},) to processor.Runner to skip the files that raise it; "
            "rerun just this item with processor.IterativeExecutor() on [item] to debug it locally.")
    return (f"coffea work item failed on {where}: {described or describe(item)}\n"
            f"  {error.remote_type}: {error.message}\n{todo}")


def _missing_tree_advice(item: Any, error: RemoteError) -> str | None:
    """What to do when the item's file has no tree of the fileset's name (skipbadfiles
    cannot help: it skips files that fail to open), naming the trees the file has."""
    tree = getattr(item, "treename", None)
    if not tree or f"not found: '{tree}'" not in error.message.replace('\\n', '\n'):
        return None
    found = re.search(r"Available keys: (.*?)(?:\\n|\n|$)", error.message)
    keys = sorted({k.split(";")[0] for k in re.findall(r"'([^']+)'", found.group(1))}) if found else []
    return (f"  The file has no tree {tree!r}; its trees and other top-level keys: {', '.join(keys) or 'none'}. Pass "
            "treename=... to processor.Runner's call, or give the file's tree in the fileset "
            "({'dataset': {'files': {path: tree}}}); skipbadfiles=True cannot help with a wrong tree name (it "
            "skips OSErrors; skipbadfiles=(UprootMissTreeError,) skips files without the tree).")


def _top_version(module: str, versions: dict | None = None) -> str | None:
    """Version of the distribution that provides ``module`` (its top-level package)."""
    top = module.split(".")[0]
    if versions is not None:
        return versions.get(top)
    try:
        from importlib import metadata
        return metadata.version(top)
    except Exception:
        return None


def undecodable_error(index: int, meta: "ResultMeta", err: BaseException,
                      worker: "WorkerStatus | None" = None, argument: str | None = None) -> RemoteError:
    """The error of a task whose result reached the client but does not unpickle here
    (the worker pickled a module or a version this client lacks), naming the module and
    both sides' versions.

    >>> from rhtc.broker.wire.messages import ResultMeta
    >>> e = undecodable_error(4, ResultMeta("w1", "n1", 7, 0.0, 1.0),
    ...                       ModuleNotFoundError("No module named 'numpy._core'", name="numpy._core"))
    >>> e.remote_type, "numpy._core" in e.message, e.worker
    ('UndecodableResult', True, 'w1')
    """
    module = getattr(err, "name", None) or getattr(err, "__module__", "")
    what = f"{type(err).__name__}: {err}"
    text = f"the result came back but does not unpickle on this client ({what})"
    if isinstance(err, ImportError) and module:
        ours = _top_version(module)
        theirs = _top_version(module, getattr(worker, "versions", None) or None)
        top = module.split(".")[0]
        text += (f"; missing module {module!r}: {top} {ours or 'not installed'} here, "
                 f"{theirs or 'version unknown'} on worker {meta.worker}")
    text += ". Install the same versions of the analysis stack on the client and the workers " \
            "(`rhtc status` shows the workers' versions), or return plain Python types."
    return RemoteError(index, ErrorKind.UNDECODABLE_RESULT, text, worker=meta.worker, host=meta.host,
                       argument=argument)


class TasksFailedWarning(UserWarning):
    """A reduced map (``reduce=``) run with ``errors="return"`` returned the reduction of
    the tasks that succeeded; the tasks that failed are left out of it. The warning names
    them; every failure is on the map's handle (``rhtc.last_map().failures``)."""


def failed_tasks_left_out(failures: list[RemoteError], n: int, map_id: str, label: str) -> str:
    """The text of :class:`TasksFailedWarning` for ``failures`` out of ``n`` tasks.

    >>> e = RemoteError(2, "ValueError", "bad", worker="w1", argument="Chunk('a.root', 'Events', 0-10)")
    >>> print(failed_tasks_left_out([e], 3, "m1", "f"))  # doctest: +NORMALIZE_WHITESPACE
    map m1 (f): 1 of 3 tasks failed and are NOT in the reduction (errors='return'): task 2
    (Chunk('a.root', 'Events', 0-10)) on worker w1: ValueError: bad. All failures:
    rhtc.last_map().failures; errors='raise' (the default) raises the first instead.
    """
    failures = sorted(failures, key=lambda e: e.index)
    shown = "; ".join(f"task {e.index}" + (f" ({e.argument})" if e.argument else "")
                      + (f" on worker {e.worker}" if e.worker else "")
                      + f": {e.remote_type}: {_short(e.message)}" for e in failures[:3])
    more = f" and {len(failures) - 3} more" if len(failures) > 3 else ""
    return (f"map {map_id} ({label}): {len(failures)} of {n} tasks failed and are NOT in the reduction "
            f"(errors='return'): {shown}{more}. All failures: rhtc.last_map().failures; "
            "errors='raise' (the default) raises the first instead.")


def _short(message: str, limit: int = 120) -> str:
    line = str(message).strip().splitlines()[0] if str(message).strip() else ""
    return line if len(line) <= limit else line[:limit - 3] + "..."
