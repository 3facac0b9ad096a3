"""``rhtc``: the command line.

    rhtc broker                 run a private broker in the foreground, print its URL
    rhtc worker [--broker URL]  run one worker (same as ``python -m rhtc.worker``)
    rhtc workers -n 4           run a local pool of workers on the configured broker
    rhtc status [-w]            live workers, queues, maps in flight
    rhtc cancel MAP             cancel a map in flight (its id, or the start of it, from status)
    rhtc dashboard              a live page of the broker in the browser, and /metrics
    rhtc timeline run.json      draw a map's timeline from its saved record
    rhtc warm run.json          read what that run read into the pool's caches (the next run is warm)
    rhtc submit --workers 50    submit workers to HTCondor (or --scheduler slurm)
    rhtc pool start -n 50       ... and keep them: replaced when held, evicted, at their walltime
    rhtc --version              the installed version
"""
from __future__ import annotations

import os
import signal
import sys
import time

import click

from ...broker.wire.config import (ENV_URL, BrokerConfig, BrokerNotConfigured, KeyNotConfigured, StaleConfig,
                                default_config_path, redact)
from ...broker.errors import ConnectionProblem

_PASSTHROUGH = {"ignore_unknown_options": True, "allow_extra_args": True, "help_option_names": []}


def _version() -> str:
    import rhtc
    return rhtc.__version__


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(version=_version(), prog_name="rhtc", message="%(prog)s %(version)s")
def main():
    """redis-htcondor: fan a NanoAOD analysis out to workers through one Redis broker."""


@main.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Interface to listen on.")
@click.option("--port", type=int, default=None, help="TCP port (default: a free one).")
@click.option("--unix-socket", "unix_socket", default=None, help="Listen on this unix socket instead of TCP.")
@click.option("--allow-remote", is_flag=True, help="Allow a non-loopback --host (workers on other nodes).")
@click.option("--maxmemory", default=None, help="Cap Redis memory, e.g. 2gb (writes fail beyond it).")
@click.option("--config", "config_path", default=None,
              help="Where to write the URL + key for clients and workers (default: ~/.config/rhtc/broker.json).")
@click.option("--dashboard", "dashboard_port", type=click.IntRange(0, 65535), default=None, is_flag=False,
              flag_value=8787, help="Also serve the live dashboard on 127.0.0.1 (on this port; default 8787).")
def broker(host, port, unix_socket, allow_remote, maxmemory, config_path, dashboard_port):
    """Run a private redis-server in the foreground (random password, no persistence)."""
    from ...broker.embedded import EmbeddedBroker
    try:
        b = EmbeddedBroker(host=host, port=port, unix_socket=unix_socket, allow_remote=allow_remote,
                           maxmemory=maxmemory).start()
    except (ValueError, FileNotFoundError, RuntimeError) as err:
        raise click.ClickException(str(err))
    _stop_on_signals()
    path = config_path or default_config_path()
    dash = None
    try:
        path = b.config.write(path, owner="rhtc broker")
        # never the password or the key on the terminal: they are in the 0600 file only
        click.echo(f"broker: {redact(b.config.url)}")
        click.echo(f"config (url with password, signing key, namespace; mode 0600): {path}")
        click.echo("clients and workers on this machine find it there; elsewhere copy the file and set RHTC_CONFIG.")
        if dashboard_port is not None:
            from .dashboard import Dashboard
            try:
                dash = Dashboard(b.config, port=dashboard_port).start()
                click.echo(f"dashboard: {dash.url}")
            except OSError as err:           # the broker serves on without it
                click.echo(f"no dashboard: {err}", err=True)
        click.echo("Ctrl-C stops the broker.")
        _wait_for_signal()
    except KeyboardInterrupt:
        pass
    finally:
        _ignore_signals()
        if dash is not None:
            dash.stop()
        b.config.remove_if_mine(path)
        b.stop()


@main.command(context_settings=_PASSTHROUGH)
@click.pass_context
def worker(ctx):
    """Run one worker: rhtc worker [--broker URL] [--name NAME] [--cache-size 4GB]."""
    os.execv(sys.executable, [sys.executable, "-m", "rhtc.worker", *ctx.args])


@main.command(context_settings=_PASSTHROUGH)
@click.pass_context
def submit(ctx):
    """Submit workers to HTCondor or Slurm: rhtc submit --workers N [--scheduler slurm]."""
    os.execv(sys.executable, [sys.executable, "-m", "rhtc.condor", "submit", *ctx.args])


@main.command(context_settings=_PASSTHROUGH)
@click.pass_context
def pool(ctx):
    """A pool that keeps itself: rhtc pool start --workers N | --adapt MIN:MAX; rhtc pool stop."""
    os.execv(sys.executable, [sys.executable, "-m", "rhtc.condor", "pool", *ctx.args])


@main.command(context_settings=_PASSTHROUGH)
@click.pass_context
def pack(ctx):
    """Pack the worker environment for batch nodes: rhtc pack [--python-version 3.11] [-o FILE]."""
    os.execv(sys.executable, [sys.executable, "-m", "rhtc.condor", "pack", *ctx.args])


@main.command()
@click.option("-n", "--workers", "n", type=click.IntRange(min=1), default=None,
              help="How many, at least 1 (default: CPU count).")
@click.option("--cache-size", default=None, help="Branch cache cap per worker, e.g. 2GB.")
@click.option("--broker", "url", default=None, help="Broker URL (default: configured, else start one).")
def workers(n, cache_size, url):
    """Run a local pool of workers in the foreground until Ctrl-C."""
    from ..local import LocalCluster
    try:
        config = BrokerConfig.resolve(url=url)
    except StaleConfig as err:
        click.echo(f"{err}; starting a new broker for this pool instead", err=True)
        config = None
    except BrokerNotConfigured:
        config = None
    except (KeyNotConfigured, ValueError, PermissionError) as err:
        raise click.ClickException(str(err))
    cluster = LocalCluster(n, cache_size=cache_size, broker=config)
    path = None
    _stop_on_signals()
    try:
        try:
            cluster.start()
        except (ConnectionError, *ConnectionProblem) as err:
            if config is None:
                raise
            raise click.ClickException(f"cannot reach the broker {redact(config.url)} (from "
                                       f"{_url_source(url)}): {str(err).rstrip('.')}. Start it (`rhtc broker`), pass "
                                       "--broker URL, or remove that setting to start a new broker "
                                       "for this pool") from None
        if config is None:
            path = cluster.config.write(default_config_path(), owner="rhtc workers")
            click.echo(f"started a broker for this pool: {redact(cluster.config.url)} "
                       f"(url with password and signing key in {path}, mode 0600)")
        click.echo(f"{len(cluster.pids)} workers running (logs in {cluster.log_dir}); Ctrl-C stops them.")
        _wait_for_signal()
    except KeyboardInterrupt:
        pass
    finally:
        _ignore_signals()
        if path is not None:
            cluster.config.remove_if_mine(path)
        cluster.close()


def _url_source(url: str | None) -> str:
    """Where the broker URL came from, in the words of the lookup order."""
    if url:
        return "--broker"
    if os.environ.get(ENV_URL):
        return f"${ENV_URL}"
    return str(default_config_path())


def _reader(url: str | None):
    """A connection to the broker ``url`` (default: the configured one) for an operator's
    read or cancel: it needs no signing key and none of the API's maps."""
    from ...broker.storage import Storage
    storage = Storage(BrokerConfig.resolve(url=url, require_key=False))
    storage.ping()
    return storage


@main.command()
@click.option("--broker", "url", default=None, help="Broker URL (default: configured).")
@click.option("-w", "--watch", is_flag=True, help="Refresh like top until Ctrl-C.")
@click.option("--interval", default=1.0, show_default=True, help="Seconds between refreshes.")
def status(url, watch, interval):
    """Live workers (current task, last heartbeat, CPU, memory, cache), queues, maps in flight."""
    from .status import render_status
    try:
        storage = _reader(url)
    except (BrokerNotConfigured, ConnectionError, PermissionError) as err:
        raise click.ClickException(str(err))
    while True:
        text = render_status(storage)
        if watch:
            click.clear()
        click.echo(text)
        if not watch:
            return
        try:
            time.sleep(interval)
        except KeyboardInterrupt:
            return


@main.command()
@click.argument("map_ids", nargs=-1, required=True, metavar="MAP...")
@click.option("--broker", "url", default=None, help="Broker URL (default: configured).")
def cancel(map_ids, url):
    """Cancel maps in flight by id (as `rhtc status` shows them; a unique start is enough).
    Their queued tasks are dropped now; the client that runs each one ends with MapCancelled."""
    import socket
    try:
        storage = _reader(url)
    except (BrokerNotConfigured, ConnectionError, PermissionError) as err:
        raise click.ClickException(str(err))
    in_flight = [m["map_id"] for m in storage.pool.maps_in_flight()]
    by = f"`rhtc cancel` ({socket.gethostname()}:{os.getpid()})"
    for wanted in map_ids:
        matches = [m for m in in_flight if m.startswith(wanted)] or [wanted]
        if len(matches) > 1:
            raise click.ClickException(f"{wanted!r} is the start of {len(matches)} maps in flight "
                                       f"({', '.join(matches)}): give more of the id")
        dropped = storage.pool.request_cancel(matches[0], by)
        if dropped is None:
            raise click.ClickException(f"no map {wanted!r} in flight (it finished, or the id is "
                                       "wrong): `rhtc status` lists the maps in flight")
        click.echo(f"cancelled map {matches[0]}: {dropped} queued task(s) dropped; its client "
                   "ends with MapCancelled")


@main.command()
@click.option("--broker", "url", default=None, help="Broker URL (default: configured).")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Interface to listen on; keep 127.0.0.1 and reach it with `ssh -L` or jupyter-server-proxy.")
@click.option("--port", type=click.IntRange(0, 65535), default=8787, show_default=True,
              help="TCP port (0: a free one).")
@click.option("--token", default=None, envvar="RHTC_DASHBOARD_TOKEN",
              help="The token the URL must carry (default: a new random one; env RHTC_DASHBOARD_TOKEN).")
def dashboard(url, host, port, token):
    """Serve a live page of the broker (workers, maps, task stream) and /metrics for Prometheus."""
    try:
        from .dashboard import Dashboard
    except ImportError as err:
        raise click.ClickException(f"the dashboard needs the 'dashboard' extra ({err}): "
                                   "pip install 'redis-htcondor[dashboard]'")
    try:
        config = BrokerConfig.resolve(url=url)
        d = Dashboard(config, host=host, port=port, token=token).start()
    except (BrokerNotConfigured, KeyNotConfigured, ConnectionError, PermissionError, OSError) as err:
        raise click.ClickException(str(err))
    _stop_on_signals()
    try:
        click.echo(f"dashboard of {config!r}: {d.url}")
        click.echo(f"Prometheus: {d.url.split('?')[0]}metrics (Authorization: Bearer <the token>)")
        if host in ("127.0.0.1", "localhost", "::1"):
            click.echo(f"from a laptop: ssh -L {d.port}:127.0.0.1:{d.port} <this node>, then open the URL above")
        click.echo("Ctrl-C stops it.")
        _wait_for_signal()
    except KeyboardInterrupt:
        pass
    finally:
        _ignore_signals()
        d.stop()


@main.command("warm")
@click.argument("record_path", metavar="RECORD", required=False, type=click.Path(dir_okay=False))
@click.option("--broker", "url", default=None, help="Broker URL (default: configured).")
@click.option("--progress/--no-progress", default=True, show_default=True, help="Show a progress bar.")
def warm_command(record_path, url, progress):
    """Read the branches a run read (its saved RECORD) into the pool's caches, placed as a cold
    run places them, so that the next run of the analysis reads nothing from the files."""
    from ..errors import MapCancelled
    from ..warm import WarmFailed, WarmRefused, warm, warm_plan
    from ..reports.record import RunRecord
    if record_path is None:
        raise click.ClickException("name the run record to warm from: rhtc warm run.json (save it after the "
                                   "run with rhtc.last_map().record().save('run.json'); in that Python "
                                   "session, rhtc.warm() warms from its last map)")
    try:
        record = RunRecord.load(record_path)
        warm_plan(record)                       # refused before anything is queued
        config = BrokerConfig.resolve(url=url)
    except FileNotFoundError:
        raise click.ClickException(f"no run record at {record_path}")
    except (WarmRefused, ValueError, BrokerNotConfigured, KeyNotConfigured, PermissionError) as err:
        raise click.ClickException(str(err))
    old = {sig: signal.getsignal(sig) for sig in _STOP_SIGNALS}
    _stop_on_signals()                          # SIGTERM/SIGHUP cancel the warm map as Ctrl-C does
    try:
        summary = warm(record, broker=config, progress=progress)
    except WarmFailed as err:
        click.echo(str(err.summary))
        raise click.ClickException(str(err))
    except (KeyboardInterrupt, MapCancelled) as err:
        click.echo(f"warm cancelled{': ' + str(err) if str(err) else ''}; what was read stays in the caches",
                   err=True)
        sys.exit(130)
    except (ConnectionError, *ConnectionProblem) as err:
        raise click.ClickException(f"cannot reach the broker {redact(config.url)}: {err}")
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)
    click.echo(str(summary))


def _register_optional() -> None:
    try:
        from ..reports.timeline import timeline_command
    except ImportError:
        return
    main.add_command(timeline_command, "timeline")


_STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)      # HUP: the terminal was closed


def _interrupt(*_) -> None:
    raise KeyboardInterrupt


def _stop_on_signals() -> None:
    """From here on SIGTERM and SIGHUP stop the command as Ctrl-C does (its ``finally``
    cleans up), whenever they arrive."""
    for sig in _STOP_SIGNALS:
        signal.signal(sig, _interrupt)


def _ignore_signals() -> None:
    """While cleaning up, a second signal must not cut the cleanup short."""
    for sig in (*_STOP_SIGNALS, signal.SIGINT):
        signal.signal(sig, signal.SIG_IGN)


def _wait_for_signal() -> None:
    """Sleep until Ctrl-C, SIGTERM or SIGHUP (after :func:`_stop_on_signals`)."""
    try:
        while True:
            time.sleep(0.5)
    except KeyboardInterrupt:
        pass


_register_optional()

if __name__ == "__main__":
    main()
