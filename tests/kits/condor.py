"""What the HTCondor tests submit, in the repository: the submit description analysts
`condor_submit` and the job's executable (tests/unit/condor/test_submit.py reads them without
a pool; tests/scenarios/test_condor.py submits them to one)."""
from __future__ import annotations

from tests.samples import ROOT

WORKERS_SUB = ROOT / "condor" / "workers.sub"
EXECUTABLE = ROOT / "condor" / "rhtc_worker.sh"
