"""Results the client cannot decode are that task's RemoteError; the rest of the map
goes on, with real workers and a real broker."""
from __future__ import annotations

import pytest

from rhtc import RemoteError, remote_map


def worker_only(x):
    """Return, for x == 1, an object of a class whose module exists only on the worker."""
    if x != 1:
        return x * 10
    import sys
    import types
    mod = types.ModuleType("rhtc_worker_only_mod")
    cls = type("Thing", (), {"__module__": "rhtc_worker_only_mod"})
    mod.Thing = cls
    sys.modules[mod.__name__] = mod
    return cls()


def test_undecodable_result_is_returned_in_place(broker, workers):
    workers.start(1)
    out = remote_map(worker_only, [0, 1, 2, 3], broker=broker, progress=False, errors="return")
    assert out[0] == 0 and out[2] == 20 and out[3] == 30
    err = out[1]
    assert isinstance(err, RemoteError) and err.index == 1
    assert "rhtc_worker_only_mod" in str(err) and err.remote_type == "UndecodableResult"
    assert err.worker                                        # names the worker it came from


def test_undecodable_result_raises_remote_error_not_module_not_found(broker, workers):
    workers.start(1)
    with pytest.raises(RemoteError, match="rhtc_worker_only_mod") as info:
        remote_map(worker_only, [0, 1, 2], broker=broker, progress=False)
    assert not isinstance(info.value, ModuleNotFoundError)
