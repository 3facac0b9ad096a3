"""Which branches of which chunks a map's tasks read: the part of a run record that
``rhtc warm`` reads again (:mod:`client.warm`).

Every worker says in each result what the task read (:mod:`broker.wire.reads`); the record keeps
it in a few flat columns, one row per chunk a task read (task, file, entry range, branch
list), with each file and each distinct list of branches written once. An analysis reads
the same branches in every task, so a map of a million chunks costs about 40 bytes a row
in memory and a few dozen characters a row in the JSON, however many branches it reads.

    >>> from rhtc.client.data.chunks import Chunk
    >>> args = [Chunk("/d/a.root", "Events", 0, 10, "u1"), Chunk("/d/a.root", "Events", 10, 20, "u1")]
    >>> table = ChunkReads()
    >>> table.add(0, "Muon_pt,nMuon", args[0])
    >>> table.add(1, "Muon_pt,nMuon", args[1])
    >>> table.add(1, "Muon_pt", args[1])                 # a second result for a task replaces its first
    >>> [(c[2:4], [b for b, _ in branches]) for c, branches in table.chunks()]
    [((0, 10), ['Muon_pt', 'nMuon']), ((10, 20), ['Muon_pt'])]
    >>> ChunkReads.from_dict(table.to_dict()) == table, len(table.branch_lists)
    (True, 2)
"""
from __future__ import annotations

from array import array
from typing import Any, Mapping

from ...broker.wire.reads import chunk_id, decode_reads

_COLUMNS = ("index", "file", "start", "stop", "branches")


class ChunkReads:
    """The rows (task, chunk, branches) of what a map's tasks read; see the module."""

    def __init__(self) -> None:
        self.files: list[tuple[str, str, str]] = []                   # (file, tree, uuid)
        self.branch_lists: list[tuple[tuple[str, str], ...]] = []   # ((branch, library), ...)
        self.columns = {name: array("q") for name in _COLUMNS}
        self.unlisted: list[int] = []       # tasks that read more than a result lists (broker.wire.reads.TOO_MANY)
        self.unresolved: list[int] = []     # tasks that read their own chunk, their argument unknown here
        self._file_ids: dict[tuple, int] = {}
        self._list_ids: dict[tuple, int] = {}
        self._decoded: dict[str, list] = {}   # each distinct text decoded once
        self._seen = bytearray()              # per task index: 1 when it has rows

    def __len__(self) -> int:
        return len(self.columns["index"])

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ChunkReads) and self.to_dict() == other.to_dict()

    def add(self, index: int, text: str, arg: Any = None) -> None:
        """Note what task ``index`` read (``text``: its result's ``reads``; ``arg``: its
        argument, for the chunk written short). A second call for a task replaces the first."""
        if index < len(self._seen) and self._seen[index]:
            self._drop(index)
        try:
            reads = self._decoded.get(text)
            if reads is None:
                reads = self._decoded[text] = decode_reads(text)
        except ValueError:
            self.unlisted.append(index)
            return
        for chunk, branches in reads:
            if chunk is None:
                try:
                    chunk = chunk_id(arg)
                except (AttributeError, TypeError, ValueError):
                    self.unresolved.append(index)
                    continue
            self._row(index, chunk, branches)

    def _row(self, index: int, chunk: tuple, branches: tuple) -> None:
        file, tree, start, stop, uuid = chunk
        fid = self._file_ids.get((file, tree, uuid))
        if fid is None:
            fid = self._file_ids[(file, tree, uuid)] = len(self.files)
            self.files.append((file, tree, uuid))
        lid = self._list_ids.get(branches)
        if lid is None:
            lid = self._list_ids[branches] = len(self.branch_lists)
            self.branch_lists.append(branches)
        for name, value in zip(_COLUMNS, (index, fid, start, stop, lid)):
            self.columns[name].append(value)
        if index >= len(self._seen):
            self._seen.extend(bytes(index + 1 - len(self._seen)))
        self._seen[index] = 1

    def _drop(self, index: int) -> None:
        """Forget the rows of task ``index`` (rare: a task whose result came twice)."""
        keep = [k for k, i in enumerate(self.columns["index"]) if i != index]
        self.columns = {name: array("q", (col[k] for k in keep)) for name, col in self.columns.items()}
        self.unlisted = [i for i in self.unlisted if i != index]
        self.unresolved = [i for i in self.unresolved if i != index]
        self._seen[index] = 0

    def chunks(self) -> list[tuple[tuple, tuple[tuple[str, str], ...]]]:
        """Each chunk read, once, as ((file, tree, entry_start, entry_stop, uuid), branches),
        in the order of the first task that read it; its branches are those of every task
        that read it, in the order first read."""
        merged: dict[tuple, tuple[int, dict]] = {}
        c = self.columns
        for index, fid, start, stop, lid in zip(c["index"], c["file"], c["start"], c["stop"], c["branches"]):
            file, tree, uuid = self.files[fid]
            key = (file, tree, start, stop, uuid)
            first, branches = merged.setdefault(key, (index, {}))
            if index < first:
                merged[key] = (index, branches)
            branches.update(dict.fromkeys(self.branch_lists[lid]))
        return [(key, tuple(b)) for key, (_, b) in sorted(merged.items(), key=lambda kv: kv[1][0])]

    def to_dict(self) -> dict[str, Any]:
        """The JSON-ready form (the run record's ``reads``)."""
        return {"files": [list(f) for f in self.files],
                "branch_lists": [[list(b) for b in branches] for branches in self.branch_lists],
                "tasks": {name: col.tolist() for name, col in self.columns.items()},
                "unlisted": list(self.unlisted), "unresolved": list(self.unresolved)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "ChunkReads":
        """Rebuild from :meth:`to_dict`; ValueError naming what is wrong."""
        table = cls()
        try:
            files = [(str(f), str(t), str(u)) for f, t, u in data.get("files") or []]
            lists = [tuple((str(b), str(lib)) for b, lib in branches) for branches in data.get("branch_lists") or []]
            tasks = data.get("tasks") or {}
            columns = {name: array("q", (int(v) for v in tasks.get(name) or [])) for name in _COLUMNS}
            table.unlisted = [int(i) for i in data.get("unlisted") or []]
            table.unresolved = [int(i) for i in data.get("unresolved") or []]
        except (TypeError, ValueError) as err:
            raise ValueError(f"reads: {err}") from None
        if len({len(col) for col in columns.values()}) > 1:
            raise ValueError("reads: its task columns have different lengths")
        if any(not 0 <= i < len(files) for i in columns["file"]) or \
                any(not 0 <= i < len(lists) for i in columns["branches"]):
            raise ValueError("reads: a row names a file or a branch list that is not in the record")
        for row in zip(*(columns[name] for name in _COLUMNS)):
            index, fid, start, stop, lid = row
            file, tree, uuid = files[fid]
            table._row(index, (file, tree, start, stop, uuid), lists[lid])
        return table
