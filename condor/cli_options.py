"""The command-line options that ``rhtc submit`` and ``rhtc pool start`` share (how to start
workers), and how their errors reach the terminal."""
from __future__ import annotations

import click

from .pack import PackError

SCHEDULER_OPTION = click.option("--scheduler", type=click.Choice(["condor", "slurm"]), default="condor",
                          show_default=True, help="Which batch system.")
SCHEDD_OPTION = click.option("--schedd", default=None, help="Schedd name (default: the local one).")
POOL_OPTION = click.option("--pool", default=None, help="Collector host[:port] of the pool (default: COLLECTOR_HOST).")


def fail(err: BaseException):
    raise click.ClickException(str(err))


def cli_errors():
    from .keeper import PoolFailing
    from .schedd import SchedulerUnavailable
    from .validate import InvalidDescription
    return (SchedulerUnavailable, InvalidDescription, PackError, FileNotFoundError,
            PermissionError, ValueError, PoolFailing)


_WORKER_OPTIONS = [
    SCHEDULER_OPTION,
    click.option("--config", "config_file", type=click.Path(dir_okay=False), default=None,
                 help="Broker config the workers read (default: $RHTC_CONFIG or ~/.config/rhtc/broker.json)."),
    click.option("--env", "env_pack", type=click.Path(dir_okay=False), default=None,
                 help="Worker environment from `rhtc pack` (HTCondor default: pack now)."),
    click.option("--python", default=None,
                 help="Instead of --env: a Python on the nodes with the project installed (Slurm default: this one)."),
    click.option("--python-version", default=None, help="The nodes' python3 (X.Y) when packing now."),
    click.option("--log-dir", default="rhtc-logs", show_default=True, help="Per-job stdout/stderr and the event log."),
    click.option("--memory", default="2GB", show_default=True, help="Memory per worker."),
    click.option("--cpus", type=int, default=1, show_default=True, help="Cores per worker."),
    click.option("--disk", default="1GB", show_default=True, help="Scratch disk per worker (HTCondor)."),
    click.option("--env-cache", default=None, metavar="DIR",
                 help="Where a node's workers share the unpacked --env (the first job unpacks it; default "
                      "/tmp/rhtc-envs-<uid>; none: each job unpacks into its scratch)."),
    click.option("--cache-size", default=None, help="Branch cache cap per worker (default: half the memory)."),
    click.option("--disk-cache", default=None, metavar="DIR",
                 help="The node's disk tier: a node-local directory that outlives the jobs, shared by the "
                      "node's workers ($VARS expanded on the node), e.g. '/scratch/$USER/rhtc-cache'. Off by default."),
    click.option("--disk-cache-size", default=None, help="Its cap per node (default 20GB)."),
    click.option("--lifetime", default=None, metavar="DURATION",
                 help="Each worker drains and leaves this long after it starts, e.g. 8h (default: the walltime "
                      "in the job ad, where the site sets one)."),
    click.option("--idle-timeout", default=None, metavar="DURATION",
                 help="A worker with no task this long leaves, e.g. 20m (never under a pool keeper's minimum)."),
    click.option("--credentials/--no-credentials", default=True, show_default=True,
                 help="Give the jobs your grid proxy (X509_USER_PROXY) and bearer token (BEARER_TOKEN_FILE) "
                      "where they exist, for root:// reads."),
    click.option("--submit-file", type=click.Path(exists=True, dir_okay=False), default=None,
                 help="Your own copy of condor/workers.sub."),
    click.option("-a", "--append", multiple=True,
                 help="Extra submit line, e.g. -a '+JobFlavour = \"workday\"' (repeatable)."),
    click.option("--sbatch-arg", "sbatch_args", multiple=True,
                 help="Extra sbatch option, e.g. --sbatch-arg=--partition=short."),
    SCHEDD_OPTION,
    POOL_OPTION,
]


def worker_options(fn):
    """The options that say how to start workers (``submit`` and ``pool start`` share them)."""
    for option in reversed(_WORKER_OPTIONS):
        fn = option(fn)
    return fn


