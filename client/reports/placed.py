"""What a warm map placed where (:class:`WarmSummary`): chunks and bytes per worker and
per node, read from the warm map's own run record, and whether the broker sees every chunk
held by a live worker afterwards (what the next run's routing looks up).

    >>> from rhtc.client.reports.record import RunRecord
    >>> rec = RunRecord(map_id="w1", function="warm dimuon", start=0.0, end=2.0, n_tasks=2)
    >>> rec.add_task({"index": 0, "worker": "n1-7", "host": "n1", "start": 0, "stop": 1, "bytes_file": 2_000_000})
    >>> rec.add_task({"index": 1, "worker": "n2-8", "host": "n2", "start": 0, "stop": 1, "bytes_disk": 1_000_000})
    >>> s = WarmSummary.of(rec, "map ab12 (dimuon)", ["k0", "k1"], held={"k0": "n1-7", "k1": "n2-8"})
    >>> s.chunks, s.bytes, s.workers["n2-8"], s.not_held
    (2, 3000000, {'host': 'n2', 'chunks': 1, 'bytes': 1000000}, [])
    >>> print(s)                                   # doctest: +NORMALIZE_WHITESPACE
    warmed 2 chunks of map ab12 (dimuon) in 2.0 s (map w1): 3.0 MB (2.0 MB from the files, 1.0 MB from the
    nodes' disk tiers, 0 B already in memory)
      worker  node  chunks  bytes
      n1-7    n1         1  2.0 MB
      n2-8    n2         1  1.0 MB
      node n1: 1 worker, 1 chunk, 2.0 MB
      node n2: 1 worker, 1 chunk, 1.0 MB
    every chunk is held by a live worker (in its memory or its node's disk tier): the next run of the analysis
    reads nothing from the files
"""
from __future__ import annotations

import dataclasses
from typing import Any, Sequence

from .record import RunRecord


def size(n: float) -> str:
    """Bytes in words (decimal units).

    >>> size(0), size(1234), size(5.6e9)
    ('0 B', '1.2 kB', '5.6 GB')
    """
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n} B"                          # (not reached)


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


@dataclasses.dataclass
class WarmSummary:
    """What a warm map placed where; ``str()`` is the text ``rhtc warm`` prints."""

    source: str                      # the run it warmed from, in words
    map_id: str                      # the warm map's id
    seconds: float
    chunks: int                      # chunks read into the caches
    bytes: int                       # bytes the workers now hold for them
    bytes_file: int                  # ... read from the files
    bytes_disk: int                  # ... from the nodes' disk tiers
    bytes_cache: int                 # ... already in the workers' memory
    workers: dict[str, dict]         # worker -> {"host", "chunks", "bytes"}
    nodes: dict[str, dict]           # host -> {"workers", "chunks", "bytes"}
    not_held: list[str]              # routing keys no live worker holds after the warm
    failed: list[str] = dataclasses.field(default_factory=list)   # per file: why its chunks failed
    notes: list[str] = dataclasses.field(default_factory=list)    # what the record could not say

    @classmethod
    def of(cls, record: RunRecord, source: str, keys: Sequence[str], held: dict[str, str],
           failed: Sequence[str] = (), notes: Sequence[str] = ()) -> "WarmSummary":
        """The summary of the warm map whose record is ``record`` (its tasks' result
        metadata), over the chunks ``keys`` (routing keys), ``held``: key -> live worker
        that holds it now (:meth:`broker.storage.Storage.locate`)."""
        workers: dict[str, dict] = {}
        nodes: dict[str, dict] = {}
        sums = dict.fromkeys(("bytes_file", "bytes_disk", "bytes_cache"), 0)
        done = 0
        for task in record.tasks:
            if task.error:
                continue
            done += 1
            got = task.bytes_file + task.bytes_disk + task.bytes_cache
            for name in sums:
                sums[name] += getattr(task, name)
            w = workers.setdefault(task.worker, {"host": task.host, "chunks": 0, "bytes": 0})
            w["chunks"] += 1
            w["bytes"] += got
        for name, w in workers.items():
            node = nodes.setdefault(w["host"] or "?", {"workers": 0, "chunks": 0, "bytes": 0})
            node["workers"] += 1
            node["chunks"] += w["chunks"]
            node["bytes"] += w["bytes"]
        return cls(source=source, map_id=record.map_id, seconds=max(0.0, record.end - record.start),
                   chunks=done, bytes=sum(sums.values()), **sums, workers=workers, nodes=nodes,
                   not_held=[k for k in keys if k not in held], failed=list(failed), notes=list(notes))

    def to_dict(self) -> dict[str, Any]:
        """The JSON-ready dict of the summary."""
        return dataclasses.asdict(self)

    def __str__(self) -> str:
        lines = [f"warmed {_plural(self.chunks, 'chunk')} of {self.source} in {self.seconds:.1f} s "
                 f"(map {self.map_id}): {size(self.bytes)} ({size(self.bytes_file)} from the files, "
                 f"{size(self.bytes_disk)} from the nodes' disk tiers, {size(self.bytes_cache)} already in memory)"]
        if self.workers:
            wide = max(6, *(len(w) for w in self.workers))
            hwide = max(4, *(len(w["host"]) for w in self.workers.values()))
            lines.append(f"  {'worker':<{wide}}  {'node':<{hwide}}  chunks  bytes")
            for name in sorted(self.workers):
                w = self.workers[name]
                lines.append(f"  {name:<{wide}}  {w['host']:<{hwide}}  {w['chunks']:>6}  {size(w['bytes'])}")
            for host in sorted(self.nodes):
                n = self.nodes[host]
                lines.append(f"  node {host}: {_plural(n['workers'], 'worker')}, {_plural(n['chunks'], 'chunk')}, "
                             f"{size(n['bytes'])}")
        for why in self.failed:
            lines.append(f"FAILED {why}")
        lines += [f"note: {note}" for note in self.notes]
        if self.not_held:
            lines.append(f"{_plural(len(self.not_held), 'chunk')} (e.g. {self.not_held[0]}) are held by no live "
                         "worker now: they did not fit in the workers' memory (--cache-size) or their workers "
                         "left; the next run reads them from the nodes' disk tiers, else from the files")
        elif self.chunks and not self.failed:
            lines.append("every chunk is held by a live worker (in its memory or its node's disk tier): the "
                         "next run of the analysis reads nothing from the files")
        return "\n".join(lines)
