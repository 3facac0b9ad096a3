"""``reference/api.md``: the public API, one autodoc entry for each name of ``rhtc.__all__``
(errors go to ``errors.md``), grouped; and the optional ``rhtc.coffea`` module."""
from __future__ import annotations

import inspect
from pathlib import Path
from typing import Callable

from .md import autodoc, generated_note

#: section -> the names it shows first; a name of ``rhtc.__all__`` in no section goes to "More"
GROUPS = {
    "Running a map": ["remote_map", "submit", "imap_unordered", "MapHandle", "MapOptions", "TaskResult",
                      "last_map"],
    "Clusters, brokers and workers": ["LocalCluster", "BrokerConfig", "resolve_config", "live_workers"],
    "Data": ["make_chunks", "Chunk", "make_nanoaod"],
}
#: modules an analyst imports besides ``rhtc`` (documented whole), with the extra each needs
MODULES = {"rhtc.coffea": "coffea"}


def _entry(name: str, obj: object) -> list[str]:
    if inspect.isclass(obj):
        return autodoc("autoclass", f"rhtc.{name}", "members")
    return autodoc("autofunction", f"rhtc.{name}")


def page(srcdir: Path, warn: Callable[[str], None]) -> str:
    import rhtc
    objects = {n: getattr(rhtc, n) for n in rhtc.__all__ if n != "__version__"}
    errors = {n for n, o in objects.items() if inspect.isclass(o) and issubclass(o, BaseException)}
    placed = {n for names in GROUPS.values() for n in names}
    for n in placed - set(objects):
        warn(f"docs/_ext/rhtc_docgen/api.py lists {n!r}, which is not in rhtc.__all__: remove it")
    out = ["# API reference", "",
           generated_note("the docstrings of `rhtc`'s public names (`rhtc.__all__`)"),
           "Everything an analyst needs is importable from `rhtc` (`from rhtc import remote_map, "
           "make_chunks`); importing `rhtc` is cheap, each name loads its module on first use. "
           "The errors are on [Errors](errors.md): " +
           ", ".join(f"{{class}}`rhtc.{n}`" for n in sorted(errors)) + ".", ""]
    rest = sorted(set(objects) - placed - errors)
    for title, names in [*GROUPS.items(), ("More", rest)]:
        names = [n for n in names if n in objects]
        if not names:
            continue
        out += [f"## {title}", ""]
        for n in names:
            out += _entry(n, objects[n])
    for module, extra in MODULES.items():
        out += [f"## `{module}`", "",
                f"Needs the `{extra}` extra (`pip install 'redis-htcondor[{extra}]'`); `import rhtc` "
                f"alone never imports it.", "",
                *autodoc("automodule", module, "members", "exclude-members: WorkItemFailed")]
    return "\n".join(out)
