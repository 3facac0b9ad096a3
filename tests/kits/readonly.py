"""What the read-only tests of the worker's caches share: the routes an analyst takes to a
numpy array out of a chunk (what they type after numpy's "assignment destination is
read-only"), and a reduction that adds in place (``a += b``), which must never fold into
what a task returned or a cache holds.

Example::

    from tests.kits.readonly import ROUTES, add_in_place

    x = ROUTES["numpy flat"](chunk)           # MET_pt as the chunk serves it
    remote_map(fn, chunks, reduce=add_in_place, merge=True)
"""
from __future__ import annotations

import awkward as ak
import numpy as np


# -- the routes: what an analyst types to get a numpy array out of a chunk ---------------------

def _nonempty(events):
    return next(e for e in events if len(e))


ROUTES = {
    "np.asarray(awkward flat)": lambda c: np.asarray(c.arrays(["MET_pt"], how=dict)["MET_pt"]),
    "ak.to_numpy(awkward flat)": lambda c: ak.to_numpy(c.arrays(["MET_pt"], how=dict)["MET_pt"]),
    "ak.flatten(awkward jagged)": lambda c: np.asarray(ak.flatten(c.arrays(["Muon_pt"], how=dict)["Muon_pt"])),
    "ak.flatten(a record's field)": lambda c: ak.to_numpy(ak.flatten(c.arrays(["Muon_pt", "MET_pt"]).Muon_pt)),
    "offsets of awkward jagged": lambda c: np.asarray(c.arrays(["Muon_pt"], how=dict)["Muon_pt"].layout.offsets),
    "content of awkward jagged": lambda c: c.arrays(["Muon_pt"], how=tuple)[0].layout.content.data,
    "numpy flat": lambda c: c.arrays(["MET_pt"], library="np")["MET_pt"],
    "numpy flat .base": lambda c: c.arrays(["MET_pt"], library="np", how=list)[0].base,
    "element of jagged numpy": lambda c: _nonempty(c.arrays(["Muon_pt"], library="np")["Muon_pt"]),
    "element of jagged numpy .base": lambda c: _nonempty(c.arrays(["Muon_pt"], library="np")["Muon_pt"]).base,
    "jagged numpy": lambda c: c.arrays(["Muon_pt"], library="np")["Muon_pt"],
}


# -- a reduction that adds in place ---------------------------------------------------------

def add_in_place(a, b):
    a += b
    return a
