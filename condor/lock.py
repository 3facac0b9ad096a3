"""A lock of the client's environment: the exact versions the worker pack must install.

A result pickled on a node with another numpy than the notebook's (``numpy._core`` vs
``numpy.core``) may not unpickle on the client, so ``rhtc pack`` installs, for the
nodes, the versions installed *here*: it walks the requirements (the project's, and any
``--with coffea`` the user asked for) and all their dependencies through the installed
distributions' metadata (``importlib.metadata``) and pins each as ``name==version``.

A requirement that is not installed in this environment stays unpinned (pip picks a
version for the node). When the nodes run another Python X.Y than the client, a pinned
version may have no wheel there: :func:`rhtc.condor.pack.pack_environment` then drops
that pin, installs what pip finds, and warns naming each package it could not pin.

Example::

    >>> from rhtc.condor.lock import lock_environment
    >>> lock = lock_environment(["numpy>=1.23"])
    >>> lock.pins["numpy"].split(".")[0].isdigit(), lock.missing
    (True, [])
"""
from __future__ import annotations

import dataclasses
import importlib.metadata as md
import re

from packaging.requirements import InvalidRequirement, Requirement


def canonical(name: str) -> str:
    """PEP 503 name: ``Typing_Extensions`` -> ``typing-extensions``.

    >>> canonical("Typing_Extensions")
    'typing-extensions'
    """
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclasses.dataclass
class Lock:
    """``pins``: canonical name -> installed version, for every requirement and dependency
    found here; ``missing``: requirements (by name) not installed here, left unpinned."""

    pins: dict[str, str]
    missing: list[str]

    def constraints(self, drop: set[str] = frozenset()) -> list[str]:
        """``name==version`` lines for a pip constraints file, without the names in ``drop``."""
        return [f"{n}=={v}" for n, v in sorted(self.pins.items()) if n not in drop]


def _installed(name: str) -> md.Distribution | None:
    try:
        return md.distribution(name)
    except md.PackageNotFoundError:
        return None


def lock_environment(requirements: list[str]) -> Lock:
    """Pin ``requirements`` and everything they depend on to this environment's versions.

    Dependencies are followed with the markers evaluated for this Python, including the
    requested extras (``redis[hiredis]`` brings ``hiredis``).

    Example::

        >>> lock_environment(["cloudpickle"]).constraints()[0].startswith("cloudpickle==")
        True
    """
    pins: dict[str, str] = {}
    missing: list[str] = []
    todo: list[Requirement] = []
    for text in requirements:
        try:
            todo.append(Requirement(text))
        except InvalidRequirement:
            missing.append(text)      # a URL or path: pip gets it as written
    seen: set[tuple[str, frozenset]] = set()
    while todo:
        req = todo.pop()
        name = canonical(req.name)
        if (name, frozenset(req.extras)) in seen:
            continue
        seen.add((name, frozenset(req.extras)))
        dist = _installed(name)
        if dist is None:
            if name not in missing and name not in pins:
                missing.append(name)
            continue
        pins[name] = dist.version
        for dep_text in dist.requires or []:
            try:
                dep = Requirement(dep_text)
            except InvalidRequirement:
                continue    # metadata pip would not read either; pip resolves that one itself
            if dep.marker is None or any(dep.marker.evaluate({"extra": e})
                                         for e in (set(req.extras) or {""})):
                todo.append(dep)
    # a dependency reached only through a false marker never lands in pins; fine
    return Lock(pins=pins, missing=[m for m in missing if m not in pins])
