"""Bad input refused at the call, before anything is queued.

Each check names the argument that is wrong and says what to pass instead, so a typo
costs an error at once, not a map that ran for nothing (``reduce='sum'``), a map of one
task per character (a string as the arguments) or an error in the middle of the map
(``retry_on=ValueError``).

    >>> map_call(abs, range(3))
    [0, 1, 2]
    >>> map_call(abs, "abc")
    Traceback (most recent call last):
    ...
    TypeError: args is the string 'abc': remote_map would run one task per character. Pass a list of arguments (['abc']), or list('abc') if you do want one task per character
"""
from __future__ import annotations

import numbers
import os
from typing import Any, Callable, Iterable

from .errors import describe


def _whole(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _number(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def map_arguments(args: Any) -> list:
    """``args`` as a list, refusing what is surely a mistake: a string or a path (one
    task per character) and anything that is not iterable."""
    if isinstance(args, (str, bytes, os.PathLike)):
        text = os.fspath(args) if isinstance(args, os.PathLike) else args
        shown = repr(text) if len(repr(text)) < 80 else repr(text)[:76] + "...'"
        if isinstance(args, os.PathLike) or (isinstance(text, str) and (
                os.sep in text or text.endswith(".root") or "://" in text)):
            raise TypeError(f"args is the path {shown}, not a list of arguments. For ROOT files pass "
                            f"make_chunks({shown}) (chunks of entries); for one task on the file pass "
                            f"[{shown}]")
        kind = "string" if isinstance(text, str) else "bytes object"
        raise TypeError(f"args is the {kind} {shown}: remote_map would run one task per character. "
                        f"Pass a list of arguments ([{shown}]), or list({shown}) if you do want one "
                        "task per character")
    try:
        return list(args)
    except TypeError as err:
        raise TypeError(f"args must be an iterable of arguments (a list, a range, chunks from "
                        f"make_chunks), not {type(args).__name__} {_short(args)}: e.g. "
                        f"[{_short(args)}] for one task") from err


def describe_short(value: Any) -> str:
    """A value as a short text for a message (at most 60 characters)."""
    return describe(value, 60)


_short = describe_short


def retry_types(retry_on: Any) -> tuple | None:
    """``retry_on`` as a tuple of exception types or type names (one type or name alone is
    taken as a tuple of one)."""
    if retry_on is None:
        return None
    if isinstance(retry_on, (str, type)):
        retry_on = (retry_on,)
    try:
        items = tuple(retry_on)
    except TypeError:
        raise TypeError(f"retry_on must be exception types or their names, e.g. (OSError, "
                        f"'ChunkFileError'), not {type(retry_on).__name__} {_short(retry_on)}") from None
    for t in items:
        if not (isinstance(t, str) and t.isidentifier()) and not (
                isinstance(t, type) and issubclass(t, BaseException)):
            raise TypeError(f"retry_on holds {_short(t)}, which is neither an exception type nor "
                            "an exception's name: pass e.g. retry_on=(OSError, 'ChunkFileError')")
    return items


def map_call(fn: Callable, args: Iterable, *, reduce: Any = None, errors: str = "raise",
             timeout: float | None = None) -> list:
    """Check the arguments of a map call that are not its :class:`~client.engine.options.MapOptions`
    (which check themselves); return ``args`` as a list. Raises TypeError / ValueError
    naming the argument."""
    if not callable(fn):
        raise TypeError(f"fn must be a callable (a function, a lambda, a class with __call__), not "
                        f"{type(fn).__name__} {_short(fn)}: remote_map(fn, args) takes the function first")
    if reduce is not None and reduce is not False and reduce is not True and not callable(reduce):
        raise TypeError(f"reduce must be True (combine the results with +), a function of two "
                        f"results (e.g. operator.add) or None, not {_short(reduce)}")
    if errors not in ("raise", "return"):
        raise ValueError(f"errors must be 'raise' (raise RemoteError after collecting the rest) "
                         f"or 'return' (RemoteError objects in place of failed results), not {_short(errors)}")
    if timeout is not None and (not _number(timeout) or not timeout > 0):
        raise ValueError(f"timeout must be a number of seconds > 0, or None to wait as long as it "
                         f"takes, not {_short(timeout)}")
    return map_arguments(args)


def positive_count(name: str, value: Any, hint: str) -> int:
    """``value`` if it is a whole number > 0; else a ValueError/TypeError naming ``name``."""
    if not _whole(value):
        raise TypeError(f"{name} must be a whole number > 0 ({hint}), not {type(value).__name__} "
                        f"{_short(value)}")
    if value <= 0:
        raise ValueError(f"{name} must be > 0 ({hint}), not {value}")
    return int(value)
