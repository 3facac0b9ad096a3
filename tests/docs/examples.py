"""The code blocks of the README and of the documentation's pages, as Sybil reads them.

Every ```` ```python ```` block of ``README.md`` and ``docs/**/*.md`` runs (tests/docs/
test_examples.py), the blocks of one page in order, in one namespace. The conventions a
page's writer uses (docs/index.md repeats them):

* ``<!-- skip: next -->`` right before a block: not run (Sybil's own skip; for output-only
  or pseudo blocks, keep rare).
* ``<!-- requires: condor -->`` (or ``slurm``, ``xrootd``) right before a block: the block
  needs that pool or server, and runs only when ``$RHTC_DOCS_REQUIRES`` names it
  (comma-separated; not yet wired to the suite's pools: skipped, saying so, otherwise).

What a block can rely on: the page runs in a directory of its own whose
``data/generated/*.root`` are small generated NanoAOD files (2 files x 20,000 events, LZ4,
made by ``rhtc.make_nanoaod``: the README's Quickstart reads them), the real samples are at
``/work/shared/data/nanoaod`` (or ``$RHTC_NANOAOD``), and a page that maps (``remote_map``,
``submit``, ``LocalCluster``...) runs in the full suite inside one shared two-worker
``LocalCluster`` that every such page uses (a ``with LocalCluster(...)`` of its own still
makes its own). A page whose blocks start no process stays in the quick tier.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from sybil import Sybil
from sybil.parsers.myst import PythonCodeBlockParser, SkipParser

ROOT = Path(__file__).resolve().parents[2]
#: the pages whose blocks run: the README and every Markdown page of the site
PAGES = ["README.md", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").rglob("*.md")
                              if "_build" not in p.parts)]
REQUIRES = re.compile(r"<!--\s*requires:\s*([\w, -]+?)\s*-->\s*$")
#: a block that calls one of these starts a broker and workers (the full suite only)
MAPS = re.compile(r"\b(remote_map|submit|imap_unordered|LocalCluster|live_workers|RedisExecutor|"
                  r"submit_workers)\s*\(")
#: what the docs-example data looks like (small: a page's run must stay fast)
DATA_FILES, DATA_EVENTS = 2, 20_000

_SYBIL = Sybil(parsers=[PythonCodeBlockParser(), SkipParser()])


@dataclass
class Block:
    """One runnable example: where it is and what it needs."""
    example: object
    line: int
    source: str
    requires: list[str] = field(default_factory=list)


def blocks(page: str) -> list[Block]:
    """The examples of ``page`` in order (skip markers included: Sybil evaluates them)."""
    document = _SYBIL.parse(ROOT / page)
    out = []
    for example in document.examples():
        before = document.text[:example.region.start].rstrip()
        last = before.splitlines()[-1] if before else ""
        m = REQUIRES.search(last)
        source = document.text[example.region.start:example.region.end]
        out.append(Block(example, example.line, source,
                         [r.strip() for r in m.group(1).split(",")] if m else []))
    return out


def needs_cluster(page: str) -> bool:
    """Whether a runnable block of ``page`` maps (so the page runs in the full suite)."""
    return any(MAPS.search(b.source) and not b.requires for b in blocks(page))


def available() -> set[str]:
    return {r.strip() for r in os.environ.get("RHTC_DOCS_REQUIRES", "").split(",") if r.strip()}
