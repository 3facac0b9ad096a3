"""Every map the tests run checks, when it ends, that its task containers agree
(client/engine/invariants.py; tests/conftest.py turns the check on): a real map's state
passes, and a disagreement made by hand (a finished task sent back to the queue, a result
delivered twice) is named. Real redis-server, a real worker process. (The decisions of
upkeep without Redis: tests/unit/client/engine/test_decisions.py.)"""
from __future__ import annotations

import pytest

from rhtc.client.engine.invariants import InvariantBroken, check
from rhtc.client.engine.tasks import TaskState
from tests.helpers import square


def test_every_map_checks_its_containers_and_a_disagreement_is_named(broker, workers):
    from rhtc import last_map, remote_map
    from rhtc.broker.wire.config import settings
    assert settings().check_invariants, "tests/conftest.py turns the check on for every map"
    workers.start(1)
    assert remote_map(square, range(6), broker=broker.config, progress=False) == [x * x for x in range(6)]
    run = last_map().run
    assert check(run.state) == []
    run.tasks._state[3] = int(TaskState.QUEUED)      # as if a bug had sent a finished task back
    with pytest.raises(InvariantBroken, match="task 3 is queued but has 1 ledger rows") as info:
        run.validate()
    assert "counts 6 done tasks but holds 5" in str(info.value)
    run.tasks._state[3] = int(TaskState.DONE)
    run.state.outbox.append(object())                  # a result delivered twice
    with pytest.raises(InvariantBroken, match="6 task.s. finished but 7 result"):
        run.validate()
