"""Every ``rhtc ...`` command that a message of the package tells the analyst to run
exists, with the options it names. Seen: ``rhtc pool stop`` for a pool that does not exist
pointed to ``rhtc pool status``, which is "No such command". The test reads the sources and
walks click's command tree (tests/kits/cli.py): ``rhtc``'s own commands, and the ones it hands
on to ``python -m rhtc.worker`` and ``python -m rhtc.condor``. Running the commands
themselves: tests/scenarios/test_cli_commands_a_message_names.py."""
from __future__ import annotations

import re
from pathlib import Path

import rhtc
from tests.kits.cli import HINT, check_hint

ROOT = Path(rhtc.__file__).resolve().parent.parent
FOLDERS = ("broker", "client", "condor", "worker", "bench", "rhtc")
#: modules whose plain strings are command-line messages (elsewhere only `backticked` hints count)
CLI_MODULES = {"client/ops/cli.py", "condor/__main__.py", "condor/pool_cli.py", "worker/cli.py"}


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
