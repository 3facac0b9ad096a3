"""What an idle worker imports before its first task: the analysis stack that the worker's
environment has (``RHTC_PRELOAD``: numpy, awkward, uproot, hist and coffea by default, in
that order so that each step is small; ``none`` for none), so that a fresh worker's first
chunk does not pay their imports (0.2-1 s for uproot and awkward, more with coffea).

The imports run in a background thread of the task process, one module at a time, and a
module is started only while the task process waits idle for work (:meth:`Preload.idle`):
never while a task runs. A task that arrives during an import does not wait for it, nor
for the rest of the list (which waits for the next idle moment), unless it imports the
package being preloaded (or one of that import's dependencies still in progress): then it
waits for that one module, and gets it whole (:mod:`worker.importgate`: two threads in one
package at once can see it half initialized, "partially initialized module
'boost_histogram.axis' has no attribute 'transform'", as a task's function unpickled while
hist was being preloaded once did). A slow or hung import thus delays only the tasks that
need it; it is logged every time it has taken twice as long (``SLOW``, ``SLOW`` x 2, ...)
and when it ends. A fork inside a task (a ``multiprocessing.Pool``) waits for the module
being imported, if any (at most ``FORK_WAIT``): a child forked in the middle of an import
would inherit that module's lock held by a thread it does not have, and hang the first time
it imports the module. A module that is not installed is skipped (logged at debug).

    >>> preload = Preload(["json", "rhtc_no_such_module"])
    >>> with preload.idle():
    ...     preload.wait(10)
    True
    >>> preload.done, preload.missing
    (['json'], ['rhtc_no_such_module'])
    >>> names("uproot, awkward,,numpy "), names("none")
    (['uproot', 'awkward', 'numpy'], [])
"""
from __future__ import annotations

import contextlib
import importlib
import importlib.util
import logging
import os
import sys
import threading
import time
from typing import Iterable

from .importgate import ImportGate

log = logging.getLogger("rhtc.worker")

FORK_WAIT = 30.0          # a fork waits at most this long for the module being imported (s)
SLOW = 5.0                # an import that takes longer is logged, and again at twice as long... (s)


def names(setting: str) -> list[str]:
    """The module names of a ``RHTC_PRELOAD`` value (comma-separated; ``none``: none; an
    empty variable, as every setting's, means the default)."""
    return [n.strip() for n in setting.split(",") if n.strip() and n.strip().lower() != "none"]


class Preload:
    """Imports ``modules`` in a background thread while the task process is idle."""

    def __init__(self, modules: Iterable[str]):
        self.todo = list(modules)
        self.done: list[str] = [m for m in self.todo if m in sys.modules]     # imported or already there
        self.missing: list[str] = []
        self.seconds = 0.0                     # spent importing, in all
        self._idle = threading.Event()
        self._importing = threading.Lock()     # held while one module is imported
        self._imported = threading.Event()     # the module in flight is in (or failed)
        self._finished = threading.Event()
        self._forking = threading.local()
        self.gate = ImportGate()
        if len(self.done) == len(self.todo):
            self._finished.set()
            return
        os.register_at_fork(before=self._before_fork, after_in_parent=self._after_fork,
                            after_in_child=self._after_fork_in_child)
        self._thread = threading.Thread(target=self._run, name="rhtc-preload", daemon=True)
        self._thread.start()

    @contextlib.contextmanager
    def idle(self):
        """The task process waits for work meanwhile: the next module may be imported."""
        self._idle.set()
        try:
            yield
        finally:
            self._idle.clear()

    def wait(self, timeout: float | None = None) -> bool:
        """Whether every module was imported (or skipped) within ``timeout`` seconds."""
        return self._finished.wait(timeout)

    def _run(self) -> None:
        try:
            for name in self.todo:
                if name in self.done:
                    continue
                while True:
                    self._idle.wait()
                    self._importing.acquire()
                    if self._idle.is_set():         # still idle under the lock: a fork waits for us
                        break
                    self._importing.release()       # a task came in between: wait for the next idle moment
                try:
                    self._import(name)
                finally:
                    self._importing.release()
        finally:
            self.gate.close()
            self._finished.set()
        log.info("preload: imported %s in %.2f s before they were needed%s", ", ".join(self.done) or "nothing",
                 self.seconds, f" ({', '.join(self.missing)} not installed)" if self.missing else "")

    def _import(self, name: str) -> None:
        """Import ``name`` (tasks that enter it meanwhile wait for it, the others go on)."""
        t0 = time.perf_counter()
        self._imported.clear()
        watch = threading.Thread(target=self._watch, args=(name, t0), name="rhtc-preload-watch", daemon=True)
        watch.start()
        self.gate.begin(name)
        failed = None
        try:
            if importlib.util.find_spec(name) is None:
                raise ModuleNotFoundError(name)
            importlib.import_module(name)
        except ModuleNotFoundError:
            self.missing.append(name)
            log.debug("preload: %s is not installed here; skipped", name)
        except BaseException as err:    # noqa: B036 - a broken install: the task that imports it says so
            failed = err
        else:
            self.done.append(name)
        finally:
            self.gate.end()
            self._imported.set()
        took = time.perf_counter() - t0
        self.seconds += took
        if failed is not None:
            log.warning("preload: importing %s failed after %.1f s (%s: %s); a task that imports it will fail "
                        "the same way", name, took, type(failed).__name__, failed)
        elif took >= SLOW:
            log.warning("preload: imported %s in %.1f s (the tasks that did not import it went on meanwhile)",
                        name, took)
        watch.join()

    def _watch(self, name: str, t0: float) -> None:
        """Log an import that takes long, at ``SLOW`` s and every time it has doubled."""
        after = SLOW
        while not self._imported.wait(max(0.0, t0 + after - time.perf_counter())):
            log.warning("preload: still importing %s after %.0f s; only the tasks that import it wait for it",
                        name, time.perf_counter() - t0)
            after *= 2

    def _before_fork(self) -> None:
        mine = threading.current_thread() is self._thread      # (an import that forks)
        held = not mine and self._importing.acquire(timeout=FORK_WAIT)
        if not mine and not held:
            log.warning("preload: a fork waited %.0f s for the import of %s and goes on: the child hangs if it "
                        "imports it", FORK_WAIT, self.gate.module)
        self._forking.held = held

    def _after_fork(self) -> None:
        if getattr(self._forking, "held", False):
            self._forking.held = False
            self._importing.release()

    def _after_fork_in_child(self) -> None:
        self._after_fork()
        self.gate.after_fork_in_child()
