"""Writing generated NanoAOD files: one TTree per file, in batches, several files at once.

Shared by the dimuon generator (:mod:`.dimuon`) and the AGC one (:mod:`bench.agcgen`):
each supplies ``generate(n, rng, first_event, params)`` returning one batch for uproot's
``extend``. A file is written under a temporary name and renamed when complete; a ``.json``
sidecar records its parameters, so a later call with the same parameters reuses it.

    >>> import numpy as np
    >>> def flat(n, rng, first, params): return {"x": rng.random(n, np.float32)}
    >>> p = {"events": 10, "basket_events": 10, "seed": 1, "file_index": 0, "compression": "ZLIB:1"}
    >>> write_files(["writer_doc.root"], [p], flat, progress=False)
    ['writer_doc.root']
"""
from __future__ import annotations

import json
import multiprocessing
import os
import warnings
from concurrent.futures import ProcessPoolExecutor, as_completed
from functools import partial
from pathlib import Path
from typing import Any, Callable, Sequence

import awkward as ak
import numpy as np
import uproot

#: Accepted compression names and the level used for each (LZMA 9 is NanoAOD's default).
COMPRESSIONS: dict[str, tuple[type, int]] = {
    "LZMA": (uproot.LZMA, 9), "ZLIB": (uproot.ZLIB, 1), "LZ4": (uproot.LZ4, 1), "ZSTD": (uproot.ZSTD, 5)}


def parse_compression(name: str) -> uproot.compression.Compression:
    """The uproot compression object for ``"LZMA"``, ``"ZLIB"``, ``"LZ4"`` or ``"ZSTD"``.

    Case-insensitive; ``"NAME:LEVEL"`` overrides the default level.

    >>> parse_compression("lz4"), parse_compression("ZLIB:6")
    (LZ4(1), ZLIB(6))
    """
    codec, _, level = str(name).strip().partition(":")
    if codec.upper() not in COMPRESSIONS:
        raise ValueError(f"unknown compression {name!r}: choose one of "
                         f"{', '.join(COMPRESSIONS)} (case-insensitive, optionally NAME:LEVEL)")
    cls, default = COMPRESSIONS[codec.upper()]
    try:
        return cls(int(level) if level else default)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"bad compression level in {name!r}: {exc}") from None


def _unsigned_counters(tree: Any, file: Any) -> None:
    """Make uproot's generated ``n<Name>`` counters ``uint32`` (as in NanoAODv6).

    uproot 5 always declares counters ``int32``; this rewrites the (still empty) tree's
    metadata with unsigned counters. If uproot's internals change, the counters stay
    ``int32`` (as in NanoAOD v12+) and a warning says so.
    """
    try:
        cascading = tree._cascading
        for datum in cascading._branch_data:
            if datum.get("kind") == "counter" and datum["dtype"] == np.dtype(">i4"):
                datum["dtype"] = np.dtype(">u4")
                datum["fTitle"] = datum["fTitle"][:-1] + "i"
        cascading.write_anew(file._file.sink)
    except (AttributeError, KeyError, TypeError) as exc:  # pragma: no cover - uproot changed
        warnings.warn(f"could not make counters uint32 ({exc}); they stay int32", stacklevel=2)


def is_current(path: Path, params: dict) -> bool:
    """Whether ``path`` exists and was written with exactly ``params``."""
    try:
        meta = json.loads(path.with_name(path.name + ".json").read_text())
        return meta.get("params") == params and path.stat().st_size == meta.get("bytes")
    except (OSError, ValueError):
        return False


def write_file(path: str, params: dict, generate: Callable, progress: Callable[[int], Any] | None = None) -> str:
    """Write one file (into a temporary name, renamed when complete) and its sidecar."""
    target = Path(path)
    part = target.with_name(f".{target.name}.part")
    events, batch = params["events"], params["basket_events"]
    first = params["file_index"] * events + 1
    try:
        with uproot.recreate(part, compression=parse_compression(params["compression"])) as file:
            tree = None
            for b, start in enumerate(range(0, events, batch)):
                key = (params["file_index"], b) if "stream" not in params else (params["stream"], params["file_index"], b)
                ss = np.random.SeedSequence(params["seed"], spawn_key=key)    # "stream": one per sample
                n = min(batch, events - start)
                data = generate(n, np.random.default_rng(ss), first + start, params)
                if tree is None:
                    types = {k: (v.type if isinstance(v, ak.Array) else v.dtype) for k, v in data.items()}
                    tree = file.mktree("Events", types, title="Events",
                                       initial_basket_capacity=-(-events // batch) + 1)
                    _unsigned_counters(tree, file)
                tree.extend(data)
                if progress is not None:
                    progress(n)
    except BaseException:
        part.unlink(missing_ok=True)
        raise
    os.replace(part, target)
    meta = {"params": params, "bytes": target.stat().st_size}
    target.with_name(target.name + ".json").write_text(json.dumps(meta, indent=1))
    return str(target)


def write_files(paths: Sequence[str | os.PathLike[str]], params: Sequence[dict], generate: Callable, *,
                progress: bool = True, workers: int | None = None, desc: str = "writing") -> list[str]:
    """Write the files whose sidecar does not match their params, ``workers`` at a time
    (default one per CPU); returns the paths in order."""
    paths = [Path(p) for p in paths]
    todo = [i for i in range(len(paths)) if not is_current(paths[i], params[i])]
    nproc = max(1, min(len(todo), workers or os.cpu_count() or 1))
    from tqdm.auto import tqdm

    with tqdm(total=sum(params[i]["events"] for i in todo), unit="ev", unit_scale=True,
              disable=not progress or not todo, desc=f"{desc} {len(todo)} file(s)") as bar:
        if nproc == 1:
            for i in todo:
                write_file(str(paths[i]), params[i], generate, bar.update)
        elif todo:  # one file per process; fork, so scripts without a __main__ guard work too
            methods = multiprocessing.get_all_start_methods()
            context = multiprocessing.get_context("fork" if "fork" in methods else "spawn")
            with ProcessPoolExecutor(nproc, mp_context=context) as pool:
                jobs = {pool.submit(partial(write_file, str(paths[i]), params[i], generate)): i for i in todo}
                for job in as_completed(jobs):
                    job.result()
                    bar.update(params[jobs[job]]["events"])
    return [str(p) for p in paths]
