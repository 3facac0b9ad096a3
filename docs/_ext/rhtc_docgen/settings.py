"""``reference/settings.md``: every ``RHTC_*`` setting, from the fields of
:class:`rhtc.broker.wire.settings.Settings` and their metadata (so a new setting, or a new kind of
bound in the metadata, appears without touching this page)."""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Callable

from .md import generated_note, table

#: what each known bound in a field's metadata means, as a phrase before its value
BOUNDS = {"refuse_below": "refused below", "minimum": "raised to at least",
          "maximum": "at most", "refuse_above": "refused above"}
#: metadata read into other columns
_SHOWN = {"kind", "env", "doc"}


def _show(value: object, kind: str) -> str:
    if kind == "size" and isinstance(value, (int, float)) and value:
        from rhtc.broker.wire.settings import mib
        return f"{int(value):,} B ({mib(value)})"
    if kind == "bool":
        return "1" if value else "0"
    if kind == "duration" and isinstance(value, (int, float)):
        return f"{value:g} s"
    if value == "":
        return "(empty)"
    return f"{value:g}" if isinstance(value, float) else str(value)


def setting_rows() -> list[tuple[str, str, str, str, str, str]]:
    """(variable, field, kind, default, range, what) for every setting."""
    from rhtc.broker.wire.settings import Settings
    rows = []
    for f in dataclasses.fields(Settings):
        meta = dict(f.metadata)
        kind = meta.get("kind") or type(f.default).__name__
        bounds = [f"{BOUNDS.get(k, k.replace('_', ' '))} {_show(v, kind)}" for k, v in meta.items()
                  if k not in _SHOWN and v is not None]
        rows.append((Settings.env_name(f.name), f.name, kind, _show(f.default, kind),
                     "; ".join(bounds) or "any", meta.get("doc", "")))
    return rows


def page(srcdir: Path, warn: Callable[[str], None]) -> str:
    return "\n".join([
        "# Settings", "",
        generated_note("the fields of `Settings` in `broker/wire/settings.py`"),
        "Every tunable of the broker, the workers and the client is one environment variable, read "
        "once per process. A value that cannot work is refused with "
        "{class}`~rhtc.broker.wire.settings.SettingRefused`, naming the variable and what it takes; a value "
        "that works but is below a useful floor is raised to it. Kinds: *size* takes `64MiB`, "
        "`20GB` or bytes; *duration* takes `8h`, `20m`, `90s` or seconds; *bool* takes 1 or 0.", "",
        table(["variable", "field", "kind", "default", "range", "what it does"],
              [(f"`{v}`", f"`{n}`", k, d, r, w) for v, n, k, d, r, w in setting_rows()]),
    ])
