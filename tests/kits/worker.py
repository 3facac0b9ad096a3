"""The worker's process, for the tests that look at it from two sides (pure, and with real
processes): a shared-state block left as a writer frozen inside a write leaves it, and the
modules a worker that reads chunks must never load."""
from __future__ import annotations

from rhtc.worker.shared import SharedState

#: what a worker that reads chunks must never load (DESIGN.md: the client's engine,
#: the analyst's API on top of it, handles and the operator's tools)
NEVER = ("rhtc.client.engine", "rhtc.client.api", "rhtc.client.handle", "rhtc.client.handleview",
         "rhtc.client.ops", "rhtc.client.local", "rhtc.client.chunking", "rhtc.client.warm")


def frozen_inside_a_write(shared: SharedState) -> None:
    """The block as a writer leaves it when it stops between its two ``seq`` bumps."""
    shared.b.seq += 1
