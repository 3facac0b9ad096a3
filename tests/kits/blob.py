"""What the tests of big results share: tasks whose results travel as blobs beside the
results list (broker/wire/blobs.py: a frame of 256 KiB or more), and the blob keys left in
Redis. This module's functions reach the workers by value (``register_by_value``).
"""
from __future__ import annotations

import numpy as np

from tests.helpers import register_by_value
from tests.kits.merge import counted

register_by_value(__name__)


def counted_big(args):
    """:func:`tests.kits.merge.counted` with 320 kB of incompressible floats beside it."""
    return {"c": counted(args), "pad": np.random.default_rng(args[1]).random(40_000)}


def noise(i):
    """An incompressible 320 kB array, ``i`` at its first place: a result that travels as a blob."""
    a = np.random.default_rng(i).random(40_000)
    a[0] = i
    return a


def blob_keys(storage) -> list[bytes]:
    """Every blob key under the namespace."""
    return storage.r.keys(storage.keys.blob("*"))
