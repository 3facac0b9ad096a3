"""The HTCondor submit description that `rhtc submit` builds (condor/submit.py) over
condor/workers.sub, checked by condor/validate.py, without a pool or a process: its defaults
and knobs, and an appended line cannot add a queue statement. The checks that need a child
process or a pool: tests/scenarios/test_condor.py."""
from __future__ import annotations

import pytest

from tests.kits.condor import EXECUTABLE, WORKERS_SUB


def test_workers_sub_defaults_and_knobs():
    from rhtc.condor.submit import build_condor_description
    from rhtc.condor.validate import check_description
    default = check_description(WORKERS_SUB.read_text())
    assert default.count == 3
    assert default["request_cpus"] == "1" and default["request_memory"] == "2GB"
    assert default["MY.RhtcWorker"] == "true"
    assert "--env rhtc-env.tar.gz" in default["arguments"]
    text = build_condor_description({"workers": 150, "memory": "4GB", "broker_config": "/x/b.json",
                                     "worker_python": "/cvmfs/py/bin/python3",
                                     "worker_sh": EXECUTABLE},
                                    append=['+JobFlavour = "workday"'])
    big = check_description(text)
    assert big.count == 150 and big["request_memory"] == "4GB"
    assert big["transfer_input_files"].strip() == "/x/b.json"          # no pack with worker_python
    assert "--python /cvmfs/py/bin/python3" in big["arguments"]
    assert "--config b.json" in big["arguments"]
    assert big["MY.JobFlavour"] == '"workday"'
    assert big["executable"] == str(EXECUTABLE)


def test_append_cannot_add_a_queue_statement():
    from rhtc.condor.submit import build_condor_description
    from rhtc.condor.validate import InvalidDescription
    with pytest.raises(InvalidDescription, match="--workers"):
        build_condor_description({}, append=["queue 150"])
