"""Every example runs: each ``python`` block of README.md and docs/*.md, a page's blocks in
order in one namespace (the conventions and what a block can rely on: tests/docs/examples.py).
A page that maps runs in the full suite in one shared LocalCluster; the others are quick."""
from __future__ import annotations

import os

import pytest

from tests.docs.examples import DATA_EVENTS, DATA_FILES, PAGES, available, blocks, needs_cluster


@pytest.fixture(scope="session")
def docs_data(tmp_path_factory):
    """A directory whose data/generated/*.root are the examples' small NanoAOD files."""
    from rhtc import make_nanoaod
    home = tmp_path_factory.mktemp("docs-examples")
    make_nanoaod(home / "data" / "generated", files=DATA_FILES, events=DATA_EVENTS, compression="LZ4",
                 progress=False, workers=1)
    return home


@pytest.fixture(scope="session")
def docs_cluster(docs_data):
    """The one local cluster the mapping pages share (two workers), stopped at the end. Its
    workers start in the pages' directory: ``make_chunks("data/generated/*.root")`` keeps the
    paths relative, so the workers must resolve them where the page does (as a notebook's
    own default cluster does)."""
    from rhtc import LocalCluster
    here = os.getcwd()
    os.chdir(docs_data)
    try:
        cluster = LocalCluster(n_workers=2).__enter__()
    finally:
        os.chdir(here)
    try:
        yield cluster
    finally:
        cluster.__exit__(None, None, None)


def _params():
    for page in PAGES:
        found = blocks(page)
        if not found:
            continue
        heavy = needs_cluster(page)
        yield pytest.param(page, heavy, id=page, marks=[pytest.mark.heavy] if heavy else [])


@pytest.mark.timeout(300)
@pytest.mark.parametrize("page, heavy", list(_params()))
def test_page_examples_run(page, heavy, request, docs_data, monkeypatch):
    if heavy:
        request.getfixturevalue("docs_cluster")
    monkeypatch.chdir(docs_data)
    can = available()
    skipped = []
    for block in blocks(page):
        missing = [r for r in block.requires if r not in can]
        if missing:
            skipped.append(f"line {block.line} (requires {', '.join(missing)})")
            continue
        try:
            block.example.evaluate()
        except Exception as exc:
            raise AssertionError(f"{page}, the block at line {block.line} failed: {exc!r}\n{block.source}") from exc
    if skipped:
        request.node.add_report_section("call", "docs", "not run: " + "; ".join(skipped) +
                                        " ($RHTC_DOCS_REQUIRES names what this machine has)")
