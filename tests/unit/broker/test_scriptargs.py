"""Every Lua script is called by name: its wrapper in broker/scriptargs.py names the
arguments in the order of the ``-- ARGV:`` header at the script's top, builds them in
that order, and the script reads no fixed ``ARGV`` index past its header. A swap of two
arguments (in a wrapper's signature or in the list it builds) fails here, not in an
end-to-end test that may not cover it. No Redis, no processes."""
from __future__ import annotations

import inspect
import re
from typing import Sequence      # named by test_a_swapped_pair_is_caught's annotations

import pytest

from rhtc.broker import scriptargs, scripts

_HEADER = re.compile(r"^-- ARGV(?:\((?P<mode>[a-z_]+)\))?: (?P<args>.+)$", re.M)


def headers(name: str) -> dict[str | None, list[str]]:
    """The ``-- ARGV`` lines of script ``name``: mode (None: the only one) -> entries."""
    text = (scripts._LUA / f"{name}.lua").read_text()
    return {m["mode"]: [a.strip() for a in m["args"].split(",")] for m in _HEADER.finditer(text)}


def _constant(entry: str) -> str | None:
    if entry.startswith("'") and entry.endswith("'"):
        return entry[1:-1]
    return entry if entry.isdigit() else None


def _param(entry: str) -> str:
    return entry.rstrip("#").removesuffix("...")


def fixed_slots(entries: list[str]) -> int:
    """How many leading ``ARGV`` slots have a fixed index: up to a counted list's count."""
    for i, e in enumerate(entries, 1):
        if e.endswith("#"):
            return i
        if e.endswith("..."):
            return i - 1
    return len(entries)


def expected_argv(entries: list[str]) -> list[str]:
    """What a wrapper called with :func:`sentinels` must return, as text."""
    out = []
    for e in entries:
        if _constant(e) is not None:
            out.append(_constant(e))
        elif e.endswith("#"):
            out += ["1", f"<{_param(e)}>"]
        else:
            out.append(f"<{_param(e)}>")
    return out


def sentinels(fn) -> dict:
    """Each argument of ``fn`` its own name (a one-item list for a list argument)."""
    out = {}
    for name, p in inspect.signature(fn).parameters.items():
        listed = "Sequence" in str(p.annotation)
        out[name] = [f"<{name}>"] if listed else f"<{name}>"
    return out


def check(wrapper: str, fn=None) -> list[str]:
    """What is wrong between wrapper ``wrapper`` and its script's header ([] if nothing)."""
    fn = fn or scriptargs.WRAPPERS[wrapper]
    script, mode = scriptargs.SCRIPT_OF[wrapper]
    entries = headers(script).get(mode)
    if entries is None:
        return [f"lua/{script}.lua has no '-- ARGV{f'({mode})' if mode else ''}:' header line"]
    params = list(inspect.signature(fn).parameters.values())
    problems = []
    if any(p.kind is not inspect.Parameter.KEYWORD_ONLY for p in params):
        problems.append(f"{wrapper}: every argument must be keyword-only")
    names = [p.name for p in params]
    want = [_param(e) for e in entries if _constant(e) is None]
    if names != want:
        problems.append(f"{wrapper} names {names}, lua/{script}.lua's header {want}")
    got = [str(x) for x in fn(**sentinels(fn))]
    if got != expected_argv(entries):
        problems.append(f"{wrapper} builds {got}, lua/{script}.lua reads {expected_argv(entries)}")
    return problems


@pytest.mark.parametrize("wrapper", sorted(scriptargs.WRAPPERS))
def test_each_wrapper_builds_the_arguments_its_script_names_in_order(wrapper):
    assert check(wrapper) == []


@pytest.mark.parametrize("name", scripts.NAMES)
def test_each_script_has_a_header_a_wrapper_and_reads_nothing_past_it(name):
    modes = headers(name)
    assert modes, f"lua/{name}.lua: no '-- ARGV:' header line at its top"
    assert sorted(modes, key=str) == sorted((m for s, m in scriptargs.SCRIPT_OF.values() if s == name), key=str), \
        f"lua/{name}.lua's header modes {sorted(modes, key=str)} and the wrappers of broker/scriptargs.py differ"
    body = (scripts._LUA / f"{name}.lua").read_text()
    read = [int(i) for i in re.findall(r"ARGV\[(\d+)\]", body)]
    limit = max(fixed_slots(e) for e in modes.values())
    assert max(read, default=0) <= limit, f"lua/{name}.lua reads ARGV[{max(read)}], past its header's {limit}"


def test_every_wrapper_is_of_a_known_script():
    assert {s for s, _ in scriptargs.SCRIPT_OF.values()} == set(scripts.NAMES)


def test_a_swapped_pair_is_caught():
    """Two arguments swapped in a wrapper's signature, or in the list it builds."""
    def take_signature_swapped(*, ns, incarnation, worker, result_grace, max_tasks, leases, scan_step,
                               steal_min_queue, steal_home_min_queue, steal_stuck_seconds, watch: "Sequence",
                               results: "Sequence"):
        return scriptargs.take(ns=ns, worker=worker, incarnation=incarnation, result_grace=result_grace,
                               max_tasks=max_tasks, leases=leases, scan_step=scan_step,
                               steal_min_queue=steal_min_queue, steal_home_min_queue=steal_home_min_queue,
                               steal_stuck_seconds=steal_stuck_seconds, watch=watch, results=results)

    def lease_one_body_swapped(*, ns, worker, incarnation, leases, frame, from_shared):
        return [ns, worker, incarnation, leases, from_shared, frame]

    assert any("names" in p for p in check("take", take_signature_swapped))
    assert any("builds" in p for p in check("lease_one", lease_one_body_swapped))
