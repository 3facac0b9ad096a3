"""Run workers as batch jobs: HTCondor (``condor/workers.sub``) or Slurm (``condor/workers.sbatch``).

The pieces:

* ``condor/workers.sub``: ``condor_submit condor/workers.sub workers=N`` starts N workers;
* ``condor/workers.sbatch``: the Slurm array counterpart;
* ``condor/rhtc_worker.sh``: the job's executable (unpacks the environment, names the worker
  after its job, runs ``python -m rhtc.worker`` until SIGTERM);
* :func:`pack_environment` (``rhtc pack``): the worker environment as one tarball;
* :func:`submit_workers`, :func:`list_workers`, :func:`remove_workers`
  (``rhtc submit``): the same from Python, through ``htcondor2`` or ``sbatch``.

Example::

    (not run by the tests: they need a site's pool and packing downloads wheels; tests/scenarios/test_condor.py runs them on the test pool)
    >>> from rhtc.condor import pack_environment, submit_workers        # doctest: +SKIP
    >>> pack_environment("rhtc-env.tar.gz", python_version="3.9")   # doctest: +SKIP
    >>> jobs = submit_workers(20, env_pack="rhtc-env.tar.gz")        # doctest: +SKIP
    >>> jobs.job_id                                                  # doctest: +SKIP
    '4711'

Importing this package does not import ``htcondor2``; that happens on first submit.
"""
from .pack import PackError, pack_environment, read_manifest
from .schedd import SchedulerUnavailable
from .submit import (EXECUTABLE, WORKERS_SBATCH, WORKERS_SUB, WorkerJobs, list_workers,
                           remove_workers, submit_workers)
from .validate import InvalidDescription, check_description

__all__ = ["submit_workers", "list_workers", "remove_workers", "WorkerJobs", "pack_environment",
           "read_manifest", "check_description", "InvalidDescription", "SchedulerUnavailable",
           "PackError", "WORKERS_SUB", "WORKERS_SBATCH", "EXECUTABLE"]
