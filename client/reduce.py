"""Combining results with ``+`` as they arrive, so a map over 800 chunks returns one
histogram and the client never holds all the partial results.

    >>> combine({"n": 1, "h": [1, 2]}, {"n": 2, "h": [3]})
    {'n': 3, 'h': [1, 2, 3]}
"""
from __future__ import annotations

from typing import Any, Callable

from ..broker.merge import combine

__all__ = ["combine", "Reducer"]


class Reducer:
    """Folds results in one at a time with ``fn`` (default :func:`combine`)."""

    def __init__(self, fn: Callable[[Any, Any], Any] | None = None):
        self.fn = fn or combine
        self.value: Any = None
        self.count = 0

    def add(self, value: Any) -> None:
        self.value = value if self.count == 0 else self.fn(self.value, value)
        self.count += 1
