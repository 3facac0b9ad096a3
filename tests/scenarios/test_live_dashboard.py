"""The live dashboard: a real broker, real workers, real NanoAOD files, the dashboard
server in this process, and Debian's headless Chromium driven by selenium (the browser and
the page's readers: tests/kits/dashboard.py). Also ``/metrics`` scraped and checked against
the maps that ran, the token, and the address shown by ``LocalCluster`` and ``MapHandle``.

And three cases of its use: a script whose short map ends and exits before the page is
opened still shows on it (from the feed); the broker announces the dashboard's address to
anyone with the Redis password, never its token (another process reads the address alone);
a malformed heartbeat, written with the password alone, is named on the page."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from rhtc.client import make_chunks, submit
from tests.conftest import needs_nanoaod
from tests.kits.dashboard import LOOK, get, read, scrape
from tests.kits.dashboard import chrome as chrome_fixture
from tests.helpers import wait_until
from tests.samples import NANOAOD

pytest.importorskip("tornado")
pytest.importorskip("prometheus_client")

from rhtc.broker import feed  # noqa: E402
from rhtc.broker.storage import Storage  # noqa: E402
from rhtc.client.ops.dashboard import Dashboard  # noqa: E402

chrome = chrome_fixture            # the fixture of tests/kits/dashboard.py (headless Chromium), by its name

REAL = [str(NANOAOD / "nano_dimuon.root"), str(NANOAOD / "nano_dy.root")]


def muon_pt_sum(chunk):
    import awkward as ak
    a = chunk.arrays(["Muon_pt"], how=dict)
    return float(ak.sum(a["Muon_pt"]))


def boom_on_two(x):
    if x == 2:
        raise ValueError("two is not allowed here")
    return x


def _total(m: dict, name: str) -> float:
    return sum(v for (n, _), v in m.items() if n == name)


@needs_nanoaod
def test_the_page_shows_workers_the_map_its_tasks_and_a_killed_worker(broker, workers, chrome):
    names = workers.start(3)
    chunks = make_chunks(REAL, step=8)
    with Dashboard(broker.config) as d:
        chrome.get(d.url)
        rows = lambda: set(read(chrome, "#workers tbody tr[data-name]", "data-name"))  # noqa: E731
        wait_until(lambda: set(names) <= rows(), 60, "the three live workers in the table", interval=LOOK)

        h = submit(muon_pt_sum, chunks, broker=broker.config, label="muon_pt_sum")
        assert len(h.wait(120)) == len(chunks)
        bar = f'#maps tr[data-map="{h.map_id}"]'
        wait_until(lambda: read(chrome, bar, "data-progress") == ["100.0"], 60, "the map at 100 %", interval=LOOK)
        assert "muon_pt_sum" in read(chrome, bar)[0]
        streamed = lambda: chrome.execute_script("return window.rhtc.streamTasks(arguments[0])", h.map_id)  # noqa: E731
        wait_until(lambda: streamed() == len(chunks), 60, "every task of the map in the task stream", interval=LOOK)
        assert int(read(chrome, "#stream-count")[0]) >= len(chunks)

        workers.signal(names[0], signal.SIGKILL)
        workers.procs[names[0]].wait(10)
        wait_until(lambda: read(chrome, f'#workers tr.gone[data-name="{names[0]}"]'), 40,
                   f"the killed worker {names[0]} shown as gone", interval=LOOK)
        assert {n for n in names[1:]} <= set(chrome.execute_script("return window.rhtc.workers()"))

        errors = [e for e in chrome.get_log("browser") if e["level"] == "SEVERE"]
        assert errors == [], f"the page logged errors in the browser: {errors}"

        chrome.get(d.url.split("?")[0] + "?token=not-the-token")
        assert "403" in chrome.find_element("tag name", "body").text


def test_a_wrong_or_missing_token_is_refused(broker):
    with Dashboard(broker.config) as d:
        base = d.url.split("?")[0]
        for path in ("", "api/state", "metrics", "static/dashboard.js"):
            assert get(base + path)[0] == 403, path
            assert get(base + path + "?token=wrong")[0] == 403, path
            assert get(base + path, {"Authorization": "Bearer wrong"})[0] == 403, path
        status, body = get(base + "?token=" + d.token)
        assert status == 200 and "static/dashboard.js" in body
        assert get(base + "static/dashboard.js", {"Authorization": f"Bearer {d.token}"})[0] == 200
        assert d.url.startswith("http://127.0.0.1:")


@needs_nanoaod
def test_metrics_match_the_maps_that_ran(broker, workers, storage):
    names = workers.start(2)
    chunks = make_chunks(REAL, step=8)
    with Dashboard(broker.config) as d:
        m = scrape(d)
        assert m[("rhtc_workers", frozenset({("state", "idle")}))] == 2
        # a map in flight: both workers busy on it
        slow = submit(time.sleep, [3, 3], broker=broker.config)
        wait_until(lambda: (lambda m: m[("rhtc_workers", frozenset({("state", "busy")}))] == 2
                            and m[("rhtc_maps_in_flight", frozenset())] == 1)(scrape(d)),
                   30, "two busy workers and one map in flight", interval=LOOK)
        slow.wait(60)
        # the workers' counters count every run, a straggler's backup copy too: a cold read
        # slowed by a loaded machine must not be run twice here (stragglers=None)
        handles = [submit(muon_pt_sum, chunks, broker=broker.config, stragglers=None) for _ in range(1)]
        handles[0].wait(120)
        handles.append(submit(muon_pt_sum, chunks, broker=broker.config, stragglers=None))   # again: cached
        handles[1].wait(120)
        bad = submit(boom_on_two, [1, 2, 3], broker=broker.config, errors="return", stragglers=None)
        assert [type(x).__name__ for x in bad.wait(60)] == ["int", "RemoteError", "int"]
        handles.append(bad)
        metas = [meta for h in [slow, *handles] for meta in h.run.metas]
        finished = sum(1 for x in metas if not x.get("error"))
        assert finished == 2 + 2 * len(chunks) + 2
        seen: list = []
        m = wait_until(lambda: (lambda m: m if seen.append(
            _total(m, "rhtc_worker_tasks_finished_total")) or seen[-1] == finished else None)(scrape(d)), 30,
            lambda: f"the workers' counters of every task ({finished}); the last totals scraped: {seen[-5:]}",
            interval=LOOK)
        assert _total(m, "rhtc_worker_tasks_failed_total") == 1
        assert _total(m, "rhtc_worker_tasks_started_total") == finished + 1
        cache = sum(x.get("bytes_cache", 0) for x in metas)
        files = sum(x.get("bytes_file", 0) for x in metas)
        assert cache > 0 and files > 0
        assert _total(m, "rhtc_worker_bytes_from_cache_total") == cache
        assert _total(m, "rhtc_worker_bytes_from_files_total") == files
        assert m[("rhtc_cache_hit_ratio", frozenset())] == pytest.approx(cache / (cache + files))
        assert {dict(k)["worker"] for (n, k) in m if n == "rhtc_worker_rss_bytes"} == set(names)
        assert all(v > 0 for (n, _), v in m.items() if n == "rhtc_worker_rss_bytes")
        assert m[("rhtc_maps_in_flight", frozenset())] == 0
        assert m[("rhtc_queue_depth", frozenset({("queue", "shared")}))] == 0
        for h in handles:
            done = m[("rhtc_map_tasks", frozenset({("map", h.map_id), ("label", h.run.label), ("state", "done")}))]
            failed = m[("rhtc_map_tasks", frozenset({("map", h.map_id), ("label", h.run.label), ("state", "failed")}))]
            assert (done, failed) == ((2, 1) if h is bad else (len(chunks), 0))
        # the page has the error with its traceback; the feed expires
        errors = [m for m in d.state.snapshot()["maps"] if m["map_id"] == bad.map_id][0]["errors"]
        assert errors[0]["index"] == 1 and "two is not allowed here" in errors[0]["traceback"]
        assert 0 < storage.r.ttl(storage.keys.feed) <= storage.settings.feed_ttl


@pytest.mark.heavy  # starts a local cluster
def test_local_cluster_and_map_handle_show_the_dashboard():
    from rhtc import LocalCluster
    with LocalCluster(1, dashboard=True, name_prefix="dash") as c:
        link = c.dashboard_link
        assert link and link.startswith("http://127.0.0.1:") and "?token=" in link
        assert link in repr(c)
        from rhtc.broker.storage import Storage
        other = Storage(c.config)
        try:
            assert feed.dashboard_address(other) == link.split("?")[0]   # another process: no token
        finally:
            other.r.close()
        h = submit(abs, [-1, -2, -4, -8, -16], broker=c)
        assert h.wait(60) == [1, 2, 4, 8, 16]
        view = h._repr_html_()
        assert "5 / 5 results (100 %)" in view and link.replace("&", "&amp;") in view
        assert link in repr(h)
    assert c.dashboard is None and c.dashboard_link is None


def test_a_thousand_workers_with_their_problems_sortable(broker, chrome):
    """1,000 heartbeats published through the broker's own claim (as workers do): the table
    lists them all, names each problem (another key, another library version, a stalled
    or forged heartbeat) and sorts by a column, both ways."""
    import dataclasses
    import secrets as _secrets
    from rhtc.broker.wire.config import Settings
    from rhtc.broker.wire.messages import WorkerStatus
    from rhtc.broker.wire.protocol import key_fingerprint
    from rhtc.broker.storage import Storage
    from rhtc.versions import stack_versions
    lasting = Settings(lease=600.0)                  # these heartbeats outlive the test's pace
    s = Storage(broker.config, settings=lasting)
    forger = Storage(dataclasses.replace(broker.config, key=b"f" * 32), settings=lasting)
    ours, now = key_fingerprint(broker.config.key), time.time()
    try:
        for k in range(1000):
            st = WorkerStatus(name=f"sim{k:04d}", host=f"node{k % 40}", pid=1000 + k, incarnation=_secrets.token_hex(8),
                              key_fingerprint=ours, t=now, started=now, tasks_done=(k * 7) % 1000,
                              versions=dict(stack_versions()), metrics={"cpu": k % 100, "rss": 10 ** 8 + k})
            if k == 1:
                st.key_fingerprint = "0" * 16
            if k == 2:
                st.versions["numpy"] = "0.0.1"
            if k == 3:
                st.t = now - 120
            (forger if k == 4 else s).lease.claim(st.name, st.incarnation, st)
        with Dashboard(broker.config) as d:
            chrome.get(d.url)
            table = "#workers tbody tr[data-name]"
            wait_until(lambda: len(read(chrome, table, "data-name")) == 1000, 60, "1,000 rows in the workers table",
                       interval=LOOK)

            def problems(name):
                return read(chrome, f'{table}[data-name="{name}"] td.problems')[0]
            assert "another signing key" in problems("sim0001")
            assert "numpy 0.0.1" in problems("sim0002")
            assert "stalled" in read(chrome, f'{table}[data-name="sim0003"]', "class")[0]
            assert "forged" in problems("sim0004")
            assert problems("sim0005") == ""
            header = '#workers th[data-k="tasks_done"]'
            first = lambda: (read(chrome, table, "data-name") or [None])[0]  # noqa: E731
            chrome.find_element("css selector", header).click()
            wait_until(lambda: first() == "sim0000", 60, "sorted by tasks, fewest first", interval=LOOK)
            chrome.find_element("css selector", header).click()
            wait_until(lambda: first() == "sim0857", 60, "sorted by tasks, most first",   # 857 * 7 % 1000 == 999
                       interval=LOOK)
            errors = [e for e in chrome.get_log("browser") if e["level"] == "SEVERE"]
            assert errors == [], f"the page logged errors in the browser: {errors}"
    finally:
        s.r.close()
        forger.r.close()


def test_rhtc_dashboard_prints_its_address_and_serves_until_stopped(broker, tmp_path):
    import subprocess
    import sys
    from tests.samples import ROOT
    env = dict(os.environ, **broker.config.env())
    env.pop("RHTC_CONFIG", None)
    out = open(tmp_path / "dashboard.out", "w+")
    proc = subprocess.Popen([sys.executable, "-m", "rhtc.client.ops.cli", "dashboard", "--port", "0"],
                            env=env, cwd=str(ROOT), stdout=out, stderr=subprocess.STDOUT, text=True)
    try:
        text = wait_until(lambda: "?token=" in (tmp_path / "dashboard.out").read_text()
                          and (tmp_path / "dashboard.out").read_text(), 60, "the printed address", interval=LOOK)
        url = next(w for w in text.split() if "?token=" in w)
        assert url.startswith("http://127.0.0.1:")
        assert get(url)[0] == 200
        assert get(url.split("?")[0] + "metrics")[0] == 403
        assert "ssh -L" in text and "metrics" in text
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
        out.close()
    from rhtc.broker.storage import Storage
    s = Storage(broker.config)
    try:
        assert feed.dashboard_address(s) is None          # it took its address with it
    finally:
        s.r.close()


def test_a_map_handle_redraws_itself_in_jupyter(broker, workers, tmp_path, monkeypatch):
    """In a real kernel (nbclient), a displayed MapHandle shows its HTML view with the
    dashboard's link, and redraws itself until the map is done."""
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    from tests.samples import ROOT
    workers.start(1)
    monkeypatch.setenv("PYTHONPATH", str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    for var, value in broker.config.env().items():
        monkeypatch.setenv(var, value)
    monkeypatch.delenv("RHTC_CONFIG", raising=False)
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell("import time\nfrom rhtc import submit\nfrom rhtc.client.ops.dashboard import Dashboard\n"
                                  "from rhtc.client.api import resolve_config\nd = Dashboard(resolve_config()).start()"),
        nbformat.v4.new_code_cell("h = submit(time.sleep, [0.5] * 6)\nh"),
        nbformat.v4.new_code_cell("h.wait(120)\ntime.sleep(2.5)\nd.stop()"),
    ])
    client = nbclient.NotebookClient(nb, timeout=180, kernel_name="python3",
                                     resources={"metadata": {"path": str(tmp_path)}})
    client.execute()
    errors = [o for c in nb.cells for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors, errors
    shown = [o for o in nb.cells[1].outputs if "text/html" in o.get("data", {})]
    assert len(shown) == 1 and "/?token=" in shown[0]["data"]["text/html"]
    # the cell's output was redrawn after the map ended: it says so now
    assert "6 / 6 results (100 %)" in shown[0]["data"]["text/html"], shown[0]["data"]["text/html"]
    assert "<MapHandle" in shown[0]["data"]["text/plain"]


SHORT_MAP_SCRIPT = """
from rhtc.client import submit
h = submit(abs, range(-20, 0), broker=None, label="short-script")
assert len(h.wait(60)) == 20
print(h.map_id, flush=True)
"""


def test_a_short_map_of_a_script_that_exits_at_once_shows_on_the_page(broker, workers, chrome, tmp_path):
    """A script whose 20-task map ends within a second and exits. The page is opened only
    after the script has exited, so what it shows came from the feed."""
    workers.start(2)
    with Dashboard(broker.config) as d:
        env = dict(os.environ, **broker.config.env())
        done = subprocess.run([sys.executable, "-c", SHORT_MAP_SCRIPT], env=env, capture_output=True, text=True,
                              timeout=120, cwd=str(tmp_path))
        assert done.returncode == 0, done.stderr
        map_id = done.stdout.split()[-1]
        chrome.get(d.url)
        row = f'#maps tr[data-map="{map_id}"]'
        wait_until(lambda: read(chrome, row, "data-progress") == ["100.0"], 60, "the script's ended map at 100 %",
                   interval=LOOK)
        text = read(chrome, row)[0]
        assert "short-script" in text and "20 / 20" in text, text


def test_the_broker_holds_the_dashboards_address_without_its_token(broker, storage):
    """Anyone with the Redis password reads the announced address; the token stays in the
    analyst's process (and in the browser that opened its URL)."""
    from rhtc.client.ops.dashboard import address_for
    with Dashboard(broker.config) as d:
        stored = storage.r.get(storage.keys.dashboard).decode()
        assert d.token not in stored and "token" not in stored, stored
        assert stored == d.url.split("?")[0]
        assert address_for(storage) == d.url                       # this process knows its token
        assert feed.dashboard_address(Storage(broker.config)) == stored
    assert storage.r.get(storage.keys.dashboard) is None           # withdrawn when it stops


def test_the_access_log_never_prints_the_token(broker, caplog):
    import logging
    with Dashboard(broker.config) as d, caplog.at_level(logging.INFO, logger="tornado.access"):
        assert get(d.url)[0] == 200
        assert get(d.url.split("?")[0] + f"api/state?since=0&token={d.token}")[0] == 200
        assert get(d.url.split("?")[0] + "?token=wrong-token-123")[0] == 403
        access = lambda: [r.getMessage() for r in caplog.records if r.name == "tornado.access"]  # noqa: E731
        wait_until(lambda: len(access()) >= 3, 10, lambda: f"three lines in the access log: {access()}")
    lines = access()
    assert not [line for line in lines if d.token in line or "wrong-token-123" in line], lines
    assert any("token=***" in line for line in lines), lines


def test_the_page_names_a_malformed_record(broker, workers, storage, chrome):
    """A malformed record, on the page: a heartbeat written with the password alone."""
    workers.start(1)
    r = storage.r
    r.sadd(storage.keys.workers, "ghost-1")
    r.set(storage.keys.incarnation("ghost-1"), "0" * 16, ex=600)
    r.set(storage.keys.heartbeat("ghost-1"), '{"name": "ghost-1", "task": ["x"]}', ex=600)
    with Dashboard(broker.config) as d:
        chrome.get(d.url)
        wait_until(lambda: "field 'task'" in "".join(read(chrome, "#malformed")), 60,
                   "the malformed heartbeat named on the page", interval=LOOK)
        assert storage.keys.heartbeat("ghost-1") in read(chrome, "#malformed")[0]
        assert chrome.find_element("id", "malformed-box").is_displayed()
        wait_until(lambda: read(chrome, "#workers tbody tr[data-name]", "data-name"), 60,
                   "the live worker in the table", interval=LOOK)
        errors = [e for e in chrome.get_log("browser") if e["level"] == "SEVERE"]
        assert errors == [], f"the page logged errors in the browser: {errors}"
