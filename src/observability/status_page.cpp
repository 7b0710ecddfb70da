// SPDX-License-Identifier: Apache-2.0
// The admin listener's status page (`GET /`, issue 13): one self-contained HTML document —
// no external assets, no build step. Its script reads the same endpoints an operator's tools
// do: /admin/config (routes, limits and their stated guarantees, generation, last reload
// error), /metrics every 2 s (decisions per second by route and outcome, from the counters'
// differences; store and breaker gauges) and /admin/explain for the form. Everything read is
// written into the page with textContent, never as markup.
#include "sluice/observability/admin.hpp"

namespace sluice::observability {

std::string_view status_page_html() noexcept {
  static constexpr std::string_view page = R"sluice_html(<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>sluice status</title>
<style>
body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em; color: #222; }
h1 { font-size: 1.4em; margin: 0 0 .2em; } h2 { font-size: 1.1em; margin: 1.4em 0 .4em; }
table { border-collapse: collapse; margin: .3em 0; }
th, td { border: 1px solid #ccc; padding: .25em .6em; text-align: left; vertical-align: top; }
th { background: #f3f3f3; } td.num { text-align: right; font-variant-numeric: tabular-nums; }
.bad { color: #b00020; font-weight: 600; } .ok { color: #0a7d32; font-weight: 600; }
.muted { color: #666; } code, pre { font-family: ui-monospace, monospace; font-size: 12px; }
pre { background: #f7f7f7; border: 1px solid #ddd; padding: .6em; max-height: 30em; overflow: auto; }
form label { margin-right: .8em; } input { font: inherit; }
</style>
</head>
<body>
<h1>sluice</h1>
<div class="muted" id="summary">loading…</div>

<h2>Store</h2>
<table><tbody id="store"><tr><td class="muted">waiting for /metrics…</td></tr></tbody></table>

<h2>Decisions per second</h2>
<table>
<thead><tr><th>route</th><th>decision</th><th>per second</th><th>total</th></tr></thead>
<tbody id="rates"><tr><td colspan="4" class="muted">waiting for two samples of /metrics…</td></tr></tbody>
</table>

<h2>Routes and limits</h2>
<table>
<thead><tr><th>route</th><th>upstream</th><th>on store failure</th><th>limit</th><th>by</th>
<th>algorithm</th><th>rate</th><th>burst</th><th>stated guarantee</th></tr></thead>
<tbody id="routes"></tbody>
</table>

<h2>Explain a request</h2>
<form id="explain">
<label>method <input name="method" value="GET" size="7"></label>
<label>path <input name="path" value="/" size="24" required></label>
<label>API key <input name="api_key" size="16"></label>
<label>client IP <input name="ip" size="15"></label>
<button type="submit">explain</button>
</form>
<p id="verdict" class="muted">Asks /admin/explain: what this request would get now, spending nothing.</p>
<pre id="explained" hidden></pre>

<script>
"use strict";
const $ = (id) => document.getElementById(id);
function cell(row, text, cls) {
  const td = row.insertCell(); td.textContent = text === undefined || text === null ? "" : String(text);
  if (cls) td.className = cls; return td;
}
function line(body, cells) {
  const tr = body.insertRow(); for (const c of cells) cell(tr, c[0], c[1]); return tr;
}

async function loadConfig() {
  const r = await fetch("/admin/config", {cache: "no-store"});
  const c = await r.json();
  const s = $("summary"); s.textContent = "";
  s.append("generation " + c.generation + " from " + c.source + " · store " +
           (c.store && c.store.type) + (c.store && c.store.address ? " " + c.store.address : ""));
  const err = document.createElement("div");
  err.id = "reload";
  if (c.last_reload_error) { err.className = "bad"; err.textContent = "last reload refused: " + c.last_reload_error; }
  else { err.className = "ok"; err.textContent = "last reload: no error"; }
  s.append(err);
  const body = $("routes"); body.textContent = "";
  for (const rt of c.routes || []) {
    const limits = rt.limits && rt.limits.length ? rt.limits : [null];
    limits.forEach((l, i) => {
      const tr = body.insertRow();
      if (i === 0) {
        for (const v of [rt.name, rt.upstream, rt.on_store_failure]) {
          const td = cell(tr, v); td.rowSpan = limits.length;
        }
      }
      if (!l) { cell(tr, "no limits", "muted").colSpan = 6; return; }
      for (const v of [l.name, l.by, l.algorithm + (l.mode === "shadow" ? " (shadow)" : ""),
                       l.rate, l.burst, l.guarantee]) cell(tr, v);
    });
  }
}

// Prometheus text format 0.0.4: name{labels} value
function parseMetrics(text) {
  const out = [];
  for (const ln of text.split("\n")) {
    if (!ln || ln[0] === "#") continue;
    const m = ln.match(/^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+)$/);
    if (!m) continue;
    const labels = {};
    if (m[3]) for (const p of m[3].matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g))
      labels[p[1]] = p[2].replace(/\\n/g, "\n").replace(/\\"/g, "\"").replace(/\\\\/g, "\\");
    out.push({name: m[1], labels, value: Number(m[4])});
  }
  return out;
}

let previous = null;
async function poll() {
  let samples;
  try {
    const r = await fetch("/metrics", {cache: "no-store"});
    samples = parseMetrics(await r.text());
  } catch (e) {
    $("store").textContent = ""; line($("store"), [["/metrics cannot be read: " + e, "bad"]]);
    return;
  }
  const now = performance.now();
  const get = (n) => samples.filter((s) => s.name === n);
  const store = $("store"); store.textContent = "";
  const connected = get("sluice_store_connected")[0];
  const breaker = get("sluice_store_breaker_state");
  // (gauges count store connections: one per worker for Redis)
  const open = breaker.filter((b) => b.value > 0 && b.labels.state !== "closed");
  line(store, [["connected"], [connected ? (connected.value >= 1 ? "yes (" + connected.value + ")" : "no") : "?",
               connected && connected.value >= 1 ? "ok" : "bad"]]);
  line(store, [["breaker"], [open.length ? open.map((b) => b.labels.state).join(", ") : "closed",
               open.length ? "bad" : "ok"]]);
  for (const n of ["sluice_store_checks_total", "sluice_store_timeouts_total",
                   "sluice_store_unavailable_total", "sluice_store_errors_total"]) {
    const v = get(n).reduce((a, s) => a + s.value, 0);
    line(store, [[n.replace("sluice_store_", "").replace("_total", "")], [v, "num"]]);
  }
  const counts = new Map();
  for (const s of get("sluice_requests_total"))
    counts.set(s.labels.route + "\u0000" + s.labels.decision, s);
  if (previous) {
    const body = $("rates"); body.textContent = "";
    const secs = (now - previous.at) / 1000;
    const keys = [...counts.keys()].sort();
    for (const k of keys) {
      const s = counts.get(k);
      const before = previous.counts.get(k);
      const rate = before && secs > 0 ? (s.value - before.value) / secs : 0;
      line(body, [[s.labels.route], [s.labels.decision], [rate.toFixed(1), "num"], [s.value, "num"]]);
    }
    if (!keys.length) line(body, [["no requests yet", "muted"]]);
  }
  previous = {at: now, counts};
}

async function explain(params) {
  const q = new URLSearchParams();
  for (const [k, v] of params) if (v !== "") q.append(k, v);
  const r = await fetch("/admin/explain?" + q.toString(), {cache: "no-store"});
  const text = await r.text();
  const pre = $("explained"); pre.hidden = false;
  const verdict = $("verdict");
  if (!r.ok) { verdict.className = "bad"; verdict.textContent = "HTTP " + r.status + ": " + text; pre.textContent = ""; return; }
  const e = JSON.parse(text);
  pre.textContent = JSON.stringify(e, null, 2);
  const o = e.outcome || {};
  let s = "route " + (e.route === null ? "none" : e.route) + ": " + (o.decision || e.error);
  if (o.status) s += " (" + o.status + ")";
  if (o.limit) s += " by " + o.limit + ", Retry-After " + Math.ceil(o.retry_after_ms / 1000) + " s";
  if (e.caller) s += " · caller " + e.caller.identity + ", plan " + e.caller.plan;
  verdict.className = o.decision === "limited" ? "bad" : "ok";
  verdict.textContent = s;
}
$("explain").addEventListener("submit", (ev) => {
  ev.preventDefault();
  explain(new FormData(ev.target)).catch((e) => { $("verdict").textContent = String(e); });
});

loadConfig().catch((e) => { $("summary").textContent = "/admin/config cannot be read: " + e; });
poll(); setInterval(poll, 2000);
// #explain?path=/v1/items&api_key=... fills the form and explains at once (a link to share).
if (location.hash.startsWith("#explain?")) {
  const p = new URLSearchParams(location.hash.slice(9));
  for (const [k, v] of p) if ($("explain").elements[k]) $("explain").elements[k].value = v;
  explain(new FormData($("explain"))).catch((e) => { $("verdict").textContent = String(e); });
}
</script>
</body>
</html>
)sluice_html";
  return page;
}

}  // namespace sluice::observability
