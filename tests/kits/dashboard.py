"""The live dashboard seen from outside, for the tests that drive it: Debian's headless
Chromium through selenium (the :func:`chrome` fixture: import it into a test module), a
page read in one call (:func:`read`), ``/metrics`` scraped (:func:`scrape`)."""
from __future__ import annotations

import os
import shutil
import signal
import urllib.error
import urllib.request
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from rhtc.client.ops.dashboard import Dashboard

CHROME_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                "--disable-dev-shm-usage", "--window-size=1400,1000")

#: seconds between two looks at the page (each runs a script in the browser) or at the metrics
LOOK = 0.25


def read(chrome, selector, attr=None):
    """Every element matching ``selector``: its ``attr`` (or its text), read in one call in
    the page. The page redraws its tables every second; an element found in one WebDriver
    call may be replaced before the next (a stale reference), so tests read here."""
    return chrome.execute_script(
        "return Array.from(document.querySelectorAll(arguments[0]))"
        ".map(e => arguments[1] ? e.getAttribute(arguments[1]) : e.innerText)", selector, attr)


def get(url, headers=None):
    """(status, body) of a GET of ``url``, an HTTP error's too."""
    req = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


def scrape(d: Dashboard) -> dict:
    """/metrics as {(name, frozenset(labels)): value}."""
    from prometheus_client.parser import text_string_to_metric_families
    status, text = get(d.url.split("?")[0] + "metrics", {"Authorization": f"Bearer {d.token}"})
    assert status == 200, text
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


@pytest.fixture
def chrome(tmp_path):
    """Debian's headless chromium through chromium-driver; quit and its driver stopped by pid."""
    if shutil.which("chromedriver") is None or shutil.which("chromium") is None:
        if os.environ.get("CI"):
            pytest.fail("chromium and chromium-driver are missing: apt-get install -y chromium chromium-driver")
        pytest.skip("chromium / chromium-driver not installed (apt-get install -y chromium chromium-driver)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    opts = webdriver.ChromeOptions()
    opts.binary_location = shutil.which("chromium")
    for flag in CHROME_FLAGS:
        opts.add_argument(flag)
    opts.add_argument(f"--user-data-dir={tmp_path / 'chromium-profile'}")
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    service = Service(shutil.which("chromedriver"), log_output=str(tmp_path / "chromedriver.log"))
    driver = webdriver.Chrome(options=opts, service=service)
    try:
        yield driver
    finally:
        pid = service.process.pid if service.process else None
        driver.quit()
        if service.process is not None and service.process.poll() is None:
            os.kill(pid, signal.SIGKILL)
            service.process.wait(10)
