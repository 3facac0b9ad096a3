"""The dashboard shows an ended map's efficiency by the wall clock before the per-worker one
(efficiency that does not flatter: the per-worker figure alone hides the ramp and the tail),
as the map's own record computes them, on the page (Debian's headless Chromium through
selenium) and in ``/metrics``. A real broker, real workers."""
from __future__ import annotations

import time

import pytest

from rhtc.client import submit
from rhtc.client.reports.efficiency import efficiency
from tests.kits.dashboard import LOOK, read, scrape
from tests.kits.dashboard import chrome as chrome_fixture
from tests.helpers import wait_until

pytest.importorskip("tornado")
pytest.importorskip("prometheus_client")

from rhtc.client.ops.dashboard import Dashboard  # noqa: E402 (after the optional extras are checked)

chrome = chrome_fixture            # the fixture of tests/kits/dashboard.py (headless Chromium), by its name


def _percent(text: str) -> float:
    return float(text.replace("%", "").strip())


def test_the_page_shows_an_ended_maps_wall_clock_efficiency_before_the_per_worker_one(broker, workers, chrome):
    workers.start(2)
    with Dashboard(broker.config) as d:
        chrome.get(d.url)
        h = submit(time.sleep, [0.3] * 6 + [0.9], broker=broker.config, label="naps")
        h.wait(120)
        eff = efficiency(h.record())
        assert eff["efficiency_wall"] < eff["efficiency"]
        row = f'#maps tr[data-map="{h.map_id}"]'
        wall = wait_until(lambda: (read(chrome, f"{row} td.eff-wall") or [""])[0], 60,
                          "the ended map's wall-clock efficiency on the page", interval=LOOK)
        per_worker = read(chrome, f"{row} td.eff-worker")[0]
        # the page's figures come from the feed's task times (rounded to the ms)
        assert _percent(wall) == pytest.approx(100 * eff["efficiency_wall"], abs=0.15)
        assert _percent(per_worker) == pytest.approx(100 * eff["efficiency"], abs=0.15)
        heads = read(chrome, "#maps thead th")
        assert heads.index("efficiency, wall clock") < heads.index("per worker"), heads
        m = scrape(d)
        labels = frozenset({("map", h.map_id), ("label", "naps")})
        assert m[("rhtc_map_wall_clock_efficiency", labels)] == pytest.approx(eff["efficiency_wall"], abs=1e-3)
        assert m[("rhtc_map_per_worker_efficiency", labels)] == pytest.approx(eff["efficiency"], abs=1e-3)
        errors = [e for e in chrome.get_log("browser") if e["level"] == "SEVERE"]
        assert errors == [], f"the page logged errors in the browser: {errors}"
