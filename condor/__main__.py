"""``python -m rhtc.condor`` (``rhtc submit`` forwards here): submit, list, remove, pack workers.

    python -m rhtc.condor submit --workers 50                 # HTCondor, through htcondor2
    python -m rhtc.condor submit --workers 50 --scheduler slurm
    python -m rhtc.condor list [CLUSTER]                      # alias: ls
    python -m rhtc.condor rm CLUSTER                          # or: rm all
    python -m rhtc.condor pack -o rhtc-env.tar.gz --python-version 3.9
"""
from __future__ import annotations

import sys
import time

import click

from .cli_options import POOL_OPTION, SCHEDD_OPTION, SCHEDULER_OPTION, cli_errors, fail, worker_options
from .pack import DEFAULT_EXCLUDE, DEFAULT_GLIBC

_ALIASES = {"ls": "list", "remove": "rm"}
class _Group(click.Group):
    def get_command(self, ctx, name):
        return super().get_command(ctx, _ALIASES.get(name, name))


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
def main():
    """Start redis-htcondor workers as HTCondor or Slurm jobs."""


def _print_jobs(rows, scheduler):
    if not rows:
        click.echo(f"no worker jobs in the {scheduler} queue")
        return
    now = time.time()
    click.echo(f"{'JOB':<14} {'STATUS':<11} {'HOST':<28} {'OWNER':<10} SINCE")
    for r in rows:
        since = r.get("time") or ""
        if r.get("EnteredCurrentStatus"):
            s = int(now - r["EnteredCurrentStatus"])
            since = f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}"
        host = (r.get("RemoteHost") or "-").split("@")[-1]
        status = r["status"] + (f" ({r['HoldReason']})" if r.get("HoldReason") else "")
        click.echo(f"{r['id']:<14} {status:<11} {host:<28} {str(r.get('Owner') or ''):<10} {since}")


@main.command()
@click.option("-n", "--workers", type=int, default=3, show_default=True, help="How many workers.")
@worker_options
@click.option("--dry-run", is_flag=True, help="Validate and print the expanded description; submit nothing.")
@click.option("--terse", is_flag=True, help="Print only the cluster (array job) id.")
@click.option("--list", "do_list", is_flag=True, help="List the worker jobs instead (same as `list`).")
@click.option("--rm", "rm_id", default=None, metavar="ID", help="Remove workers instead (same as `rm ID`).")
def submit(workers, scheduler, config_file, env_pack, python, python_version, log_dir, memory, cpus,
           disk, env_cache, cache_size, disk_cache, disk_cache_size, lifetime, idle_timeout, credentials, submit_file, append, sbatch_args,
           schedd, pool, dry_run, terse, do_list, rm_id):
    """Submit N workers; print the cluster (or Slurm array) id."""
    from .submit import list_workers, remove_workers, submit_workers
    try:
        if do_list:
            return _print_jobs(list_workers(scheduler, schedd=schedd, pool=pool), scheduler)
        if rm_id:
            n = remove_workers(rm_id, scheduler, schedd=schedd, pool=pool)
            return click.echo(f"removed {n} worker job(s) of {rm_id}")
        jobs = submit_workers(workers, scheduler=scheduler, config_file=config_file, env_pack=env_pack,
                              python=python, python_version=python_version, env_cache=env_cache,
                              cache_size=cache_size,
                              disk_cache=disk_cache, disk_cache_size=disk_cache_size,
                              lifetime=lifetime, idle_timeout=idle_timeout, credentials=credentials,
                              log_dir=log_dir, memory=memory, cpus=cpus, disk=disk,
                              submit_file=submit_file, append=append, sbatch_args=sbatch_args,
                              schedd=schedd, pool=pool, dry_run=dry_run)
    except cli_errors() as err:
        fail(err)
    for w in jobs.warnings:
        click.echo(f"note: {w}", err=True)
    if dry_run:
        click.echo(f"# {jobs.count} workers would be submitted to {scheduler} with:")
        for k, v in jobs.description.items():
            click.echo(f"{k} = {v}")
        return
    if terse:
        return click.echo(jobs.job_id)
    what = "cluster" if scheduler == "condor" else "array job"
    rm = "condor_rm" if scheduler == "condor" else "scancel"
    click.echo(f"submitted {jobs.count} workers to {scheduler}: {what} {jobs.job_id}")
    click.echo(f"  logs:    {jobs.log_dir}")
    click.echo(f"  config:  {jobs.config_file} (0600; its URL and key stay out of the job ad)")
    click.echo(f"  watch:   rhtc status          remove: rhtc submit --rm {jobs.job_id}"
               + (f" --scheduler {scheduler}" if scheduler != "condor" else "")
               + f"  (or {rm} {jobs.job_id})")


@main.command(name="list")
@click.argument("job_id", required=False)
@SCHEDULER_OPTION
@SCHEDD_OPTION
@POOL_OPTION
def list_(job_id, scheduler, schedd, pool):
    """List worker jobs (all, or those of one cluster / array job)."""
    from .submit import list_workers
    try:
        rows = list_workers(scheduler, job_id, schedd=schedd, pool=pool)
    except cli_errors() as err:
        fail(err)
    _print_jobs(rows, scheduler)


@main.command()
@click.argument("job_id")
@SCHEDULER_OPTION
@SCHEDD_OPTION
@POOL_OPTION
def rm(job_id, scheduler, schedd, pool):
    """Remove workers: a cluster id, one job (12.3), an array job id, or `all` of yours."""
    from .submit import remove_workers
    try:
        n = remove_workers(job_id, scheduler, schedd=schedd, pool=pool)
    except cli_errors() as err:
        fail(err)
    click.echo(f"removed {n} worker job(s) of {job_id}")


@main.command()
@click.option("-o", "--output", default="rhtc-env.tar.gz", show_default=True, help="Where to write the tarball.")
@click.option("--python-version", default=None, help="The nodes' python3 as X.Y (default: this Python's).")
@click.option("--glibc", default=DEFAULT_GLIBC, show_default=True, help="Oldest glibc on the nodes (EL8 = 2.28, EL9 = 2.34).")
@click.option("--with", "--extra", "extra", multiple=True,
              help="Extra requirement for your functions, e.g. --with coffea (repeatable); "
                   "pinned to this environment's version when installed here.")
@click.option("--without", "exclude", multiple=True, help=f"Leave a project requirement out (default: {', '.join(DEFAULT_EXCLUDE)}).")
@click.option("--pip-arg", "pip_args", multiple=True, help="Passed to pip, e.g. --pip-arg=--no-index.")
@click.option("--rebuild", is_flag=True, help="Ignore the cache.")
def pack(output, python_version, glibc, extra, exclude, pip_args, rebuild):
    """Pack the worker environment (dependencies for the nodes' Python + this project)."""
    from .pack import pack_environment, read_manifest
    t0 = time.monotonic()
    try:
        path = pack_environment(output, python_version=python_version, glibc=glibc, extra=extra,
                                exclude=exclude or DEFAULT_EXCLUDE, pip_args=pip_args,
                                rebuild=rebuild, quiet=False)
    except cli_errors() as err:
        fail(err)
    m = read_manifest(path)
    size = path.stat().st_size / 1e6
    click.echo(f"{path}: {size:.0f} MB for Python {m['python']} ({len(m['requirements'])} requirements, "
               f"{len(m['lock'])} packages pinned to this environment's versions, "
               f"{time.monotonic() - t0:.1f} s)")
    if m["not_pinned"]:
        click.echo(f"not pinned (pip chose the version for the nodes): {', '.join(m['not_pinned'])}")
    click.echo("transfer it with the workers: condor_submit condor/workers.sub "
               f"env_pack={path}  (or rhtc submit --env {path})")


def _register_pool() -> None:
    from .pool_cli import pool
    main.add_command(pool, "pool")


_register_pool()

if __name__ == "__main__":
    sys.exit(main())
