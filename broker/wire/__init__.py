"""The wire vocabulary: what the client and the worker agree on, with no Redis in it.

Frames and their signing (:mod:`.protocol`), the messages a worker and a client read
from each other (:mod:`.messages`, :mod:`.resultmeta`, :mod:`.history`, :mod:`.reads`),
the partials' frames (:mod:`.merge`) and big results' stubs (:mod:`.blobs`), the records
kept as JSON (:mod:`.records`), pickling (:mod:`.pickling`), the names of every key
(:mod:`.keys`), the settings and their ranges (:mod:`.settings`, :mod:`.amounts`) and the
broker's address and key (:mod:`.config`).

None of these modules imports ``redis``: the commands that move these bytes live in the
Redis adapter beside this package (:mod:`broker.storage` and its roles), and a test keeps
it so (``tests/unit/test_layout.py``).
"""
