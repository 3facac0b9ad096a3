"""The chaos map's shape and its fixed seeds: what tests/unit/bench/test_chaosfaults.py
checks the seed's plan of faults for, and what tests/scenarios/test_exactly_once_under_chaos.py
runs (``RHTC_CHAOS_SEED`` replays another seed there)."""
from __future__ import annotations

TASKS = 5000
WORKERS = 4
LEASE = 2.0
#: the map's bound with faults. Without faults it takes ~10 s on the 2-core development VM
#: (the GIL task alone holds one worker 7 s); each fault costs at most a few leases.
MAP_BOUND = 150.0
#: the seeds CI runs (a day's seeds too); RHTC_CHAOS_SEED replays another
SEED_PLAIN, SEED_MERGED, SEED_DAY = 1029, 2029, 3029
