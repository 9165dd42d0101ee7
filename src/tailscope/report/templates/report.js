/* tailscope report: draws the charts from the JSON in #ts-data with the embedded plotly.js.
   User text (run ids, class names, metric labels) only ever reaches the DOM through plotly strings escaped by esc(),
   never through innerHTML. */
(function () {
  "use strict";
  var data = JSON.parse(document.getElementById("ts-data").textContent);
  var CONFIG = { displaylogo: false, responsive: true };
  var COLORS = ["#2f6fde", "#e8590c", "#2b8a3e", "#ae3ec9", "#c92a2a", "#0b7285", "#5f3dc4", "#868e96"];
  var pending = [];
  var jobs = [];

  function esc(s) {
    return String(s).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
  }
  function div(parent, id) {
    var d = document.createElement("div");
    d.id = id;
    d.className = "plot";
    parent.appendChild(d);
    return d;
  }
  function plot(el, traces, layout) {
    var base = { margin: { l: 60, r: 20, t: 36, b: 44 }, height: 280, font: { size: 12 },
                 legend: { orientation: "h", y: -0.25 }, hovermode: "closest" };
    var merged = Object.assign(base, layout || {});
    el.style.height = merged.height + "px";  // plotly's responsive mode sizes to the container
    el.dataset.traces = String(traces.length);
    el.dataset.points = String(traces.reduce(function (n, t) { return n + ((t.x || t.y || []).length); }, 0));
    // drawn only once every chart's box exists, so that each is sized to its final place in the grid
    jobs.push(function () { pending.push(Plotly.newPlot(el, traces, merged, CONFIG)); });
  }
  function logx() {
    var box = document.getElementById("logx");
    return !box || box.checked;
  }
  function positive(xs) { return xs.length > 0 && xs[0] > 0; }
  function emptyNote(text) {
    return [{ text: esc(text), showarrow: false, xref: "paper", yref: "paper", x: 0.5, y: 0.5, font: { color: "#6b7280" } }];
  }

  function cdfs(runs) {
    var host = document.getElementById("cdfs");
    if (!host) { return; }
    var metrics = Object.keys(runs[0].charts);
    metrics.forEach(function (m) {
      var el = div(host, "cdf-" + m);
      el.dataset.kind = "cdf";
      var traces = [];
      var allPositive = true;
      runs.forEach(function (r, i) {
        var c = r.charts[m];
        if (!c || c.cdf.x.length === 0) { return; }
        allPositive = allPositive && positive(c.cdf.x);
        traces.push({ type: "scatter", mode: "lines", line: { shape: "hv", color: COLORS[i % COLORS.length], width: 2 },
                      name: esc(runs.length > 1 ? r.label : c.label), x: c.cdf.x, y: c.cdf.y,
                      hovertemplate: "%{x:.2f} ms<br>%{y:.4f}<extra>" + esc(r.label) + "</extra>" });
      });
      var label = runs[0].charts[m].label;
      var layout = { title: { text: esc(label) + " CDF" }, xaxis: { title: { text: "ms" }, type: logx() && allPositive ? "log" : "linear" },
                     yaxis: { title: { text: "fraction ≤ x" }, range: [0, 1.02] }, showlegend: runs.length > 1 };
      if (runs.length > 1) {
        layout.height = 300 + 18 * runs.length;
        layout.margin = { l: 60, r: 20, t: 36, b: 70 + 18 * runs.length };
        layout.legend = { orientation: "v", y: -0.3, yanchor: "top", x: 0 };
      }
      if (traces.length === 0) { layout.annotations = emptyNote("no samples"); el.dataset.empty = "1"; }
      el.dataset.allPositive = allPositive ? "1" : "0";
      plot(el, traces, layout);
    });
    var box = document.getElementById("logx");
    if (box) {
      box.addEventListener("change", function () {
        host.querySelectorAll(".plot").forEach(function (el) {
          var t = box.checked && el.dataset.allPositive === "1" ? "log" : "linear";
          Plotly.relayout(el, { "xaxis.type": t });
        });
      });
    }
  }

  function hists(run) {
    var host = document.getElementById("hists");
    if (!host) { return; }
    Object.keys(run.charts).forEach(function (m) {
      var c = run.charts[m];
      var el = div(host, "hist-" + m);
      el.dataset.kind = "histogram";
      var h = c.hist;
      var traces = [];
      if (h.counts.length > 0) {
        var y = h.counts.concat([h.counts[h.counts.length - 1]]);
        traces.push({ type: "scatter", mode: "lines", line: { shape: "hv", color: COLORS[0] }, fill: "tozeroy",
                      name: esc(c.label), x: h.edges, y: y, hovertemplate: "from %{x:.2f} ms: %{y}<extra></extra>" });
      }
      var layout = { title: { text: esc(c.label) + " histogram (" + c.n + " samples)" },
                     xaxis: { title: { text: "ms" }, type: h.log ? "log" : "linear" }, yaxis: { title: { text: "count" } },
                     showlegend: false };
      if (traces.length === 0) { layout.annotations = emptyNote("no samples"); el.dataset.empty = "1"; }
      plot(el, traces, layout);
    });
  }

  function timeseries(runs) {
    var el = document.getElementById("timeseries");
    if (!el) { return; }
    el.dataset.kind = "timeseries";
    var rows = [];  // each: {title, traces: [{x, y, name, shape}]}
    function add(title, series) { rows.push({ title: title, series: series }); }
    var multi = runs.length > 1;
    function nm(r, what) { return multi ? r.label + " " + what : what; }
    add("in flight", runs.map(function (r) { return { x: r.series.t, y: r.series.in_flight, name: nm(r, "in flight") }; }));
    add("output tok/s", runs.map(function (r) { return { x: r.series.t, y: r.series.out_tok_s, name: nm(r, "output tok/s") }; }));
    add("TTFT ms", [].concat.apply([], runs.map(function (r) {
      // windows where no request was scheduled have no TTFT: join across them
      var s = [{ x: r.series.t, y: r.series.ttft_p99_ms, name: nm(r, "TTFT p99"), gaps: true }];
      if (!multi) { s.push({ x: r.series.t, y: r.series.ttft_p50_ms, name: "TTFT p50", dash: "dot", gaps: true }); }
      return s;
    })));
    add("per window", [].concat.apply([], runs.map(function (r) {
      return [{ x: r.series.t, y: r.series.completed, name: nm(r, "completed") },
              { x: r.series.t, y: r.series.errors, name: nm(r, "errors"), color: multi ? null : "#c92a2a" }];
    })));
    if (!multi) {
      runs[0].series.server.forEach(function (s) {
        var title = s.name + (s.rate ? " /s" : "");
        add(title, [{ x: s.t, y: s.v, name: s.name + (s.labels ? "{" + s.labels + "}" : "") + (s.rate ? " (rate)" : ""),
                      shape: s.shape || (s.markers ? "linear" : "hv"), markers: !!s.markers }]);
      });
    }
    var n = rows.length;
    var gap = 0.03;
    var h = (1 - gap * (n - 1)) / n;
    var layout = { height: Math.max(320, 140 * n), margin: { l: 70, r: 20, t: 20, b: 40 }, showlegend: true,
                   legend: { orientation: "v", x: 1.01, y: 1 }, hovermode: "x unified",
                   xaxis: { title: { text: "seconds since the run start" }, anchor: "y" + (n > 1 ? n : "") } };
    var drill = !multi && runs[0].summary ? runs[0].summary.drill : null;
    if (drill && drill.timeline) {  // a drill's fault window, shaded across every row
      var t0 = null, t1 = null;
      drill.timeline.forEach(function (e) {
        if (e.event === "fault-start") { t0 = e.t_s; }
        if (e.event === "fault-end") { t1 = e.t_s; }
      });
      if (t0 !== null && t1 !== null) {
        layout.shapes = [{ type: "rect", xref: "x", yref: "paper", x0: t0, x1: t1, y0: 0, y1: 1,
                           fillcolor: "rgba(201, 42, 42, 0.10)", line: { width: 0 } }];
        layout.annotations = [{ xref: "x", yref: "paper", x: (t0 + t1) / 2, y: 1, yanchor: "bottom",
                                text: "fault: " + esc((drill.fault || {}).kind || ""), showarrow: false, font: { size: 10 } }];
      }
    }
    var traces = [];
    rows.forEach(function (row, i) {
      var key = i === 0 ? "yaxis" : "yaxis" + (i + 1);
      var top = 1 - i * (h + gap);
      layout[key] = { domain: [Math.max(0, top - h), top], title: { text: esc(row.title), font: { size: 10 } }, rangemode: "tozero" };
      row.series.forEach(function (s, j) {
        var runIndex = multi ? Math.floor(j / Math.max(1, row.series.length / runs.length)) : j;
        traces.push({ type: "scatter", mode: s.markers ? "markers" : "lines", x: s.x, y: s.y, name: esc(s.name), xaxis: "x",
                      yaxis: i === 0 ? "y" : "y" + (i + 1), connectgaps: !!s.gaps,
                      line: { shape: s.shape || "hv", dash: s.dash || "solid", color: s.color || COLORS[runIndex % COLORS.length], width: 1.5 } });
      });
    });
    plot(el, traces, layout);
  }

  function gantt(run) {
    var el = document.getElementById("gantt");
    if (!el || !run.gantt) { return; }
    el.dataset.kind = "gantt";
    var g = run.gantt;
    document.getElementById("gantt-note").textContent =
      "Showing " + g.shown + " of " + g.total + " requests (evenly spread in schedule order, plus the slowest). " +
      "Phases: queue = scheduled → sent, prefill = sent → first token, decode = first token → end. Failed requests in red.";
    var phases = [["queue", "scheduled", "sent", "#adb5bd"], ["prefill", "sent", "first", "#f59f00"],
                  ["decode", "first", "end", "#2f6fde"]];
    var traces = phases.map(function (p) {
      var ys = [], xs = [], bases = [], text = [];
      g.rows.forEach(function (r) {
        var a = r[p[1]], b = r[p[2]];
        if (a === null || b === null || r.status !== "ok") { return; }
        ys.push("#" + r.id); bases.push(a); xs.push(Math.max(b - a, 0));
        text.push(esc(r["class"]) + " " + p[0] + " " + ((b - a) * 1000).toFixed(1) + " ms");
      });
      return { type: "bar", orientation: "h", name: p[0], y: ys, x: xs, base: bases, text: text, width: 0.8,
               hoverinfo: "text+y", textposition: "none", marker: { color: p[3] } };
    });
    var fy = [], fx = [], fb = [], ft = [];
    g.rows.forEach(function (r) {
      if (r.status === "ok") { return; }
      var a = r.scheduled, b = r.end !== null ? r.end : (r.first !== null ? r.first : (r.sent !== null ? r.sent : a));
      fy.push("#" + r.id); fb.push(a); fx.push(Math.max(b - a, 0.0005));
      ft.push(esc(r["class"]) + " " + esc(r.status) + (r.error ? " " + esc(r.error) : ""));
    });
    traces.push({ type: "bar", orientation: "h", name: "failed / incomplete", y: fy, x: fx, base: fb, text: ft, width: 0.8,
                  hoverinfo: "text+y", textposition: "none", marker: { color: "#c92a2a" } });
    plot(el, traces, { barmode: "overlay", height: Math.min(1400, Math.max(320, 9 * g.shown + 90)), bargap: 0.15,
                       xaxis: { title: { text: "seconds since the run start" } },
                       yaxis: { autorange: "reversed", showticklabels: g.shown <= 60, type: "category" },
                       legend: { orientation: "h", y: 1.04, x: 0 }, margin: { l: 60, r: 20, t: 30, b: 44 } });
  }

  function sweep(sw) {
    if (!sw) { return; }
    var lat = document.getElementById("sweep-latency");
    var thr = document.getElementById("sweep-throughput");
    var pts = sw.points;
    var x = pts.map(function (p) { return p.load; });
    function col(k) { return pts.map(function (p) { return p[k]; }); }
    var shapes = [];
    if (sw.knee !== null) {
      shapes.push({ type: "line", x0: pts[sw.knee].load, x1: pts[sw.knee].load, yref: "paper", y0: 0, y1: 1,
                    line: { color: "#c92a2a", dash: "dash" } });
    }
    sw.slo.forEach(function (s) {
      if (s.threshold_ms !== null && /^(ttft|e2e)/.test(s.metric)) {
        shapes.push({ type: "line", xref: "paper", x0: 0, x1: 1, y0: s.threshold_ms, y1: s.threshold_ms,
                      line: { color: "#e8590c", dash: "dot" } });
      }
    });
    lat.dataset.kind = "sweep";
    plot(lat, [
      { type: "scatter", mode: "lines+markers", name: "TTFT p50", x: x, y: col("ttft_p50") },
      { type: "scatter", mode: "lines+markers", name: "TTFT p99", x: x, y: col("ttft_p99") },
      { type: "scatter", mode: "lines+markers", name: "E2E p99", x: x, y: col("e2e_p99") }
    ], { title: { text: "latency vs " + esc(sw.param) + " (knee: dashed, SLO: dotted)" }, shapes: shapes, height: 320,
         margin: { l: 60, r: 20, t: 36, b: 90 }, legend: { orientation: "h", y: -0.3, yanchor: "top" },
         xaxis: { title: { text: esc(sw.param) } }, yaxis: { title: { text: "ms" } } });
    thr.dataset.kind = "sweep";
    plot(thr, [{ type: "scatter", mode: "lines+markers+text", name: "TTFT p99", x: col("out_tok_s"), y: col("ttft_p99"),
                 text: x.map(function (v) { return esc(sw.param) + "=" + v; }), textposition: "top center",
                 cliponaxis: false }],
         { title: { text: "throughput vs TTFT p99" }, height: 320, margin: { l: 70, r: 40, t: 50, b: 60 },
           xaxis: { title: { text: "output tok/s" } },
           yaxis: { title: { text: "TTFT p99 ms" } }, showlegend: false });
  }


  var LAYER_COLORS = { inference: "#2f6fde", llm: "#2f6fde", retrieval: "#2b8a3e", business: "#e8590c",
                       tool: "#f59f00", agent: "#ae3ec9", gateway: "#0b7285", network: "#5c7cfa", db: "#862e9c",
                       queue: "#c92a2a", other: "#adb5bd" };
  function layerColor(name, i) { return LAYER_COLORS[name] || COLORS[i % COLORS.length]; }

  function layerShares(layers) {
    var el = document.getElementById("layer-shares");
    if (!el || !layers) { return; }
    el.dataset.kind = "layers";
    var bucketNames = Object.keys(layers);
    var names = {};
    bucketNames.forEach(function (b) { Object.keys(layers[b]).forEach(function (l) { names[l] = true; }); });
    var traces = Object.keys(names).map(function (l, i) {
      return { type: "bar", orientation: "h", name: esc(l), y: bucketNames.map(esc),
               x: bucketNames.map(function (b) { return 100 * (layers[b][l] || 0); }), marker: { color: layerColor(l, i) },
               hovertemplate: esc(l) + ": %{x:.1f} %<extra></extra>" };
    });
    plot(el, traces, { barmode: "stack", xaxis: { title: { text: "% of critical-path time" }, range: [0, 100] },
                       yaxis: { autorange: "reversed" }, height: 280, margin: { l: 120, r: 20, t: 40, b: 50 },
                       legend: { orientation: "h", y: 1.02, yanchor: "bottom", x: 0 } });
  }

  function traceWaterfall(list) {
    var el = document.getElementById("trace-waterfall");
    var pick = document.getElementById("trace-pick");
    if (!el || !list || list.length === 0) { return; }
    el.dataset.kind = "waterfall";
    list.forEach(function (w, i) {
      var o = document.createElement("option");
      o.value = String(i);
      o.textContent = w.label + " (" + w.duration_ms.toFixed(1) + " ms)" + (w.truncated ? ", first spans only" : "");
      pick.appendChild(o);
    });
    function draw(w, initial) {
      var byLayer = {};
      w.rows.forEach(function (r, k) {
        var t = byLayer[r.layer] || (byLayer[r.layer] = { y: [], x: [], base: [], text: [] });
        t.y.push(k); t.base.push(r.start_ms); t.x.push(Math.max(r.end_ms - r.start_ms, 0.001));
        t.text.push(esc(r.service ? r.service + " · " + r.name : r.name) + " " + (r.end_ms - r.start_ms).toFixed(2) + " ms");
      });
      var traces = Object.keys(byLayer).map(function (l, i) {
        var t = byLayer[l];
        return { type: "bar", orientation: "h", name: esc(l), y: t.y, x: t.x, base: t.base, text: t.text, width: 0.8,
                 hoverinfo: "text", textposition: "none", marker: { color: layerColor(l, i), opacity: 0.8 } };
      });
      traces.push({ type: "bar", orientation: "h", name: "critical path", y: w.path.map(function (p) { return p.row; }),
                    x: w.path.map(function (p) { return Math.max(p.end_ms - p.start_ms, 0.001); }),
                    base: w.path.map(function (p) { return p.start_ms; }), width: 0.35, hoverinfo: "x",
                    marker: { color: "#7f1d1d" } });
      var ticks = w.rows.map(function (r, k) { return k; });
      var labels = w.rows.map(function (r) { return esc(Array(r.depth + 1).join("· ") + r.name); });
      var layout = { barmode: "overlay", height: Math.min(1600, Math.max(300, 18 * w.rows.length + 90)),
                     margin: { l: 240, r: 20, t: 20, b: 44 }, xaxis: { title: { text: "ms from the trace start" } },
                     yaxis: { autorange: "reversed", tickvals: ticks, ticktext: labels, tickfont: { size: 10 } },
                     legend: { orientation: "h", y: 1.02, yanchor: "bottom" } };
      if (initial) { plot(el, traces, layout); } else { el.style.height = layout.height + "px"; Plotly.react(el, traces, layout, CONFIG); }
    }
    draw(list[0], true);
    pick.addEventListener("change", function () { draw(list[Number(pick.value)], false); });
  }

  function diffLayers(diff) {
    var el = document.getElementById("diff-layers");
    if (!el || !diff) { return; }
    var ops = Object.keys(diff.root_ops);
    if (ops.length === 0) { return; }
    el.dataset.kind = "diff";
    var tail = diff.root_ops[ops[0]].layers.tail_bucket || {};
    var names = Object.keys(tail);
    plot(el, [
      { type: "bar", name: "before", x: names.map(esc), y: names.map(function (n) { return tail[n].before_ms; }), marker: { color: "#adb5bd" } },
      { type: "bar", name: "after", x: names.map(esc), y: names.map(function (n) { return tail[n].after_ms; }), marker: { color: "#2f6fde" } }
    ], { barmode: "group", title: { text: "tail critical path per layer, " + esc(ops[0]) + " (ms per trace)" },
         yaxis: { title: { text: "ms" } } });
  }

  try {
    if (data.mode === "traces") {
      diffLayers(data.diff);
      layerShares(data.layers);
      traceWaterfall(data.waterfalls);
    } else {
      cdfs(data.runs);
      timeseries(data.runs);
    }
    if (data.mode === "run") {
      hists(data.runs[0]);
      gantt(data.runs[0]);
    } else if (data.mode === "compare") {
      sweep(data.sweep);
    }
    jobs.forEach(function (job) { job(); });
  } catch (err) {
    console.error("tailscope report: " + err);
  }
  Promise.all(pending).then(function () {
    document.body.dataset.chartsReady = String(pending.length);
  }, function (err) { console.error("tailscope report: " + err); });
})();
