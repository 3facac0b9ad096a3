"""``rhtc pool``: a pool of worker jobs that keeps itself for a day (condor/keeper.py).

    rhtc pool start --workers 50 --env rhtc-env.tar.gz --lifetime 8h     # holds 50 workers until stopped
    rhtc pool start --adapt 5:200 --idle-timeout 20m                     # 5 to 200, following the work
    rhtc status                                                          # wanted/actual, last replacements
    rhtc pool stop [POOL]                                                # its jobs are removed
"""
from __future__ import annotations

import getpass
import logging
import signal
import socket
import time

import click

from ..broker.wire.config import BrokerConfig, BrokerNotConfigured, parse_duration
from .cli_options import cli_errors, fail, worker_options


def _adapt(text: str | None) -> tuple[int, int] | None:
    if text is None:
        return None
    try:
        low, high = (int(x) for x in text.split(":"))
    except ValueError:
        raise click.BadParameter(f"{text!r}: give MIN:MAX, e.g. 2:100", param_hint="--adapt") from None
    return low, high


def _seconds(value: str | None, name: str) -> float | None:
    if value is None:
        return None
    try:
        return parse_duration(value)
    except ValueError as err:
        raise click.BadParameter(str(err), param_hint=name) from None


@click.group()
def pool():
    """A pool of worker jobs that keeps itself: replaced when held, removed or evicted,
    renewed before their walltime, grown and shrunk with the work."""


@pool.command()
@click.option("-n", "--workers", type=click.IntRange(min=1), default=None, help="Hold the pool at N workers.")
@click.option("--adapt", default=None, metavar="MIN:MAX",
              help="Instead of --workers: between MIN and MAX, a worker per waiting task, idle ones removed.")
@click.option("--name", "pool_id", default=None, help="The pool's id (default: random); `rhtc pool stop ID`.")
@click.option("--interval", default="5s", show_default=True, help="How often the keeper looks.")
@click.option("--idle-limit", default="30m", show_default=True, help="Replace a job idle in the queue this long.")
@click.option("--startup-limit", default="10m", show_default=True,
              help="A running job whose worker has not reached the broker in this long failed.")
@click.option("--max-starts", default=3, show_default=True, help="Replace a job started more often than this.")
@click.option("--max-failures", default=3, show_default=True,
              help="Stop after this many start-up failures in a row, naming the cause.")
@click.option("--shrink-after", default="5m", show_default=True,
              help="Adaptive: remove a worker idle this long (never under MIN).")
@click.option("--stop-when-idle", default="0", show_default=True,
              help="Stop the pool after this long with no map and no busy worker (0: never).")
@worker_options
@click.option("-v", "--verbose", is_flag=True)
def start(workers, adapt, pool_id, interval, idle_limit, startup_limit, max_starts, max_failures, shrink_after,
          stop_when_idle, verbose, schedd, pool, **submit_options):
    """Start workers and keep the pool until Ctrl-C or `rhtc pool stop` (then its jobs are removed)."""
    from .keeper import PoolKeeper
    from .keeper_rules import KeeperPlan
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    span = _adapt(adapt)
    if (workers is None) == (span is None):
        raise click.UsageError("give either --workers N (a fixed pool) or --adapt MIN:MAX")
    low, high = span or (workers, workers)
    try:
        plan = KeeperPlan(low, high, interval=_seconds(interval, "--interval"),
                          idle_limit=_seconds(idle_limit, "--idle-limit"),
                          startup_limit=_seconds(startup_limit, "--startup-limit"), max_starts=max_starts,
                          max_failures=max_failures, shrink_after=_seconds(shrink_after, "--shrink-after"),
                          stop_when_idle=_seconds(stop_when_idle, "--stop-when-idle"))
        keeper = PoolKeeper(plan, pool_id=pool_id, schedd=schedd, pool=pool, **submit_options)
    except cli_errors() as err:
        fail(err)
    click.echo(f"pool {keeper.pool_id}: keeping {low if low == high else f'{low} to {high}'} workers on "
               f"{submit_options['scheduler']}; log {keeper.log_path}")
    click.echo(f"  watch: rhtc status     stop: rhtc pool stop {keeper.pool_id} (or Ctrl-C here)")
    signal.signal(signal.SIGTERM, lambda *_: keeper.stop("SIGTERM"))
    try:
        why = keeper.run()
    except cli_errors() as err:
        fail(err)
    click.echo(f"pool {keeper.pool_id} stopped ({why}); its jobs were removed")


def _storage(url: str | None):
    from ..broker.storage import Storage
    try:
        return Storage(BrokerConfig.resolve(url=url, require_key=False))
    except (BrokerNotConfigured, ConnectionError, PermissionError) as err:
        raise click.ClickException(str(err))


@pool.command()
@click.argument("pool_ids", nargs=-1, metavar="[POOL]...")
@click.option("--broker", "url", default=None, help="Broker URL (default: configured).")
@click.option("--wait/--no-wait", default=True, show_default=True, help="Wait until the keeper has stopped.")
def stop(pool_ids, url, wait):
    """Stop pool keepers (all of this broker's when none is named); their jobs are removed."""
    s = _storage(url)
    try:
        running = {k["pool"]: k for k in s.pool.keepers()}
        if not running:
            raise click.ClickException("no pool keeper runs for this broker: `rhtc status` lists the pools "
                                       "that run; start one with `rhtc pool start`")
        wanted = [p for p in running if not pool_ids or any(p.startswith(x) for x in pool_ids)]
        if not wanted:
            raise click.ClickException(f"no keeper named {', '.join(pool_ids)}; running: {', '.join(running)}")
        by = f"{getpass.getuser()}@{socket.gethostname()} (rhtc pool stop)"
        for p in wanted:
            s.pool.request_keeper_stop(p, by)
            click.echo(f"asked pool {p} (keeper pid {running[p].get('pid')} on {running[p].get('host')}) to stop")
        deadline = time.monotonic() + 120
        while wait and time.monotonic() < deadline and {k["pool"] for k in s.pool.keepers()} & set(wanted):
            time.sleep(0.5)
    finally:
        s.close()
