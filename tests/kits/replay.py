"""Shared parts of the replay tests (a password-only attacker: knows the Redis password, not
the signing key), used by tests/scenarios/test_replayed_and_forged_frames.py,
tests/scenarios/test_frames_replayed_after_the_map_ended.py and
tests/scenarios/test_scripts_as_functions_on_real_workers.py: the user's function that
leaves one file per run, how many times it ran, a client with chosen settings, and the
problems the broker recorded."""
from __future__ import annotations

import dataclasses
import uuid
from pathlib import Path

from rhtc.broker.storage import Storage
from rhtc.broker.wire.config import settings


def touch(arg):
    """The user's function: leaves one file per run (``tag-index-<random>``)."""
    folder, tag, index = arg
    Path(folder, "runs", f"{tag}-{index}-{uuid.uuid4().hex}").touch()
    return index * index


def runs(folder: Path, tag: str) -> dict[int, int]:
    """How many times the function ran on each index of ``tag``."""
    out: dict[int, int] = {}
    for p in (folder / "runs").iterdir():
        t, index, _ = p.name.split("-")
        if t == tag:
            out[int(index)] = out.get(int(index), 0) + 1
    return out


def client(broker, **options) -> Storage:
    """A client's storage with these settings (those that exist: the tests also run on the
    code before the fix, to see them fail)."""
    known = {f.name for f in dataclasses.fields(settings())}
    return Storage(broker.config, dataclasses.replace(settings(), **{k: v for k, v in options.items()
                                                                     if k in known}))


def problems(storage: Storage) -> str:
    return "\n".join(p["message"] for p in storage.recent_problems(200))
