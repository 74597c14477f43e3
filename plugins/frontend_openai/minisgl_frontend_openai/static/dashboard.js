// The dashboard view: polls /v1/engine/stats once a second while it is on screen, never otherwise.
"use strict";
(function () {
  const M = (window.minisgl = window.minisgl || {});
  const $ = (id) => document.getElementById(id);
  const WINDOW_S = 300; // the charts keep five minutes...
  const MIN_SPAN_S = 60; // ...and span at least one, growing as samples come in
  const samples = [];
  let since = null, timer = null, inFlight = false, infoShown = false;

  const CHARTS = {
    "chart-tps": { series: [["output", "--c1", "tokens_per_s"], ["prompt", "--c2", "prompt_tokens_per_s"]] },
    "chart-requests": { series: [["running", "--c1", "running"], ["waiting", "--c2", "waiting"]],
                        integer: true },
    "chart-kv": { series: [["in use", "--c1", "kv_used"], ["prefix cache", "--c4", "kv_cached"],
                           ["allocatable", "--c3", "kv_free"]], integer: true },
    "chart-hit": { series: [["recent", "--c3", "hit_rate"], ["since start", "--c1", "hit_rate_total"]],
                   percent: true, yMax: 1 },
  };

  function fmt(v, digits) {
    return v === null || v === undefined ? "-" : Number(v).toFixed(digits);
  }

  function draw(now) {
    for (const [id, spec] of Object.entries(CHARTS)) {
      const series = spec.series.map(([name, color, key]) => ({
        name, color, points: samples.map((s) => [s.t, s[key]]),
      }));
      M.legend(id, series);
      const span = Math.min(WINDOW_S, Math.max(MIN_SPAN_S, samples.length ? now - samples[0].t : 0));
      const last = samples[samples.length - 1];
      const yMax = id === "chart-kv" && last && last.kv_total > 0 ? last.kv_total : spec.yMax;
      M.drawChart($(id), series, { t0: now - span, t1: now, yMax,
                                   percent: spec.percent, integer: spec.integer });
    }
  }

  function tiles(last, current) {
    $("stat-tps").textContent = last ? fmt(last.tokens_per_s, 1) : "-";
    $("stat-running").textContent = last ? fmt(last.running, 0) : "-";
    $("stat-waiting").textContent = last ? fmt(last.waiting, 0) : "-";
    $("stat-kv").textContent = last && last.kv_total
      ? fmt(last.kv_used, 0) + " / " + fmt(last.kv_total, 0) : "-";
    const hits = current.prompt_tokens_total > 0
      ? current.prefix_cache_hit_tokens_total / current.prompt_tokens_total : null;
    // the share of them the disk tier supplied, when it supplied any
    const disk = current.prefix_cache_disk_hit_tokens_total || 0;
    $("stat-hit").textContent = hits === null ? "-" : Math.round(hits * 100) + "%" + (disk > 0
      ? " (disk " + Math.round(disk / current.prompt_tokens_total * 100) + "%)" : "");
    $("stat-ttft").textContent = current.ttft_mean_s === null ? "-"
      : Math.round(current.ttft_mean_s * 1000) + " ms";
    // speculation: accepted share of the drafted tokens ("-" while nothing was drafted)
    const drafted = current.spec_draft_tokens_total || 0;
    $("stat-spec").textContent = drafted > 0
      ? Math.round(current.spec_accepted_tokens_total / drafted * 100) + "%" : "-";
  }

  // under --dp N, one row per scheduler replica (the table stays hidden for one scheduler)
  function replicaTable(rows) {
    $("replicas-wrap").hidden = !rows || rows.length === 0;
    const body = $("replicas").querySelector("tbody");
    body.replaceChildren();
    for (const r of rows || []) {
      const tr = document.createElement("tr");
      const hit = r.hit_rate_total === null ? "-" : Math.round(r.hit_rate_total * 100) + "%";
      for (const v of [r.dp_rank, fmt(r.running, 0), fmt(r.waiting, 0),
                       fmt(r.kv_used, 0) + " / " + fmt(r.kv_total, 0), fmt(r.requests_total, 0), hit]) {
        const td = document.createElement("td");
        td.textContent = String(v);
        tr.append(td);
      }
      body.append(tr);
    }
  }

  async function tick() {
    if (inFlight) return;
    inFlight = true;
    try {
      const data = await M.getJSON("/v1/engine/stats" + (since === null ? "" : "?since=" + since));
      for (const s of data.samples) samples.push(s);
      if (samples.length) since = samples[samples.length - 1].t;
      while (samples.length && samples[0].t < data.time - WINDOW_S) samples.shift();
      tiles(samples[samples.length - 1], data.current);
      replicaTable(data.replicas);
      draw(data.time);
      $("dash-status").textContent = data.healthy ? "" : "The engine is not ready or not running.";
      if (!infoShown) await showInfo();
    } catch (e) {
      $("dash-status").textContent = e instanceof M.AuthError ? "Waiting for the API key." : "Stats unavailable: " + e.message;
    } finally {
      inFlight = false;
    }
  }

  async function showInfo() {
    const info = await M.getJSON("/v1/engine/info");
    infoShown = true;
    const rows = [
      ["model", info.model], ["max context", info.max_context + " tokens"],
      ["transport", info.transport], ["frontends", (info.frontends || []).join(", ")],
      ["tensor parallel", info.tp], ["data parallel", info.dp],
      ["quantization", info.quantization_reason
        ? info.quantization + " (" + info.quantization_reason + ")" : info.quantization],
      ["dtype", info.dtype_reason ? info.dtype + " (" + info.dtype_reason + ")" : info.dtype],
      ["kernels", info.kernels],
      ["weights", info.weight_bytes && (info.weight_bytes / 1e6).toFixed(1) + " MB, " +
        (info.weight_huge_page_bytes / 1e6).toFixed(1) + " MB of them in huge pages"],
      ["KV cache dtype", info.kv_cache_dtype],
      ["compiled decode step", info.compile],
      ["device", info.device], ["prefix cache", info.cache],
      ["minisgl", info.version],
    ];
    const dl = $("served");
    dl.replaceChildren();
    for (const [k, v] of rows) {
      if (v === undefined || v === null || v === "") continue;
      const dt = document.createElement("dt"), dd = document.createElement("dd");
      dt.textContent = k;
      dd.textContent = String(v);
      dl.append(dt, dd);
    }
    const body = $("plugins").querySelector("tbody");
    body.replaceChildren();
    for (const p of info.plugins || []) {
      const tr = document.createElement("tr");
      for (const v of [p.name, p.dist, p.version, (p.provides || []).join(" "), p.status]) {
        const td = document.createElement("td");
        td.textContent = v;
        tr.append(td);
      }
      body.append(tr);
    }
  }

  M.startDashboard = function () {
    if (timer !== null) return;
    tick();
    timer = setInterval(tick, 1000);
  };
  M.stopDashboard = function () {
    if (timer !== null) clearInterval(timer);
    timer = null;
  };
  M.redrawDashboard = function () {
    if (samples.length) draw(samples[samples.length - 1].t);
  };
})();
