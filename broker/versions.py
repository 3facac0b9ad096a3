"""The versions of the analysis stack in this Python environment.

A result pickled on a node with another numpy (``numpy._core`` vs ``numpy.core``) or
awkward than the client's may not unpickle on the client, so the client, the worker
pack and the worker's heartbeat all speak of the same short list of distributions.
The versions come from the installed distributions' metadata (``importlib.metadata``),
never from importing the packages, so asking is cheap (about a millisecond) and safe
in any process.

Example::

    >>> from rhtc.broker.versions import stack_versions
    >>> v = stack_versions()
    >>> "numpy" in v and v["numpy"][0].isdigit()
    True
"""
from __future__ import annotations

from importlib import metadata

#: The distributions whose versions must agree between the client and its workers,
#: reported whenever they are installed (coffea is optional).
STACK = ("numpy", "awkward", "uproot", "hist", "coffea", "cloudpickle", "lz4")


def stack_versions() -> dict[str, str]:
    """Map each installed distribution of :data:`STACK` to its version string.

    Distributions that are not installed are left out.

    Example::

        >>> from rhtc.broker.versions import stack_versions
        >>> sorted(stack_versions())[:2]  # doctest: +SKIP
        ['awkward', 'cloudpickle']
    """
    found: dict[str, str] = {}
    for name in STACK:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return found
