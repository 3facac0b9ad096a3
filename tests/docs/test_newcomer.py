"""A newcomer's first minutes: a fresh ``git clone`` of the repository, then the README as
written: its first command (``make example``) and its Quickstart's python blocks, run from
the clone with the clone's code. ``VENV=`` points ``make`` at the suite's own environment (CI
builds one fresh venv already; ``-o`` keeps make from reinstalling it from the clone)."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.heavy, pytest.mark.slow]


def quickstart_blocks(readme: str) -> list[str]:
    """The ``python`` blocks of the README's "Quickstart" section (up to the next ``## ``),
    without those that a ``<!-- skip: next -->`` or ``<!-- requires: ... -->`` marks.

    >>> quickstart_blocks("## Quickstart\\n```python\\nx = 1\\n```\\n## Next\\n```python\\ny\\n```\\n")
    ['x = 1\\n']
    """
    m = re.search(r"^## Quickstart.*?$(.*?)(?=^## |\Z)", readme, re.S | re.M)
    if not m:
        return []
    out = []
    for marker, code in re.findall(r"((?:<!--[^>]*-->\s*)?)```python\n(.*?)```", m.group(1), re.S):
        if "skip" in marker or "requires" in marker:
            continue
        out.append(code)
    return out


@pytest.mark.timeout(900)
def test_a_fresh_clone_follows_the_readme(tmp_path):
    clone = tmp_path / "redis-htcondor"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True, timeout=120)
    venv = Path(sys.prefix)
    env = {**os.environ, "PYTHONPATH": str(clone)}    # the clone's code, not the checkout's
    env.pop("RHTC_CONFIG", None)
    made = subprocess.run(["make", "-o", f"{venv}/.installed", "example", f"VENV={venv}"], cwd=clone, env=env,
                          capture_output=True, text=True, timeout=840)
    assert made.returncode == 0, f"make example failed in a fresh clone:\n{made.stdout[-3000:]}\n{made.stderr[-3000:]}"
    blocks = quickstart_blocks((clone / "README.md").read_text())
    assert blocks, "the README has no Quickstart python block"
    ran = subprocess.run([sys.executable, "-c", "\n".join(blocks)], cwd=clone, env=env, capture_output=True,
                         text=True, timeout=600)
    assert ran.returncode == 0, f"the README's Quickstart failed in a fresh clone:\n{ran.stderr[-4000:]}"
