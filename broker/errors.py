"""What can go wrong between us and Redis, named once.

Redis answers some commands with an error that is not ours to fix and not fatal: it is
out of memory (``OOM``), busy running a script (``BUSY``), loading its data after a
restart (``LOADING``), a replica (``READONLY``; ``UNBLOCKED`` for a blocked read it cut
short when it became one) or unable to save (``MISCONF``). The
connections :mod:`broker.storage` makes raise these as the two exceptions below, so
the rest of the code says what it means (``except BrokerOutOfMemory``) instead of
reading error strings.

    >>> issubclass(BrokerOutOfMemory, BrokerRefused), issubclass(BrokerUnavailable, BrokerRefused)
    (True, True)
"""
from __future__ import annotations

import redis
from redis._parsers import _HiredisParser, _RESP2Parser
from redis.connection import DefaultParser
from rhtc.errors import RhtcError

BrokerRefused = redis.ResponseError     # Redis said no (out of memory, wrong type...)


class BrokerOutOfMemory(redis.exceptions.OutOfMemoryError, RhtcError):
    """Redis refused a write beyond its ``maxmemory``: wait for memory to be freed."""


class BrokerUnavailable(redis.ResponseError, RhtcError):
    """Redis is up but cannot serve now (BUSY, LOADING, READONLY, MISCONF): back off, retry."""


#: errors after which a worker or client backs off and tries again (never exits)
ConnectionProblem = (redis.ConnectionError, redis.TimeoutError, redis.BusyLoadingError, BrokerUnavailable)

#: every error of the broker a worker survives by backing off (connection, busy, full, refused)
BrokerTrouble = ConnectionProblem + (BrokerRefused,)

_OURS = {"OOM": BrokerOutOfMemory, "BUSY": BrokerUnavailable, "LOADING": BrokerUnavailable,
         "READONLY": BrokerUnavailable, "MISCONF": BrokerUnavailable, "MASTERDOWN": BrokerUnavailable,
         "UNBLOCKED": BrokerUnavailable}     # a blocked read cut short: the server became a replica

#: the error codes of a broker that says no (the reaper counts them: ``broker/lua/lib.lua``)
REFUSAL_CODES = tuple(_OURS)


def _parser(base):
    def parse_error(cls, response):
        code = response.split(" ")[0]
        if code in _OURS:
            return _OURS[code](response)
        # an error inside a script keeps its own code after the "ERR Error running script" text
        for inner, kind in _OURS.items():
            if f" {inner} " in response[:200] and "script" in response[:200]:
                return kind(response)
        return base.parse_error.__func__(cls, response)
    return type(f"Rhtc{base.__name__}", (base,), {"parse_error": classmethod(parse_error)})


#: the parser class our connections use (``parser_class=`` of redis-py)
PARSER = _parser(_HiredisParser if DefaultParser is _HiredisParser else _RESP2Parser)
