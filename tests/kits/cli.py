"""The ``rhtc`` command tree as the CLI tests walk it (tests/unit/client/ops/test_cli.py,
tests/scenarios/test_cli_commands_a_message_names.py): what is wrong with a command line
``rhtc <text>`` that a message tells the analyst to run, read from click's command tree:
``rhtc``'s own commands, and the ones it hands on to ``python -m rhtc.worker`` and
``python -m rhtc.condor``."""
from __future__ import annotations

import re

import click

from rhtc.client.ops.cli import main as rhtc_main
from rhtc.condor.__main__ import main as condor_main
from rhtc.worker.cli import main as worker_main

#: the commands `rhtc` hands on to another command line (os.execv in client/ops/cli.py)
HANDED_ON = {"worker": worker_main, "submit": condor_main.commands["submit"], "pool": condor_main.commands["pool"],
             "pack": condor_main.commands["pack"]}
#: ``rhtc`` followed by a command, in backticks or in a message of a command line
HINT = re.compile(r"(?<![\w.-])rhtc ((?:[a-z][a-z-]*|--?[a-z][\w-]*)(?:[ =][^\s`'\";|(),]+)*)")


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
