"""User code cannot crash the machinery: exceptions that cannot be formatted or pickled,
tasks that start processes, results too big for Redis, and a task that hangs in a small
map. Real redis-server, real worker processes."""
from __future__ import annotations

import os
import signal
import threading
import time

import psutil
import pytest

from rhtc.broker.storage import Storage
from rhtc.client import RemoteError, remote_map
from rhtc.client.api import submit
from tests.helpers import big_result, wait_until


def _status(storage: Storage, name: str):
    return next((w for w in storage.pool.worker_statuses(queue_depths=False) if w.name == name), None)


# -- exceptions that cannot be formatted or pickled -------------------------------------
class StrRaises(Exception):
    def __str__(self):
        raise RuntimeError("__str__ exploded")


class ReduceRaises(ValueError):
    def __reduce__(self):
        raise TypeError("no pickling for you")


class NeedsTwoArgs(Exception):
    """Pickles, but does not load back (its __init__ wants two arguments)."""

    def __init__(self, a, b):
        super().__init__(f"{a}-{b}")


class BaseStrRaises(BaseException):
    def __str__(self):
        raise SystemExit("a __str__ that raises a BaseException")


def raise_odd(i):
    if i == 0:
        raise StrRaises("hidden")
    if i == 1:
        raise ReduceRaises("reduce")
    if i == 2:
        raise KeyError(threading.Lock())            # args that cannot be pickled
    if i == 3:
        raise NeedsTwoArgs("x", "y")
    if i == 4:
        raise BaseStrRaises()
    return i


def test_unformattable_and_unpicklable_exceptions_come_back_as_remote_errors(broker, storage, workers):
    (name,) = workers.start(1)
    # the first heartbeat may come before the task process is up: wait for the one naming it
    pid = wait_until(lambda: (_status(storage, name) or None) and _status(storage, name).task_pid, 30,
                     "the worker's heartbeat naming its task process")
    out = remote_map(raise_odd, range(6), broker=broker.config, progress=False, errors="return")
    assert out[5] == 5
    errs = out[:5]
    assert all(isinstance(e, RemoteError) for e in errs), out
    assert [e.remote_type for e in errs] == ["StrRaises", "ReduceRaises", "KeyError", "NeedsTwoArgs",
                                             "BaseStrRaises"]
    assert all(e.worker == name for e in errs)
    assert "could not be formatted" in errs[0].message and "raise_odd" in errs[0].remote_traceback
    assert errs[1].message == "reduce" and "could not be pickled" in errs[1].remote_traceback
    assert "could not be pickled" in errs[2].remote_traceback
    assert errs[3].message == "x-y" and "could not be pickled" in errs[3].remote_traceback
    assert "could not be formatted" in errs[4].message and "raise_odd" in errs[4].remote_traceback
    status = _status(storage, name)
    assert status.crashes == 0 and status.task_pid == pid          # the task process went on
    assert remote_map(abs, [-3], broker=broker.config, progress=False) == [3]


# -- tasks that start processes ---------------------------------------------------------
def pool_square(x):
    import multiprocessing
    with multiprocessing.Pool(2) as pool:
        return sum(pool.map(abs, [-x, -x]))


def spawn_pool_square(x):
    import multiprocessing
    with multiprocessing.get_context("spawn").Pool(1) as pool:    # starts a resource tracker too
        return sum(pool.map(abs, [-x, -x]))


def executor_square(x):
    from concurrent.futures import ProcessPoolExecutor
    with ProcessPoolExecutor(2) as ex:
        return sum(ex.map(abs, [-x, -x]))


def leave_children(path):
    """Starts a Pool it never closes and a grandchild that outlives its parent."""
    import multiprocessing
    import subprocess
    import sys
    pool = multiprocessing.Pool(2)
    pool.map(abs, [1, 2])
    globals()["_kept"] = pool
    p = subprocess.Popen([sys.executable, "-c", "import os, subprocess, sys, time; "
                          "c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)']); "
                          "print(c.pid, flush=True); os._exit(0)"], stdout=subprocess.PIPE)
    grandchild = int(p.stdout.readline())
    p.wait()
    pids = [w.pid for w in pool._pool] + [grandchild]
    with open(path, "w") as f:
        f.write(" ".join(map(str, pids)))
    return len(pids)


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


@pytest.fixture
def pid_files():
    """The files in which a test's tasks write the pids of the processes they start. Whatever
    the test's outcome, none of those outlives it: one still running at teardown (the worker did
    not stop it, so the test failed) is killed by its pid; a pid reused since is left alone."""
    files: list = []
    yield files
    for path in files:
        if not path.exists():
            continue
        written = path.stat().st_mtime
        for pid in map(int, path.read_text().split()):
            try:
                proc = psutil.Process(pid)
                if proc.create_time() <= written + 1 and proc.status() != psutil.STATUS_ZOMBIE:
                    proc.kill()
            except psutil.Error:
                pass


def test_tasks_may_use_process_pools_and_their_leftovers_are_stopped(broker, storage, workers, tmp_path,
                                                                     pid_files):
    (name,) = workers.start(1)
    supervisor = workers.procs[name].pid
    # the first heartbeat may come before the task process is up: wait for the one naming it
    task_pid = wait_until(lambda: (_status(storage, name) or None) and _status(storage, name).task_pid, 30,
                          "the worker's heartbeat naming its task process")
    assert remote_map(pool_square, [3, 4], broker=broker.config, progress=False) == [6, 8]
    assert remote_map(executor_square, [5], broker=broker.config, progress=False) == [10]
    path = tmp_path / "pids"
    pid_files.append(path)
    assert remote_map(leave_children, [str(path)], broker=broker.config, progress=False) == [3]
    pids = [int(p) for p in path.read_text().split()]
    assert all(_gone(p) for p in pids), [(p, _gone(p)) for p in pids]
    assert psutil.Process(task_pid).children(recursive=True) == []
    status = _status(storage, name)
    assert status.crashes == 0 and status.task_pid == task_pid and status.pid == supervisor
    assert "left 3 child process(es) running; stopped them" in workers.log(name)
    assert remote_map(pool_square, [1], broker=broker.config, progress=False) == [2]
    for _ in range(2):      # the spawn context's resource tracker, stopped after a task, comes back
        assert remote_map(spawn_pool_square, [2], broker=broker.config, progress=False, timeout=120) == [4]


# The child's reset of its signal handlers made slow (0.5 s per handler): a SIGTERM sent
# right after the fork lands inside it, every time, as one sent by a pool stopped right after
# it forked a worker did by chance in CI (the task never ended).
_SIGTERM_DURING_THE_FORK = """
import os, signal, sys, time
from rhtc.worker.children import default_signals_in_children

def hand_back(signum, frame):          # the task process's own SIGTERM handler
    os.write(1, b"the task process's hand-back ran in the child\\n")
    raise RuntimeError("hand-back")

signal.signal(signal.SIGTERM, hand_back)
default_signals_in_children()
real = signal.signal
def slow(sig, handler):
    time.sleep(0.5)
    return real(sig, handler)
signal.signal = slow
pid = os.fork()
if pid == 0:
    while True:
        time.sleep(0.05)
signal.signal = real
os.kill(pid, signal.SIGTERM)
for _ in range(200):
    done, status = os.waitpid(pid, os.WNOHANG)
    if done:
        break
    time.sleep(0.05)
else:
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    sys.exit("the child caught its SIGTERM and ran on")
print("the child ended by", signal.Signals(os.WTERMSIG(status)).name if os.WIFSIGNALED(status) else status)
"""


@pytest.mark.heavy       # forks a process of its own
def test_a_sigterm_that_reaches_a_tasks_child_inside_its_fork_ends_it():
    import subprocess
    import sys
    done = subprocess.run([sys.executable, "-c", _SIGTERM_DURING_THE_FORK], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip() == "the child ended by SIGTERM", done.stdout + done.stderr


def linger(path):
    """Starts a child that ignores SIGTERM, then runs until the worker stops."""
    import subprocess
    import sys
    c = subprocess.Popen([sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, "
                          "signal.SIG_IGN); print('ready', flush=True); time.sleep(300)"], stdout=subprocess.PIPE)
    c.stdout.readline()
    with open(path, "w") as f:
        f.write(str(c.pid))
    time.sleep(300)


def test_the_children_of_a_task_stop_with_the_worker(broker, storage, workers, tmp_path, pid_files):
    (name,) = workers.start(1)
    path = tmp_path / "pid"
    pid_files.append(path)
    handle = submit(linger, [str(path)], broker=broker.config, errors="return")
    try:
        wait_until(lambda: path.exists() and path.read_text(), 30, "the task's child")
        child = int(path.read_text())
        workers.signal(name, signal.SIGTERM)
        assert workers.procs[name].wait(60) == 0
        wait_until(lambda: _gone(child), 10, f"child {child} to stop")
    finally:
        handle.cancel()


# -- results too big for Redis ----------------------------------------------------------
def test_a_result_over_the_brokers_bulk_limit_is_refused_and_the_worker_goes_on(broker, storage, workers):
    storage.r.config_set("proto-max-bulk-len", 1024 * 1024)      # the smallest Redis allows
    (name,) = workers.start(1, env={"RHTC_MAX_RESULT_BYTES": str(100 * 1024 * 1024)})
    out = remote_map(big_result, [3 * 1024 * 1024, 10], broker=broker.config, progress=False,
                     errors="return", timeout=120)
    err = out[0]
    assert isinstance(err, RemoteError) and err.remote_type == "ResultTooLarge", out
    assert "proto-max-bulk-len of 1.0 MiB" in err.message and "CONFIG SET proto-max-bulk-len" in err.message
    assert "3.0 MiB" in err.message and err.worker == name
    assert isinstance(out[1], bytes) and len(out[1]) == 10
    assert remote_map(abs, [-7], broker=broker.config, progress=False, timeout=60) == [7]
    assert _status(storage, name).crashes == 0


def test_the_default_limit_is_stated_in_mib(broker, storage, workers):
    (name,) = workers.start(1, env={"RHTC_MAX_RESULT_BYTES": str(1024 * 1024)})
    (err,) = remote_map(big_result, [2 * 1024 * 1024], broker=broker.config, progress=False, errors="return")
    assert err.remote_type == "ResultTooLarge"
    assert "over the limit of 1.0 MiB (RHTC_MAX_RESULT_BYTES)" in err.message and "MB" not in err.message


# -- a task that hangs in a small map --------------------------------------------------
def hang_once(arg):
    """Hangs for good the first time it runs (a stalled read); a second copy returns."""
    marker, value = arg
    if marker:
        try:
            fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            return value
        os.close(fd)
        time.sleep(600)
    return value


def hang_always(arg):
    marker, value = arg
    if marker:
        time.sleep(600)
    return value


def test_a_hung_task_in_a_two_task_map_is_backed_up_after_task_timeout(broker, storage, workers, tmp_path):
    workers.start(2)
    marker = str(tmp_path / "hung")
    # stragglers=None: only the task_timeout bound can save this map
    out = remote_map(hang_once, [(marker, "a"), ("", "b")], broker=broker.config, progress=False,
                     stragglers=None, task_timeout=2, timeout=90)
    assert out == ["a", "b"]


def test_a_task_that_hangs_everywhere_fails_naming_worker_chunk_and_time(broker, storage, workers):
    names = workers.start(2)
    out = remote_map(hang_always, [("hang", 1), ("", 2)], broker=broker.config, progress=False,
                     stragglers=None, task_timeout=2, errors="return", timeout=90)
    err = out[0]
    assert out[1] == 2
    assert isinstance(err, RemoteError) and err.remote_type == "TaskTimeout", out
    assert err.worker in names and err.worker in err.message
    assert "task_timeout=2 s" in err.message and "backup copy on another worker" in err.message
    assert "'hang'" in err.argument


def test_the_straggler_rule_backs_up_a_hung_task_when_one_task_has_finished(broker, storage, workers,
                                                                               tmp_path):
    workers.start(2)
    marker = str(tmp_path / "hung")
    out = remote_map(hang_once, [(marker, "a"), ("", "b")], broker=broker.config, progress=False, timeout=90)
    assert out == ["a", "b"]


@pytest.mark.parametrize("bad", [0, -1, "5", float("nan"), True])
def test_task_timeout_must_be_positive_seconds(broker, bad):
    with pytest.raises(ValueError, match="task_timeout="):
        remote_map(abs, [1], broker=broker.config, progress=False, task_timeout=bad)


def start_child_and_die(path):
    """Leaves a child that ignores SIGTERM, then kills its own task process."""
    import subprocess
    import sys
    c = subprocess.Popen([sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, "
                          "signal.SIG_IGN); print('ready', flush=True); time.sleep(300)"], stdout=subprocess.PIPE)
    c.stdout.readline()
    with open(path, "a") as f:
        f.write(f"{c.pid}\n")
    os._exit(7)


def test_the_children_of_a_task_process_that_died_are_stopped_by_the_supervisor(broker, storage, workers,
                                                                                tmp_path, pid_files):
    (name,) = workers.start(1)
    supervisor = workers.procs[name].pid
    path = tmp_path / "pids"
    pid_files.append(path)
    (err,) = remote_map(start_child_and_die, [str(path)], broker=broker.config, progress=False,
                        errors="return", timeout=120)
    assert isinstance(err, RemoteError) and err.remote_type == "WorkerLost"
    pids = [int(p) for p in path.read_text().split()]
    assert len(pids) == 3                          # one per attempt
    wait_until(lambda: all(_gone(p) for p in pids), 15, f"children {pids} to stop")
    assert psutil.Process(supervisor).is_running() and _status(storage, name).pid == supervisor
    assert "stopped 1 process(es) left by its task process" in workers.log(name)


def test_a_result_over_the_brokers_query_buffer_limit_names_it(broker, storage, workers):
    storage.r.config_set("client-query-buffer-limit", 1024 * 1024)
    (name,) = workers.start(1, env={"RHTC_MAX_RESULT_BYTES": str(100 * 1024 * 1024)})
    (err,) = remote_map(big_result, [2 * 1024 * 1024], broker=broker.config, progress=False,
                        errors="return", timeout=120)
    assert err.remote_type == "ResultTooLarge" and "client-query-buffer-limit of 1.0 MiB" in err.message
    assert remote_map(abs, [-7], broker=broker.config, progress=False, timeout=60) == [7]


def test_the_coffea_executor_takes_task_timeout(broker):
    pytest.importorskip("coffea")
    from rhtc.client.coffea import RedisExecutor
    with pytest.raises(ValueError, match="task_timeout=-1"):
        RedisExecutor(broker=broker.config, task_timeout=-1, status=False)([1, 2], abs, None)


def test_a_result_refused_by_a_broker_whose_limits_cannot_be_read_does_not_wedge(broker, storage, workers):
    storage.r.config_set("proto-max-bulk-len", 1024 * 1024)
    storage.r.execute_command("ACL", "SETUSER", "default", "-config")      # the workers cannot read it
    (name,) = workers.start(1, env={"RHTC_MAX_RESULT_BYTES": str(100 * 1024 * 1024)})
    (err,) = remote_map(big_result, [2 * 1024 * 1024], broker=broker.config, progress=False,
                        errors="return", timeout=120)
    assert err.remote_type == "ResultTooLarge" and "refused the 2.0 MiB result 3 times" in err.message
    assert "proto-max-bulk-len" in err.message and err.worker == name
    assert remote_map(abs, [-7], broker=broker.config, progress=False, timeout=60) == [7]


def test_imap_unordered_and_submit_take_task_timeout_a_lone_worker_reports_it(broker, storage, workers):
    from rhtc.client import imap_unordered
    (name,) = workers.start(1)
    got = {r.index: r for r in imap_unordered(hang_always, [("hang", 1)], broker=broker.config,
                                              stragglers=None, task_timeout=1)}
    err = got[0].error
    assert isinstance(err, RemoteError) and err.remote_type == "TaskTimeout" and err.worker == name
    assert "no other worker was free to run a backup copy" in err.message
    with pytest.raises(ValueError, match="task_timeout="):
        submit(abs, [1], broker=broker.config, task_timeout=0)
