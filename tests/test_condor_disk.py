"""The node's disk tier on the tests' HTCondor pool (issue 19): every worker job removed,
new ones submitted on the same execute node, and the rerun reads nothing from the files."""
from __future__ import annotations

from .samples import DIMUON_FILES
from .pools.fixtures import (REPO, condor_env_pack, condor_pool, make_owned_dir, pool_analyst,  # noqa: F401
                             pool_broker, write_pool_config)
from .test_condor import WORKERS_SUB, _real_nanoaod, _wait_gone, _wait_registered, pool_tests

import pytest


def _submit(pool, work, env_pack, disk, n: int) -> int:
    return pool.condor_submit(WORKERS_SUB, "broker_config=broker.json", f"env_pack={env_pack}",
                              f"workers={n}", f"disk_cache={disk}", "disk_cache_size=2GB",
                              "log_dir=rhtc-logs", cwd=work)


def _serve_one_map(pool, broker, env_pack, analyst, work, cfg, disk, files) -> tuple[int, list[dict]]:
    """Two worker jobs with the node's disk tier; one map; then every job removed."""
    cluster = _submit(pool, work, env_pack, disk, 2)
    names = []
    try:
        names = _wait_registered(pool, broker.config, cluster, 2, work / "rhtc-logs")
        tasks = analyst(cfg, "reads", "2000", *files)["tasks"]
    finally:
        pool.run(["condor_rm", str(cluster)], check=False)
    _wait_gone(pool, broker.config, cluster, names)
    return cluster, tasks


@pool_tests
def test_a_replaced_condor_worker_is_warm_from_its_nodes_disk(condor_pool, pool_broker, condor_env_pack,
                                                              pool_analyst):
    if not _real_nanoaod():
        pytest.skip("needs the real NanoAOD samples (../shared/data/nanoaod)")
    work = condor_pool.workdir("disk_tier")
    cfg = write_pool_config(pool_broker, work)
    make_owned_dir(work / "rhtc-logs")
    disk = make_owned_dir(work / "node-disk")          # outside every job's scratch: outlives the jobs
    files = [str(f) for f in DIMUON_FILES]
    cold_cluster, cold = _serve_one_map(condor_pool, pool_broker, condor_env_pack, pool_analyst, work, cfg, disk, files)
    assert cold and all(t["bytes_file"] > 0 for t in cold)
    second, warm = _serve_one_map(condor_pool, pool_broker, condor_env_pack, pool_analyst, work, cfg, disk, files)
    assert second != cold_cluster                          # new jobs, new names: condor-<second>.N
    assert [t["value"] for t in warm] == [t["value"] for t in cold]
    assert all(t["worker"].startswith(f"condor-{second}.") for t in warm)
    assert sum(t["bytes_file"] for t in warm) == 0, warm
    assert all(t["bytes_disk"] > 0 for t in warm)
