"""``make test-deps`` (tests/provision.py): it says which steps exist when asked for another,
and a step that fails says why without stopping the others."""
from __future__ import annotations

import pytest

from tests import provision


def test_an_unknown_step_is_refused_naming_the_steps(capsys):
    with pytest.raises(SystemExit) as exit_:
        provision.main(["--only", "condor,htcondor"])
    err = capsys.readouterr().err
    assert exit_.value.code == 2
    assert "htcondor" in err and all(name in err for name in provision.STEPS), err


def test_a_failing_step_says_why_and_the_others_still_run(monkeypatch, capsys):
    ran = []

    def broken() -> str:
        raise OSError("debootstrap: no route to deb.debian.org")

    monkeypatch.setitem(provision.STEPS, "condor", broken)
    monkeypatch.setitem(provision.STEPS, "coffea", lambda: ran.append("coffea") or "/cache/coffea")
    assert provision.main(["--only", "condor,coffea"]) == 1
    out = capsys.readouterr()
    assert ran == ["coffea"]
    assert "condor    FAILED" in out.out and "no route to deb.debian.org" in out.out, out.out
    assert "coffea    ready" in out.out and "/cache/coffea" in out.out, out.out
    assert "condor failed" in out.err
