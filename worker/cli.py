"""Command line of one worker (also reached as ``rhtc worker``)."""
from __future__ import annotations

import logging
import os
import sys

import click
import psutil

from ..broker.wire.config import (BrokerConfig, BrokerNotConfigured, KeyNotConfigured, settings,
                             validate_worker_name)


def default_cache_size() -> int:
    """Half the memory HTCondor gave the job if known, else min(4 GB, RAM / (2 * cores))."""
    ad = os.environ.get("_CONDOR_JOB_AD")
    if ad and os.path.exists(ad):
        with open(ad) as fh:
            for line in fh:
                if line.startswith("RequestMemory ="):
                    try:
                        return int(float(line.split("=", 1)[1]) * 1e6 * 0.5)
                    except ValueError:
                        break
    return int(min(4e9, psutil.virtual_memory().total / (2 * (os.cpu_count() or 1))))


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--broker", "url", help="Broker URL (default: $RHTC_BROKER, then the config file).")
@click.option("--config", "config_file", type=click.Path(dir_okay=False),
              help="JSON config with url, key, namespace (default: $RHTC_CONFIG or ~/.config/rhtc/broker.json).")
@click.option("--name", help="Worker name shown by `rhtc status` (default: host-pid).")
@click.option("--cache-size", default=None, help="Branch cache cap, e.g. 4GB (default: from the node's memory).")
@click.option("--disk-cache", default=None, metavar="DIR",
              help="The node's disk tier under the branch cache: a node-local directory that outlives "
                   "the job, shared by the node's workers (default: $RHTC_DISK_CACHE; off when unset).")
@click.option("--disk-cache-size", default=None,
              help="Cap of the node's disk tier, e.g. 20GB (default: $RHTC_DISK_CACHE_SIZE or 20GB).")
@click.option("--lifetime", default=None, metavar="DURATION",
              help="Leave on its own terms this long after starting, e.g. 8h: drain (no new task, finish the "
                   "one in hand) a margin before the end and exit 0 (default: $RHTC_LIFETIME, else the job's "
                   "walltime where HTCondor or Slurm says it, else never).")
@click.option("--idle-timeout", default=None, metavar="DURATION",
              help="Leave after this long without a task, e.g. 20m, unless the pool is at its keeper's "
                   "minimum (default: $RHTC_IDLE_TIMEOUT; never).")
@click.option("--namespace", default=None, help="Key namespace (must match the client's).")
@click.option("-v", "--verbose", is_flag=True)
def main(url, config_file, name, cache_size, disk_cache, disk_cache_size, lifetime, idle_timeout, namespace,
         verbose):
    """Serve tasks from the broker until SIGTERM (then hand back the current task, exit 0)."""
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    from ..broker.wire.config import parse_size
    from .supervisor import Supervisor
    if name is not None:
        try:
            validate_worker_name(name)
        except ValueError as err:
            raise click.BadParameter(str(err), param_hint="--name")   # exit code 2
    try:
        config = BrokerConfig.resolve(url=url, namespace=namespace, config_file=config_file)
        size = parse_size(cache_size) if cache_size else default_cache_size()
        st = settings().overridden(disk_cache=disk_cache, disk_cache_size=disk_cache_size, lifetime=lifetime,
                                   idle_timeout=idle_timeout)    # checked as their variables are
        w = Supervisor(config, name=name, cache_bytes=size, settings_=st)
    except (BrokerNotConfigured, KeyNotConfigured, ValueError, PermissionError) as err:
        raise click.ClickException(str(err))
    sys.exit(w.run())
