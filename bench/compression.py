"""How fast can a dimuon analysis read its branches under each ROOT compression?

NanoAOD is written with LZMA, which packs tightly but decompresses slowly; LZ4 and ZSTD
decompress several times faster. :func:`compression_benchmark` writes the same events
(same seed, via :func:`client.synthetic.make_data`) once per compression, reads the dimuon
branches from each file with uproot in this one process (a first read puts each file in
the page cache; then ``repeats`` timed reads, round robin over the files, of which the
median is kept) and reports file size, read time, events/s, uncompressed MB/s and the
read speed relative to LZMA. ``bench compression`` (:data:`compression_command`) does the
same from the shell.

Generating the LZMA file is the slow part: LZMA at NanoAOD's level 9 compresses at about
1 MB/s (some 20-30 minutes for a million events on a small machine); it happens once, later
runs reuse the files. Level 1 writes about 4x faster and reads just as fast.

Example::

    >>> from rhtc.bench.compression import compression_benchmark
    >>> result = compression_benchmark("codecs", events=2_000, repeats=1, progress=False)
    >>> [row["codec"] for row in result["rows"]]
    ['LZMA', 'ZLIB', 'LZ4', 'ZSTD']
    >>> result["rows"][0]["speed_vs_lzma"]
    1.0
"""
from __future__ import annotations

if __name__ == "compression":
    # Imported by its bare name: bench/ is on sys.path (``python bench/compression.py``) and
    # this file shadows the standard library's ``compression`` package (Python 3.14), which
    # lz4 probes for while uproot is imported. Step aside so lz4 falls back to _compression.
    raise ImportError("bench/compression.py is not the stdlib 'compression' package; "
                      "import it as bench.compression")

import gc
import multiprocessing
import os
import statistics
import time
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from pathlib import Path
from typing import Any, Sequence

import click
import uproot

from . import results
from ..client.synthetic.dimuon import DIMUON_BRANCHES, make_data, parse_compression

#: The compressions compared, LZMA (NanoAOD's default and the baseline) first.
CODECS: tuple[str, ...] = ("LZMA", "ZLIB", "LZ4", "ZSTD")


def _one_file(outdir: str, codec: str, events: int, seed: int) -> str:
    """Write (or reuse) the single file of ``events`` events for one compression."""
    subdir = Path(outdir) / codec.split(":")[0].lower()
    return make_data(subdir, files=1, events=events, compression=codec, seed=seed,
                     progress=False, workers=1)[0]


def _generate(outdir: str | os.PathLike[str], codecs: Sequence[str], events: int, seed: int,
              progress: bool) -> dict[str, str]:
    """One file per compression, written in parallel processes (LZMA, the slowest, first)."""
    from tqdm.auto import tqdm

    methods = multiprocessing.get_all_start_methods()
    context = multiprocessing.get_context("fork" if "fork" in methods else "spawn")
    nproc = max(1, min(len(codecs), os.cpu_count() or 1))
    with ProcessPoolExecutor(nproc, mp_context=context) as pool, \
            tqdm(total=len(codecs), desc=f"files of {events:,} events", unit="file",
                 disable=not progress) as bar:
        pending = {codec: pool.submit(_one_file, str(outdir), codec, events, seed) for codec in codecs}
        paths = {}
        while pending:
            bar.set_postfix_str("writing/checking " + ", ".join(pending))  # also redraws the clock
            done, _ = wait(pending.values(), timeout=1.0, return_when=FIRST_COMPLETED)
            for codec in [c for c, job in pending.items() if job in done]:
                paths[codec] = pending.pop(codec).result()
                bar.update(1)
    return paths


def _read(path: str, branches: Sequence[str]) -> float:
    """Seconds to open ``path`` and read ``branches`` as awkward arrays, single-threaded."""
    start = time.perf_counter()
    with uproot.open(path) as file:
        arrays = file["Events"].arrays(list(branches), library="ak")
    seconds = time.perf_counter() - start
    if len(arrays) == 0:
        raise RuntimeError(f"{path} has no events")
    return seconds


def compression_benchmark(outdir: str | os.PathLike[str], *, events: int = 1_000_000,
                          branches: Sequence[str] = DIMUON_BRANCHES, repeats: int = 3,
                          seed: int = 0, compressions: Sequence[str] = CODECS,
                          progress: bool = True) -> dict[str, Any]:
    """Read ``branches`` of the same ``events`` events stored with each compression.

    Files go to ``outdir/<codec>/nano_gen_000.root`` and are reused when they already
    hold the same events. ``compressions`` accepts ``"NAME"`` or ``"NAME:LEVEL"`` (see
    :func:`client.synthetic.writer.parse_compression`); the ratios are relative to the first LZMA
    entry (or to the first entry if there is no LZMA). With ``progress`` the table is
    printed too.

    Returns a dict with ``events``, ``branches``, ``repeats``, ``seed`` and ``rows``, one
    per compression: ``codec``, ``compression`` (with level), ``file_mb``, ``branches_mb``
    (compressed bytes of the branches read), ``uncompressed_mb``, ``read_s`` (median),
    ``read_s_all``, ``mhz`` (million events/s), ``mb_per_s`` (uncompressed),
    ``speed_vs_lzma`` (LZMA's read time / this one's) and ``size_vs_lzma``.

    >>> r = compression_benchmark("codecs", events=2_000, repeats=1,
    ...                           compressions=("LZ4", "ZSTD"), progress=False)
    >>> sorted(r["rows"][1])[:4]
    ['branches_mb', 'codec', 'compression', 'file_mb']
    """
    if repeats < 1:
        raise ValueError(f"repeats must be at least 1, got {repeats}")
    if not compressions:
        raise ValueError("give at least one compression")
    codecs = [str(c) for c in compressions]
    for codec in codecs:
        parse_compression(codec)  # a bad name fails here, before any file is written
    paths = _generate(outdir, codecs, events, seed, progress)
    rows = []
    for codec in codecs:
        path = paths[codec]
        with uproot.open(path) as file:
            tree = file["Events"]
            missing = [b for b in branches if b not in tree]
            if missing:
                raise KeyError(f"{path} has no branches {missing}; choose from {tree.keys()[:20]}...")
            compressed = sum(tree[b].compressed_bytes for b in branches)
            uncompressed = sum(tree[b].uncompressed_bytes for b in branches)
            level = repr(file.file.compression)
        _read(path, branches)                                # warm the page cache
        rows.append({"codec": codec.split(":")[0].upper(), "compression": level, "path": path,
                     "file_mb": os.path.getsize(path) / 1e6, "branches_mb": compressed / 1e6,
                     "uncompressed_mb": uncompressed / 1e6, "read_s_all": []})
    for _ in range(repeats):  # round robin, so a slow spell of the machine hits every codec
        for row in rows:
            gc.collect()
            row["read_s_all"].append(_read(row["path"], branches))
    for row in rows:
        row["read_s"] = median = statistics.median(row["read_s_all"])
        row["mhz"] = events / median / 1e6
        row["mb_per_s"] = row["uncompressed_mb"] / median
    base = next((r for r in rows if r["codec"] == "LZMA"), rows[0])
    for row in rows:
        row["speed_vs_lzma"] = round(base["read_s"] / row["read_s"], 3)
        row["size_vs_lzma"] = round(row["file_mb"] / base["file_mb"], 3)
    result = {"events": events, "branches": list(branches), "repeats": repeats, "seed": seed,
              "baseline": base["compression"], "rows": rows}
    if progress:
        print(format_table(result))
    return result


def format_table(result: dict[str, Any]) -> str:
    """The results of :func:`compression_benchmark` as a text table.

    >>> row = {"compression": "LZ4(1)", "file_mb": 10.0, "branches_mb": 1.0, "read_s": 0.5,
    ...        "mhz": 2.0, "mb_per_s": 40.0, "speed_vs_lzma": 1.0, "size_vs_lzma": 1.0}
    >>> print(format_table({"events": 10**6, "branches": ["nMuon"], "repeats": 3,
    ...                     "baseline": "LZ4(1)", "rows": [row]}).splitlines()[3])
    LZ4(1)          10.0        1.00      0.500     2.00      40.0     1.00x     1.00x
    """
    lines = [f"{result['events']:,} events, branches {', '.join(result['branches'])}, "
             f"median of {result['repeats']} warm read(s); raw = uncompressed; speedup and "
             f"size relative to {result['baseline']}",
             f"{'compression':<12}{'file MB':>8}{'branch MB':>12}{'read s':>11}{'MHz':>9}"
             f"{'raw MB/s':>10}{'speedup':>10}{'size':>10}",
             "-" * 82]
    for r in result["rows"]:
        lines.append(f"{r['compression']:<12}{r['file_mb']:>8.1f}{r['branches_mb']:>12.2f}"
                     f"{r['read_s']:>11.3f}{r['mhz']:>9.2f}{r['mb_per_s']:>10.1f}"
                     f"{r['speed_vs_lzma']:>9.2f}x{r['size_vs_lzma']:>9.2f}x")
    return "\n".join(lines)


@click.command("compression")
@click.option("--events", default=1_000_000, show_default=True, type=click.IntRange(min=1),
              help="Events per file (the same events for every compression).")
@click.option("--out", "out", default="data/compression", show_default=True,
              type=click.Path(file_okay=False), help="Directory for the generated files.")
@click.option("--repeats", default=3, show_default=True, type=click.IntRange(min=1),
              help="Timed reads per file; the median is reported.")
@click.option("--seed", default=0, show_default=True, type=int, help="Random seed of the events.")
@click.option("--codecs", default=",".join(CODECS), show_default=True,
              help="Comma-separated compressions, NAME or NAME:LEVEL (LZMA:1 writes 4x faster "
                   "than LZMA's default level 9 and reads as fast).")
@click.option("--json", "json_path", default=None, type=click.Path(dir_okay=False),
              help="Also write the results to this JSON file.")
def compression_command(events: int, out: str, repeats: int, seed: int, codecs: str,
                        json_path: str | None) -> None:
    """Compare reading the dimuon branches from LZMA, ZLIB, LZ4 and ZSTD files."""
    start = time.perf_counter()
    try:
        result = compression_benchmark(out, events=events, repeats=repeats, seed=seed,
                                       compressions=[c for c in codecs.split(",") if c.strip()])
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None
    click.echo(f"({time.perf_counter() - start:.1f} s including generating missing files)")
    if json_path:
        results.write(json_path, "compression", result, indent=1)
        click.echo(f"wrote {json_path}")


if __name__ == "__main__":
    compression_command()
