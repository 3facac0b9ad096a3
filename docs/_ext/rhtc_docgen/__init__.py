"""The pages of the documentation site that are generated from the code at build time.

Each generated page is committed as a stub (a title under a comment that says where it
comes from, so that the toctree and Sybil find a file); when Sphinx reads it, its text is
replaced by what the page's generator returns (Markdown for MyST), and every build reads it
again (``env-get-outdated``), so the page always says what the code of that build says:

==========================  =====================================================
page                        generated from
==========================  =====================================================
``reference/api.md``        ``rhtc.__all__`` (autodoc of each name), ``rhtc.coffea``
``reference/errors.md``     every ``RhtcError`` subclass (and warning) the library defines
``reference/settings.md``   the fields of ``rhtc.broker.wire.settings.Settings`` and their metadata
``reference/keys.md``       ``rhtc.broker.wire.keys.TEMPLATES`` and the key table of its docstring
``reference/task-states.md``  ``rhtc.client.engine.tasks`` (``TaskState``, ``TRANSITIONS``)
``benchmarks.md``           ``docs/benchmarks/results/*.json`` (see :mod:`rhtc.bench.results`)
==========================  =====================================================

A generator that finds something it cannot place (a key without a description, a result
file without its envelope) says so as a Sphinx warning, which fails ``make docs`` (-W).
References from docstrings to internal modules that the reference does not document
(``:mod:`broker.wire.keys```) render as code instead of failing the nitpicky build; a reference
to a name of the public API that is not documented still fails it.
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable

from docutils import nodes
from sphinx.util import logging

from . import api, benchmarks, errors, keys, settings, states

log = logging.getLogger(__name__)

#: docname -> the function that returns its Markdown
PAGES: dict[str, Callable[..., str]] = {
    "reference/api": api.page,
    "reference/errors": errors.page,
    "reference/settings": settings.page,
    "reference/keys": keys.page,
    "reference/task-states": states.page,
    "benchmarks": benchmarks.page,
}

#: the repository's folders, whose modules docstrings name without the ``rhtc.`` prefix
INTERNAL = ("broker", "client", "worker", "condor", "bench", "examples", "rhtc", "tests")


def warn(docname: str, message: str) -> None:
    """A problem of a generated page (fails the build under -W)."""
    log.warning(f"{docname}: {message}", location=docname)


def _source_read(app, docname: str, source: list[str]) -> None:
    make = PAGES.get(docname)
    if make is None:
        return
    source[0] = make(Path(app.srcdir), lambda msg: warn(docname, msg))


def _draw_figures(app) -> None:
    """Draw the benchmarks' pictures before any page is read, so that any page may show one
    (the benchmarks page, generated, says what it cannot place)."""
    benchmarks.draw_figures(Path(app.srcdir))


def _always_outdated(app, env, added, changed, removed) -> list[str]:
    return [d for d in PAGES if d in env.found_docs and d not in added | changed]


def _missing_reference(app, env, node, contnode):
    """An internal module or object the reference leaves out renders as code; a public name
    (``rhtc.X`` with X in ``rhtc.__all__``) that is missing stays an error."""
    if node.get("refdomain") != "py":
        return None
    target = node.get("reftarget", "")
    import rhtc
    head = target.split(".")[0]
    if head == "rhtc" and target.count(".") == 1 and target.split(".")[1] in rhtc.__all__:
        return None
    if head in INTERNAL or (node.get("py:module") or "").split(".")[0] in INTERNAL:
        return contnode
    return None


def setup(app):
    app.connect("builder-inited", _draw_figures)
    app.connect("source-read", _source_read)
    app.connect("env-get-outdated", _always_outdated)
    app.connect("missing-reference", _missing_reference)
    return {"parallel_read_safe": True, "parallel_write_safe": True, "version": "1"}
