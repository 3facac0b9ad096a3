"""The analyst's side of a pool test, run *inside* the pool with the workers' Python.

Functions defined in a notebook travel to the workers by value (cloudpickle), and code
objects only run on the Python X.Y that made them: the client must run the same Python
minor version as the workers. The pool's workers run the chroot's Python 3.13 while the
test process may run another, so the tests run this script in the chroot, with the same
``rhtc pack`` environment the workers use::

    python3 analyst.py CONFIG where            # 24 chunks: square, in-a-job?, Python X.Y
    python3 analyst.py CONFIG dimuon REPO STEP FILE...   # examples/dimuon.py on these NanoAOD files
    python3 analyst.py CONFIG reads STEP FILE...         # per chunk: a sum, bytes from file/disk, worker
    python3 analyst.py CONFIG sleeps LOG N SECONDS       # N tasks of SECONDS each; each run appends to LOG

It prints one JSON line with the results.
"""
from __future__ import annotations

import json
import os
import sys


def where_am_i(x):
    """Runs on a worker: the square, whether it ran inside a batch job, the Python version."""
    import os
    import sys
    in_job = "_CONDOR_JOB_AD" in os.environ or "SLURM_JOB_ID" in os.environ
    return [x * x, in_job, "%d.%d" % sys.version_info[:2]]


def main(argv: list[str]) -> dict:
    import cloudpickle

    from rhtc.broker.wire.config import BrokerConfig
    from rhtc.client import remote_map
    cfg = BrokerConfig.resolve(config_file=argv[1])
    mode = argv[2]
    if mode == "where":
        return {"results": remote_map(where_am_i, list(range(24)), broker=cfg, progress=False)}
    if mode == "dimuon":
        sys.path.insert(0, argv[3])
        from rhtc.client import make_chunks
        from rhtc.examples import dimuon as example
        cloudpickle.register_pickle_by_value(example)    # the workers have no examples/ package
        files = argv[5:]                                 # the test names them: one sample directory
        missing = [f for f in files if not os.path.exists(f)]
        if not files or missing:
            raise SystemExit(f"analyst.py dimuon: NanoAOD files not visible inside the pool: {missing or 'none given'}")
        chunks = make_chunks(files, step=int(argv[4]))
        result = remote_map(example.dimuon, chunks, reduce=True, broker=cfg, progress=False)
        return {"files": files, "chunks": len(chunks), "events": int(result["events"]),
                "pairs": int(result["pairs"]), "in_z_window": float(result["mass_z"].values().sum())}
    if mode == "reads":
        from rhtc.client import imap_unordered, make_chunks
        chunks = make_chunks(argv[4:], step=int(argv[3]))
        out = sorted(imap_unordered(muon_pt_sum, chunks, broker=cfg), key=lambda r: r.index)
        return {"tasks": [{"value": r.value, "worker": r.meta["worker"], "bytes_file": r.meta["bytes_file"],
                           "bytes_disk": r.meta.get("bytes_disk", 0)} for r in out]}
    if mode == "sleeps":
        log, n, seconds = argv[3], int(argv[4]), float(argv[5])
        from rhtc.bench.pool import sleep_and_log        # on the workers too (the pack has the project)
        from rhtc.client import imap_unordered
        out = sorted(imap_unordered(sleep_and_log, [(log, i, seconds) for i in range(n)], broker=cfg),
                     key=lambda r: r.index)
        return {"values": [r.value for r in out], "workers": [r.meta["worker"] for r in out]}
    raise SystemExit(f"unknown mode {mode}")



def muon_pt_sum(chunk):
    """Runs on a worker: reads two branches of one chunk (through the caches)."""
    import awkward as ak
    arrays = chunk.arrays(["Muon_pt", "Muon_eta"], how=dict)
    return float(ak.sum(arrays["Muon_pt"]))


if __name__ == "__main__":
    print(json.dumps(main(sys.argv)))
