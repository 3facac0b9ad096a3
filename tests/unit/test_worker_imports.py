"""The list of what a worker that reads chunks must never load (:data:`tests.kits.worker.NEVER`:
the client's map engine, its API, handles and operator tools) names modules that exist, so
that the check of a real worker (tests/scenarios/test_a_worker_loads_only_what_it_runs.py)
cannot pass by looking for a name that nothing could load."""
from __future__ import annotations

import pytest

from tests.kits.worker import NEVER


@pytest.mark.parametrize("name", NEVER)
def test_every_name_the_check_forbids_exists(name):
    import importlib.util
    assert importlib.util.find_spec(name) is not None, f"{name} is listed in NEVER but is no module of rhtc"
