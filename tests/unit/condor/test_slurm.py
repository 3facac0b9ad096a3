"""Slurm's side of the submit code (condor/slurm.py) without a cluster: the memory a job
asks for, in the MB that sbatch takes. The real cluster: tests/scenarios/test_slurm.py."""
from __future__ import annotations


def test_memory_for_slurm():
    from rhtc.condor.slurm import memory_mb
    assert memory_mb("2GB") == 2048 and memory_mb("1.5G") == 1536 and memory_mb("700MB") == 700
