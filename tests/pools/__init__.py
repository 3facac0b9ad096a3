"""Real batch pools for the tests: HTCondor (minicondor in a Debian trixie chroot) and Slurm.

``fixtures.py`` holds the pytest session fixtures; ``condor_pool.py`` and ``slurm_pool.py``
bring the pools up and down and can be run by hand (``python -m pools.condor_pool up``
from ``tests/``).
"""
