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
