"""Side by side with other code: a bench run here and with a git revision, in turns, in one
run (these machines are shared and noisy: two runs an hour apart compare the hour, not
the code). ``bench overhead --against REF`` and ``bench scale --against REF`` use it.

The revision is checked out into a temporary git worktree (removed afterwards) and run
from there with its own code (``python -m rhtc.bench ...`` with the worktree first on
the path: ``rhtc/_checkout.py`` maps its folders); this checkout runs the same command
the same way, so both pay the same start-up. The bench's own files named by the caller
(``overlay``: the measuring harness, e.g. ``bench/overhead.py`` and ``bench/profile.py``)
are this checkout's on both sides, so both are measured the same way and only the code
under test differs. A harness file that imports a module the revision does not have (a
revision from before the module moved: ``bench/floor.py`` reads the frames through
``broker/wire/``, which older revisions keep in ``broker/``) is left as the revision's own,
and the bench says so. Each run writes its figures as JSON; the caller gets them back,
``rounds`` per side, alternating (ours, theirs, ours, theirs...).
"""
from __future__ import annotations

import ast
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Iterator

import click

from . import results

_ROOT = Path(__file__).resolve().parent.parent


def _checkout_root() -> Path:
    """The git checkout this code runs from; a clear error when it is an installed package."""
    if not (_ROOT / "rhtc" / "_checkout.py").exists() or not (_ROOT / ".git").exists():
        raise click.UsageError(f"--against needs a git checkout of redis-htcondor; this code runs from "
                               f"{_ROOT}, an installed package. Run the bench from a clone.")
    return _ROOT


@contextlib.contextmanager
def worktree(ref: str, overlay: tuple[str, ...] = ()) -> Iterator[Path]:
    """A temporary worktree of ``ref`` (a commit, tag or branch of this checkout), with
    the files ``overlay`` (paths from the checkout's root) copied from this checkout."""
    root = _checkout_root()
    where = Path(tempfile.mkdtemp(prefix="rhtc-against-"))
    got = subprocess.run(["git", "-C", str(root), "worktree", "add", "--detach", str(where), ref],
                         capture_output=True, text=True)
    if got.returncode:
        where.rmdir()
        raise click.UsageError(f"--against {ref}: git could not check it out: {got.stderr.strip()}")
    try:
        for name in overlay:
            lacking = missing_imports(root / name, where)
            if lacking:
                click.echo(f"  {ref} keeps its own {name}: this checkout's imports {', '.join(lacking)}, "
                           "which that revision does not have", err=True)
            else:
                shutil.copyfile(root / name, where / name)
        yield where
    finally:
        subprocess.run(["git", "-C", str(root), "worktree", "remove", "--force", str(where)], capture_output=True)


def missing_imports(path: Path, root: Path) -> list[str]:
    """The project modules that ``path`` (a file of this checkout) imports relatively and
    the checkout at ``root`` does not have, as paths from its root (``broker/wire/keys.py``).
    Read from the source; only the module's own ``from .x import`` and ``from ..x.y import``
    lines count (an import inside a function runs only if the bench takes that path).

    >>> import tempfile
    >>> top = Path(tempfile.mkdtemp()); (top / "bench").mkdir(); (top / "broker").mkdir()
    >>> _ = (top / "broker" / "keys.py").write_text("")
    >>> f = top / "bench" / "h.py"
    >>> _ = f.write_text("from ..broker.keys import Keys\\nfrom ..broker.wire import protocol\\nfrom . import results")
    >>> missing_imports(f, top)
    ['broker/wire']
    """
    folder = path.resolve().parent.relative_to(_ROOT) if path.resolve().is_relative_to(_ROOT) else Path(path.parent.name)
    lacking = []
    for node in ast.parse(path.read_text(), str(path)).body:
        if not isinstance(node, ast.ImportFrom) or not node.level:
            continue
        base = folder.parents[node.level - 2] if node.level > 1 else folder
        parts = base.parts if str(base) != "." else ()
        module = Path(*parts, *(node.module.split(".") if node.module else ()))
        names = [module / a.name for a in node.names] if node.module is None else [module]
        for m in names:
            if not ((root / m).with_suffix(".py").exists() or (root / m / "__init__.py").exists()):
                if node.module is None and (root / module).exists():
                    continue                       # (``from . import x``: x may be a name, not a module)
                lacking.append(str(m))
    return sorted(set(lacking))


def run_bench(root: Path, args: list[str]) -> dict:
    """``python -m rhtc.bench <args> --json F`` with the code of ``root``; its figures."""
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as fh:
        out = fh.name
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(root)
    try:
        got = subprocess.run([sys.executable, "-m", "rhtc.bench", *args, "--json", out], cwd=str(root), env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if got.returncode:
            raise click.ClickException(f"bench {' '.join(args)} with the code of {root} failed "
                                       f"(exit {got.returncode}): {got.stderr.strip()[-2000:]}")
        with open(out) as fh:
            return results.figures(json.load(fh))
    finally:
        os.unlink(out)


def side_by_side(ref: str, args: list[str], rounds: int,
                 overlay: tuple[str, ...] = ()) -> tuple[list[dict], list[dict]]:
    """(ours, theirs): ``rounds`` runs of ``bench <args>`` each, alternating, ours first."""
    ours, theirs = [], []
    with worktree(ref, overlay) as there:
        for k in range(rounds):
            click.echo(f"  round {k + 1} of {rounds}: this checkout, then {ref}", err=True)
            ours.append(run_bench(_checkout_root(), args))
            theirs.append(run_bench(there, args))
    return ours, theirs
