"""Combining results with ``+`` as they arrive, so a map over 800 chunks returns one
histogram and the client never holds all the partial results.

    >>> combine({"n": 1, "h": [1, 2]}, {"n": 2, "h": [3]})
    {'n': 3, 'h': [1, 2, 3]}
"""
from __future__ import annotations

from typing import Any, Callable


def combine(a: Any, b: Any) -> Any:
    """``a + b``, recursing into dicts (keys of either side kept) and tuples."""
    if a is None:
        return b
    if b is None:
        return a
    if isinstance(a, dict) and isinstance(b, dict):
        out = dict(a)
        for k, v in b.items():
            out[k] = combine(out[k], v) if k in out else v
        return out
    if isinstance(a, tuple) and isinstance(b, tuple) and len(a) == len(b):
        return tuple(combine(x, y) for x, y in zip(a, b))
    try:
        return a + b
    except TypeError as err:
        raise TypeError(f"cannot combine a {type(a).__name__} with a {type(b).__name__} using +: "
                        f"{err}. Return numbers, numpy arrays, hist objects or dicts of them, or "
                        "pass reduce=<your function of two results>") from err


class Reducer:
    """Folds results in one at a time with ``fn`` (default :func:`combine`)."""

    def __init__(self, fn: Callable[[Any, Any], Any] | None = None):
        self.fn = fn or combine
        self.value: Any = None
        self.count = 0

    def add(self, value: Any) -> None:
        self.value = value if self.count == 0 else self.fn(self.value, value)
        self.count += 1
