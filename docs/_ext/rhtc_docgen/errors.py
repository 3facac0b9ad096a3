"""``reference/errors.md``: every error class the library defines (each subclass of
:class:`rhtc.RhtcError`, and the library's warnings), found by importing the library's
modules, with its docstring (autodoc)."""
from __future__ import annotations

import importlib
import inspect
import pkgutil
from pathlib import Path
from typing import Callable

from .md import autodoc, generated_note

#: the library's subpackages whose modules raise errors at an analyst (bench and examples are tools)
LIBRARY = ("rhtc.broker", "rhtc.client", "rhtc.worker", "rhtc.condor")
#: optional extras a module may need; without them the module is skipped (Read the Docs)
OPTIONAL = ("coffea", "XRootD", "fsspec_xrootd", "htcondor", "tornado", "prometheus_client", "dask")


def library_modules(warn: Callable[[str], None]) -> list:
    import rhtc
    mods = [rhtc, importlib.import_module("rhtc.errors")]
    for pkg_name in LIBRARY:
        pkg = importlib.import_module(pkg_name)
        mods.append(pkg)
        for info in pkgutil.walk_packages(pkg.__path__, pkg_name + "."):
            if info.name.endswith("__main__"):
                continue
            try:
                mods.append(importlib.import_module(info.name))
            except ImportError as exc:
                if getattr(exc, "name", None) and exc.name.split(".")[0] in OPTIONAL:
                    continue
                warn(f"cannot import {info.name} to find its errors: {exc}")
    return mods


def error_classes(warn: Callable[[str], None] = lambda m: None) -> list[tuple[str, type]]:
    """(documented name, class) of every error and warning class the library defines: public
    ones by their ``rhtc.X`` name, the others by their module's."""
    import rhtc
    from rhtc.errors import RhtcError
    public = {}
    for name in rhtc.__all__:
        try:
            obj = getattr(rhtc, name)
        except ImportError:
            continue
        if inspect.isclass(obj):
            public[obj] = f"rhtc.{name}"
    found: dict[type, str] = {}
    for mod in library_modules(warn):
        for _, obj in inspect.getmembers(mod, inspect.isclass):
            if obj.__module__ != mod.__name__ or not issubclass(obj, (RhtcError, Warning)):
                continue
            found[obj] = public.get(obj) or f"{obj.__module__}.{obj.__qualname__}"
    found.setdefault(RhtcError, "rhtc.RhtcError")
    return sorted(((n, c) for c, n in found.items()), key=lambda nc: (nc[0].count(".") > 1, nc[0].lower()))


def page(srcdir: Path, warn: Callable[[str], None]) -> str:
    classes = error_classes(warn)
    out = ["# Errors", "",
           generated_note("the exception classes of the library (every subclass of `rhtc.RhtcError`)"),
           "Every error the library raises is a {class}`rhtc.RhtcError` (`except rhtc.RhtcError` "
           "catches them all), and most also derive from the built-in exception a caller would "
           "expect (a `KeyError` for a branch that is not there, a `ConnectionError` for a lost "
           "broker). An error in *your* function comes back as {class}`rhtc.RemoteError`. Each "
           "message names the thing that is wrong and what to do; [Troubleshooting](../troubleshooting.md) "
           "goes from symptoms to causes.", "",
           "## Raised to an analyst", ""]
    internal = False
    for name, cls in classes:
        if name.count(".") > 1 and not internal:
            out += ["## Raised inside the library", "",
                    "Raised by the broker, the workers and the tools; most reach you as the cause "
                    "of one of the errors above, or in a message.", ""]
            internal = True
        directive = "autoexception" if issubclass(cls, BaseException) else "autoclass"
        out += autodoc(directive, name, "members", "show-inheritance")
    return "\n".join(out)
