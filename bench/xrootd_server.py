"""A real xrootd server (Debian's ``xrootd-server``) serving a directory on a free
loopback port, stopped by its pid: for ``bench dimuon --xrootd`` and the tests.

xrootd refuses to run as root, so as root it drops to an unprivileged user (``-R``):
the ``xrootd`` user the Debian package creates, else ``nobody``. The served directory
must be readable by that user.

Example::

    (not run by the tests: it needs the xrootd binary; tests/scenarios/test_nanoaod_over_xrootd.py runs it)
    >>> with XRootDServer("/tmp/served") as server:                  # doctest: +SKIP
    ...     make_chunks(server.url("*.root"))
"""
from __future__ import annotations

import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rhtc.processes import stop_processes
from rhtc.errors import RhtcError


class XRootDUnavailable(RuntimeError, RhtcError):
    """No xrootd binary, or it did not start; the message says what to do. ``crashed``: it
    died of a signal before it listened."""

    crashed = False


def _free_port() -> int:
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in (6379, 1094):
            return port


def _run_as() -> str | None:
    if os.geteuid() != 0:
        return None
    for user in ("xrootd", "nobody"):
        try:
            pwd.getpwnam(user)
            return user
        except KeyError:
            continue
    raise XRootDUnavailable("xrootd refuses to run as root and there is no 'xrootd' or 'nobody' user")


class XRootDServer:
    """``xrootd`` exporting ``root_dir`` as ``/`` on 127.0.0.1:``port`` (a free port)."""

    def __init__(self, root_dir: str | os.PathLike, port: int | None = None, start_timeout: float = 20.0):
        self.root_dir = Path(root_dir).resolve()
        self.port = port or _free_port()
        self.start_timeout = start_timeout
        self.proc: subprocess.Popen | None = None
        self.work = Path(tempfile.mkdtemp(prefix="rhtc-xrootd-"))
        self.work.chmod(0o755)                   # reachable by the unprivileged user
        self.user = _run_as()
        self.log = self.work / "logs" / "xrootd.log"

    def url(self, name: str = "") -> str:
        """``root://127.0.0.1:PORT//name`` (name relative to the served directory)."""
        return f"root://127.0.0.1:{self.port}//{name.lstrip('/')}"

    def start(self, attempts: int = 3) -> "XRootDServer":
        """Start the server and wait until it listens. Debian's xrootd 5.5 now and then dies
        of a signal (SIGSEGV) while it starts, before it logs a line; such a start is tried
        again, up to ``attempts`` times, and said so on stderr. Any other failure is raised."""
        for attempt in range(1, attempts + 1):
            try:
                return self._start_once()
            except XRootDUnavailable as err:
                if not err.crashed:
                    raise
                if attempt == attempts:
                    raise XRootDUnavailable(f"{err} ({attempts} starts, each died of a signal)") from None
                print(f"xrootd: {err}; starting it again ({attempt + 1} of {attempts})", file=sys.stderr)
                self.proc = None
        raise AssertionError("unreachable")

    def _start_once(self) -> "XRootDServer":
        binary = shutil.which("xrootd")
        if binary is None:
            raise XRootDUnavailable("the xrootd server is not installed: apt-get install xrootd-server "
                                    "(Debian/Ubuntu) or dnf install xrootd-server")
        for sub in ("admin", "logs"):
            (self.work / sub).mkdir(exist_ok=True)
            if self.user:
                info = pwd.getpwnam(self.user)
                os.chown(self.work / sub, info.pw_uid, info.pw_gid)
        config = self.work / "xrootd.cfg"
        config.write_text(f"all.export /\noss.localroot {self.root_dir}\n"
                          f"all.adminpath {self.work / 'admin'}\nall.pidpath {self.work / 'admin'}\n")
        cmd = [binary, "-c", str(config), "-p", str(self.port), "-l", str(self.log)]
        if self.user:
            cmd += ["-R", self.user]
        with open(self.work / "stdout", "ab") as out:
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                err = XRootDUnavailable(f"xrootd exited with {self.proc.returncode}: {self.log_tail()}")
                err.crashed = self.proc.returncode < 0          # died of a signal
                raise err
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return self
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise XRootDUnavailable(f"xrootd did not listen on port {self.port} within "
                                f"{self.start_timeout:.0f} s: {self.log_tail()}")

    def log_tail(self, lines: int = 15) -> str:
        text = ""
        for path in (self.work / "stdout", self.log):
            try:
                text += path.read_text(errors="replace")
            except OSError:
                pass
        return "\n".join(text.splitlines()[-lines:]) or "(no log)"

    def kill(self) -> None:
        """SIGKILL the server (a crash), by its pid."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None:
            stop_processes([self.proc])
        self.proc = None

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.work, ignore_errors=True)

    def __enter__(self) -> "XRootDServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()
