"""Run from a checkout: ``rhtc.broker`` is the top-level ``broker/`` folder, and so on.

The repository keeps the folders the users asked for at its top (``broker/ worker/
client/ condor/ bench/ examples/``); the installed distribution has them inside
``rhtc/``. An installed wheel (or the worker's pack) needs nothing from here. In a
checkout, :func:`map_folders` puts one small finder first on :data:`sys.meta_path` that
answers for exactly those six names, so that

* the checkout that provided ``rhtc/__init__.py`` also provides its folders (a second
  checkout or worktree on ``sys.path`` runs its own code, not an editable install's);
* the repository root is never on ``rhtc.__path__``: ``pkgutil.walk_packages`` ends
  (with the root on it, ``rhtc.rhtc.rhtc...`` recursed without end);
* inside the folders, imports between them are written relative
  (``from ..broker import storage``), so a reader who never runs the code sees which
  sibling folder a file uses.

>>> import rhtc, rhtc.broker, pkgutil
>>> rhtc.broker.__name__, all(p != rhtc.__path__[0] for p in rhtc.broker.__path__)
('rhtc.broker', True)
>>> sum(1 for _ in pkgutil.walk_packages(rhtc.__path__, "rhtc.")) < 100
True
"""
from __future__ import annotations

import importlib.abc
import importlib.util
import os
import sys

#: The top-level folders that are subpackages of ``rhtc`` (setup.cfg's package_dir).
FOLDERS = ("broker", "worker", "client", "condor", "bench", "examples")


class FolderFinder(importlib.abc.MetaPathFinder):
    """Finds ``<package>.<folder>`` in ``<root>/<folder>`` for the folders above only."""

    def __init__(self, package: str, root: str):
        self.package, self.root = package, root

    def find_spec(self, fullname, path=None, target=None):
        head, _, name = fullname.partition(".")
        if head != self.package or name not in FOLDERS:
            return None
        folder = os.path.join(self.root, name)
        return importlib.util.spec_from_file_location(
            fullname, os.path.join(folder, "__init__.py"), submodule_search_locations=[folder])

    def __repr__(self) -> str:
        return f"FolderFinder({self.package!r}, {self.root!r})"


def map_folders(package: str, path: list[str]) -> None:
    """Map ``package.<folder>`` to the checkout's folders, if ``package`` runs from one."""
    here = os.path.dirname(os.path.abspath(path[0]) + os.sep)
    root = os.path.dirname(here)
    if os.path.isdir(os.path.join(here, "broker")):  # installed: the folders are inside
        return
    if not os.path.isfile(os.path.join(root, "broker", "__init__.py")):
        return
    if not any(isinstance(f, FolderFinder) and f.root == root for f in sys.meta_path):
        sys.meta_path.insert(0, FolderFinder(package, root))
