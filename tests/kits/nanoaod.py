"""The real CMS NanoAOD samples as the chunk, cache and routing tests read them: the two
files of the dimuon example, the Drell-Yan one alone, and the task that sums their muons'
pt (it reaches the workers by reference: they run in the checkout).

Example::

    from tests.kits.nanoaod import REAL, muon_pt_sum

    def test_it(broker, workers):
        workers.start(1)
        assert remote_map(muon_pt_sum, make_chunks(REAL, step=20), broker=broker)
"""
from __future__ import annotations

from tests.samples import NANOAOD

#: the two files of the dimuon example (80 events in all), as strings
REAL = [str(NANOAOD / "nano_dimuon.root"), str(NANOAOD / "nano_dy.root")]
#: the Drell-Yan sample alone
DY = str(NANOAOD / "nano_dy.root")


def muon_pt_sum(chunk):
    import awkward as ak
    a = chunk.arrays(["Muon_pt"], how=dict)
    return float(ak.sum(a["Muon_pt"]))
