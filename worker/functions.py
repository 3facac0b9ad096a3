"""A task process's map functions: fetched from the broker by hash the first time a map's
task comes, checked (the hash, the session's signature, the client's Python version)
before they are unpickled, and kept for the next tasks (the 32 most recent).

    (needs a broker: see tests/integration/test_function_library.py)
    >>> fns = Functions(storage, "w1", key)                       # doctest: +SKIP
    >>> fn = fns.get(task.fn_hash, task.map_id)                    # doctest: +SKIP
"""
from __future__ import annotations

import collections

from rhtc.errors import RhtcError
from ..broker.wire import messages, protocol

KEPT = 32                 # functions kept per task process


class SystemFault(RhtcError, Exception):
    """A task cannot run for a reason that is not the user's code: ``kind`` says which
    (the message names the worker, the map and what to do)."""

    def __init__(self, kind: messages.FaultKind, message: str):
        super().__init__(message)
        self.kind = kind


class Functions:
    """The map functions one task process has loaded, most recent last."""

    def __init__(self, storage, name: str, key: bytes):
        self.storage, self.name, self.key = storage, name, key
        self.loaded: collections.OrderedDict[str, object] = collections.OrderedDict()

    def get(self, fn_hash: str, map_id: str):
        """The function ``fn_hash`` of map ``map_id``; raises :class:`SystemFault`."""
        fn = self.loaded.get(fn_hash)
        if fn is not None:
            self.loaded.move_to_end(fn_hash)
            return fn
        name = self.name
        info = self.storage.lease.map_info(map_id)
        ours = protocol.versions()
        theirs = info.get("python", "")
        if theirs and theirs.split(".")[:2] != ours["python"].split(".")[:2]:
            # pickles by value do not travel between Python versions: loading one can
            # crash the interpreter outright, so refuse before trying
            raise SystemFault(messages.FaultKind.VERSION_MISMATCH, f"worker {name} runs Python {ours['python']} but "
                              f"map {map_id} was sent from Python {theirs}: run the workers with the "
                              "client's Python X.Y (`rhtc pack` builds the worker environment for it)")
        blob = self.storage.lease.get_function(fn_hash)
        if blob is None:
            raise SystemFault(messages.FaultKind.MISSING_FUNCTION, f"the function of map {map_id} is not in the "
                              "broker (it expired or the broker restarted); the client re-sends it")
        try:
            protocol.check_function(blob, fn_hash)
        except protocol.FunctionMismatch as err:
            raise SystemFault(messages.FaultKind.FUNCTION_MISMATCH, f"worker {name} refused map {map_id}: {err}")
        try:
            body = protocol.verify(self.key, blob)
        except protocol.BadFrame as err:
            raise SystemFault(messages.FaultKind.BAD_FRAME, f"worker {name} refused the function of map {map_id}: {err}")
        try:
            fn = protocol.loads(body)
        except Exception as err:
            theirs = {k: info.get(k, "?") for k in ("python", "cloudpickle")}
            differ = {k: (theirs[k], ours[k]) for k in theirs if theirs[k] != ours[k]}
            hint = ("; the client runs " + ", ".join(f"{k} {a} and this worker {k} {b}" for k, (a, b)
                                                     in differ.items())) if differ else ""
            raise SystemFault(messages.FaultKind.FUNCTION_LOAD, f"worker {name} cannot load the function of map "
                              f"{map_id}: {type(err).__name__}: {err}{hint}. Install the same packages "
                              "(and versions) on the workers as on the client.")
        self.loaded[fn_hash] = fn
        while len(self.loaded) > KEPT:
            self.loaded.popitem(last=False)
        return fn
