"""The lock of the client's environment (condor/lock.py), read from this environment's
installed distributions: each requirement and everything it depends on, with the markers
evaluated for this Python and the requested extras followed, pinned to the version installed
here; what is not installed, or not a name (a URL), left unpinned and listed; names in their
PEP 503 form; the constraints file sorted, without what the pack drops. The pack that
installs them on the nodes: tests/scenarios/test_condor.py."""
from __future__ import annotations

import importlib.metadata as md

import pytest
from packaging.requirements import Requirement

from rhtc.condor.lock import Lock, canonical, lock_environment


@pytest.mark.parametrize("name, want", [("Typing_Extensions", "typing-extensions"), ("zope.interface", "zope-interface"),
                                        ("a__b--c..d", "a-b-c-d"), ("numpy", "numpy")])
def test_names_are_canonical(name, want):
    assert canonical(name) == want


def test_a_requirement_is_pinned_to_the_version_installed_here_with_its_dependencies():
    lock = lock_environment(["redis-htcondor"])
    assert lock.missing == []
    for name in ("redis", "cloudpickle", "numpy", "click"):
        assert lock.pins[name] == md.version(name)
    for name, version in lock.pins.items():         # every pin is what this environment holds
        assert md.version(name) == version


def test_every_unconditional_dependency_of_a_pin_is_pinned_too():
    lock = lock_environment(["redis-htcondor"])
    for name in lock.pins:
        for text in md.distribution(name).requires or []:
            dep = Requirement(text)
            if dep.marker is None and canonical(dep.name) not in lock.missing:
                assert canonical(dep.name) in lock.pins, f"{name} needs {dep.name}"


def test_an_extra_brings_its_dependencies_and_only_when_asked():
    assert "hiredis" not in lock_environment(["redis"]).pins
    assert lock_environment(["redis[hiredis]"]).pins["hiredis"] == md.version("hiredis")


def test_what_is_not_installed_or_not_a_name_is_left_unpinned():
    url = "git+https://example.org/pkg.git"
    lock = lock_environment(["numpy", "No_Such_Package_Here", url])
    assert sorted(lock.missing) == sorted(["no-such-package-here", url]) and "numpy" in lock.pins


def test_the_constraints_are_sorted_pins_without_what_is_dropped():
    lock = Lock(pins={"numpy": "2.0.1", "awkward": "2.6.0", "lz4": "4.3.3"}, missing=[])
    assert lock.constraints() == ["awkward==2.6.0", "lz4==4.3.3", "numpy==2.0.1"]
    assert lock.constraints(drop={"lz4"}) == ["awkward==2.6.0", "numpy==2.0.1"]
