"""Keep freed memory for reuse instead of handing it back to the kernel at once.

An analysis task allocates and frees large temporary arrays (tens of MB per chunk).
glibc gives such blocks back to the kernel when they are freed and faults fresh zeroed
pages in on the next task: on a virtual machine that costs as much as the arithmetic
(measured here: a warm dimuon chunk 25 ms with these settings, 33-50 ms without). A
worker runs one task after another for hours, so it keeps up to ``trim`` bytes of freed
heap for the next task. ``RHTC_MALLOC_TUNING=0`` turns this off (read with the other
settings in :class:`broker.wire.config.Settings`; the task process skips the call then).

    (not run by the tests: it changes the calling process's allocator)
    >>> tune_malloc()      # doctest: +SKIP
    True
"""
from __future__ import annotations

import ctypes
import ctypes.util

_M_TRIM_THRESHOLD, _M_TOP_PAD, _M_MMAP_THRESHOLD = -1, -2, -3


def tune_malloc(mmap_threshold: int = 64 << 20, trim: int = 512 << 20, top_pad: int = 64 << 20) -> bool:
    """Ask glibc to serve blocks up to ``mmap_threshold`` from the heap and to keep up
    to ``trim`` bytes of freed heap; False where that is not possible (not glibc)."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    return all(mallopt(p, v) == 1 for p, v in ((_M_MMAP_THRESHOLD, mmap_threshold),
                                               (_M_TRIM_THRESHOLD, trim), (_M_TOP_PAD, top_pad)))
