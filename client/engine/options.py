"""How a map runs: the options of ``remote_map``, ``submit``, ``imap_unordered``, the
coffea executor and :class:`~client.engine.maprun.MapRun`, declared once.

Each option is a field of :class:`MapOptions`, with its default, its check (a wrong value
raises at the call, naming the option and what to pass) and its documentation, which
the docstrings of the public calls include (:func:`documented`). Pass them as keywords
(``remote_map(fn, chunks, retries=2)``) or as one object kept for many maps
(``remote_map(fn, chunks, options=MapOptions(retries=2, retry_on=(OSError,)))``).

    >>> MapOptions(retries=2, retry_on=OSError).retry_on
    (<class 'OSError'>,)
    >>> MapOptions.of(MapOptions(retries=2), label="dimuon")
    MapOptions(retries=2, retry_on=None, routing=True, stragglers=3.0, label='dimuon', task_timeout=None, merge=True)
    >>> MapOptions.of(retires=2)
    Traceback (most recent call last):
    ...
    TypeError: unknown map option 'retires': the options are retries, retry_on, routing, stragglers, label, task_timeout, merge
"""
from __future__ import annotations

import dataclasses
import numbers
from typing import Any

from ..arguments import describe_short, retry_types
from .timeouts import check_task_timeout


def _option(default, doc: str):
    return dataclasses.field(default=default, metadata={"doc": doc})


@dataclasses.dataclass(frozen=True)
class MapOptions:
    """The options of one map (see the module)."""

    retries: int = _option(0, """how many times to rerun a task whose function raised (default 0).
            Tasks whose *worker* died are always retried, up to ``$RHTC_MAX_ATTEMPTS`` runs in
            all (default 3; :mod:`client.engine.retry` decides every rerun).""")
    retry_on: tuple | None = _option(None, """only retry these exception types (or type names), e.g.
            ``(ChunkFileError, OSError)`` for transient remote reads.""")
    routing: bool = _option(True, """send each chunk to a worker that has it cached (sticky
            routing), in memory or on its node's disk.""")
    stragglers: float | None = _option(3.0, """in the map's tail, when a worker is idle, run a backup
            copy of a task that has run this many times longer than the median (first result
            wins); ``None`` turns it off. With fewer than three finished tasks (a small map)
            the longest finished one stands in for the median.""")
    label: str | None = _option(None, """the map's name in the timeline, the dashboard and
            ``rhtc status`` (default: the function's name).""")
    task_timeout: float | None = _option(None, """seconds one task may run without a result
            (default ``None``: no bound). Past it the task is backed up on an idle worker; if
            no copy has a result ``task_timeout`` seconds later (or no worker was free by
            twice the bound), it fails with a :class:`RemoteError` ``TaskTimeout`` naming the
            worker, the chunk and the time. For reads that may hang for good (a stalled FUSE
            mount, an XRootD server), e.g. ``task_timeout=600``.""")
    merge: bool = _option(True, """with ``reduce=`` (and the coffea executor): each worker folds its
            results into a running partial with the reduce function and hands it in after
            ``$RHTC_MERGE_TASKS`` tasks (64), ``$RHTC_MERGE_SECONDS`` (10 s) or when its queue runs
            dry, so the client receives and adds far fewer, not bigger, objects; each task still
            counts exactly once and errors come back per task. ``False``: every result comes alone.""")

    def __post_init__(self) -> None:
        r = self.retries
        if not isinstance(r, numbers.Integral) or isinstance(r, bool) or r < 0:
            raise ValueError(f"retries must be a whole number >= 0 (reruns after the function raised), "
                             f"not {describe_short(r)}")
        if not isinstance(self.routing, bool):
            raise TypeError(f"routing must be True or False, not {describe_short(self.routing)}")
        if not isinstance(self.merge, bool):
            raise TypeError(f"merge must be True or False (whether workers merge results before sending "
                            f"them), not {describe_short(self.merge)}")
        s = self.stragglers
        if s is not None and (not isinstance(s, numbers.Real) or isinstance(s, bool) or not s > 1):
            raise ValueError(f"stragglers must be a factor > 1 (back up a task that ran this many times "
                             f"longer than the median) or None to turn it off, not {describe_short(s)}")
        if self.label is not None and not isinstance(self.label, str):
            raise TypeError(f"label must be a string (the map's name in the timeline), not "
                            f"{describe_short(self.label)}")
        object.__setattr__(self, "retry_on", retry_types(self.retry_on))
        object.__setattr__(self, "task_timeout", check_task_timeout(self.task_timeout))

    @classmethod
    def of(cls, options: "MapOptions | None" = None, **given: Any) -> "MapOptions":
        """``options`` (default: the defaults) with the keyword options ``given`` applied;
        an unknown keyword raises TypeError naming it and the options there are."""
        names = [f.name for f in dataclasses.fields(cls)]
        for name in given:
            if name not in names:
                raise TypeError(f"unknown map option {name!r}: the options are {', '.join(names)}")
        if options is not None and not isinstance(options, cls):
            raise TypeError(f"options must be a MapOptions, not {describe_short(options)}")
        base = options if options is not None else cls()
        return dataclasses.replace(base, **given) if given else base


def documented(fn):
    """Put the map options' documentation where ``fn``'s docstring says ``{map_options}``."""
    lines = [f"        {f.name}: {f.metadata['doc']}" for f in dataclasses.fields(MapOptions)]
    fn.__doc__ = (fn.__doc__ or "").replace("{map_options}", "\n".join(lines).lstrip())
    return fn
