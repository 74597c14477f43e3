// Line charts on <canvas>: a time axis over the last minutes, one line per series, gaps at nulls.
"use strict";
(function () {
  const M = (window.minisgl = window.minisgl || {});

  // The smallest of 1, 2, 2.5, 5 x 10^k that is >= v.
  function nice(v) {
    const p = Math.pow(10, Math.floor(Math.log10(v)));
    for (const m of [1, 2, 2.5, 5, 10]) if (v <= m * p * (1 + 1e-9)) return m * p;
    return 10 * p;
  }

  // Four grid steps: whole numbers for counts, and the top line at or above the peak.
  function yTop(max, integer) {
    if (!(max > 0)) return integer ? 4 : 1;
    const step = nice(max / 4);
    return 4 * (integer ? Math.max(Math.ceil(step), 1) : step);
  }

  function timeStep(span) {
    for (const s of [10, 15, 30, 60, 120]) if (span / s <= 6) return s;
    return 300;
  }

  function timeLabel(s) {
    if (s === 0) return "now";
    return s % 60 === 0 ? "-" + s / 60 + " min" : "-" + s + " s";
  }

  function short(v) {
    if (v >= 1e6) return (v / 1e6).toFixed(1) + "M";
    if (v >= 1e4) return (v / 1e3).toFixed(0) + "k";
    if (v >= 1e3) return (v / 1e3).toFixed(1) + "k";
    return Number.isInteger(v) ? String(v) : v.toFixed(v < 1 ? 2 : 1);
  }

  function css(name) {
    return getComputedStyle(document.documentElement).getPropertyValue(name).trim();
  }

  // series: [{name, color: "--c1", points: [[t, v|null], ...]}];
  // opts: {t0, t1, yMax (fixed top), percent (0..1 shown as %), integer (counts)}
  M.drawChart = function (canvas, series, opts) {
    const ratio = window.devicePixelRatio || 1;
    const w = canvas.clientWidth, h = canvas.clientHeight;
    if (!w || !h) return;
    if (canvas.width !== Math.round(w * ratio) || canvas.height !== Math.round(h * ratio)) {
      canvas.width = Math.round(w * ratio);
      canvas.height = Math.round(h * ratio);
    }
    const ctx = canvas.getContext("2d");
    ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
    ctx.clearRect(0, 0, w, h);
    const left = 40, right = 8, top = 8, bottom = 20;
    const pw = w - left - right, ph = h - top - bottom;
    let max = 0;
    for (const s of series) for (const p of s.points) if (p[1] !== null && p[1] > max) max = p[1];
    const yMax = opts.yMax || yTop(max, opts.integer);
    const x = (t) => left + ((t - opts.t0) / (opts.t1 - opts.t0)) * pw;
    const y = (v) => top + ph - (Math.min(v, yMax) / yMax) * ph;

    ctx.font = "11px system-ui, sans-serif";
    ctx.lineWidth = 1;
    ctx.strokeStyle = css("--grid");
    ctx.fillStyle = css("--muted");
    ctx.textAlign = "right";
    ctx.textBaseline = "middle";
    for (let i = 0; i <= 4; i++) {
      const v = (yMax * i) / 4, yy = Math.round(y(v)) + 0.5;
      ctx.beginPath(); ctx.moveTo(left, yy); ctx.lineTo(left + pw, yy); ctx.stroke();
      ctx.fillText(opts.percent ? Math.round(v * 100) + "%" : short(v), left - 6, yy);
    }
    ctx.textAlign = "center";
    ctx.textBaseline = "top";
    const span = opts.t1 - opts.t0;
    const step = timeStep(span);
    for (let s = 0; s <= span; s += step) {
      const xx = x(opts.t1 - s);
      if (xx < left + 16) break;
      ctx.fillText(timeLabel(s), Math.min(xx, left + pw - 12), top + ph + 5);
    }
    ctx.lineWidth = 2;
    ctx.lineJoin = "round";
    for (const s of series) {
      ctx.strokeStyle = ctx.fillStyle = css(s.color);
      const pts = s.points.filter((p) => p[0] >= opts.t0);
      ctx.beginPath();
      pts.forEach(([t, v], i) => {
        if (v === null) return;
        const prev = i > 0 ? pts[i - 1][1] : null, next = i + 1 < pts.length ? pts[i + 1][1] : null;
        if (prev === null) ctx.moveTo(x(t), y(v)); else ctx.lineTo(x(t), y(v));
        if (prev === null && next === null) ctx.fillRect(x(t) - 2, y(v) - 2, 4, 4); // a lone point
      });
      ctx.stroke();
    }
    // what the chart shows, readable by tests and tools: the last value and the peak per series
    const summary = {};
    for (const s of series) {
      const vals = s.points.filter((p) => p[1] !== null).map((p) => p[1]);
      summary[s.name] = { count: vals.length, last: vals.length ? vals[vals.length - 1] : null,
                          max: vals.length ? Math.max(...vals) : null };
    }
    canvas.dataset.summary = JSON.stringify(summary);
  };

  M.legend = function (canvasId, series) {
    const holder = document.querySelector('.legend[data-for="' + canvasId + '"]');
    if (!holder || holder.childElementCount) return;
    for (const s of series) {
      const item = document.createElement("span");
      const swatch = document.createElement("i");
      swatch.style.background = "var(" + s.color + ")";
      item.append(swatch, s.name);
      holder.append(item);
    }
  };
})();
