"""The import gate: while the preload thread (:mod:`worker.preload`) imports a module, a
task's import waits for it only if it enters a package that the preload is in the middle
of; every other task goes on, however long the preload takes or if it hangs.

What two threads importing at once actually break (Python 3.11, measured with a package
whose ``__init__`` the preload thread was held inside; see tests/scenarios/test_preload_before_the_first_task.py):

- A task that imports the package's *top* module (``import hist``) while the preload
  executes it waits on Python's own lock of that module and gets it whole: safe.
- A task that imports a *submodule* (``boost_histogram.axis``, as unpickling a histogram or
  a function that names it does) does not wait for the package's ``__init__`` running in
  the other thread: Python takes the parent from ``sys.modules`` half-initialized and runs
  the submodule beside it. Where the package's modules import each other (hist's do), the
  two threads then wait on each other's module locks; Python breaks that cycle by handing
  one of them the module half-initialized, and both fail ("partially initialized module
  'boost_histogram.axis' has no attribute 'transform'"). The gate makes such a task wait,
  before it takes any lock, until the preload has finished its module.
- The same holds the other way round: a package that a task is importing, entered by the
  preload as a dependency of its module. The preload (a background thread) waits then,
  until the task's import of that package is done.
- A fork while the preload thread holds a module's lock leaves that lock held in the
  child, by a thread the child does not have: the child hangs the first time it imports
  that module. :class:`worker.preload.Preload` makes a fork wait for the module in flight.

A task's import is caught before Python takes any lock for it (``builtins.__import__``,
through which ``import`` statements, ``pickle`` and C extensions import); which packages
each thread is loading is seen by a finder first on ``sys.meta_path`` that loads nothing.
Both are in place only while a preload is under way. Where the two threads would wait on
each other (a cycle that only their own imports can have), neither waits: that is Python's
own behaviour without a preload. That includes a thread the gate does not hold (one started
after the preload's module began) that already waits on Python's lock of a module the
preload is inside: the preload, entering that thread's package, does not wait for it
(:func:`waits_for`), and Python's own import breaks the cycle. A worker hung so for good, a
task of its map unfinished (seen in a chaos day under load: "still importing uproot after
80 s"). Every wait of the gate, either way, is bounded by :data:`TASK_PATIENCE`. The threads that wait for the preload are those that were
there when its module began (the task process's main thread, where tasks are unpickled and
run): a thread started meanwhile may be one that the module being imported started and
waits for.

    >>> gate = ImportGate()
    >>> gate.begin("json")             # (the preload thread is this one here)
    >>> import json
    >>> gate.end(); gate.close()
"""
from __future__ import annotations

import builtins
import logging
import sys
import threading
import time

log = logging.getLogger("rhtc.worker")
POLL = 0.05                 # how often a waiting preload looks whether a task's package is in (s)
#: the longest a task waits for the preload's import (s): past it the task goes on and imports
#: beside it, as without a preload, rather than wait on something the gate cannot see end
TASK_PATIENCE = 60.0


def top_package(name: str, globals_: dict | None, level: int) -> str | None:
    """The top-level package an ``__import__(name, globals_, ..., level)`` enters.

    >>> top_package("boost_histogram.axis", None, 0), top_package("", {"__package__": "hist.axis"}, 1)
    ('boost_histogram', 'hist')
    """
    if level == 0:
        return name.partition(".")[0] or None
    package = (globals_ or {}).get("__package__")
    if not package:
        spec = (globals_ or {}).get("__spec__")
        package = getattr(spec, "parent", None) or (globals_ or {}).get("__name__", "")
    return package.partition(".")[0] or None


def waits_for(owner: int) -> bool:
    """Whether some thread is blocked on one of Python's module import locks that thread
    ``owner`` holds (``importlib._bootstrap._blocking_on``: a lock per thread up to 3.11, a
    list of them after; where it cannot be read, False, and the waits stay bounded).

    >>> waits_for(threading.get_ident())
    False
    """
    from importlib import _bootstrap
    try:
        blocked = list(_bootstrap._blocking_on.items())
    except (AttributeError, TypeError, RuntimeError):
        return False
    for tid, locks in blocked:
        for lock in (locks if isinstance(locks, list) else [locks]):
            if tid != owner and getattr(lock, "owner", None) == owner:
                return True
    return False


def unfinished(package: str, missing: bool = True) -> bool:
    """Whether a module of ``package`` is still being executed (or, with ``missing``, the
    package is not in ``sys.modules`` yet: about to be, or its import failed)."""
    if package not in sys.modules:
        return missing
    prefix = package + "."
    return any(getattr(getattr(m, "__spec__", None), "_initializing", False)
               for n, m in list(sys.modules.items()) if n == package or n.startswith(prefix))


class ImportGate:
    """Holds a task's import back while the preload is in the package that it enters (and
    the preload's while a task is in one); in place from :meth:`install` to :meth:`close`."""

    def __init__(self):
        self._cond = threading.Condition()
        self._module: str | None = None       # the preload's module in flight
        self._preloader: int | None = None    # its thread
        self._tasks_threads: set[int] = set()  # the threads that wait for it (those there before it)
        self._entered: set[str] = set()       # packages the preload loads modules of, meanwhile
        self._tasks: set[str] = set()         # packages the tasks load modules of, meanwhile
        self._wants: list[str] = []           # the packages the preload is importing, innermost last
        self._preload_waits = False           # for a task's package
        self._tasks_waiting = 0               # tasks waiting for the preload
        self._original = builtins.__import__
        self._finder = _Finder(self)
        self.installed = False

    def install(self) -> None:
        """Put the gate in place (the finder first on ``sys.meta_path``)."""
        if not self.installed:
            self._original = builtins.__import__
            builtins.__import__ = self._import
            sys.meta_path.insert(0, self._finder)
            self.installed = True

    def close(self) -> None:
        """Take the gate away (what another hook put in place after it stays)."""
        if self.installed:
            if builtins.__import__ == self._import:
                builtins.__import__ = self._original
            if self._finder in sys.meta_path:
                sys.meta_path.remove(self._finder)
            self.installed = False

    def begin(self, module: str) -> None:
        """The calling thread (the preload's) starts importing ``module``."""
        self.install()
        with self._cond:
            self._module, self._preloader = module, threading.get_ident()
            self._tasks_threads = {t.ident for t in threading.enumerate()} - {self._preloader}
            self._entered, self._tasks = {module.partition(".")[0]}, set()

    def end(self) -> None:
        """The preload's import is over (done or failed): the tasks waiting for it go on."""
        with self._cond:
            self._module = self._preloader = None
            self._entered, self._tasks, self._wants, self._tasks_threads = set(), set(), [], set()
            self._cond.notify_all()

    @property
    def module(self) -> str | None:
        """The module being preloaded, if any."""
        return self._module

    def after_fork_in_child(self) -> None:
        """The child of a fork has no preload thread: no gate (and a fresh lock)."""
        self._cond = threading.Condition()
        self._module = self._preloader = None
        self._wants, self._tasks_waiting, self._preload_waits, self._tasks_threads = [], 0, False, set()
        self.close()

    # -- the hooks -----------------------------------------------------------------------
    def _import(self, name, globals=None, locals=None, fromlist=(), level=0):
        if self._module is None:
            return self._original(name, globals, locals, fromlist, level)
        package = top_package(name, globals, level)
        if package is None:
            return self._original(name, globals, locals, fromlist, level)
        me = threading.get_ident()
        if me != self._preloader:
            if me in self._tasks_threads and package in self._entered:
                self._task_enters(package, name)
            return self._original(name, globals, locals, fromlist, level)
        try:
            self._preload_enters(package)
            return self._original(name, globals, locals, fromlist, level)
        finally:
            with self._cond:
                if self._wants:
                    self._wants.pop()

    def _loading(self, name: str) -> None:
        """The finder saw a thread load ``name`` (not in ``sys.modules``)."""
        if self._module is None:
            return
        package = name.partition(".")[0]
        with self._cond:
            if threading.get_ident() == self._preloader:
                self._entered.add(package)
            elif package not in self._entered:
                self._tasks.add(package)

    def _busy(self, package: str) -> bool:
        """Whether the preload is in ``package`` now (its own module's: all along)."""
        module = self._module
        return module is not None and (package == module.partition(".")[0]
                                       or (package in self._entered and unfinished(package)))

    def _task_enters(self, package: str, name: str) -> None:
        with self._cond:
            module = self._module
            if module is None or package not in self._entered or not self._busy(package):
                return
            if self._preload_waits or self._preload_wants_ours():
                return                       # the preload waits for us: waiting for it is a deadlock
            log.info("preload: a task imports %s while %s is being preloaded: it waits for that import",
                     name, module)
            self._tasks_waiting += 1
            give_up = time.monotonic() + TASK_PATIENCE
            try:
                while self._module == module and not self._preload_waits and not self._preload_wants_ours():
                    left = give_up - time.monotonic()
                    if left <= 0:        # a wait the gate cannot see the end of: never a hung worker
                        log.warning("preload: a task waited %.0f s for the import of %s (for %s); it goes on",
                                    TASK_PATIENCE, module, name)
                        break
                    self._cond.wait(min(left, 1.0))
            finally:
                self._tasks_waiting -= 1
                self._cond.notify_all()

    def _preload_wants_ours(self) -> bool:
        """Whether the preload is entering a package a task is loading (and would wait on its lock)."""
        return any(p in self._tasks and unfinished(p, missing=False) for p in self._wants)

    def _preload_enters(self, package: str) -> None:
        with self._cond:
            self._wants.append(package)      # (popped when its import returns)
            self._cond.notify_all()          # (a task waiting for us sees what we want)
            if package not in self._tasks or not unfinished(package, missing=False):
                return
            if waits_for(threading.get_ident()):
                return                       # that thread waits for a module we hold: a deadlock
            log.info("preload: importing %s waits for a task's import of %s", self._module, package)
            self._preload_waits = True
            give_up = time.monotonic() + TASK_PATIENCE
            try:
                while self._tasks_waiting == 0 and unfinished(package, missing=False):
                    if waits_for(threading.get_ident()):
                        break                # (Python's own import then sees the cycle and breaks it)
                    if time.monotonic() > give_up:
                        log.warning("preload: importing %s waited %.0f s for a task's import of %s; it goes on",
                                    self._module, TASK_PATIENCE, package)
                        break
                    self._cond.wait(POLL)
            finally:
                self._preload_waits = False


class _Finder:
    """First on ``sys.meta_path`` while the gate is in place: sees who loads what, finds nothing."""

    def __init__(self, gate: ImportGate):
        self.gate = gate

    def find_spec(self, name, path=None, target=None):
        self.gate._loading(name)
        return None

    def invalidate_caches(self) -> None:
        pass

