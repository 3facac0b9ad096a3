"""coffea processors on redis-htcondor workers (needs ``pip install 'redis-htcondor[coffea]'``)::

    (a fragment: ``processor`` and a fileset are yours; tests/scenarios/test_coffea_on_workers_answers_as_coffea.py runs the executor)
    >>> from rhtc.coffea import RedisExecutor, worker_cache          # doctest: +SKIP
    >>> run = processor.Runner(executor=RedisExecutor(), cachestrategy=worker_cache)  # doctest: +SKIP

The executor lives in :mod:`rhtc.client.coffea`, the cache strategy (and what runs for an
item on a worker) in :mod:`rhtc.client.data.coffea_items`; this module is the name users
import. ``import rhtc`` alone never imports coffea.
"""
from rhtc.client.coffea import (CoffeaTask, RedisExecutor, WorkItemFailed, describe_item,  # noqa: F401
                                routing_key, worker_cache)

__all__ = ["RedisExecutor", "worker_cache", "WorkItemFailed", "CoffeaTask", "describe_item", "routing_key"]
