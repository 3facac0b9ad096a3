"""The one table of a task's moves in Redis (broker/taskmoves.py) is the scripts' own: every
mover it names exists, every script that moves a task is in it, and every move a script
makes through the shared steps of lua/lib.lua (requeue, refill, deliver, ...) is listed
for that script. No Redis, no processes."""
from __future__ import annotations

import re

from rhtc.broker import scripts, taskmoves as tm

#: the moves each shared step of lua/lib.lua makes itself (not through another step)
STEP_MOVES = {
    "requeue": {(tm.LEASED, tm.SHARED), (tm.LEASED, tm.DEAD)},
    "pool_partial": {(tm.LEASED, tm.POOLED)},
    "deliver_all": {(tm.LEASED, tm.RESULT)},
    "pool_to_client": {(tm.POOLED, tm.RESULT)},
    "refill": {(tm.BACKLOG, tm.SHARED)},
    "drain_queue": {(tm.ROUTED, tm.SHARED)},
    "steal_one": {(tm.ROUTED, tm.LEASED)},
    "drop_map": {(tm.BACKLOG, tm.DROPPED), (tm.POOLED, tm.DROPPED), (tm.RESULT, tm.DROPPED)},
}
#: moves the call graph allows but the arguments never make, and why
NEVER = {("take", tm.LEASED, tm.DEAD): "whole_partial requeues without a reason: never an attempt",
         ("merge", tm.LEASED, tm.DEAD): "whole_partial requeues without a reason: never an attempt"}


def _code(text: str) -> str:
    return re.sub(r"--[^\n]*", "", text)


def lib_calls() -> dict[str, set[str]]:
    """Each shared step of lib.lua -> the steps it calls."""
    lib = _code((scripts._LUA / "lib.lua").read_text())
    parts = re.split(r"\nlocal function (\w+)\(", "\n" + lib)
    bodies = dict(zip(parts[1::2], parts[2::2]))
    return {name: {other for other in bodies if other != name and re.search(rf"\b{other}\(", body)}
            for name, body in bodies.items()}


def steps_of(script: str) -> set[str]:
    calls, body = lib_calls(), _code(scripts.body(script))
    todo = {name for name in calls if re.search(rf"\b{name}\(", body)}
    seen: set[str] = set()
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo |= calls[name]
    return seen


def test_the_steps_named_here_are_lib_luas():
    assert set(STEP_MOVES) <= set(lib_calls()), set(STEP_MOVES) - set(lib_calls())


def test_every_mover_exists_and_every_state_is_known():
    for m in tm.MOVES:
        assert m.by in scripts.NAMES or m.by in tm.COMMANDS, f"{m}: no script or command {m.by!r}"
        assert m.source in tm.STATES and m.target in tm.STATES, m
    assert len(set(tm.MOVES)) == len(tm.MOVES), "a move is listed twice"


def test_every_script_that_moves_a_task_is_in_the_table():
    movers = {m.by for m in tm.MOVES}
    for name in scripts.NAMES:
        assert (name in movers) != (name in tm.STILL), \
            f"lua/{name}.lua must be in taskmoves.MOVES (it moves tasks) or in STILL (it does not), not both"


def test_every_move_a_script_makes_through_lib_is_listed():
    for name in scripts.NAMES:
        made = {mv for step in steps_of(name) for mv in STEP_MOVES.get(step, ())}
        listed = {(m.source, m.target) for m in tm.moves_by(name)}
        missing = {mv for mv in made - listed if (name, *mv) not in NEVER}
        assert not missing, f"lua/{name}.lua moves tasks {sorted(missing)} that broker/taskmoves.py does not list"
        if name in tm.STILL:
            assert not made, f"lua/{name}.lua is in STILL but moves {sorted(made)}"


def test_every_state_is_reached_and_only_the_final_ones_are_left_never():
    final = {tm.READ, tm.DROPPED}
    for s in tm.STATES:
        assert s == tm.NEW or any(m.target == s for m in tm.MOVES), f"nothing moves a task to {s}"
        assert (s in final) == (not tm.moves_from(s)), f"{s}: final states have no move out, others do"
