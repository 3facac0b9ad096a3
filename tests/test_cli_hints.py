"""Every ``rhtc ...`` command that a message of the package tells the analyst to run
exists, with the options it names (issue 29, item 6: ``rhtc pool stop`` for a pool that
does not exist pointed to ``rhtc pool status``, which is "No such command"). The test
walks click's command tree: ``rhtc``'s own commands, and the ones it hands on to
``python -m rhtc.worker`` and ``python -m rhtc.condor``."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import click
import pytest

import rhtc
from rhtc.client.ops.cli import main as rhtc_main
from rhtc.condor.__main__ import main as condor_main
from rhtc.worker.cli import main as worker_main

ROOT = Path(rhtc.__file__).resolve().parent.parent
FOLDERS = ("broker", "client", "condor", "worker", "bench", "rhtc")
#: the commands `rhtc` hands on to another command line (os.execv in client/ops/cli.py)
HANDED_ON = {"worker": worker_main, "submit": condor_main.commands["submit"], "pool": condor_main.commands["pool"],
             "pack": condor_main.commands["pack"]}
#: ``rhtc`` followed by a command, in backticks or in a message of a command line
HINT = re.compile(r"(?<![\w.-])rhtc ((?:[a-z][a-z-]*|--?[a-z][\w-]*)(?:[ =][^\s`'\";|(),]+)*)")
#: modules whose plain strings are command-line messages (elsewhere only `backticked` hints count)
CLI_MODULES = {"client/ops/cli.py", "condor/__main__.py", "condor/pool_cli.py", "worker/cli.py"}


def _command(name: str) -> click.Command | None:
    return HANDED_ON.get(name) or rhtc_main.commands.get(name)


def check_hint(text: str) -> str | None:
    """What is wrong with the command line ``rhtc <text>``, or None."""
    words = [w.strip("[].:") for w in text.split()]
    cmd: click.Command = rhtc_main
    path = ["rhtc"]
    for at, word in enumerate(words):
        if word.startswith("-"):
            names = {o for p in cmd.params for o in (*p.opts, *p.secondary_opts)} | {"--help", "-h"}
            if cmd is rhtc_main:
                names.add("--version")
            if word.split("=")[0] not in names:
                return f"`{' '.join(path)}` has no option {word.split('=')[0]}"
            continue
        if isinstance(cmd, click.Group) and at == len(path) - 1:
            sub = _command(word) if cmd is rhtc_main else cmd.get_command(click.Context(cmd), word)
            if sub is None:
                return f"`{' '.join(path)} {word}`: no such command"
            cmd, path = sub, path + [word]
    return None


def hints() -> list[tuple[str, str]]:
    """(where, text) of every hint in the package's sources."""
    out = []
    for folder in FOLDERS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            source = path.read_text()
            spans = re.findall(r"`(rhtc [^`\n]+)`", source)
            if rel in CLI_MODULES:
                spans += [line for line in source.splitlines() if "rhtc " in line]
            for span in spans:
                for m in HINT.finditer(span):
                    out.append((rel, m.group(1)))
    return sorted(set(out))


def test_the_walk_catches_a_command_that_does_not_exist():
    assert check_hint("pool status") == "`rhtc pool status`: no such command"
    assert check_hint("submit --nope 3") == "`rhtc submit` has no option --nope"
    assert check_hint("pool stop ID") is None and check_hint("status -w") is None
    assert check_hint("pack --python-version X.Y") is None and check_hint("--version") is None


def test_every_rhtc_command_a_message_names_exists():
    found = hints()
    assert len(found) > 20, found                    # the scan sees the hints
    wrong = [f"{where}: rhtc {text}: {why}" for where, text in found if (why := check_hint(text))]
    assert not wrong, "\n".join(wrong)


def test_rhtc_pool_stop_of_no_pool_points_to_a_command_that_exists(broker):
    env = dict(os.environ, **broker.config.env())
    done = subprocess.run([sys.executable, "-m", "rhtc.client.ops.cli", "pool", "stop", "nosuchpool"], env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    said = done.stderr + done.stdout
    named = [m.group(1) for m in HINT.finditer(said)]
    assert named, said
    for text in named:
        assert check_hint(text) is None, f"{said!r} points to `rhtc {text}`: {check_hint(text)}"
    assert "rhtc status" in said, said


@pytest.mark.parametrize("argv", [["pool", "--help"], ["submit", "--help"], ["status", "--help"]])
def test_the_help_of_each_command_runs(argv):
    done = subprocess.run([sys.executable, "-m", "rhtc.client.ops.cli", *argv], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
