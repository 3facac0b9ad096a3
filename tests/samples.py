"""Where the real CMS NanoAOD samples are: the one place the tests and the pools look.

Beside the checkout (``../shared/data/nanoaod``), where the development machines keep them
(a worktree or a CI checkout elsewhere), or ``$RHTC_NANOAOD``.
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_SAMPLE_DIRS = [ROOT.parent / "shared" / "data" / "nanoaod", Path("/work/shared/data/nanoaod")]
NANOAOD = Path(os.environ.get("RHTC_NANOAOD") or next(
    (d for d in _SAMPLE_DIRS if (d / "nano_dy.root").exists()), _SAMPLE_DIRS[0]))
#: the two files the dimuon example reads
DIMUON_FILES = [NANOAOD / n for n in ("nano_dimuon.root", "nano_dy.root")]
#: tests that read the real CMS NanoAOD samples skip, saying so, where they are absent
needs_nanoaod = pytest.mark.skipif(not (NANOAOD / "nano_dy.root").exists(),
                                   reason=f"real NanoAOD samples not found in {NANOAOD} (set RHTC_NANOAOD)")
