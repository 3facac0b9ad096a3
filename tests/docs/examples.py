"""The code blocks of the README and of the documentation's pages, as Sybil reads them.

Every ```` ```python ```` block of ``README.md`` and ``docs/**/*.md`` runs (tests/docs/
test_examples.py), the blocks of one page in order, in one namespace. The conventions a
page's writer uses (docs/index.md repeats them):

* ``<!-- skip: next -->`` right before a block: not run (Sybil's own skip; for output-only
  or pseudo blocks, keep rare).
* ``<!-- requires: condor -->`` (or ``xrootd``, ``slurm``) right before a block: the block
  needs that pool or server. It runs in the full suite against the suite's real one: where
  this machine cannot bring it up, the page is skipped saying why, and under
  ``$RHTC_REQUIRE_POOLS`` / ``$CI`` it fails instead, as the pool tests do.

  - ``condor``: the whole page runs in tests/docs/test_pool_examples.py, in a client inside
    the suite's HTCondor pool (tests/pools/) with the workers' Python, from a directory on
    the pool's shared filesystem that holds what the page's shell steps made: the broker's
    config (the default, ``$RHTC_CONFIG``), ``rhtc-env.tar.gz``, ``rhtc-logs/`` and two
    workers submitted with ``condor_submit condor/workers.sub``.
  - ``xrootd``: Debian's ``xrootd-server`` is installed (apt-get) and the XRootD client
    importable; the block starts its own server (``rhtc.bench.xrootd_server``).
  - ``slurm``: not wired yet: a block that needs it fails, saying so (wire it beside condor).

What a block can rely on: the page runs in a directory of its own whose
``data/generated/*.root`` are small generated NanoAOD files (2 files x 20,000 events, LZ4,
made by ``rhtc.make_nanoaod``: the README's Quickstart reads them; the directory is
world-readable, so a server that drops root can serve it), the real samples are at
``/work/shared/data/nanoaod`` (or ``$RHTC_NANOAOD``), and a page that maps (``remote_map``,
``submit``, ``LocalCluster``...) runs in the full suite inside one shared two-worker
``LocalCluster`` that every such page uses (a ``with LocalCluster(...)`` of its own still
makes its own). A page whose blocks start no process and need nothing stays in the quick tier.
"""
from __future__ import annotations

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
#: what ``requires:`` may name: the pools (a page with such a block runs whole in
#: tests/docs/test_pool_examples.py) and the servers (a block of a page of test_examples.py)
POOLS = ("condor", "slurm")
SERVERS = ("xrootd",)

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


def requirements(page: str) -> set[str]:
    """What the ``requires:`` markers of ``page`` name."""
    return {r for b in blocks(page) for r in b.requires}


def pool_of(page: str) -> str | None:
    """The pool a block of ``page`` requires (the page then runs whole in that pool), or None."""
    pools = sorted(requirements(page) & set(POOLS))
    if len(pools) > 1:
        raise ValueError(f"{page} has blocks for {' and '.join(pools)}: a page runs in one pool; "
                         "split it, or mark its blocks for one")
    return pools[0] if pools else None


def unknown_requirements(page: str) -> list[str]:
    """``requires:`` names on ``page`` that the suite does not know (with their lines)."""
    known = set(POOLS) | set(SERVERS)
    return [f"line {b.line}: requires {r!r}" for b in blocks(page) for r in b.requires if r not in known]


def needs_cluster(page: str) -> bool:
    """Whether a runnable block of ``page`` maps (so the page runs in the full suite)."""
    return any(MAPS.search(b.source) for b in blocks(page))
