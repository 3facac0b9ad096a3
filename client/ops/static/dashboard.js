// The rhtc dashboard page: polls api/state about once a second and draws it.
// Plain JavaScript, no library, no network beyond this server (works offline).
"use strict";
(function () {
  const token = new URLSearchParams(location.search).get("token") || "";
  const state = { since: 0, tasks: [], snap: null, sortKey: "name", sortDir: 1, failures: 0 };
  const MAX_TASKS = 20000;
  const COLORS = { hit: "#2ca02c", partial: "#bcbd22", miss: "#1f77b4", compute: "#9e9e9e",
                   error: "#d62728", running: "#ffcc80" };
  const $ = (id) => document.getElementById(id);
  const esc = (s) => String(s === null || s === undefined ? "" : s).replace(/[&<>"']/g,
    (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));
  const rate = (b) => (b >= 1e6 ? (b / 1e6).toFixed(1) + " MB/s" : (b / 1e3).toFixed(1) + " kB/s");
  const mb = (x) => (x ? (x / 1e6).toFixed(0) : "0");
  const fix = (x, d) => (x === null || x === undefined ? "" : Number(x).toFixed(d));
  const pct = (x) => (x === null || x === undefined ? "" : (100 * x).toFixed(1) + " %");
  const dur = (s) => (s === null || s === undefined ? "" : s < 90 ? s.toFixed(0) + " s" :
                      s < 5400 ? (s / 60).toFixed(1) + " min" : (s / 3600).toFixed(1) + " h");

  function source(t) {
    if (t.err) return "error";
    if (t.c > 0 && !t.f) return "hit";
    if (t.c > 0 && t.f > 0) return "partial";
    if (t.f > 0) return "miss";
    return "compute";
  }

  // what the tests (and a curious user in the console) can read
  window.rhtc = {
    workers: () => (state.snap ? state.snap.workers.map((w) => w.name) : []),
    streamTasks: (mapId) => state.tasks.filter((t) => !mapId || t.m === mapId).length,
    snapshot: () => state.snap,
  };

  async function poll() {
    try {
      const r = await fetch("api/state?since=" + state.since + "&token=" + encodeURIComponent(token),
                            { credentials: "same-origin", cache: "no-store" });
      if (!r.ok) throw new Error("the dashboard server answered " + r.status);
      const snap = await r.json();
      state.snap = snap;
      for (const t of snap.tasks) state.tasks.push(t);
      if (state.tasks.length > MAX_TASKS) state.tasks.splice(0, state.tasks.length - MAX_TASKS);
      if (snap.tasks.length) state.since = snap.tasks[snap.tasks.length - 1].q;
      else if (snap.last_task < state.since) state.since = 0;     // the server restarted
      $("conn").hidden = true;
      render(snap);
    } catch (err) {
      $("conn").hidden = false;
      $("conn").textContent = "no answer from the dashboard server (" + err.message + "); retrying";
    }
    setTimeout(poll, 1000);
  }

  function render(snap) {
    $("broker").textContent = "broker " + snap.broker;
    $("clock").textContent = new Date(snap.t * 1000).toLocaleTimeString();
    const p = snap.pool;
    $("pool").textContent = p.workers + " workers (" + p.busy + " busy), " + snap.shared_queue +
      " tasks in the shared queue; pool keeper: " + (p.keeper ? p.keeper : "none (" + p.note + ")");
    renderMaps(snap);
    renderWorkers(snap);
    renderStream(snap);
    renderThroughput(snap);
    $("problems").innerHTML = snap.problems.map((x) =>
      "<li>" + esc(new Date(x.t * 1000).toLocaleTimeString()) + " " + esc(x.message) + "</li>").join("") ||
      "<li>none</li>";
    $("malformed-box").hidden = !snap.malformed.length;
    $("malformed-note").textContent = snap.malformed_note;
    $("malformed").innerHTML = snap.malformed.map((x) => "<li>" + esc(x) + "</li>").join("");
  }

  function renderMaps(snap) {
    const rows = snap.maps.map((m) => {
      const done = m.n ? (100 * m.done) / m.n : 0, failed = m.n ? (100 * m.failed) / m.n : 0;
      return '<tr data-map="' + esc(m.map_id) + '" data-progress="' + (100 * m.progress).toFixed(1) + '">' +
        "<td>" + esc(m.label) + "</td><td>" + esc(m.map_id) + "</td>" +
        '<td><div class="bar" title="' + (100 * m.progress).toFixed(1) + ' %" data-done="' + done.toFixed(1) +
        '" data-failed="' + failed.toFixed(1) + '"><div></div><div class="failed"></div></div></td><td class="num">' + m.done + " / " + m.n + " (" + (100 * m.progress).toFixed(0) +
        ' %)</td><td class="num">' + m.failed + '</td><td class="num">' + fix(m.tasks_per_s, 1) +
        '</td><td class="num">' + (m.events ? fix(m.events_per_s, 0) : "") + '</td><td class="num">' +
        dur(m.eta_s) + '</td><td class="num eff-wall">' + pct(m.efficiency_wall) + '</td><td class="num eff-worker">' +
        pct(m.efficiency) + "</td><td>" + esc(m.state) + "</td></tr>";
    });
    $("maps").tBodies[0].innerHTML = rows.join("") || '<tr><td colspan="11">no maps in flight</td></tr>';
    for (const bar of $("maps").querySelectorAll(".bar")) {     // styles set here: the page's CSP forbids inline ones
      const [ok, bad] = bar.children;
      ok.style.width = bar.dataset.done + "%";
      bad.style.left = bar.dataset.done + "%";
      bad.style.width = bar.dataset.failed + "%";
    }
    const errs = [];
    for (const m of snap.maps) for (const e of m.errors) {
      errs.push("<details><summary>map " + esc(m.label) + " (" + esc(m.map_id) + "), task " + esc(e.index) +
        (e.worker ? " on " + esc(e.worker) : "") + ": " + esc(e.type) + ": " + esc(e.message) + "</summary>" +
        (e.argument ? "<div>argument: " + esc(e.argument) + "</div>" : "") + "<pre>" + esc(e.traceback) +
        "</pre></details>");
    }
    const box = $("errors"), open = new Set([...box.querySelectorAll("details[open] summary")].map((s) => s.textContent));
    box.innerHTML = errs.join("");
    for (const s of box.querySelectorAll("summary")) if (open.has(s.textContent)) s.parentElement.open = true;
  }

  function renderWorkers(snap) {
    const f = $("filter").value.toLowerCase();
    let rows = snap.workers.concat(snap.gone);
    if (f) rows = rows.filter((w) => [w.name, w.host, w.state, w.task, w.problems.join(" ")].join(" ")
                                       .toLowerCase().includes(f));
    const k = state.sortKey, d = state.sortDir;
    rows.sort((a, b) => {
      let x = a[k], y = b[k];
      if (Array.isArray(x)) { x = x.length; y = y.length; }
      if (x === y) return a.name < b.name ? -1 : 1;
      if (x === null || x === undefined) return 1;
      if (y === null || y === undefined) return -1;
      return (x < y ? -1 : 1) * d;
    });
    $("worker-count").textContent = snap.workers.length + " live" + (snap.gone.length ? ", " + snap.gone.length +
                                     " gone" : "") + (f ? ", " + rows.length + " shown" : "");
    $("workers").tBodies[0].innerHTML = rows.map((w) => {
      const cls = [w.state, w.problems.length ? "problem" : ""].join(" ");
      return '<tr class="' + cls + '" data-name="' + esc(w.name) + '"><td>' + esc(w.name) + "</td><td>" +
        esc(w.host) + '</td><td class="state ' + esc(w.state) + '">' + esc(w.state) + "</td><td>" + esc(w.task || "") +
        '</td><td class="num">' + fix(w.task_seconds, 1) + '</td><td class="num">' + fix(w.hb_age, 1) +
        '</td><td class="num">' + esc(w.tasks_done) + '</td><td class="num">' + esc(w.errors) +
        '</td><td class="num">' + esc(w.queued === null ? "" : w.queued) + '</td><td class="num">' + mb(w.cache_bytes) +
        (w.cache_limit ? " / " + mb(w.cache_limit) : "") + '</td><td class="num">' +
        (w.hit_rate === null ? "" : (100 * w.hit_rate).toFixed(0) + " %") + '</td><td class="num">' + fix(w.cpu, 0) +
        '</td><td class="num">' + mb(w.rss) + "</td><td>" + esc(w.versions) + '</td><td class="problems">' +
        esc(w.problems.join("; ")) + "</td></tr>";
    }).join("");
  }

  function sizeCanvas(c, cssHeight) {
    const ratio = window.devicePixelRatio || 1, w = c.clientWidth || 800;
    c.style.height = cssHeight + "px";
    if (c.width !== Math.round(w * ratio) || c.height !== Math.round(cssHeight * ratio)) {
      c.width = Math.round(w * ratio);
      c.height = Math.round(cssHeight * ratio);
    }
    const g = c.getContext("2d");
    g.setTransform(ratio, 0, 0, ratio, 0, 0);
    g.clearRect(0, 0, w, cssHeight);
    return [g, w];
  }

  function renderStream(snap) {
    const span = Number($("span").value), now = snap.t, t0 = now - span;
    const names = new Set(snap.workers.map((w) => w.name).concat(snap.gone.map((w) => w.name)));
    const recent = state.tasks.filter((t) => t.e >= t0);
    for (const t of recent) if (t.w) names.add(t.w);
    const lanes = [...names].sort(), lane = new Map(lanes.map((n, i) => [n, i]));
    const laneH = lanes.length > 300 ? 2 : lanes.length > 100 ? 4 : lanes.length > 30 ? 8 : 16;
    const left = 130, axis = 16, height = Math.max(60, lanes.length * laneH + axis);
    const [g, width] = sizeCanvas($("stream"), height);
    const x = (t) => left + ((t - t0) / span) * (width - left - 6);
    g.font = "10px sans-serif";
    g.fillStyle = "#555";
    for (let s = 0; s <= span; s += span / 6) {
      const px = x(t0 + s);
      g.fillRect(px, 0, 1, height - axis);
      g.fillText("-" + (span - s).toFixed(0) + " s", px - 12, height - 4);
    }
    if (laneH >= 8) lanes.forEach((n, i) => g.fillText(n.slice(0, 22), 2, i * laneH + laneH - 3));
    else g.fillText(lanes.length + " workers", 2, 12);
    for (const t of recent) {
      const i = lane.get(t.w);
      if (i === undefined) continue;
      g.fillStyle = COLORS[source(t)];
      const a = Math.max(left, x(t.s)), b = x(t.e);
      g.fillRect(a, i * laneH + 1, Math.max(1, b - a - 0.5), laneH - 1);
    }
    g.fillStyle = COLORS.running;
    for (const w of snap.workers) {
      if (w.state !== "busy" || w.task_seconds === null) continue;
      const i = lane.get(w.name), a = Math.max(left, x(now - w.task_seconds));
      g.fillRect(a, i * laneH + 1, Math.max(1, x(now) - a), laneH - 1);
    }
    $("stream-count").textContent = recent.length;
  }

  function renderThroughput(snap) {
    const pts = snap.throughput, [g, width] = sizeCanvas($("throughput"), 140);
    if (pts.length < 2) return;
    const t0 = pts[0].t, t1 = pts[pts.length - 1].t, left = 40, h = 120;
    const maxB = Math.max(1, ...pts.map((p) => Math.max(p.cache_Bps, p.file_Bps)));
    const maxT = Math.max(1, ...pts.map((p) => p.tasks_per_s));
    const x = (t) => left + ((t - t0) / Math.max(1, t1 - t0)) * (width - left - 40);
    const line = (key, max, color) => {
      g.strokeStyle = color; g.lineWidth = 1.5; g.beginPath();
      pts.forEach((p, i) => { const y = 4 + h - (p[key] / max) * h; i ? g.lineTo(x(p.t), y) : g.moveTo(x(p.t), y); });
      g.stroke();
    };
    line("cache_Bps", maxB, COLORS.hit);
    line("file_Bps", maxB, COLORS.miss);
    line("tasks_per_s", maxT, "#6a1b9a");
    g.fillStyle = "#555"; g.font = "10px sans-serif";
    g.fillText(rate(maxB), 2, 12);
    g.fillText(maxT.toFixed(1) + " tasks/s", width - 60, 12);
    g.fillText(((t1 - t0) / 60).toFixed(1) + " min", left, h + 16);
    const p = pts[pts.length - 1];
    $("tp-now").textContent = "now: " + rate(p.cache_Bps) + " from the cache, " + rate(p.file_Bps) +
      " from files, " + p.tasks_per_s.toFixed(1) + " tasks/s";
  }

  for (const th of document.querySelectorAll("#workers th")) {
    th.addEventListener("click", () => {
      state.sortDir = state.sortKey === th.dataset.k ? -state.sortDir : 1;
      state.sortKey = th.dataset.k;
      if (state.snap) renderWorkers(state.snap);
    });
  }
  $("filter").addEventListener("input", () => state.snap && renderWorkers(state.snap));
  $("span").addEventListener("change", () => state.snap && renderStream(state.snap));
  poll();
})();
