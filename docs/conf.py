"""Sphinx configuration of the documentation site (``make docs``; Read the Docs reads it too).

Markdown pages (MyST-Parser), an API reference from the docstrings (autodoc + napoleon), the
furo theme, Graphviz diagrams (``{graphviz}`` blocks; ``dot`` from apt's ``graphviz``), and
the pages generated from the code at build time by ``docs/_ext/rhtc_docgen`` (the reference
tables and ``benchmarks.md``), so they cannot drift from it. The build is strict: ``make
docs`` runs ``sphinx-build -W --keep-going -n``, so a broken cross-reference or heading
anchor, a missing reference target or a page outside every toctree fails it.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "_ext"))

project = "redis-htcondor"
author = "the redis-htcondor developers"
copyright = "the redis-htcondor developers"
try:
    from importlib.metadata import version as _version
    release = _version("redis-htcondor")
except Exception:  # a checkout that was never installed
    release = "0+unknown"
version = release

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.graphviz",
    "rhtc_docgen",
]

source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
root_doc = "index"
exclude_patterns = ["_build", "Thumbs.db", ".DS_Store", "**/README.md"]

# --- MyST: [text](page.md#a-heading) links resolve (and are checked) down to level-3 headings
myst_enable_extensions = ["colon_fence", "deflist", "fieldlist"]
myst_heading_anchors = 3
suppress_warnings: list[str] = []

# --- autodoc: the docstrings are the reference (napoleon reads their Args/Returns sections)
autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_default_options = {"members": True, "show-inheritance": True}
napoleon_google_docstring = True
napoleon_numpy_docstring = True
# Optional extras the API imports only when used: mocked when not installed (Read the Docs
# installs only the [docs] extra), so the reference builds without them.
autodoc_mock_imports = [m for m in ("coffea", "XRootD", "fsspec_xrootd", "htcondor", "tornado",
                                    "prometheus_client", "dask", "distributed")
                        if __import__("importlib.util").util.find_spec(m) is None]

# --- nitpicky (-n): every reference must resolve, except to the objects of other projects
# (no intersphinx: the build needs no network) and to the internals the reference leaves out
nitpicky = True
nitpick_ignore_regex = [
    (r"py:.*", r"(numpy|np|awkward|ak|uproot|hist|redis|coffea|dask|distributed|matplotlib|"
               r"collections|concurrent|typing|pathlib|os|subprocess|threading|enum|dataclasses|"
               r"datetime|logging|socket|tornado|psutil|cloudpickle|lz4|types|io|abc)(\..*)?"),
    (r"py:.*", r"(Any|Callable|Iterable|Iterator|Sequence|Mapping|Hashable|Optional|Union|"
               r"NoneType|ellipsis|Path|Figure|Axes|T|R|V|K)"),
    # builtins (autodoc's "Bases:" and type hints name them)
    (r"py:.*", r"(Exception|BaseException|ValueError|TypeError|KeyError|OSError|RuntimeError|"
               r"ConnectionError|UserWarning|Warning|LookupError|object|int|float|str|bytes|bool|"
               r"dict|list|tuple|set|frozenset|None)"),
]

# --- HTML: furo (a theme common in scientific Python; from PyPI)
html_theme = "furo"
html_title = f"redis-htcondor {release}"
html_static_path = ["_static"]
html_extra_path: list[str] = []

graphviz_output_format = "svg"
