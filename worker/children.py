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

A function the analyst defined in their script or notebook (``__main__``) reaches the
worker pickled by value; the task process's ``__main__`` is the worker's, so the standard
pickle that ``multiprocessing`` uses (a ``Pool.map(square, ...)`` inside the task) cannot
find it by name. :func:`pickle_main_by_value` has ``multiprocessing`` send such functions
and classes by value (cloudpickle), as the client's process sends them by name: it works
with the fork, forkserver and spawn start methods alike.

And the worker's own processes: a task process dies with its supervisor
(:func:`die_with`), and a dead one's exit is named in the log (:func:`describe_exit`).
"""
from __future__ import annotations

import ctypes
import logging
import multiprocessing.reduction
import multiprocessing.util
import os
import signal
import sys
import threading
import time
import types

import cloudpickle

log = logging.getLogger("rhtc.worker")

_PR_SET_CHILD_SUBREAPER = 36
_PR_SET_PDEATHSIG = 1
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
    the ones stopped. Then stop multiprocessing's own helpers (:func:`_stop_helpers`)."""
    try:
        multiprocessing.util._run_finalizers(0)
    except Exception as err:    # a user's finalizer: say so, then stop the processes anyway
        log.warning("closing the task's leftover multiprocessing pools failed: %s: %s", type(err).__name__, err)
    _stop_helpers()


def _helpers() -> list:
    from multiprocessing import forkserver, resource_tracker
    return [forkserver._forkserver, resource_tracker._resource_tracker]


def _helper_pids() -> set[int]:
    """The pids of the forkserver and resource tracker that a task started (not leftovers)."""
    fs, rt = _helpers()
    return {pid for pid in (fs._forkserver_pid, rt._pid) if pid is not None}


def _stop_helpers() -> None:
    """Stop the forkserver and the resource tracker (a forkserver Pool's helpers) through
    their own stop: what they started is then stopped with the rest, and the next task's
    forkserver Pool starts them afresh (killed, they were remembered as running, and that
    Pool failed with ChildProcessError)."""
    fs, rt = _helpers()
    if fs._forkserver_pid is None and rt._pid is None:
        return                             # neither was started (every task but a Pool's: cheap)
    for helper in (fs, rt):
        try:
            helper._stop()
        except ChildProcessError:          # it died and was reaped already: forget it
            if helper is fs:
                fs._forkserver_pid = fs._forkserver_address = None
        except Exception as err:
            log.warning("stopping multiprocessing's %s failed: %s: %s", type(helper).__name__,
                        type(err).__name__, err)


def end_children(exclude: frozenset[int] = frozenset(), grace: float = GRACE_SECONDS,
                 close_pools: bool = False) -> list[int]:
    """Stop and reap every child of this process but ``exclude``, and the orphans that
    their deaths hand to this subreaper (SIGTERM, then SIGKILL after ``grace``);
    ``close_pools``: first terminate the pools this process left open. Returns the
    pids stopped."""
    if not _reap_zombies(exclude):
        if close_pools:
            _stop_helpers()                # none runs; one that died may still be remembered
        return []
    helpers = _helper_pids() if close_pools else set()
    before = [pid for pid in children(exclude) if pid not in helpers]
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
    return sorted((set(termed) | set(before)) - helpers)


_RESET_IN_CHILDREN = (signal.SIGTERM, signal.SIGUSR1, signal.SIGINT)


def default_signals_in_children() -> None:
    """A process this one forks (a Pool's workers) starts with Python's default handling
    of SIGTERM, SIGUSR1 and SIGINT, as it would in the analyst's own process: stopping a
    pool then never raises the task process's hand-back inside it.

    The three are blocked across the fork, and in the child until its handlers are reset: a
    pool stopped right after it forked a worker (``with Pool(2)`` whose map the first
    worker finished) sent SIGTERM while the new worker was still inside the fork, the
    inherited hand-back ran there instead of the reset, and ``Pool.terminate`` waited
    forever for a worker that had caught its SIGTERM (a task that never ended). Blocked,
    the SIGTERM waits for the reset and then ends the worker as the pool expects."""
    saved = threading.local()           # each forking thread's own mask

    def block() -> None:
        saved.mask = signal.pthread_sigmask(signal.SIG_BLOCK, _RESET_IN_CHILDREN)

    def unblock() -> None:
        mask = saved.__dict__.pop("mask", None)
        if mask is not None:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)

    def reset() -> None:
        try:
            for sig in (signal.SIGTERM, signal.SIGUSR1):
                signal.signal(sig, signal.SIG_DFL)
            signal.signal(signal.SIGINT, signal.default_int_handler)
        finally:
            unblock()
    os.register_at_fork(before=block, after_in_parent=unblock, after_in_child=reset)



def main_by_value(obj):
    """How ``multiprocessing`` sends a function or class of ``__main__`` that this process's
    ``__main__`` does not hold by that name (the analyst's, rebuilt here by cloudpickle):
    by value; None for everything else (pickled as before).

    >>> ns = {"__name__": "__main__"}; exec("def square(x): return x * x", ns)
    >>> square = cloudpickle.loads(cloudpickle.dumps(ns["square"]))    # as a task receives it
    >>> load, args = main_by_value(square); load(*args)(7)
    49
    >>> main_by_value(len) is None, main_by_value(7) is None
    (True, True)
    """
    if isinstance(obj, (types.FunctionType, type)) and getattr(obj, "__module__", None) == "__main__" \
            and getattr(sys.modules.get("__main__"), obj.__qualname__, None) is not obj:
        return cloudpickle.loads, (cloudpickle.dumps(obj),)
    return None


def pickle_main_by_value() -> None:
    """Have ``multiprocessing`` (pools, executors, queues) in this process pickle with
    :func:`main_by_value` (once; a reducer set before stays in force for the rest).

    (not run by the tests: it changes how this process's multiprocessing pickles)
    >>> pickle_main_by_value()             # doctest: +SKIP
    """
    pickler = multiprocessing.reduction.ForkingPickler
    if getattr(pickler, "_rhtc_main_by_value", False):
        return
    earlier = getattr(pickler, "reducer_override", None)

    def reducer_override(self, obj):
        got = main_by_value(obj)
        if got is not None:
            return got
        return earlier(self, obj) if earlier is not None else NotImplemented

    pickler.reducer_override = reducer_override
    pickler._rhtc_main_by_value = True


def end_task_children(worker: str, ref) -> None:
    """Stop the processes task ``ref`` left running on ``worker`` (a Pool never closed, a
    background subprocess): none outlives its task or leaks into the next one."""
    try:
        stopped = end_children(close_pools=True)
    except OSError as err:
        log.warning("worker %s: could not stop the processes task %s left: %s", worker, ref, err)
        return
    if stopped:
        log.warning("worker %s: task %s left %d child process(es) running; stopped them (pids %s). "
                    "Close pools inside the task (`with Pool() as p:`)", worker, ref, len(stopped), stopped)


def describe_exit(code: int | None) -> str:
    """'SIGSEGV (signal 11)' or 'exit code 9'.

    >>> describe_exit(-11), describe_exit(9)
    ('SIGSEGV (signal 11)', 'exit code 9')
    """
    if code is not None and code < 0:
        try:
            return f"{signal.Signals(-code).name} (signal {-code})"
        except ValueError:
            return f"signal {-code}"
    return f"exit code {code}"


def die_with(parent: int) -> None:
    """SIGKILL this process when ``parent`` dies (Linux): a task process must never serve
    under a name whose supervisor is gone."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent:
        os._exit(1)
