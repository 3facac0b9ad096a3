"""The child processes a task leaves behind (a ``multiprocessing.Pool`` never closed, a
``ProcessPoolExecutor`` not shut down, a ``subprocess`` sent to the background).

The task process and the supervisor make themselves *child subreapers* (Linux), so an
orphaned grandchild is reparented to them rather than to init; :func:`end_children`
then stops every child still there: SIGTERM, a short grace, SIGKILL, and reaps them, so
nothing leaks from one task into the next or outlives the worker.

    (not run by the tests: it makes the calling process a subreaper)
    >>> become_subreaper()                 # doctest: +SKIP
    >>> end_children()                     # after the task: nothing left   # doctest: +SKIP
    []
"""
from __future__ import annotations

import ctypes
import logging
import multiprocessing.util
import os
import signal
import time

log = logging.getLogger("rhtc.worker")

_PR_SET_CHILD_SUBREAPER = 36
GRACE_SECONDS = 1.0        # a leftover child gets this long after SIGTERM before SIGKILL


def become_subreaper() -> None:
    """Orphaned descendants of this process become its children (Linux; else a no-op)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def _reap_zombies(exclude: frozenset[int]) -> bool:
    """Reap exited children; True if a live child may remain. With ``exclude`` (children
    that others wait for), only the listed pids are reaped, never ``waitpid(-1)``."""
    if exclude:
        return bool(children(exclude))
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return False          # no child at all: the cheap common case
        if pid == 0:
            return True


def children(exclude: frozenset[int] = frozenset()) -> list[int]:
    """The pids of this process's children (read from /proc), except ``exclude``."""
    me, out = os.getpid(), []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return out
    for entry in entries:
        if not entry.isdigit() or int(entry) in exclude:
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2:].split()
        if len(fields) > 1 and int(fields[1]) == me:
            out.append(int(entry))
    return out


def _close_pools() -> None:
    """Terminate the ``multiprocessing`` pools and managers this process still has open
    (what their finalizers do at exit): a live Pool would start new workers in place of
    the ones stopped."""
    try:
        multiprocessing.util._run_finalizers(0)
    except Exception as err:    # a user's finalizer: say so, then stop the processes anyway
        log.warning("closing the task's leftover multiprocessing pools failed: %s: %s", type(err).__name__, err)


def end_children(exclude: frozenset[int] = frozenset(), grace: float = GRACE_SECONDS,
                 close_pools: bool = False) -> list[int]:
    """Stop and reap every child of this process but ``exclude``, and the orphans that
    their deaths hand to this subreaper (SIGTERM, then SIGKILL after ``grace``);
    ``close_pools``: first terminate the pools this process left open. Returns the
    pids stopped."""
    if not _reap_zombies(exclude):
        return []
    before = children(exclude)
    if close_pools:
        _close_pools()
    termed: dict[int, float] = {}
    deadline = time.monotonic() + grace + 5.0
    while True:
        for pid in termed:
            try:
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                pass
        pids = children(exclude)
        if not pids:
            break
        now = time.monotonic()
        if now > deadline:
            log.warning("could not stop child process(es) %s of pid %d", pids, os.getpid())
            break
        for pid in pids:
            try:
                if pid not in termed:
                    termed[pid] = now
                    os.kill(pid, signal.SIGTERM)
                elif now - termed[pid] > grace:
                    os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.02)
    return sorted(set(termed) | set(before))
