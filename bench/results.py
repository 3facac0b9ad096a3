"""The envelope of a benchmark's JSON result: when, where, from which code and by which
command the figures were measured, around the bench's own figures. Every bench's ``--json``
writes through :func:`write`; the documentation's benchmark page (``docs/benchmarks.md``,
generated from ``docs/benchmarks/results/*.json``) reads the envelope, and :func:`figures`
gives a reader the figures of a file with or without one (files written before it).

    >>> doc = envelope("overhead", {"tasks_per_s": 30414.0}, command="bench overhead --workers 2")
    >>> sorted(doc)
    ['bench', 'command', 'commit', 'date', 'dirty', 'figures', 'machine']
    >>> figures(doc) == {"tasks_per_s": 30414.0} == figures({"tasks_per_s": 30414.0})
    True
"""
from __future__ import annotations

import datetime
import json
import os
import platform
import shlex
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

#: the keys of an envelope besides the figures (a file with all of them is one)
ENVELOPE = ("bench", "date", "machine", "commit", "command")
_REPO = Path(__file__).resolve().parent.parent


def machine() -> dict[str, Any]:
    """The machine the figures were measured on: hostname, cores, memory, CPU model."""
    model = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        import psutil
        memory = psutil.virtual_memory().total
    except ImportError:  # pragma: no cover - psutil is a dependency
        memory = None
    return {"hostname": socket.gethostname(), "cores": os.cpu_count(), "memory_bytes": memory,
            "cpu_model": model, "system": f"{platform.system()} {platform.release()}",
            "python": platform.python_version()}


def commit(repo: Path = _REPO) -> tuple[str | None, bool]:
    """The checked-out commit of ``repo`` and whether its tracked files differ from it
    ((None, False) outside a git checkout, e.g. an installed wheel)."""
    try:
        sha = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True,
                             timeout=10).stdout.strip() or None
        dirty = bool(sha) and bool(subprocess.run(["git", "-C", str(repo), "status", "--porcelain",
                                                   "--untracked-files=no"], capture_output=True, text=True,
                                                  timeout=10).stdout.strip())
    except (OSError, subprocess.SubprocessError):
        return None, False
    return sha, dirty


def command_line(argv: list[str] | None = None) -> str:
    """The command as the user would type it again: ``bench overhead --tasks 500``."""
    argv = list(sys.argv if argv is None else argv)
    prog = Path(argv[0]).name if argv else "bench"
    if prog in ("__main__.py", "cli.py", "-c", "") or prog.endswith(".py"):
        prog = "bench"
    return shlex.join([prog, *argv[1:]])


def envelope(bench: str, figures: dict, command: str | None = None, series: str | None = None) -> dict[str, Any]:
    """``figures`` of bench ``bench`` in their envelope (date in UTC, machine, commit); with
    ``series``, the setting of the bench they belong to (the benchmarks page shows the
    newest result of each series: ``bench scale --curve``'s beside ``bench scale``'s)."""
    sha, dirty = commit()
    return {"bench": bench, "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "machine": machine(), "commit": sha, "dirty": dirty,
            "command": command if command is not None else command_line(), "figures": figures,
            **({"series": series} if series else {})}


def write(path: str | os.PathLike, bench: str, figures: dict, series: str | None = None,
          **json_options) -> dict[str, Any]:
    """Write ``figures`` in their envelope to ``path`` (atomically: a reader never sees half
    a file); returns the document written."""
    doc = envelope(bench, figures, series=series)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(doc, indent=json_options.pop("indent", 2), **json_options))
    os.replace(tmp, path)
    return doc


def figures(doc: dict) -> dict:
    """The bench's own figures of a result, whether it has an envelope or not."""
    return doc["figures"] if isinstance(doc, dict) and all(k in doc for k in ENVELOPE) and "figures" in doc else doc


def read(path: str | os.PathLike) -> dict:
    """The whole result file ``path``: the figures in their envelope (if it has one)."""
    return json.loads(Path(path).read_text())


def load(path: str | os.PathLike) -> dict:
    """The figures of the result file ``path`` (see :func:`figures`)."""
    return figures(read(path))
