"""Which tests share an xdist worker (tests/parallel.py) is named by path and test name, so a
renamed module or test would leave its group unseen: a pool test would then run beside
another worker's pool and wait on it, a pack test beside another one's cache. Every module
and test the tables name exists (read from the files, nothing imported), and a test's group
does not depend on its parameters."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.parallel import (CONDOR_GROUP, MODULE_GROUPS, PACK_GROUP, POOL_MODULES, SLURM_GROUP, TEST_GROUPS,
                            group_of)

TESTS = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("module", sorted({*POOL_MODULES, *MODULE_GROUPS}))
def test_every_grouped_module_exists(module):
    assert (TESTS / module).is_file(), f"tests/parallel.py names tests/{module}, which does not exist"


@pytest.mark.parametrize("test", sorted(TEST_GROUPS))
def test_every_grouped_test_exists(test):
    module, name = test.split("::")
    source = (TESTS / module).read_text() if (TESTS / module).is_file() else ""
    assert re.search(rf"^def {re.escape(name)}\(", source, re.M), \
        f"tests/parallel.py puts tests/{test} in a group, but tests/{module} defines no such test"


def test_a_test_is_grouped_by_its_name_then_its_module():
    assert group_of("tests/scenarios/test_condor.py::test_rhtc_submit_condor") == CONDOR_GROUP
    assert group_of("tests/scenarios/test_condor.py::test_pack_pins_the_clients_exact_versions") == PACK_GROUP
    assert group_of("tests/scenarios/test_pool_keeper.py::test_slurm_pool_replaces_cancelled_and_held_jobs") \
        == SLURM_GROUP
    assert group_of("tests/scenarios/test_condor.py::test_validation_catches_what_the_bindings_would_not[a-b]") \
        == CONDOR_GROUP                                             # parameters do not change it
    module = "tests/unit/bench/test_agcgen.py"
    assert group_of(f"{module}::test_every_branch_of_the_real_sample_with_its_type") == module
    assert group_of("tests/unit/test_layout.py::test_no_import_cycles") is None     # runs alone
