"""What makes an item run on our workers behave as under coffea's own executors: its
error, the warnings a user would see (not the libraries' noise), and ``savemetrics`` bytes
of the item alone. Used by :mod:`client.data.coffea_items` on the worker and by
:class:`client.coffea.RedisExecutor` on the client; needs no coffea itself.

An item's error travels in two halves. On the worker, :func:`_processor_error` takes off
coffea's plain ``Exception("Failed processing file: ...")`` wrapper, so that the queue's
``retry_on`` sees the processor's own exception (the only one that pickles back whole:
pickling drops ``__cause__``), and writes down the wrapper's text on it. On the client,
:func:`as_coffea_raises` puts the wrapper back, so the caller gets what coffea's
IterativeExecutor raises: the same type (coffea's ``Exception`` wrapper around a
processor's error, the reader's own ``FileNotFoundError``, ``UprootMissTreeError`` or
``pyarrow.ArrowInvalid`` from preprocessing), whose ``__cause__`` chain ends in the
:class:`~client.errors.RemoteError` with the worker, the task and the remote traceback,
and a note naming the item and the worker.
"""
from __future__ import annotations

import warnings
from typing import Any

#: How many of one item's warnings (e.g. coffea's "Skipping bad file") come back to the client,
#: after the libraries' own noise (:data:`NOISY_LIBRARIES`) is left out.
MAX_WARNINGS_PER_ITEM = 5
#: Where the warnings come from that are left on the worker: the schema's notes about its
#: own cross-references and the readers' (e.g. NanoAODSchema's "Missing cross-reference
#: index"), the same for every file and not about the user's run.
NOISY_LIBRARIES = ("coffea/nanoevents/", "uproot/", "awkward/")


def _bytes_requested(directory) -> int:
    """The read counter of an open file's source (what coffea's ``savemetrics`` reports)."""
    return int(getattr(getattr(directory.file, "source", None), "num_requested_bytes", 0) or 0)


def _per_item_bytes(out: Any, stand_in: Any) -> None:
    """coffea's ``savemetrics`` reads ``bytesread`` off the file's counter; a kept-open
    file's counter spans every item since it was opened: report this item's bytes only."""
    if stand_in is None or stand_in.bytes_before is None or not isinstance(out, dict):
        return
    metrics = out.get("metrics")
    if isinstance(metrics, dict) and "bytesread" in metrics:
        metrics["bytesread"] = max(0, metrics["bytesread"] - stand_in.bytes_before)


#: Where :func:`_processor_error` writes down the wrappers it took off (their ``args``,
#: outermost first), on the processor's exception: it travels in the exception's
#: ``__dict__``, as its ``__notes__`` do.
WRAPPERS = "_rhtc_coffea_wrappers"


def _processor_error(err: BaseException) -> BaseException:
    """The processor's (or the reader's) own exception: coffea wraps it in a plain
    ``Exception("Failed processing file: ...")``, which ``retry_on`` cannot match. The
    wrappers' arguments are kept on it (:data:`WRAPPERS`), for :func:`as_coffea_raises`."""
    own, wrappers = err, []
    while type(own) is Exception and own.__cause__ is not None:
        wrappers.append(own.args if all(isinstance(a, str) for a in own.args) else (str(own),))
        own = own.__cause__
    if wrappers:
        try:
            setattr(own, WRAPPERS, wrappers)
        except Exception:       # an exception type that takes no attributes: it travels unwrapped
            pass
    return own


def as_coffea_raises(error: Any, note: str) -> BaseException | None:
    """The exception coffea's IterativeExecutor would raise for the item whose task failed
    with ``error`` (a :class:`~client.errors.RemoteError`), rebuilt from the processor's
    exception that came back: coffea's wrappers put back around it, ``error`` at the end
    of its ``__cause__`` chain, ``note`` added. ``None`` when it cannot be rebuilt: the
    exception did not come back (it did not pickle, or the task failed for a reason of
    ours: a worker lost, a timeout, a result too large), or it is no ``Exception`` (a
    ``SystemExit`` raised on a worker must not end the analyst's session).

    >>> from rhtc.client.errors import RemoteError
    >>> own = OSError("no such file")
    >>> setattr(own, WRAPPERS, [("Failed processing file: item 0",)])
    >>> raised = as_coffea_raises(RemoteError(0, "OSError", "no such file", exception=own), "on worker w1")
    >>> type(raised).__name__, raised.__cause__ is own, type(own.__cause__).__name__, raised.__notes__
    ('Exception', True, 'RemoteError', ['on worker w1'])
    """
    own = getattr(error, "exception", None)
    if not isinstance(own, Exception):
        return None
    wrappers = own.__dict__.pop(WRAPPERS, None) or []
    texts = {f"(coffea: {Exception(*args)})" for args in wrappers}   # the worker's note of each: the wrapper is back
    notes = [n for n in getattr(own, "__notes__", []) if n not in texts]
    if hasattr(own, "__notes__"):
        own.__notes__ = notes
    own.__cause__ = error        # the worker, the task and the remote traceback, at the chain's end
    raised = own
    for args in reversed(wrappers):
        outer = Exception(*args)
        outer.__cause__ = raised
        raised = outer
    raised.add_note(note)
    return raised


def _worth_sending(w: warnings.WarningMessage) -> bool:
    """A warning the user would see with IterativeExecutor, not a library's noise."""
    where = str(w.filename).replace("\\", "/")
    return not any(lib in where for lib in NOISY_LIBRARIES)
