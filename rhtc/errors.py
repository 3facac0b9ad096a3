"""The root of every error this library raises: ``except rhtc.RhtcError`` catches them all.

>>> import rhtc
>>> issubclass(rhtc.RemoteError, rhtc.RhtcError) and issubclass(rhtc.BrokerLost, rhtc.RhtcError)
True
"""
from __future__ import annotations


class RhtcError(Exception):
    """Base class of the errors raised by redis-htcondor (the broker, the client, the
    worker's pack and submit tools). An error in *your* function comes back as
    :class:`rhtc.RemoteError`, which is one too."""


class ReadOnlyArrayError(ValueError, RhtcError):
    """A task wrote in place into an array that a worker's cache served, or tried to make one
    writable again (``x.flags.writeable = True``): every cache tier hands out read-only
    arrays that stay so (so that no task changes what a later one reads). The message
    names the branch; copy it before changing it (``np.array(x)``, ``x.copy()``, ``ak.copy(x)``).
    It reaches the client as the :class:`rhtc.RemoteError` of the task."""
