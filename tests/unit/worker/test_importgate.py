"""A task beside a preload in flight (worker/preload.py, worker/importgate.py), in one
process with real threads and real packages written to a temporary directory: a task that
enters the package being preloaded waits for it and gets it whole; one that imports
something else goes on while the preload is held; the preload waits for a package a task
is in the middle of; a fork waits for the module in flight. Each import is held by a file
the test creates (progress, not sleeps)."""
from __future__ import annotations

import logging
import os
import sys
import threading

import pytest

from rhtc.worker.preload import Preload
from tests.helpers import wait_until

HOLD = '''
import os, time
open(os.path.join({d!r}, "{name}.entered"), "w").close()
while not os.path.exists(os.path.join({d!r}, "{name}.release")):
    time.sleep(0.01)
'''


def write_package(root, name: str) -> None:
    """A package whose ``__init__`` is held (after ``a``, before ``b``) until released, and
    whose ``b`` and ``c`` import each other: entered at ``c`` while ``__init__`` is held, it
    breaks ("partially initialized module"), as boost_histogram.axis did."""
    d = root / name
    d.mkdir()
    (d / "__init__.py").write_text("from . import a\n" + HOLD.format(d=str(root), name=name)
                                   + "from . import b\nVALUE = b.B\n")
    (d / "a.py").write_text("A = 1\n")
    (d / "b.py").write_text(f"from . import a\nfrom {name} import c\nB = a.A + c.C\n")
    (d / "c.py").write_text(f"import {name}.b as bb\nC = 2\n")


#: seconds between two looks at the threads here (they move in milliseconds)
LOOK = 0.01


@pytest.fixture
def packages(tmp_path):
    """A directory on ``sys.path`` for this test's packages; they leave ``sys.modules`` after."""
    sys.path.insert(0, str(tmp_path))
    released = []

    def release(name):
        (tmp_path / f"{name}.release").touch()
        released.append(name)

    yield tmp_path, release
    for p in tmp_path.glob("*.entered"):                  # nothing stays held
        (tmp_path / p.name.replace(".entered", ".release")).touch()
    sys.path.remove(str(tmp_path))
    for name in [n for n in sys.modules if n.partition(".")[0].startswith("gate_")]:
        del sys.modules[name]


class Task(threading.Thread):
    """A thread that imports ``name`` (as a task does) when told to (:meth:`go`), and keeps
    what came of it. Started before the preload, as the task process's main thread is."""

    def __init__(self, name: str, attr: str):
        super().__init__(daemon=True)
        self.name_, self.attr, self.got, self.error = name, attr, None, None
        self._go = threading.Event()
        self.start()

    def go(self) -> None:
        self._go.set()

    def run(self):
        self._go.wait()
        try:
            __import__(self.name_)
            self.got = getattr(sys.modules[self.name_], self.attr)
        except Exception as err:                   # noqa: BLE001 - the test shows it
            self.error = err


def preload_held(root, name: str) -> Preload:
    """A preload of ``name``, inside its held ``__init__`` now; the task process busy again."""
    preload = Preload([name])
    with preload.idle():
        wait_until((root / f"{name}.entered").exists, 60, f"the preload entering {name}", interval=LOOK)
    return preload


@pytest.mark.timeout(120)
def test_a_task_entering_a_submodule_of_the_package_being_preloaded_waits_and_gets_it_whole(packages, caplog):
    root, release = packages
    write_package(root, "gate_hist")
    caplog.set_level(logging.INFO, logger="rhtc.worker")
    task = Task("gate_hist.c", "C")                    # (unpickling a gate_hist.c.thing does this)
    preload = preload_held(root, "gate_hist")
    task.go()
    wait_until(lambda: "a task imports gate_hist.c while gate_hist is being preloaded" in caplog.text,
               60, "the task waiting for the preload", interval=LOOK)
    release("gate_hist")
    task.join(60)
    assert preload.wait(60) and preload.done == ["gate_hist"], (preload.done, caplog.text)
    assert task.error is None and task.got == 2, task.error
    assert sys.modules["gate_hist"].VALUE == 3


@pytest.mark.timeout(120)
def test_a_task_that_imports_something_else_goes_on_while_the_preload_is_held(packages):
    root, release = packages
    write_package(root, "gate_slow")
    (root / "gate_other.py").write_text("import json\nX = json.dumps([1])\n")
    task = Task("gate_other", "X")
    preload = preload_held(root, "gate_slow")
    task.go()
    task.join(60)                                      # (held for ever without the gate)
    assert not task.is_alive() and task.error is None and task.got == "[1]"
    assert not preload.wait(0) and preload.gate.module == "gate_slow"     # still held meanwhile
    release("gate_slow")
    assert preload.wait(60) and preload.done == ["gate_slow"]


@pytest.mark.timeout(120)
def test_the_preload_waits_for_a_package_that_a_task_is_in_the_middle_of(packages):
    """The other way round: the preloaded module enters (at a submodule) a package that a
    task is importing meanwhile; it waits for the task's import, and both get it whole."""
    root, release = packages
    write_package(root, "gate_numba")
    d = root / "gate_coffea"
    d.mkdir()
    (d / "__init__.py").write_text(HOLD.format(d=str(root), name="gate_coffea")
                                   + "import gate_numba.c\nC = gate_numba.c.C\n")
    task = Task("gate_numba", "VALUE")                 # the task's own import, while the preload is held
    preload = preload_held(root, "gate_coffea")
    task.go()
    wait_until((root / "gate_numba.entered").exists, 60, "the task entering gate_numba", interval=LOOK)
    release("gate_coffea")                             # the preload goes on, to gate_numba.c
    numba = str(root / "gate_numba")
    wait_until(lambda: preload.wait(0) or any(f == "_preload_enters" or path.startswith(numba)  # waits, or in
                                              for f, path in _frames(preload._thread)),         # it (unfixed)
               60, "the preload reaching gate_numba", interval=LOOK)
    release("gate_numba")
    task.join(60)
    assert preload.wait(60) and preload.done == ["gate_coffea"], (preload.done, preload.missing)
    assert task.error is None and task.got == 3, task.error
    assert sys.modules["gate_coffea"].C == 2


@pytest.mark.timeout(120)
def test_the_preload_never_waits_for_a_thread_that_waits_on_a_module_it_holds(packages):
    """A thread the gate does not hold (started after the preload began: a task's own, a
    pool's) is inside ``gate_lib`` and blocked on Python's lock of ``gate_pre.a``, which the
    preload is executing; the preload then imports ``gate_lib``. Waiting for the thread's
    import to finish is waiting for ever (a chaos day's worker hung so: "still importing
    uproot after 80 s", a task of its map never done). Without a preload, Python sees the
    cycle and hands the preload ``gate_lib`` half-initialized: both finish."""
    from importlib import _bootstrap
    root, release = packages
    pre, lib = root / "gate_pre", root / "gate_lib"
    pre.mkdir(), lib.mkdir()
    (pre / "__init__.py").write_text("from . import a\nVALUE = a.V\n")
    (pre / "a.py").write_text(HOLD.format(d=str(root), name="gate_pre_a") + "import gate_lib\nV = 1\n")
    (lib / "__init__.py").write_text(HOLD.format(d=str(root), name="gate_lib") + "import gate_pre.a\nL = 2\n")
    preload = Preload(["gate_pre"])
    with preload.idle():
        wait_until((root / "gate_pre_a.entered").exists, 60, "the preload inside gate_pre.a", interval=LOOK)
        task = Task("gate_lib", "L")                   # (started after the preload: not held by the gate)
        task.go()
        wait_until((root / "gate_lib.entered").exists, 60, "the thread entering gate_lib", interval=LOOK)
        release("gate_lib")
        wait_until(lambda: task.ident in _bootstrap._blocking_on, 60,
                   "the thread blocked on the lock of gate_pre.a", interval=LOOK)
        release("gate_pre_a")                          # the preload goes on, to import gate_lib
        assert preload.wait(30), "the preload waits for a thread that waits for it"
    task.join(30)
    assert not task.is_alive() and task.error is None and task.got == 2, task.error
    assert preload.done == ["gate_pre"] and sys.modules["gate_pre"].VALUE == 1


@pytest.mark.timeout(120)
def test_a_thread_that_the_preloaded_module_starts_and_waits_for_is_not_held(packages):
    """(Only the threads that were there before the module began wait for it: the module's
    own could be waited for by it.)"""
    root, _ = packages
    d = root / "gate_spawn"
    d.mkdir()
    (d / "a.py").write_text("A = 1\n")
    (d / "__init__.py").write_text("import threading\n"
                                   "t = threading.Thread(target=__import__, args=('gate_spawn.a', None, None, ['A']))\n"
                                   "t.start(); t.join()\nA = a.A\n")
    preload = Preload(["gate_spawn"])
    with preload.idle():
        assert preload.wait(60), "the preload waited for its own thread, which waited for it"
    assert preload.done == ["gate_spawn"] and sys.modules["gate_spawn"].A == 1


@pytest.mark.timeout(120)
@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded")
def test_a_fork_in_a_task_waits_for_the_module_in_flight(packages):
    """A child forked while the preload thread held a module's lock would hang importing it."""
    root, release = packages
    write_package(root, "gate_fork")
    preload = preload_held(root, "gate_fork")
    pid = []

    def fork():
        child = os.fork()
        if child == 0:                     # the child: import what was in flight, or say it hangs
            threading.Timer(30, os._exit, (7,)).start()
            import gate_fork               # noqa: F401
            os._exit(0)
        pid.append(child)

    forker = threading.Thread(target=fork, daemon=True)
    forker.start()
    wait_until(lambda: "_before_fork" in dict(_frames(forker)), 60, "the fork waiting for the preload", interval=LOOK)
    release("gate_fork")
    forker.join(60)
    _, status = os.waitpid(pid[0], 0)
    assert os.waitstatus_to_exitcode(status) == 0, "the forked child hung importing gate_fork"
    assert preload.wait(60)


def _frames(thread: threading.Thread) -> list[tuple[str, str]]:
    """What ``thread`` runs now: (function, file) from the innermost out."""
    frame, names = sys._current_frames().get(thread.ident), []
    while frame is not None:
        names.append((frame.f_code.co_name, frame.f_code.co_filename))
        frame = frame.f_back
    return names
