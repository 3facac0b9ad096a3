"""The dashboard during a map on many workers: a screenshot for the docs, and what the open
page costs the broker (Redis commands per second, from INFO commandstats).

    python -m rhtc.bench.dashshot --workers 150 --out docs/dashboard.png

Starts a LocalCluster with its dashboard, opens the page in Debian's headless chromium
(``apt-get install chromium chromium-driver``; ``pip install selenium``), runs a map over
the real NanoAOD samples (once from the files, once again from the caches), saves the
screenshot during the second map, and measures the page's cost with the workers idle:
commands per second with no page open, then with the page open.
"""
from __future__ import annotations

import json
import random
import shutil
import tempfile
import time

import click


def pt_sum_and_nap(chunk):
    """Read a branch through the worker's cache, then take a while (so the stream has blocks)."""
    import awkward as ak
    a = chunk.arrays(["Muon_pt"], how=dict)
    time.sleep(random.uniform(3.0, 8.0))
    if chunk.entry_start == 13 and "dy" in chunk.file:
        raise ValueError(f"an example error for the page: chunk {chunk}")
    return float(ak.sum(a["Muon_pt"]))


def _browser(width: int, height: int):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    opts = webdriver.ChromeOptions()
    opts.binary_location = shutil.which("chromium")
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--disable-dev-shm-usage", f"--window-size={width},{height}",
                 f"--user-data-dir={tempfile.mkdtemp(prefix='rhtc-chromium-')}"):
        opts.add_argument(flag)
    return webdriver.Chrome(options=opts, service=Service(shutil.which("chromedriver")))


def _rate(storage, seconds: float) -> tuple[float, dict]:
    from ..broker.feed import command_counts
    before = command_counts(storage)
    time.sleep(seconds)
    after = command_counts(storage)
    diff = {k: v - before.get(k, 0) for k, v in after.items() if v - before.get(k, 0) > 0}
    diff["info"] = diff.get("info", 1) - 1                  # our own INFO
    return sum(diff.values()) / seconds, {k: round(v / seconds, 1) for k, v in sorted(diff.items()) if v}


@click.command()
@click.option("--workers", default=150, show_default=True)
@click.option("--out", default="docs/dashboard.png", show_default=True)
@click.option("--measure", default=30.0, show_default=True, help="Seconds of each cost measurement.")
def main(workers: int, out: str, measure: float) -> None:
    from rhtc import LocalCluster, make_chunks, submit
    from ..broker.storage import Storage
    from tests.samples import DIMUON_FILES
    chunks = make_chunks([str(p) for p in DIMUON_FILES], step=1) * 3
    with LocalCluster(workers, dashboard=True, start_timeout=900, name_prefix="n") as c:
        print(f"{workers} workers up; dashboard {c.dashboard_link}", flush=True)
        storage = Storage(c.config)
        idle, idle_by = _rate(storage, measure)
        browser = _browser(1600, 1500)
        try:
            browser.get(c.dashboard_link)
            time.sleep(3)
            open_rate, open_by = _rate(storage, measure)
            submit(pt_sum_and_nap, chunks, broker=c, errors="return", label="pt_sum (files)").wait(900)
            h = submit(pt_sum_and_nap, chunks, broker=c, errors="return", label="pt_sum (cached)")
            time.sleep(6)
            browser.save_screenshot(out)
            print(f"screenshot during map {h.map_id}: {out}", flush=True)
            h.wait(900)
            time.sleep(2)
            end = f"{tempfile.gettempdir()}/rhtc-dashboard-end.png"
            browser.save_screenshot(end)
            print(f"after the map: {end}", flush=True)
        finally:
            browser.quit()
        print(json.dumps({"workers": workers, "idle_commands_per_s": round(idle, 1),
                          "page_open_commands_per_s": round(open_rate, 1),
                          "page_cost_commands_per_s": round(open_rate - idle, 1),
                          "idle_by_command": idle_by, "open_by_command": open_by}, indent=1), flush=True)
        storage.close()


if __name__ == "__main__":
    main()
