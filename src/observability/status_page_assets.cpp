// SPDX-License-Identifier: Apache-2.0
// The status page's style sheet and script (status_page.cpp renders the page around them).
// The script reads /metrics, /admin/top and /admin/explain and writes what it reads with
// textContent, never as markup.
#include <string_view>

namespace sluice::observability {

extern const std::string_view status_page_style;
extern const std::string_view status_page_script;

const std::string_view status_page_style = R"sluice_html(<style>
body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em; color: #222; }
h1 { font-size: 1.4em; margin: 0 0 .2em; } h2 { font-size: 1.1em; margin: 1.4em 0 .4em; }
table { border-collapse: collapse; margin: .3em 0; }
th, td { border: 1px solid #ccc; padding: .25em .6em; text-align: left; vertical-align: top; }
th { background: #f3f3f3; } td.num { text-align: right; font-variant-numeric: tabular-nums; }
.bad { color: #b00020; font-weight: 600; } .ok { color: #0a7d32; font-weight: 600; }
.muted { color: #666; } code, pre { font-family: ui-monospace, monospace; font-size: 12px; }
pre { background: #f7f7f7; border: 1px solid #ddd; padding: .6em; max-height: 30em; overflow: auto; }
form label { margin-right: .8em; } input { font: inherit; }
svg.graph { background: #fafafa; border: 1px solid #eee; display: block; }
svg.graph polyline { stroke-width: 1.5; } svg.graph .ok { stroke: #0a7d32; } svg.graph .bad { stroke: #b00020; }
</style>)sluice_html";

const std::string_view status_page_script = R"sluice_html(<script>
"use strict";
// Refreshes the server-rendered page: /metrics every 2 s (store, decisions per second),
// /admin/top every 5 s (most limited callers); answers the explain form in place.
const $ = (id) => document.getElementById(id);
function cell(row, text, cls) {
  const td = row.insertCell(); td.textContent = text === undefined || text === null ? "" : String(text);
  if (cls) td.className = cls; return td;
}
function line(body, cells) {
  const tr = body.insertRow(); for (const c of cells) cell(tr, c[0], c[1]); return tr;
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
  for (const s of get("sluice_requests_total")) {  // summed over the protocol label
    const k = s.labels.route + "\u0000" + s.labels.decision;
    const had = counts.get(k);
    counts.set(k, had ? {labels: s.labels, value: had.value + s.value} : s);
  }
  if (previous) {
    const body = $("rates"); body.textContent = "";
    const secs = (now - previous.at) / 1000;
    const keys = [...counts.keys()].sort();
    let shown = 0;
    for (const k of keys) {
      const s = counts.get(k);
      if (s.value === 0) continue;  // zero rows are left out, as the server leaves them out
      const before = previous.counts.get(k);
      const rate = before && secs > 0 ? (s.value - before.value) / secs : 0;
      line(body, [[s.labels.route], [s.labels.decision], [rate.toFixed(1), "num"], [s.value, "num"]]);
      ++shown;
    }
    if (!shown) line(body, [["no requests yet", "muted"]]);
  }
  previous = {at: now, counts};
}

async function refreshTop() {
  const table = $("top-table");
  if (!table) return;
  const r = await fetch("/admin/top?n=" + encodeURIComponent(table.dataset.n), {cache: "no-store"});
  if (!r.ok) return;
  const t = await r.json();
  const body = $("top"); body.textContent = "";
  for (const row of t.top)
    line(body, [[row.caller], [row.route], [row.limit], [row.refusals, "num"],
                [row.error ? "\u2264 " + row.error : "exact", "num"]]);
  if (!t.top.length) line(body, [["no refusals in the last " + t.window_minutes + " min", "muted"]]);
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

poll(); setInterval(poll, 2000);
setInterval(() => refreshTop().catch(() => {}), 5000);
// #explain?path=/v1/items&api_key=... fills the form and explains at once (a link to share).
if (location.hash.startsWith("#explain?")) {
  const p = new URLSearchParams(location.hash.slice(9));
  for (const [k, v] of p) if ($("explain").elements[k]) $("explain").elements[k].value = v;
  explain(new FormData($("explain"))).catch((e) => { $("verdict").textContent = String(e); });
}
</script>)sluice_html";

}  // namespace sluice::observability
