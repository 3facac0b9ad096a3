"""What makes an item run on our workers behave as under coffea's own executors: the
processor's own exception (not coffea's wrapper), the warnings a user would see (not the
libraries' noise), and ``savemetrics`` bytes of the item alone. Used by
:mod:`client.data.coffea_items` on the worker; needs no coffea itself.
"""
from __future__ import annotations

import warnings
from typing import Any

#: How many of one item's warnings (e.g. coffea's "Skipping bad file") come back to the client,
#: after the libraries' own noise (:data:`NOISY_LIBRARIES`) is left out.
MAX_WARNINGS_PER_ITEM = 5
#: Where the warnings come from that are left on the worker: the schema's notes about its
#: own cross-references and the readers' (e.g. NanoAODSchema's "Missing cross-reference
#: index"), the same for every file and not about the user's run.
NOISY_LIBRARIES = ("coffea/nanoevents/", "uproot/", "awkward/")


def _bytes_requested(directory) -> int:
    """The read counter of an open file's source (what coffea's ``savemetrics`` reports)."""
    return int(getattr(getattr(directory.file, "source", None), "num_requested_bytes", 0) or 0)


def _per_item_bytes(out: Any, stand_in: Any) -> None:
    """coffea's ``savemetrics`` reads ``bytesread`` off the file's counter; a kept-open
    file's counter spans every item since it was opened: report this item's bytes only."""
    if stand_in is None or stand_in.bytes_before is None or not isinstance(out, dict):
        return
    metrics = out.get("metrics")
    if isinstance(metrics, dict) and "bytesread" in metrics:
        metrics["bytesread"] = max(0, metrics["bytesread"] - stand_in.bytes_before)


def _processor_error(err: BaseException) -> BaseException:
    """The processor's (or the reader's) own exception: coffea wraps it in a plain
    ``Exception("Failed processing file: ...")``, which ``retry_on`` cannot match."""
    own = err
    while type(own) is Exception and own.__cause__ is not None:
        own = own.__cause__
    return own


def _worth_sending(w: warnings.WarningMessage) -> bool:
    """A warning the user would see with IterativeExecutor, not a library's noise."""
    where = str(w.filename).replace("\\", "/")
    return not any(lib in where for lib in NOISY_LIBRARIES)
