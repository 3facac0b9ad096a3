"""How a :class:`~client.api.MapHandle` shows itself: a small HTML view in Jupyter
(progress, workers busy, a link to the dashboard when one serves the broker), redrawn
once a second until the map is done, and one line in a terminal.

    >>> from rhtc import submit
    >>> h = submit(abs, [-1, -2, -3, -4]); _ = h.wait()
    >>> h
    <MapHandle ... abs: 4/4 results...>
"""
from __future__ import annotations

import html
import logging
import threading
import time

from .dashlink import address_for

log = logging.getLogger("rhtc.client")


def dashboard_address(storage) -> str | None:
    """The address of a dashboard serving this broker, if one runs (never raises)."""
    return address_for(storage)


def announce(handle) -> None:
    """When a map is submitted: say where its dashboard is, as dask's Client does."""
    url = dashboard_address(handle.run.storage)
    if url:
        log.info("map %s (%s): dashboard %s", handle.map_id, handle.run.label, url)


def text_view(handle) -> str:
    url = dashboard_address(handle.run.storage)
    return (f"<MapHandle {handle.map_id} {handle.run.label}: {handle.received}/{handle.run.n} results"
            + (f"; dashboard {url}" if url else "") + ">")


def html_view(handle) -> str:
    run = handle.run
    done, n = handle.received, run.n
    failed = len(handle.failures)
    pct = 100.0 * done / n if n else 100.0
    try:
        live = run.storage.pool.worker_statuses(queue_depths=False)
        busy = f"{sum(1 for w in live if w.task is not None and w.task.map_id == run.map_id)} of {len(live)} workers busy on it"
    except Exception as err:                  # the broker is away: say so, never raise in a repr
        busy = f"workers unknown ({type(err).__name__})"
    url = dashboard_address(run.storage)
    link = (f'<a href="{html.escape(url)}" target="_blank">dashboard</a>' if url else
            "no dashboard runs for this broker (<code>rhtc dashboard</code>, or <code>LocalCluster(dashboard=True)</code>)")
    state = "cancelled" if run.cancelled else ("done" if handle.done() else "running")
    return (f'<div class="rhtc-map" style="font-family:sans-serif;font-size:13px">'
            f"<b>map {html.escape(run.label)}</b> <code>{run.map_id}</code> ({state}): "
            f"{done} / {n} results ({pct:.0f} %){f', {failed} failed' if failed else ''}<br>"
            f'<div style="width:300px;height:10px;background:#e0e0e0;margin:3px 0">'
            f'<div style="width:{pct:.1f}%;height:100%;background:#2e7d32"></div></div>'
            f"{busy}; {link}</div>")


#: how often a displayed handle redraws itself in Jupyter (s)
REDRAW_SECONDS = 1.0


def live_display(handle) -> None:
    """Show ``handle`` in Jupyter and redraw it every :data:`REDRAW_SECONDS` until the map
    is done (a daemon thread; the terminal's text and the tqdm bar are untouched)."""
    from IPython.display import display

    def bundle() -> dict:
        return {"text/html": html_view(handle), "text/plain": text_view(handle)}
    shown = display(bundle(), raw=True, display_id=True)
    if shown is None or handle.done():
        return

    def redraw() -> None:
        while True:
            time.sleep(REDRAW_SECONDS)
            finished = handle.done()
            try:
                shown.update(bundle(), raw=True)
            except Exception as err:           # the kernel went away: stop quietly
                log.debug("map %s: cannot redraw its view: %s", handle.map_id, err)
                return
            if finished:
                return
    threading.Thread(target=redraw, name=f"view-{handle.map_id}", daemon=True).start()
