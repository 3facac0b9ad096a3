"""The client's side of the merge on the workers (:mod:`broker.merge`): what a map that
reduces sends as its function. How the map takes in a *partial* (the folded results of
several tasks in one frame: all of its tasks counted once, or none) is the state's
(:meth:`client.engine.state.MapState.handle` with a :class:`~client.engine.events.Partial`).

    >>> from rhtc.client.engine.options import MapOptions
    >>> plan = function_to_send(abs, True, MapOptions(), tasks=8, seconds=lambda: 5.0)
    >>> type(plan).__name__, plan(-2), plan.seconds, function_to_send(abs, None, MapOptions(), 8, float) is abs
    ('MergePlan', 2, 5.0, True)
"""
from __future__ import annotations

from typing import Callable

from ...broker.merge import MergePlan
from .options import MapOptions


def function_to_send(fn: Callable, reduce, options: MapOptions, tasks: int, seconds: Callable[[], float]):
    """The map's function as its workers get it: a :class:`MergePlan` when a reduction was
    asked for and ``options.merge`` is on (``reduce`` True: folded with ``+``; partials
    handed in after ``tasks`` tasks or ``seconds()`` s), else ``fn``."""
    if not reduce or not options.merge:
        return fn
    return MergePlan(fn, None if reduce is True else reduce, tasks, seconds())
