"""Small helpers shared by the test pools: commands, packages, mounts, processes."""
from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Iterable, Sequence


class PoolUnavailable(RuntimeError):
    """The pool cannot be brought up on this machine (the tests skip with this reason)."""


class DaemonDied(RuntimeError):
    """A pool's daemon exited while starting: a bug in the set-up, so the tests error
    (never skip), at once and with the daemon's output."""


def run(cmd: Sequence[str], *, check: bool = True, timeout: float | None = 600,
        env: dict | None = None, cwd: str | os.PathLike | None = None,
        input: str | None = None) -> subprocess.CompletedProcess:
    """Run a command, capture its output, raise with the output's tail if it fails."""
    proc = subprocess.run(list(cmd), capture_output=True, text=True, timeout=timeout, env=env,
                          cwd=cwd, input=input)
    if check and proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-25:])
        raise subprocess.CalledProcessError(proc.returncode, list(cmd), proc.stdout,
                                            proc.stderr or tail) from RuntimeError(tail)
    return proc


def describe(err: BaseException) -> str:
    if isinstance(err, subprocess.CalledProcessError):
        out = ((err.stdout or "") + (err.stderr or "")).strip().splitlines()[-15:]
        return f"`{' '.join(map(str, err.cmd))}` exited {err.returncode}:\n" + "\n".join(out)
    return f"{type(err).__name__}: {err}"


def require_root(what: str) -> None:
    if os.name != "posix" or not Path("/proc/self/mountinfo").exists():
        raise PoolUnavailable(f"{what} needs Linux")
    if os.geteuid() != 0:
        raise PoolUnavailable(f"{what} needs root (chroot, mounts, daemons); run the tests as root")


_apt_updated = False


def ensure_debian_packages(packages: Iterable[str], commands: Iterable[str]) -> None:
    """``apt-get install`` the packages unless every command is already on PATH."""
    global _apt_updated
    if all(shutil.which(c) or Path(c).exists() for c in commands):
        return
    if not shutil.which("apt-get"):
        raise PoolUnavailable(f"{', '.join(commands)} missing and no apt-get to install "
                              f"{' '.join(packages)}")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    # another session (or unattended-upgrades) may hold dpkg's lock: wait for it
    lock = ["-o", "DPkg::Lock::Timeout=600"]
    cmd = ["apt-get", *lock, "install", "-y", "-q", "--no-install-recommends", *packages]
    for attempt in range(2):
        proc = run(cmd, check=False, env=env, timeout=900)
        if proc.returncode == 0:
            return
        if _apt_updated or attempt:
            break
        run(["apt-get", *lock, "update", "-q"], check=False, env=env, timeout=600)
        _apt_updated = True
    raise PoolUnavailable(f"cannot install {' '.join(packages)} with apt-get:\n"
                          + "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-10:]))


def free_port() -> int:
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port != 6379:
            return port


# --- mounts ----------------------------------------------------------------------
def _unescape(field: str) -> str:
    return field.replace("\\040", " ").replace("\\011", "\t").replace("\\012", "\n").replace("\\134", "\\")


def mounts_under(root: str | os.PathLike) -> list[str]:
    """Mount points at or below ``root``, deepest first."""
    root = os.path.realpath(root)
    points = []
    with open("/proc/self/mountinfo") as fh:
        for line in fh:
            point = _unescape(line.split()[4])
            if point == root or point.startswith(root.rstrip("/") + "/"):
                points.append(point)
    return sorted(set(points), key=lambda p: p.count("/"), reverse=True)


def unmount_all(root: str | os.PathLike) -> None:
    """Unmount everything at or below ``root``; lazily if a mount is busy."""
    for _ in range(3):
        points = mounts_under(root)
        if not points:
            return
        for point in points:
            if run(["umount", point], check=False).returncode != 0:
                run(["umount", "-l", point], check=False)
    left = mounts_under(root)
    if left:
        raise RuntimeError(f"could not unmount {left}")


def safe_rmtree(path: str | os.PathLike) -> None:
    """``rm -rf`` that refuses to descend into anything still mounted (a bound /dev, a repo)."""
    path = Path(path)
    if not path.exists():
        return
    unmount_all(path)
    if mounts_under(path):
        raise RuntimeError(f"refusing to delete {path}: something is still mounted below it")
    shutil.rmtree(path)


def bind(source: str | os.PathLike, target: str | os.PathLike, *, readonly: bool = False,
         recursive: bool = False) -> None:
    Path(target).mkdir(parents=True, exist_ok=True)
    run(["mount", "--rbind" if recursive else "--bind", str(source), str(target)])
    if recursive:
        run(["mount", "--make-rslave", str(target)], check=False)
    if readonly:
        run(["mount", "-o", "remount,bind,ro", str(target)])


# --- processes -------------------------------------------------------------------
def _ppid(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return int(fh.read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def all_pids() -> list[int]:
    return [int(p) for p in os.listdir("/proc") if p.isdigit()]


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (children, grandchildren...)."""
    children: dict[int, list[int]] = {}
    for p in all_pids():
        parent = _ppid(p)
        if parent is not None:
            children.setdefault(parent, []).append(p)
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def pids_rooted_in(root: str | os.PathLike) -> list[int]:
    """Processes whose root directory is ``root`` (they were started inside that chroot)."""
    root = os.path.realpath(root)
    found = []
    for p in all_pids():
        try:
            if os.path.realpath(os.readlink(f"/proc/{p}/root")) == root and p != os.getpid():
                found.append(p)
        except OSError:
            continue
    return found


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a zombie is dead for our purposes
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def terminate(pids: Iterable[int], *, grace: float = 10.0, sig: int = signal.SIGTERM,
              popen: subprocess.Popen | None = None) -> None:
    """Send ``sig`` to each pid, wait up to ``grace`` s, then SIGKILL the ones still alive."""
    pids = [p for p in pids if p and alive(p)]
    for p in pids:
        try:
            os.kill(p, sig)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        if popen is not None:
            popen.poll()
        if not any(alive(p) for p in pids):
            return
        time.sleep(0.1)
    for p in pids:
        if alive(p):
            try:
                os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                pass
    if popen is not None:
        try:
            popen.wait(5)
        except subprocess.TimeoutExpired:
            pass


def wait_for(predicate, timeout: float, interval: float = 0.5, what: str = "condition"):
    """Poll ``predicate()`` until it returns something truthy; raise TimeoutError after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    last_err = None
    while True:
        try:
            value = predicate()
            if value:
                return value
        except DaemonDied:
            raise           # waiting longer cannot help
        except Exception as err:  # noqa: BLE001 - report the last one on timeout
            last_err = err
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}"
                               + (f" (last error: {last_err})" if last_err else ""))
        time.sleep(interval)


def pids_with_env(name: str, value: str) -> list[int]:
    """Processes whose environment has ``name=value`` (e.g. the jobs and steps of one test cluster)."""
    needle = f"{name}={value}".encode()
    found = []
    for p in all_pids():
        if p == os.getpid():
            continue
        try:
            with open(f"/proc/{p}/environ", "rb") as fh:
                if needle in fh.read().split(b"\0"):
                    found.append(p)
        except OSError:
            continue
    return found
