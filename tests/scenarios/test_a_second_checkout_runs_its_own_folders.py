"""A second checkout (a worktree, a second clone) next to an editable install imports its
own top-level folders, not the installed checkout's: the layout is seen the same way by the
code and by an installed copy. A real ``git clone`` and a real Python process in it."""
from __future__ import annotations

import pytest

import subprocess
import sys
from pathlib import Path

import rhtc


@pytest.mark.heavy
def test_a_second_checkout_runs_its_own_folders(tmp_path):
    """A worktree (or a second clone) next to an editable install imports its own
    ``broker/``, not the installed checkout's."""
    here = Path(rhtc.__file__).resolve().parent.parent
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", "--no-hardlinks", str(here), str(clone)], check=True)
    (clone / "broker" / "marker_for_test.py").write_text("WHERE = 'clone'\n")
    out = subprocess.run([sys.executable, "-c", "import rhtc.broker.marker_for_test as m, rhtc.broker.wire.keys as k; "
                          "print(m.WHERE, k.__file__)"], cwd=clone, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[0] == "clone" and out.stdout.split()[1].startswith(str(clone)), out.stdout
