"""The first run of the day, already warm: :func:`warm` (``rhtc warm RECORD``).

A rerun of an analysis is fast because each worker keeps the branches it read and the
client sends each chunk back to the worker that holds it. A new pool, or workers replaced
overnight, start cold. ``warm`` reads, from a run's record, the same branches of the same
chunks into the current pool's memory and nodes' disk tiers, as a map of its own, placed
as a cold run of the analysis would place them (the same chunks in the same order, routed
and weighed the same way). The next run of the analysis then finds every chunk where it
is, and reads nothing from the files.

Every run records which branches of which chunks its tasks read (the workers say so with
each result: :mod:`broker.wire.reads`, :mod:`client.reports.reads`). Warm from the session's
last map, a :class:`~client.handle.MapHandle`, a :class:`~client.reports.record.RunRecord`
or a record saved as JSON::

    >>> import os, tempfile, rhtc
    >>> from rhtc import LocalCluster, make_chunks, remote_map
    >>> chunks = make_chunks("../shared/data/nanoaod/nano_dy.root", step=20)
    >>> def muons(chunk):
    ...     return int(chunk.arrays(["nMuon"], library="np")["nMuon"].sum())
    >>> saved = os.path.join(tempfile.mkdtemp(), "run.json")
    >>> with LocalCluster(n_workers=1) as cluster:
    ...     cold = remote_map(muons, chunks, broker=cluster, progress=False)
    ...     _ = rhtc.last_map().record().save(saved)
    >>> with LocalCluster(n_workers=2) as cluster:     # the next morning's pool: new workers, cold
    ...     summary = rhtc.warm(saved, broker=cluster, progress=False)
    ...     again = remote_map(muons, chunks, broker=cluster, progress=False)
    ...     read = sum(t.bytes_file for t in rhtc.last_map().record().tasks)
    >>> summary.chunks, again == cold, read
    (2, True, 0)

It is a map like any other: a progress bar, Ctrl-C (or :meth:`Warming.cancel`) cancels it,
and a chunk that cannot be read (a file gone or rewritten) fails it loudly, naming the
file, after the other chunks are warm (:class:`WarmFailed`).
"""
from __future__ import annotations

import os
from typing import Any

from rhtc.errors import RhtcError
from .data.warmread import WarmChunk, read_branches
from .engine.options import MapOptions
from .errors import RemoteError
from .reports.placed import WarmSummary
from .reports.record import RunRecord

__all__ = ["warm", "submit_warm", "Warming", "WarmRefused", "WarmFailed", "warm_plan"]


class WarmRefused(RhtcError, ValueError):
    """There is nothing to warm from: no run, a record that does not say which branches its
    tasks read (written before runs recorded it), or tasks that read no chunk. The message
    names the run and says what to do."""


class WarmFailed(RhtcError):
    """Some chunks could not be read into the caches (a file gone, unreadable or rewritten
    since the run): the message names each file. ``summary`` is what was warmed."""

    def __init__(self, message: str, summary: WarmSummary):
        super().__init__(message)
        self.summary = summary


def _describe(record: RunRecord) -> str:
    return f"map {record.map_id or '?'}" + (f" ({record.function})" if record.function else "")


def _record_of(record: Any) -> RunRecord:
    """The run record to warm from: the session's last map (None), a MapHandle, a
    RunRecord, or the path of a saved one."""
    if record is None:
        from .api import last_map
        handle = last_map()
        if handle is None:
            raise WarmRefused("no map has run in this session: run the analysis once, or warm from a "
                              "saved run record: rhtc.warm('run.json') (saved with "
                              "rhtc.last_map().record().save('run.json')), or `rhtc warm run.json`")
        return handle.record()
    if isinstance(record, RunRecord):
        return record
    if hasattr(record, "record") and callable(record.record):
        return record.record()
    if isinstance(record, (str, os.PathLike)):
        try:
            return RunRecord.load(record)
        except FileNotFoundError:
            raise WarmRefused(f"no run record at {os.fspath(record)}: save one with "
                              "rhtc.last_map().record().save(path) after the run") from None
        except ValueError as err:
            raise WarmRefused(f"cannot warm from {os.fspath(record)}: {err}") from None
    raise TypeError(f"record must be a run record, a map handle, the path of a saved record or None "
                    f"(the session's last map), not {type(record).__name__}")


def warm_plan(record: RunRecord) -> list[WarmChunk]:
    """The chunks to read, each with the branches the run's tasks read of it, in the order of
    the run's tasks (so the warm map places them as that run was placed); WarmRefused when the
    record cannot say.

    >>> warm_plan(RunRecord(map_id="ab12", function="dimuon", n_tasks=3))
    Traceback (most recent call last):
    ...
    rhtc.client.warm.WarmRefused: the run record of map ab12 (dimuon) does not say which branches its 3 tasks read ...
    """
    what = _describe(record)
    if record.reads is None:
        raise WarmRefused(
            f"the run record of {what} does not say which branches its {record.n_tasks} tasks read (it was "
            "written by an older redis-htcondor, or by hand): run the analysis once with this version (its "
            "record says it), then warm from that run: rhtc.warm() in the same session, or save its record "
            "(rhtc.last_map().record().save('run.json')) and `rhtc warm run.json`")
    plan = [WarmChunk(file, tree, start, stop, uuid, branches)
            for (file, tree, start, stop, uuid), branches in record.reads.chunks()]
    if not plan:
        why = (f"{len(record.reads.unlisted)} of them read more branches than a result lists"
               if record.reads.unlisted else "they read no branch through Chunk.arrays (only what "
               "reads through a chunk, make_chunks' Chunk.arrays, is recorded and warmed)")
        raise WarmRefused(f"the run record of {what} names no chunk to warm: {len(record.tasks)} of its "
                          f"{record.n_tasks} tasks finished and {why}")
    return plan


def _notes(record: RunRecord) -> list[str]:
    reads, notes = record.reads, []
    if reads.unlisted:
        notes.append(f"{len(reads.unlisted)} tasks of the run (e.g. task {reads.unlisted[0]}) read more branches "
                     "than a result lists: their chunks are not warmed")
    if reads.unresolved:
        notes.append(f"{len(reads.unresolved)} tasks of the run (e.g. task {reads.unresolved[0]}) read their "
                     "argument's chunk but the record does not hold the arguments: their chunks are not warmed")
    unread = record.n_tasks - len(set(reads.columns["index"]))
    if unread > 0:
        notes.append(f"{unread} of the run's {record.n_tasks} tasks recorded no chunk read (unfinished, or "
                     "they read none): nothing of theirs is warmed")
    return notes


class Warming:
    """A warm map in flight (:func:`submit_warm`): ``progress()``, ``done()``, ``cancel()``,
    ``wait()`` -> :class:`WarmSummary`; ``handle`` is its :class:`~client.handle.MapHandle`."""

    def __init__(self, handle, plan: list[WarmChunk], source: RunRecord, storage):
        self.handle, self.plan, self.source, self._storage = handle, plan, source, storage

    @property
    def map_id(self) -> str:
        return self.handle.map_id

    def progress(self) -> tuple[int, int]:
        """(chunks read, chunks to read)."""
        return self.handle.progress()

    def done(self) -> bool:
        return self.handle.done()

    def cancel(self) -> int:
        """Cancel the warm map (its queued tasks dropped); ``wait()`` then raises MapCancelled."""
        return self.handle.cancel()

    def wait(self, timeout: float | None = None) -> WarmSummary:
        """Block until every chunk is read; the summary of what was placed where. Raises
        :class:`WarmFailed` (with the summary) when a chunk could not be read; Ctrl-C or a
        timeout cancels the warm map."""
        try:
            values = self.handle.wait(timeout)
        except BaseException:
            if not self.handle.run.closed:
                self.handle.cancel()
            raise
        keys = [chunk.routing_key for chunk in self.plan]
        held, _live = self._storage.pool.locate(keys)
        failed = _failures(values, self.plan)
        summary = WarmSummary.of(self.handle.record(), _describe(self.source), keys, held,
                                 failed=failed, notes=_notes(self.source))
        if failed:
            raise WarmFailed(f"warming from {summary.source}: {len(self.plan) - summary.chunks} of {len(self.plan)} "
                             "chunks could not be read: " + "; ".join(failed) + ". The other chunks are warm.",
                             summary)
        return summary


def _failures(values: list, plan: list[WarmChunk]) -> list[str]:
    """Why chunks failed, once per file: '<file>: <error> (n chunks)'."""
    by_file: dict[str, tuple[str, int]] = {}
    for value, chunk in zip(values, plan):
        if isinstance(value, RemoteError):
            message, n = by_file.get(chunk.file, (f"{value.remote_type}: {value.message}", 0))
            by_file[chunk.file] = (message, n + 1)
    return [f"{file}: {message} ({n} chunk{'s' if n > 1 else ''}, e.g. {_first(plan, file)!r})"
            for file, (message, n) in by_file.items()]


def _first(plan: list[WarmChunk], file: str) -> WarmChunk:
    return next(chunk for chunk in plan if chunk.file == file)


def _begin(record: Any, broker, progress: bool, background: bool) -> Warming:
    from .api import _start, storage_for
    from .handle import MapHandle
    source = _record_of(record)
    plan = warm_plan(source)
    label = f"warm {source.function or source.map_id}"
    run = _start(read_branches, plan, broker, MapOptions(label=label))
    try:
        handle = MapHandle(run, errors="return", progress=progress)
        if background:
            handle.start_background()
    except BaseException:
        run.cancel()
        raise
    return Warming(handle, plan, source, storage_for(broker))


def warm(record: Any = None, broker=None, *, progress: bool = True, timeout: float | None = None) -> WarmSummary:
    """Read what a run read into the current pool's caches, placed as a cold run would
    place it, so that the next run of the analysis reads nothing from the files.

    Args:
        record: the run to warm from: None (this session's last map), a
            :class:`~client.handle.MapHandle`, a :class:`~client.reports.record.RunRecord`,
            or the path of a record saved with ``MapHandle.record().save(path)``.
        broker: as for :func:`~client.api.remote_map` (URL, BrokerConfig or LocalCluster).
        progress: show a progress bar.
        timeout: seconds to wait before cancelling the warm map and raising TimeoutError.

    Returns a :class:`~client.reports.placed.WarmSummary` (chunks, bytes, per worker and per
    node; ``print()`` it). Raises :class:`WarmRefused` when the record cannot say what to
    read, :class:`WarmFailed` when chunks could not be read (each file named). Ctrl-C cancels
    the warm map. The module's docstring has a runnable example.
    """
    return _begin(record, broker, progress, background=False).wait(timeout)


def submit_warm(record: Any = None, broker=None) -> Warming:
    """Start warming (as :func:`warm`) and return at once a :class:`Warming`: its
    ``progress()``, ``cancel()`` and ``wait()`` (the summary)."""
    return _begin(record, broker, progress=False, background=True)
