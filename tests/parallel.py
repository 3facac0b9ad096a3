"""The suite in parallel: pytest-xdist workers (pyproject's ``addopts``: ``-n 4 --dist loadgroup``).

Every test runs alone, in whichever worker is free (its own broker, workers and temporary
directory), except the tests of one **group**, which run in one worker, one after another:

* ``condor-pool`` and ``slurm-cluster``: the tests of :data:`POOL_MODULES` (and
  :data:`TEST_GROUPS`), which use the HTCondor pool or the Slurm cluster. Those are session
  fixtures of one process over what the machine has once (the HTCondor pool's chroot under
  ``$RHTC_POOL_CACHE`` and its lock, its port 9618): a pool asked for in a second worker would
  wait for the first worker's session to end. In one worker it comes up once. The two are
  independent (the Slurm cluster runs in a session directory of its own, on free ports), so
  each has its own group: in one, the HTCondor pool's ~7 minutes (its chroot built from
  nothing in CI, then the tests) were the suite's longest chain, and the Slurm tests waited
  at its end.
* ``worker-packs``: the ``rhtc pack`` tests of ``scenarios/test_condor.py``, which need no
  pool (so they are out of the HTCondor chain, about 45 s of it) but share the packs' cache
  (it keeps ``KEEP_PACKS``, and one test checks that packing again comes from it).
* the modules of :data:`MODULE_GROUPS`, whose module-scoped fixture takes long to build (a wheel,
  generated data, a LocalCluster, a downloaded sdist): in one worker it is built once, not once
  per worker.

pytest-xdist's own ``loadgroup`` groups the tests marked ``xdist_group`` by appending the group
to their node ids in each worker; pytest 9.2's node ids no longer take that (pytest-xdist issue
1386), and the marks are then silently ignored. So the groups are named here, by module, and
:func:`pytest_xdist_make_scheduler` gives xdist a scheduler that keeps each group together (and
still honours an ``xdist_group`` mark where it reaches the scheduler: pytest before 9.2).
``tests/conftest.py`` refuses a test that asks for a pool outside that pool's group.
"""
from __future__ import annotations

import pytest

CONDOR_GROUP, SLURM_GROUP, PACK_GROUP = "condor-pool", "slurm-cluster", "worker-packs"
#: the modules (their paths under tests/) whose tests use the machine's one HTCondor pool or
#: Slurm cluster, with the group of the one they use
POOL_MODULES = {"scenarios/test_condor.py": CONDOR_GROUP, "scenarios/test_pool_keeper.py": CONDOR_GROUP,
                "docs/test_pool_examples.py": CONDOR_GROUP,      # the docs' pool examples
                "scenarios/test_slurm.py": SLURM_GROUP}
#: tests whose group is not their module's (node ids under tests/, without parameters)
TEST_GROUPS = {
    "scenarios/test_pool_keeper.py::test_slurm_pool_replaces_cancelled_and_held_jobs": SLURM_GROUP,
    **{f"scenarios/test_condor.py::{name}": PACK_GROUP for name in (
        "test_pack_holds_the_worker_for_the_requested_python", "test_pack_pins_the_clients_exact_versions",
        "test_pack_extra_packages_are_pinned_when_installed_here",
        "test_rhtc_pack_says_what_it_wrote_and_how_to_give_it_to_the_workers",
        "test_pack_for_an_older_python_warns_naming_what_it_could_not_pin")},
}
#: the group of the tests that use each pool fixture (tests/conftest.py refuses a test elsewhere)
POOL_FIXTURE_GROUPS = {"condor_pool": CONDOR_GROUP, "slurm_pool": SLURM_GROUP}
#: modules kept in one worker for a module-scoped fixture that is slow to build (what it builds)
MODULE_GROUPS = {
    "unit/bench/test_agcgen.py": "a ttbar file with every one of ~950 branches",
    "scenarios/test_coffea_on_workers_answers_as_coffea.py": "the nine AGC samples",
    "scenarios/test_coffea_contract.py": "a LocalCluster and coffea's sdist (unpacked from rhtc's cache)",
    "unit/client/synthetic/test_dimuon.py": "a generated NanoAOD file",
    "scenarios/test_a_warm_answer_is_the_cold_answer.py": "generated files and a node of workers",
    "scenarios/test_wheel.py": "the wheel and sdist (python -m build)",
    "scenarios/test_nanoaod_over_xrootd.py": "copies of the samples and a generated file to serve",
    "scenarios/test_xrootd_errors_and_timeouts.py": "an xrootd server",
    "docs/test_site.py": "a copy of the site built with every breakage",
}


def group_of(nodeid: str) -> str | None:
    """The group of a test (by its node id), or None: it runs alone."""
    module = nodeid.split("::", 1)[0].split("tests/", 1)[-1]      # its path under tests/
    test = nodeid.split("tests/", 1)[-1].split("[", 1)[0]
    if test in TEST_GROUPS:
        return TEST_GROUPS[test]
    if module in POOL_MODULES:
        return POOL_MODULES[module]
    if module in MODULE_GROUPS:
        return nodeid.split("::", 1)[0]
    return None


def _scheduler_class():
    from xdist.scheduler import LoadGroupScheduling

    class ModuleGroupScheduling(LoadGroupScheduling):
        """``--dist loadgroup`` whose groups are :func:`group_of`'s, besides any ``@group``
        suffix that xdist put on a node id."""

        def _split_scope(self, nodeid: str) -> str:
            scope = super()._split_scope(nodeid)
            if scope != nodeid:                      # an xdist_group mark that reached us
                return scope
            return group_of(nodeid) or nodeid
    return ModuleGroupScheduling


@pytest.hookimpl(optionalhook=True)          # a hook of pytest-xdist: unknown under -p no:xdist
def pytest_xdist_make_scheduler(config, log):
    if config.getvalue("dist") != "loadgroup":
        return None                              # --dist load, loadfile...: xdist's own
    return _scheduler_class()(config, log)
