"""``make_chunks``: the analyst's call that splits ROOT files into chunks (file, tree,
entry range), counting their entries here or, with ``remote=True``, on the workers
through :func:`~client.api.remote_map`.

It sits beside the API, not in :mod:`client.data` (which workers import to read a chunk
and which must not load the map engine): counting on the workers is a map.

    >>> chunks = make_chunks("../shared/data/nanoaod/nano_dy.root", step=25)
    >>> len(chunks), chunks[0].entry_stop
    (2, 25)
"""
from __future__ import annotations

from typing import Iterable

from .api import remote_map
from .arguments import positive_count
from .data.chunks import Chunk, ChunkFileError, _expand, _file_info_star, file_info
from .errors import RemoteError

__all__ = ["make_chunks"]


def make_chunks(files: str | Iterable[str], tree: str = "Events", step: int = 100_000, *,
                remote: bool = False, broker=None) -> list[Chunk]:
    """Split ROOT files into chunks of at most ``step`` entries.

    Args:
        files: paths, glob patterns or URLs uproot opens: ``root://host//dir/*.root``
            globs through the server's directory listing.
        tree: the TTree (NanoAOD: ``Events``).
        step: entries per chunk.
        remote: count the entries on the workers through ``remote_map`` (faster for
            hundreds of remote files); ``broker`` as for remote_map.

    Example::

        >>> chunks = make_chunks("../shared/data/nanoaod/*.root", step=50)
        >>> chunks[0]
        Chunk('EGamma_2022E_v13.root', 'Events', 0-50)
        >>> make_chunks("root://eos.example.org//store/nano/*.root", step=500_000)  # doctest: +SKIP

    Every file is opened here (its entries counted, its UUID read), so a missing file, a
    wrong host or a permission problem is a :class:`ChunkFileError` naming the URL before
    any task is queued.
    """
    step = positive_count("step", step, "entries per chunk, e.g. step=100_000")
    if not isinstance(tree, str):
        raise TypeError(f"tree must be the name of the TTree (a string, 'Events' for NanoAOD), "
                        f"not {type(tree).__name__}")
    paths = _expand(files)
    if remote:
        infos = _file_infos_on_workers(paths, tree, broker)
    else:
        infos = [file_info(p, tree) for p in paths]
    chunks = []
    for path, n, uuid in infos:
        for start in range(0, n, step):
            chunks.append(Chunk(path, tree, start, min(n, start + step), uuid))
    return chunks


def _file_infos_on_workers(paths: list[str], tree: str, broker) -> list[tuple[str, int, str]]:
    """file_info of each path, run on the workers; a file that fails there raises the
    same ChunkFileError as here, naming the worker (not a RemoteError)."""
    infos = remote_map(_file_info_star, [(p, tree) for p in paths], broker=broker,
                       progress=True, label="count entries", errors="return")
    for path, info in zip(paths, infos):
        if not isinstance(info, RemoteError):
            continue
        where = f" (on worker {info.worker})" if info.worker else ""
        if isinstance(info.exception, ChunkFileError):
            raise ChunkFileError(f"{info.exception}{where}", info.exception.reason,
                                 info.exception.transient) from info
        raise ChunkFileError(f"{path}: counting its entries failed{where}: {info.remote_type}: "
                             f"{info.message}. Is the file complete and readable on the workers?",
                             "unreadable") from info
    return infos
