"""``bench make-data``: write the NanoAOD-schema files the benchmarks read (the dimuon set
of :mod:`rhtc.client.synthetic`, or with ``--agc`` the AGC samples of
:mod:`bench.agcgen`), reusing files already written with the same parameters."""
from __future__ import annotations

import os
import time
from pathlib import Path

import click
import uproot

from ..client.synthetic.dimuon import DIMUON_BRANCHES, dimuon_fraction, make_data
from ..client.synthetic.writer import parse_compression


@click.command("make-data")
@click.option("--out", "out", default=None, type=click.Path(file_okay=False),
              help="Directory to write the files into [data/generated, with --agc data/agc].")
@click.option("--files", default=None, type=click.IntRange(min=1),
              help="Number of files [8; with --agc files per sample, 1].")
@click.option("--events", default=None, type=click.IntRange(min=1),
              help="Events per file [1,000,000; with --agc events in all, 100,000].")
@click.option("--compression", default=None,
              help="LZMA (NanoAOD's default; slow to write, ~1-2 MB/s), ZLIB, LZ4 or ZSTD; "
                   "NAME:LEVEL sets the level [LZ4; with --agc ZLIB, as the AGC's files].")
@click.option("--agc", is_flag=True, help="The nine AGC ttbar samples (bench.agcgen) instead of the dimuon set.")
@click.option("--lean", is_flag=True, help="With --agc: only the branches of Jet, Electron, Muon (fast to write).")
@click.option("--seed", default=0, show_default=True, type=int, help="Random seed.")
@click.option("--workers", default=None, type=click.IntRange(min=1), help="Parallel writers [one per CPU].")
def make_data_command(out: str | None, files: int | None, events: int | None, compression: str | None,
                      agc: bool, lean: bool, seed: int, workers: int | None) -> None:
    """Write NanoAOD-schema files for the benchmarks: a Z peak, or with --agc the AGC
    samples (reuses files already written with the same parameters)."""
    out = out or ("data/agc" if agc else "data/generated")
    compression = compression or ("ZLIB" if agc else "LZ4")

    def stamp(path: Path) -> int | None:
        return path.stat().st_mtime_ns if path.exists() else None

    before = {str(p): stamp(p) for p in Path(out).glob("*.root")}
    start = time.perf_counter()
    try:
        if agc:
            from .agcgen import make_agc_data
            paths = make_agc_data(out, events=events or 100_000, files_per_sample=files or 1,
                                  compression=compression, seed=seed, lean=lean, workers=workers)
        else:
            paths = make_data(out, files=files or 8, events=events or 1_000_000, compression=compression,
                              seed=seed, workers=workers)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None
    seconds = time.perf_counter() - start
    written = [p for p in paths if stamp(Path(p)) != before.get(p)]
    counts = {}
    for path in paths:
        with uproot.open(path) as f:
            counts[path] = f["Events"].num_entries
        click.echo(f"{path}  {os.path.getsize(path) / 1e6:9.1f} MB  {counts[path]:,} events  "
                   f"{'written' if path in written else 'reused'}")
    total = sum(os.path.getsize(path) for path in paths)
    new = sum(counts[p] for p in written)
    click.echo(f"{len(paths)} files, {total / 1e6:.1f} MB, {sum(counts.values()):,} events, "
               f"{parse_compression(compression)!r}; wrote {len(written)} in {seconds:.1f} s"
               + (f" ({new / seconds / 1e3:.1f} k events/s)" if written else ""))
    if agc:
        from .agcgen import ANALYSIS_BRANCHES, read_fraction
        click.echo(f"the AGC analysis reads {len(ANALYSIS_BRANCHES)} branches: "
                   f"{read_fraction(paths[0]):.1%} of the compressed bytes of {os.path.basename(paths[0])}")
    else:
        click.echo(f"dimuon branches ({', '.join(DIMUON_BRANCHES)}) are "
                   f"{dimuon_fraction(paths[0]):.1%} of the compressed bytes")


if __name__ == "__main__":
    make_data_command()
