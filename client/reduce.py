"""Combining results with ``+`` as they arrive, so a map over 800 chunks returns one
histogram and the client never holds all the partial results.

    >>> combine({"n": 1, "h": [1, 2]}, {"n": 2, "h": [3]})
    {'n': 3, 'h': [1, 2, 3]}

With ``merge=True`` the workers fold too. A fold that raises on a worker (a ``MemoryError``
on a small node halfway through ``a += b``) leaves the worker's partial as it was and sends
what it could not fold here, unmerged, with a note of the failure
(:class:`~broker.wire.merge.FoldFailure`): the :class:`Reducer` folds it as ``merge=False``
would, so the answer is ``merge=False``'s, and warns (:class:`ReduceFailedOnWorker`) with
the worker, the tasks and the remote traceback. If the fold raises here too (the reduce
function's own bug), the map fails with that error, as with ``merge=False``, noted with
what the worker saw.
"""
from __future__ import annotations

import warnings
from typing import Any, Callable

from ..broker.wire.merge import FoldFailure, combine, unnoted
from .errors import RemoteError

__all__ = ["combine", "Reducer", "ReduceFailedOnWorker"]


class ReduceFailedOnWorker(RuntimeWarning):
    """The reduce function raised on a worker; the client folded what the worker could not
    (the answer is the one ``merge=False`` gives). The message names the map, the worker,
    the tasks and the exception, with the remote traceback; a reduce that raises on every
    worker but never on the client is one that the workers' memory or packages cannot run."""


class Reducer:
    """Folds results in one at a time with ``fn`` (default :func:`combine`); a value that
    a worker could not fold (:func:`~broker.wire.merge.unnoted`) is folded here, and said.

    >>> from rhtc.broker.wire.merge import FoldFailure, Noted
    >>> r = Reducer()
    >>> r.add(1)
    >>> failed = FoldFailure("0123456789abcdef", "w1", "n1", (7,), 3, False, {"type": "MemoryError"})
    >>> with warnings.catch_warnings(record=True) as said:
    ...     warnings.simplefilter("always")
    ...     r.add(Noted(2, (failed,)))
    >>> r.value, r.worker_failures[0].worker, said[0].category.__name__
    (3, 'w1', 'ReduceFailedOnWorker')
    """

    def __init__(self, fn: Callable[[Any, Any], Any] | None = None):
        self.fn = fn or combine
        self.value: Any = None
        self.count = 0
        self.worker_failures: list[RemoteError] = []    # folds that raised on a worker, done here
                                                        # (MapHandle.reducer.worker_failures)
        self._said: set[tuple[str | None, str]] = set()

    def add(self, value: Any) -> None:
        value, failures = unnoted(value)
        said = [fold_error(f) for f in failures]
        try:
            self.value = value if self.count == 0 else self.fn(self.value, value)
        except Exception as err:
            for e in said:
                err.add_note(told(e, "It raised there first (the worker's partial stayed as it was before "
                                     "that fold, and sent the value on here unmerged)."))
            raise
        self.count += 1
        for e in said:
            self.worker_failures.append(e)
            if (e.worker, e.remote_type) in self._said:
                continue                # said once per worker and exception: the rest are in worker_failures
            self._said.add((e.worker, e.remote_type))
            warnings.warn(told(e, "The client folded it instead: the answer is the one merge=False gives. "
                                  "If that worker is short of memory, give it more (or pass merge=False). Its next "
                                  "failures of this kind are not said again: handle.reducer.worker_failures "
                                  "lists them all."),
                          ReduceFailedOnWorker, stacklevel=2)


def fold_error(failure: FoldFailure) -> RemoteError:
    """A fold that failed on a worker, as a task's error is told (:class:`RemoteError`:
    the first of its tasks, the exception's type, the worker, the remote traceback)."""
    info = failure.error
    message = (f"the reduce function raised folding {failure.what} into the worker's partial of "
               f"{failure.into} task(s) of map {failure.map_id}: {info.get('message', '')}")
    return RemoteError(failure.tasks[0], str(info.get("type") or "Error"), message,
                       str(info.get("traceback") or ""), worker=failure.worker, host=failure.host)


def told(e: RemoteError, then: str) -> str:
    """What failed where (:func:`fold_error`), ``then`` what came of it, and the remote traceback."""
    text = f"On worker {e.worker} ({e.host}): {e.remote_type}: {e.message}. {then}"
    return text + ("\n\nRemote traceback:\n" + e.remote_traceback.rstrip() if e.remote_traceback else "")
