"""What a task read through its chunks, as its result's metadata carries it
(:attr:`ResultMeta.reads <broker.wire.resultmeta.ResultMeta>`): the branches of each chunk, so
that ``rhtc warm`` can read the same ones again into a new pool's caches.

One line per chunk the task read, in the order it first read it:

* the task's own chunk (its argument is the chunk): the branch names alone, comma-separated,
  ``Muon_pt,Muon_eta,nMuon``; a branch read with another uproot ``library`` than the
  default ``"ak"`` is written ``name@library`` (``Muon_pt@np``);
* any other chunk, or names that the short form cannot hold: a JSON list
  ``["file", "tree", entry_start, entry_stop, "uuid", [["Muon_pt", "ak"], ...]]``.

Every task of an analysis reads the same branches, so its line is the same text for all of
them: the client keeps one copy of it (its ledger interns the text) and the run record one
per distinct list (:mod:`client.reports.reads`). A task that read more names than
:data:`MAX_CHARS` says so (:data:`TOO_MANY`) instead of listing them: the metadata stays
small whatever a task does.

    >>> from rhtc.client.data.chunks import Chunk
    >>> own, other = Chunk("/d/a.root", "Events", 0, 10, "u1"), Chunk("/d/a.root", "Events", 10, 20, "u1")
    >>> reads = {own.routing_key: (own, {("Muon_pt", "ak"): None, ("nMuon", "np"): None}),
    ...          other.routing_key: (other, {("Muon_pt", "ak"): None})}
    >>> text = encode_reads(reads, own)
    >>> print(text)
    Muon_pt,nMuon@np
    ["/d/a.root", "Events", 10, 20, "u1", [["Muon_pt", "ak"]]]
    >>> decode_reads(text)
    [(None, (('Muon_pt', 'ak'), ('nMuon', 'np'))), (('/d/a.root', 'Events', 10, 20, 'u1'), (('Muon_pt', 'ak'),))]
"""
from __future__ import annotations

import json
import re
from typing import Any, Mapping

#: the longest list a result carries (characters; the metadata's strings are < 64 KiB)
MAX_CHARS = 32_000
#: what a task that read more than that sends instead
TOO_MANY = "*"
DEFAULT_LIBRARY = "ak"
_SIMPLE = re.compile(r"[A-Za-z0-9_.]+\Z")

#: (file, tree, entry_start, entry_stop, uuid) of a chunk; None: the task's own argument
ChunkId = tuple
#: ((branch, library), ...) in the order first read
Branches = tuple


def chunk_id(chunk: Any) -> ChunkId:
    """(file, tree, entry_start, entry_stop, uuid) of anything shaped like a chunk."""
    return (str(chunk.file), str(chunk.tree), int(chunk.entry_start), int(chunk.entry_stop), str(chunk.uuid))


def encode_reads(reads: Mapping[str, tuple[Any, Mapping[tuple[str, str], None]]], arg: Any) -> str:
    """The text of ``reads`` (routing key -> (chunk, {(branch, library): None})), the
    chunk that is ``arg`` written short; "" when the task read nothing through a chunk."""
    if not reads:
        return ""
    try:
        own = getattr(arg, "routing_key", None)
    except Exception:                  # noqa: BLE001 - a user's argument may raise anything
        own = None
    lines = []
    for key, (chunk, branches) in reads.items():
        short = key == own and _short(branches)
        lines.append(short if short else json.dumps([*chunk_id(chunk), [list(b) for b in branches]]))
    text = "\n".join(lines)
    return text if len(text) <= MAX_CHARS else TOO_MANY


def _short(branches) -> str | None:
    out = []
    for name, library in branches:
        if not _SIMPLE.match(name) or (library != DEFAULT_LIBRARY and not _SIMPLE.match(library)):
            return None
        out.append(name if library == DEFAULT_LIBRARY else f"{name}@{library}")
    return ",".join(out) or None


def decode_reads(text: str) -> list[tuple[ChunkId | None, Branches]]:
    """The (chunk, branches) of :func:`encode_reads`' text, the task's own chunk as None;
    ValueError for :data:`TOO_MANY` or a line that is not of this format.

    >>> decode_reads(""), decode_reads("nMuon")
    ([], [(None, (('nMuon', 'ak'),))])
    """
    if text == TOO_MANY:
        raise ValueError(f"the task read more branches than its result can list ({MAX_CHARS} characters)")
    out = []
    for line in text.split("\n") if text else ():
        if line.startswith("["):
            try:
                file, tree, start, stop, uuid, branches = json.loads(line)
                out.append(((str(file), str(tree), int(start), int(stop), str(uuid)),
                            tuple((str(b), str(lib)) for b, lib in branches)))
            except (ValueError, TypeError) as err:
                raise ValueError(f"not a line of what a task read: {line[:80]!r} ({err})") from None
            continue
        branches = []
        for token in line.split(","):
            name, at, library = token.partition("@")
            if not name:
                raise ValueError(f"not a line of what a task read: {line[:80]!r} (an empty branch name)")
            branches.append((name, library if at else DEFAULT_LIBRARY))
        out.append((None, tuple(branches)))
    return out
