"""Sizes and durations as people write them (``4GB``, ``512MiB``, ``8h``, ``20m``): read,
and bounded to what a byte count or a wait can hold. The command lines and the settings
(broker/wire/settings.py, which bounds each setting further by its range) share them.

    >>> parse_size("20GB"), parse_duration("2d")
    (20000000000, 172800.0)
"""
from __future__ import annotations

import re
import threading


def mib(n: float) -> str:
    """A size in the binary units Redis and our byte settings use: '64.0 MiB'.

    >>> mib(64 * 1024 * 1024), mib(520e6)
    ('64.0 MiB', '495.9 MiB')
    """
    return f"{n / 2**20:.1f} MiB"


#: the units a size may be written in (upper case), and what each is in bytes
UNITS = {"": 1, "B": 1, "K": 1e3, "KB": 1e3, "M": 1e6, "MB": 1e6, "G": 1e9, "GB": 1e9, "T": 1e12, "TB": 1e12,
         "P": 1e15, "PB": 1e15, "KIB": 1024, "MIB": 1024 ** 2, "GIB": 1024 ** 3, "TIB": 1024 ** 4, "PIB": 1024 ** 5}
#: the units a duration may be written in, and what each is in seconds
SECONDS = {"": 1, "s": 1, "m": 60, "min": 60, "h": 3600, "d": 86400}
_AMOUNT = re.compile(r"\s*((?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?)\s*([A-Za-z]*)\s*")
#: the largest size a byte count can be: a signed 64-bit integer (the OS's, numpy's, Redis')
LARGEST_SIZE = 2 ** 63 - 1


def _amount(text: str | int | float, units: dict, fold, what: str) -> float:
    """The bytes or seconds that ``text`` (a number and one of ``units``) says, unbounded:
    an exponent too large is inf here; the callers bound it. ValueError for what is not one."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        return text
    m = _AMOUNT.fullmatch(str(text))
    if not m or fold(m.group(2)) not in units:
        raise ValueError(f"cannot read {text!r} as {what}")
    return float(m.group(1)) * units[fold(m.group(2))]


def read_size(text: str | int | float) -> float:
    """The bytes ``text`` says, unbounded (:func:`parse_size` bounds them; a setting, its range).

    >>> read_size("2KiB"), read_size("1e400PB")
    (2048.0, inf)
    """
    return _amount(text, UNITS, str.upper, "a size: use e.g. 4GB, 512MB, 2GiB or a number of bytes")


def read_duration(text: str | int | float) -> float:
    """The seconds ``text`` says, unbounded (:func:`parse_duration` bounds them; a setting, its range).

    >>> read_duration("1.5h")
    5400.0
    """
    return float(_amount(text, SECONDS, str.lower, "a duration: use e.g. 8h, 20m, 90s, 2d or a number of seconds"))


def parse_size(text: str | int | float) -> int:
    """``"4GB"`` -> 4_000_000_000; ``"512MiB"``, ``"1.5G"`` and plain numbers work too. A size
    that is negative, not finite or beyond a 64-bit byte count is refused (ValueError).

    >>> parse_size("4GB"), parse_size("512MiB"), parse_size(100)
    (4000000000, 536870912, 100)
    >>> parse_size("1e400")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: cannot read '1e400' as a size: it is beyond what a byte count holds (0 to 9223372036854775807 bytes)...
    """
    size = read_size(text)
    if not 0 <= size <= LARGEST_SIZE:     # (False for nan too)
        raise ValueError(f"cannot read {text!r} as a size: it is beyond what a byte count holds "
                         f"(0 to {LARGEST_SIZE} bytes); use e.g. 4GB, 512MB, 2GiB")
    return int(size)


def parse_duration(text: str | int | float) -> float:
    """``"8h"`` -> 28800.0; ``"20m"``, ``"90s"``, ``"1.5h"``, ``"2d"`` and plain seconds work too.
    A duration that is negative, not finite or longer than a process can wait
    (``threading.TIMEOUT_MAX``, about 292 years) is refused (ValueError).

    >>> parse_duration("8h"), parse_duration("20m"), parse_duration("90"), parse_duration(60)
    (28800.0, 1200.0, 90.0, 60.0)
    >>> parse_duration(float("inf"))  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: cannot read inf as a duration: it is beyond what a process can wait ...
    """
    seconds = read_duration(text)
    if not 0 <= seconds <= threading.TIMEOUT_MAX:     # (False for nan too)
        raise ValueError(f"cannot read {text!r} as a duration: it is beyond what a process can wait "
                         f"(0 to {threading.TIMEOUT_MAX:.0f} s); use e.g. 8h, 20m, 90s, 2d")
    return seconds
