"""The worker's allocator settings (worker/memory.py): on glibc, freed heap is kept for the
next task and large blocks come from the heap (``tune_malloc`` is True, and a block under
the mmap threshold is no longer handed back to the kernel at once); where mallopt is not to
be had it says False instead of raising. It changes the allocator of the process that calls
it, so it runs in a child Python (a process: ``heavy``)."""
from __future__ import annotations

import platform
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import rhtc

pytestmark = pytest.mark.heavy

#: a child that frees two 40 MB blocks and says whether they came from mmap and whether glibc
#: kept them in the heap (mallinfo2's ``fordblks``: free bytes held in the heap); 80 MB is more
#: than the top pad (64 MB) alone keeps: the trim threshold keeps the rest
CHILD = textwrap.dedent("""
    import ctypes, sys
    from rhtc.worker.memory import tune_malloc
    tuned = tune_malloc() if sys.argv[1] == "tuned" else None
    libc = ctypes.CDLL("libc.so.6")
    class MallInfo2(ctypes.Structure):
        _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                    "fsmblks", "uordblks", "fordblks", "keepcost")]
    libc.mallinfo2.restype = MallInfo2
    libc.malloc.restype = ctypes.c_void_p
    libc.free.argtypes = [ctypes.c_void_p]
    blocks = [libc.malloc(40 << 20) for _ in range(2)]
    mmapped = libc.mallinfo2().hblkhd >= 80 << 20
    for block in blocks:
        libc.free(block)
    print(tuned, mmapped, libc.mallinfo2().fordblks >= 80 << 20)
""")


def _child(mode: str) -> list[str]:
    root = Path(rhtc.__file__).resolve().parent.parent           # this checkout's rhtc, in the child too
    return subprocess.run([sys.executable, "-c", CHILD, mode], capture_output=True, text=True, timeout=60,
                          check=True, cwd=root).stdout.split()


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt is glibc's")
def test_on_glibc_a_large_block_comes_from_the_heap_and_stays_for_the_next_task():
    assert _child("default") == ["None", "True", "False"]        # glibc's own: mmap, handed back
    assert _child("tuned") == ["True", "False", "True"]          # ours: the heap keeps it


def test_without_mallopt_it_says_false(monkeypatch):
    from rhtc.worker import memory

    class NoMallopt:
        def __init__(self, name):
            raise OSError(f"{name}: cannot open shared object file")

    monkeypatch.setattr(memory.ctypes, "CDLL", NoMallopt)
    assert memory.tune_malloc() is False
