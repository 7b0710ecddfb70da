// SPDX-License-Identifier: Apache-2.0
// The admin listener's status page (`GET /`, issues 13 and 29): one self-contained HTML
// document — no external assets, no build step — rendered here, on the server, so that it
// is complete with scripts off (a plain fetch, a screenshot, a text browser). Its script only
// refreshes what changes: the store and decision tables from /metrics every 2 s, the most
// limited callers from /admin/top every 5 s; and it answers the explain form in place
// (without scripts the form asks /admin/explain itself). Everything the server writes into
// the page is HTML-escaped; the script writes with textContent, never as markup.
#include "sluice/observability/admin.hpp"

#include "sluice/limiter/guarantee.hpp"
#include "sluice/utf8.hpp"
#include "sluice/version.hpp"

#include <boost/json.hpp>
#include <boost/url/parse.hpp>

#include <algorithm>
#include <array>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>

namespace sluice::observability {
namespace {

namespace json = boost::json;

/// `s` with the five characters that are markup in text and attribute values escaped
/// (HTML §13.1.2.6: &, <, >, and both quotes).
std::string escape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string text_of(const json::value& v) {
  if (v.is_string()) return std::string(v.get_string());
  if (v.is_null()) return "";
  return json::serialize(v);
}

/// A table cell; `cls` an optional class.
std::string td(std::string_view text, std::string_view cls = {}) {
  std::string out = cls.empty() ? "<td>" : "<td class=\"" + std::string(cls) + "\">";
  return out + escape(text) + "</td>";
}

std::string num(std::uint64_t n) {
  return td(std::to_string(n), "num");
}

/// What the page's query asks for: the top-N size and the explain form's fields.
struct page_query {
  std::size_t n = 0;  // 0: the configured default
  std::string n_text, method = "GET", path = "/", api_key, ip;
  std::vector<std::string> notes;  // query problems, shown in the page
};

page_query read_query(std::string_view target) {
  page_query q;
  if (target.find('?') == std::string_view::npos) return q;
  auto parsed = boost::urls::parse_origin_form(target);
  if (!parsed) {
    q.notes.push_back("the query cannot be read: " + parsed.error().message());
    return q;
  }
  boost::urls::encoding_opts plus;
  plus.space_as_plus = true;
  for (const auto p : parsed->params(plus)) {
    if (p.key == "n") {
      q.n_text = p.value;
      std::size_t n = 0;
      const auto* end = p.value.data() + p.value.size();
      const auto [at, ec] = std::from_chars(p.value.data(), end, n);
      if (ec != std::errc{} || at != end || n == 0) {
        q.notes.push_back("n '" + p.value + "' is not a whole number from 1 to " +
                          std::to_string(top_settings::max_top) + ": the default is shown");
      } else {
        q.n = n;
      }
    } else if (p.key == "method") {
      q.method = p.value;
    } else if (p.key == "path") {
      q.path = p.value;
    } else if (p.key == "api_key") {
      q.api_key = p.value;
    } else if (p.key == "ip") {
      q.ip = p.value;
    } else {
      q.notes.push_back("unknown parameter '" + p.key + "' (n, method, path, api_key, ip)");
    }
  }
  return q;
}

std::string duration_words(std::int64_t ms) {
  std::int64_t s = ms / 1000;
  const auto d = s / 86400, h = s % 86400 / 3600, m = s % 3600 / 60;
  s %= 60;
  std::string out;
  if (d) out += std::to_string(d) + "d ";
  if (d || h) out += std::to_string(h) + "h ";
  if (d || h || m) out += std::to_string(m) + "m ";
  return out + std::to_string(s) + "s";
}

/// The upper bound of the bucket holding the q-quantile of `h` (seconds), or -1 when empty.
double quantile_bound(const histogram_counts& h, double q) {
  const auto total = h.count();
  if (total == 0) return -1;
  const auto rank = static_cast<std::uint64_t>(std::ceil(q * static_cast<double>(total)));
  std::uint64_t seen = 0;
  for (std::size_t i = 0; i < h.buckets.size(); ++i) {
    seen += h.buckets[i];
    if (seen >= rank)
      return i < duration_bounds_seconds.size() ? duration_bounds_seconds[i] : INFINITY;
  }
  return INFINITY;
}

std::string ms_text(double seconds) {
  if (seconds < 0) return "–";
  if (std::isinf(seconds)) return "> 10 s";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g ms", seconds * 1000);
  return buf;
}

/// A row of the routes table for one limit (limit_json()'s fields); `applies`: "route" or
/// "plan NAME".
std::string limit_row(const config::limit& l, std::string_view applies) {
  const json::object o = limit_json(l);
  std::string algorithm = text_of(o.at("algorithm"));
  if (text_of(o.at("mode")) == "shadow") algorithm += " (shadow)";
  std::string rate, burst;
  if (const auto* r = o.if_contains("rate")) rate = text_of(*r);
  if (const auto* b = o.if_contains("burst")) burst = text_of(*b);
  if (const auto* m = o.if_contains("max_in_flight")) rate = text_of(*m) + " in flight";
  std::string plans;
  if (const auto* p = o.if_contains("plans"); p && p->is_object()) {
    for (const auto& [plan, po] : p->as_object()) {
      plans += (plans.empty() ? "" : "; ") + std::string(plan) + ": " +
               text_of(po.as_object().at("rate")) + " burst " + text_of(po.as_object().at("burst"));
    }
  }
  return td(l.name) + td(applies) + td(text_of(o.at("by"))) + td(algorithm) + td(rate) + td(burst) +
         td(plans) + td(text_of(o.at("guarantee")));
}

void routes_table(std::string& out, const config::rules& rules) {
  out +=
      "<h2>Routes and limits</h2>\n<table id=\"routes-table\">\n<thead><tr><th>route</th>"
      "<th>upstream</th><th>on store failure</th><th>limit</th><th>applies as</th><th>by</th>"
      "<th>algorithm</th><th>rate</th><th>burst</th><th>per plan</th>"
      "<th>stated guarantee</th></tr></thead>\n<tbody id=\"routes\">";
  // The plans in the order the gateway resolves them: anonymous first, then by name.
  std::vector<const std::pair<const std::string, config::plan>*> plans;
  for (const auto& p : rules.plans)
    if (p.first == "anonymous")
      plans.insert(plans.begin(), &p);
    else
      plans.push_back(&p);
  for (const auto& rt : rules.routes) {
    std::vector<std::string> rows;
    for (const auto& l : rt.limits) rows.push_back(limit_row(l, "route"));
    // A plan's limits apply on every route to that plan's callers (before the route's own,
    // and in place of a route limit of the same name).
    for (const auto* p : plans)
      for (const auto& l : p->second.limits) rows.push_back(limit_row(l, "plan " + p->first));
    if (rows.empty()) rows.push_back("<td class=\"muted\" colspan=\"8\">no limits</td>");
    const std::string span = " rowspan=\"" + std::to_string(rows.size()) + "\"";
    const char* policy = rt.on_store_failure == config::failure_policy::fail_open ? "fail_open"
                         : rt.on_store_failure == config::failure_policy::fail_closed
                             ? "fail_closed"
                             : "local";
    for (std::size_t i = 0; i < rows.size(); ++i) {
      out += "<tr>";
      if (i == 0) {
        for (std::string_view v :
             {std::string_view(rt.name), std::string_view(rt.upstream), std::string_view(policy)})
          out += "<td" + span + ">" + escape(v) + "</td>";
      }
      out += rows[i] + "</tr>\n";
    }
  }
  out += "</tbody>\n</table>\n";
}

void store_rows(std::string& out, const metrics_sample& s) {
  const bool up = s.store_connected >= 1;
  out += "<tr><td>connected</td>" +
         td(up ? "yes (" + std::to_string(s.store_connected) + ")" : "no", up ? "ok" : "bad") +
         "</tr>\n";
  std::string open;
  if (s.breaker[1]) open = "open";
  if (s.breaker[2]) open += std::string(open.empty() ? "" : ", ") + "half_open";
  out += "<tr><td>breaker</td>" + td(open.empty() ? "closed" : open, open.empty() ? "ok" : "bad") +
         "</tr>\n";
  const std::pair<const char*, std::uint64_t> counts[] = {{"checks", s.store.checks},
                                                          {"timeouts", s.store.timeouts},
                                                          {"unavailable", s.store.unavailable},
                                                          {"errors", s.store.errors}};
  for (const auto& [name, v] : counts) out += "<tr>" + td(name) + num(v) + "</tr>\n";
  out += "<tr><td>check latency p50 / p99</td>" +
         td(ms_text(quantile_bound(s.store_check, 0.5)) + " / " +
            ms_text(quantile_bound(s.store_check, 0.99))) +
         "</tr>\n";
}

void upstream_table(std::string& out, const metrics_sample& s) {
  out +=
      "<h2>Upstreams</h2>\n<table id=\"upstreams\">\n<thead><tr><th>upstream</th>"
      "<th>responses</th><th>mean</th><th>p50 / p99 (bucket bound)</th><th>failures</th>"
      "<th>last error</th></tr></thead>\n<tbody>";
  if (s.upstreams.empty()) out += "<tr><td class=\"muted\" colspan=\"6\">none used yet</td></tr>";
  const auto now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count();
  for (const auto& u : s.upstreams) {
    const auto n = u.response.count();
    std::string failures;
    for (std::size_t i = 0; i < u.failures.size(); ++i)
      if (u.failures[i])
        failures +=
            (failures.empty() ? "" : ", ") +
            std::string(http::upstream_failure_name(static_cast<http::upstream_failure>(i))) + " " +
            std::to_string(u.failures[i]);
    out += "<tr>" + td(u.upstream) + num(n) +
           td(n ? ms_text(u.response.sum_seconds / static_cast<double>(n)) : "–", "num") +
           td(ms_text(quantile_bound(u.response, 0.5)) + " / " +
              ms_text(quantile_bound(u.response, 0.99))) +
           td(failures.empty() ? "none" : failures, failures.empty() ? "ok" : "bad") +
           (u.last_error.empty()
                ? td("–", "muted")
                : td(u.last_error + " (" +
                     duration_words(std::max<std::int64_t>(0, now_ms - u.last_error_unix_ms)) +
                     " ago)")) +
           "</tr>\n";
  }
  out += "</tbody>\n</table>\n";
}

/// Responses by status class, as clients saw them (the request-duration histogram's
/// classes), and of each class what the gateway answered itself (429, 400/401/404 before any
/// limit, 502/503/504); the rest of a class was relayed from upstreams.
void status_classes(std::string& out, const metrics_sample& s) {
  std::array<std::uint64_t, code_classes.size()> seen{};
  for (const auto& e : s.exchanges)
    for (const auto& by_class : e.duration)  // every protocol
      for (std::size_t i = 0; i < seen.size(); ++i) seen[i] += by_class[i].count();
  std::uint64_t limited = 0, fail_closed = 0, bad_gateway = 0, timeout = 0;
  for (const auto& r : s.routes) {
    limited += r.limited;
    fail_closed += r.fail_closed;
    bad_gateway += r.bad_gateway;
    timeout += r.gateway_timeout;
  }
  // The gateway's own answers by class (index as code_classes).
  std::array<std::vector<std::pair<std::string, std::uint64_t>>, code_classes.size()> own;
  own[4] = {{"429 limited", limited}, {"400 / 401 / 404 before any limit", s.bad_requests}};
  own[5] = {{"502 upstream failed", bad_gateway},
            {"503 store failed (fail_closed)", fail_closed},
            {"504 upstream timed out", timeout}};
  out +=
      "<h2>Responses by status</h2>\n<table id=\"classes\">\n<thead><tr><th>class</th>"
      "<th>answered by</th><th>count</th></tr></thead>\n<tbody>";
  bool any = false;
  // 1xx..5xx, then exchanges that ended before any status (the client left, or a timeout).
  for (std::size_t i : {1u, 2u, 3u, 4u, 5u, 0u}) {
    std::uint64_t gateway = 0;
    for (const auto& [what, n] : own[i]) gateway += n;
    const std::uint64_t relayed = seen[i] - std::min(seen[i], gateway);
    std::vector<std::pair<std::string, std::uint64_t>> rows;
    if (i == 0) {
      rows.emplace_back("no response (the exchange ended first)", seen[0]);
    } else {
      rows.emplace_back("relayed from upstreams", relayed);
      for (const auto& r : own[i]) rows.push_back(r);
    }
    for (const auto& [what, n] : rows) {
      if (n == 0) continue;  // zero rows are left out
      any = true;
      out += "<tr>" + td(code_classes[i]) + td(what) + num(n) + "</tr>\n";
    }
  }
  if (!any) out += "<tr><td class=\"muted\" colspan=\"3\">no requests yet</td></tr>";
  out += "</tbody>\n</table>\n";
}

/// `v` per second, short: 0, 0.25, 12, 1.2k.
std::string rate_text(double v) {
  char buf[32];
  if (v >= 1000)
    std::snprintf(buf, sizeof buf, "%.3gk", v / 1000);
  else
    std::snprintf(buf, sizeof buf, "%.3g", v);
  return buf;
}

/// An inline SVG polyline of `values` (oldest first) scaled to `top` over `width` x `height`
/// pixels, one point per value, the newest at the right edge.
std::string polyline(const std::vector<double>& values, double top, std::size_t slots, int width,
                     int height, std::string_view cls) {
  std::string points;
  const double dx = slots > 1 ? static_cast<double>(width) / static_cast<double>(slots - 1) : 0;
  const std::size_t first = slots - std::min(slots, values.size());
  char buf[48];
  for (std::size_t i = 0; i < values.size() && i < slots; ++i) {
    const double x = dx * static_cast<double>(first + i);
    const double y = top > 0 ? height - values[i] / top * (height - 2) - 1 : height - 1;
    std::snprintf(buf, sizeof buf, "%s%.1f,%.1f", points.empty() ? "" : " ", x, y);
    points += buf;
  }
  return "<polyline class=\"" + std::string(cls) + "\" fill=\"none\" points=\"" + points + "\"/>";
}

/// Per-route request rates over the last `status.graph`: one small graph per route that saw
/// requests (forwarded in green, refused in red), drawn on the server as inline SVG.
void rate_graphs(std::string& out, const rate_history& rates) {
  const auto series = rates.read();
  const auto step_s = rates.step().count() / 1000;
  const auto span_min = static_cast<long long>(rates.points()) * rates.step().count() / 60'000;
  out += "<h2>Requests per second</h2>\n<p class=\"muted\">Each route over the last " +
         std::to_string(span_min) + " min, one point per " + std::to_string(step_s) +
         " s: <span class=\"ok\">forwarded</span> and <span class=\"bad\">refused</span> "
         "(429, and 503 fail_closed). Drawn by the server; reload the page for new points.</p>\n"
         "<table id=\"graphs\">\n<thead><tr><th>route</th><th>last "
         "minutes</th><th>now forwarded / refused</th><th>peak</th></tr></thead>\n<tbody>";
  bool any = false;
  constexpr int width = 240, height = 36;
  for (const auto& s : series) {
    double peak = 0, sum = 0;
    for (std::size_t i = 0; i < s.forwarded.size(); ++i) {
      peak = std::max({peak, s.forwarded[i], s.limited[i]});
      sum += s.forwarded[i] + s.limited[i];
    }
    if (sum == 0) continue;  // a route that saw nothing in the span is left out
    any = true;
    out += "<tr data-route=\"" + escape(s.route) + "\">" + td(s.route) +
           "<td><svg class=\"graph\" role=\"img\" width=\"" + std::to_string(width) +
           "\" height=\"" + std::to_string(height) + "\" viewBox=\"0 0 " + std::to_string(width) +
           " " + std::to_string(height) + "\"><title>" + escape(s.route) +
           ": requests per second, peak " + rate_text(peak) + "</title>" +
           polyline(s.forwarded, peak, rates.points(), width, height, "ok") +
           polyline(s.limited, peak, rates.points(), width, height, "bad") + "</svg></td>" +
           td(rate_text(s.forwarded.back()) + " / " + rate_text(s.limited.back()), "num") +
           td(rate_text(peak), "num") + "</tr>\n";
  }
  if (!any)
    out += "<tr><td class=\"muted\" colspan=\"4\">no requests in the last " +
           std::to_string(span_min) + " min (a point is drawn every " + std::to_string(step_s) +
           " s)</td></tr>";
  out += "</tbody>\n</table>\n";
}

/// The Envoy rate limit service's calls by answer, its descriptors and its latency; rows at
/// zero left out.
void rls_table(std::string& out, const rls_counts& r) {
  out +=
      "<h2>Rate limit service</h2>\n<table id=\"rls\">\n<thead><tr><th>ShouldRateLimit</th>"
      "<th>count</th></tr></thead>\n<tbody>";
  const std::pair<const char*, std::uint64_t> rows[] = {
      {"OK", r.ok},
      {"OVER_LIMIT", r.over_limit},
      {"INVALID_ARGUMENT (no counter touched)", r.invalid_argument},
      {"UNAVAILABLE (store failed, fail_closed)", r.unavailable},
      {"OK without a decision (store failed, fail_open)", r.fail_open},
      {"a shadow limit would have refused", r.shadow_limited},
      {"descriptors decided", r.descriptors_decided},
      {"descriptors unknown (allowed)", r.unknown_descriptors}};
  bool any = false;
  for (const auto& [what, n] : rows) {
    if (n == 0) continue;
    any = true;
    const bool bad = what[0] == 'U' || what[0] == 'I';
    out += "<tr>" + td(what, bad ? "bad" : "") + num(n) + "</tr>\n";
  }
  if (!any)
    out += "<tr><td class=\"muted\" colspan=\"2\">no calls yet</td></tr>";
  else
    out += "<tr><td>latency p50 / p99</td>" +
           td(ms_text(quantile_bound(r.duration, 0.5)) + " / " +
              ms_text(quantile_bound(r.duration, 0.99))) +
           "</tr>\n";
  out += "</tbody>\n</table>\n";
}

void decision_rows(std::string& out, const metrics_sample& s) {
  bool any = false;
  for (const auto& r : s.routes) {
    const std::pair<const char*, std::uint64_t> counts[] = {
        {"allowed", r.allowed},         {"limited", r.limited},
        {"unlimited", r.unlimited},     {"fail_open", r.fail_open},
        {"fail_closed", r.fail_closed}, {"shadow-limited", r.shadow_limited}};
    for (const auto& [decision, n] : counts) {
      if (n == 0) continue;  // zero rows are left out
      any = true;
      out += "<tr>" + td(r.route) + td(decision) + td("–", "num") + num(n) + "</tr>\n";
    }
  }
  if (!any) out += "<tr><td colspan=\"4\" class=\"muted\">no requests yet</td></tr>";
}

void top_rows(std::string& out, const top_callers::answer& a) {
  for (const auto& r : a.rows) {
    out += "<tr>" + td(r.caller) + td(r.route) + td(r.limit) + num(r.refusals) +
           td(r.error ? "≤ " + std::to_string(r.error) : "exact", "num") + "</tr>\n";
  }
  if (a.rows.empty())
    out += "<tr><td colspan=\"5\" class=\"muted\">no refusals in the last " +
           std::to_string(a.window_minutes) + " min</td></tr>";
}

}  // namespace

// status_page_assets.cpp
extern const std::string_view status_page_style;
extern const std::string_view status_page_script;

std::string status_page_html(admin_backend& backend, std::string_view target,
                             const rate_history* rates) {
  const page_query q = read_query(target);
  const auto view = backend.current_config();
  const auto facts = backend.status();
  const auto top = backend.top(q.n);
  const config::rules& rules = *view.rules;

  std::string out;
  out.reserve(32 * 1024);
  out +=
      "<!doctype html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
      "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
      "<title>sluice status</title>\n";
  out += status_page_style;
  out += "\n</head>\n<body>\n<h1>sluice</h1>\n<div class=\"muted\" id=\"summary\">";
  out += "version " + escape(sluice::version) + " (" + escape(sluice::revision) + ")";
  if (facts)
    out += " · up " + escape(duration_words(facts->uptime_ms)) + " · " +
           std::to_string(facts->workers) + " workers";
  out += " · generation " + std::to_string(view.generation) + " from " + escape(view.source_file) +
         " · store " +
         escape(rules.store.type == config::store_settings::kind::memory ? "memory" : "redis");
  if (view.last_reload_error.empty())
    out += "<div id=\"reload\" class=\"ok\">last reload: no error</div>";
  else
    out +=
        "<div id=\"reload\" class=\"bad\">last reload refused: " + escape(view.last_reload_error) +
        "</div>";
  out += "</div>\n";
  for (const auto& note : q.notes) out += "<p class=\"bad query-note\">" + escape(note) + "</p>\n";

  out += "<h2>Most limited callers</h2>\n";
  if (top) {
    out += "<p class=\"muted\">Refusals (429) in the last " + std::to_string(top->window_minutes) +
           " min by caller (the access log's key hash, "
           "or the client address without a key), route and limit: " +
           std::to_string(top->total) + " in all; the top " + std::to_string(top->shown) +
           " (a Space-Saving sketch: a count may overstate by its error).</p>\n";
    if (top->capped)
      out += "<p class=\"bad query-note\">n=" + escape(q.n_text) +
             " is over the bound; capped at " + std::to_string(top_settings::max_top) + "</p>\n";
    out += "<table id=\"top-table\" data-n=\"" + std::to_string(top->shown) +
           "\">\n<thead><tr><th>caller</th><th>route</th><th>limit</th><th>refusals</th>"
           "<th>error</th></tr></thead>\n<tbody id=\"top\">";
    top_rows(out, *top);
    out += "</tbody>\n</table>\n";
  } else {
    out += "<p class=\"muted\">not kept by this gateway</p>\n";
  }

  out += "<h2>Store</h2>\n<table><tbody id=\"store\">";
  if (facts)
    store_rows(out, facts->sample);
  else
    out += "<tr><td class=\"muted\">not available</td></tr>";
  out += "</tbody></table>\n";
  if (facts) {
    upstream_table(out, facts->sample);
    status_classes(out, facts->sample);
    if (facts->rls_enabled) rls_table(out, facts->sample.rls);
  }

  if (rates) rate_graphs(out, *rates);

  out +=
      "<h2>Decisions</h2>\n<table>\n<thead><tr><th>route</th><th>decision</th>"
      "<th>per second</th><th>total</th></tr></thead>\n<tbody id=\"rates\">";
  if (facts) decision_rows(out, facts->sample);
  out += "</tbody>\n</table>\n";

  routes_table(out, rules);

  out +=
      "<h2>Explain a request</h2>\n<form id=\"explain\" method=\"get\" "
      "action=\"/admin/explain\">\n<label>method <input name=\"method\" value=\"" +
      escape(q.method) + "\" size=\"7\"></label>\n<label>path <input name=\"path\" value=\"" +
      escape(q.path) +
      "\" size=\"24\" required></label>\n<label>API key <input name=\"api_key\" value=\"" +
      escape(q.api_key) + "\" size=\"16\"></label>\n<label>client IP <input name=\"ip\" value=\"" +
      escape(q.ip) +
      "\" size=\"15\"></label>\n<button type=\"submit\">explain</button>\n</form>\n"
      "<p id=\"verdict\" class=\"muted\">Asks /admin/explain: what this request would get now, "
      "spending nothing.</p>\n<pre id=\"explained\" hidden></pre>\n";
  out += status_page_script;
  out += "\n</body>\n</html>\n";
  // A query value may hold ill-formed UTF-8: U+FFFD keeps the document well-formed.
  return utf8::make_valid(out);
}

std::pair<unsigned, std::string> top_answer(admin_backend& backend, std::string_view target) {
  std::size_t n = 0;
  if (target.find('?') != std::string_view::npos) {
    auto parsed = boost::urls::parse_origin_form(target);
    if (!parsed)
      return {400, utf8::make_valid(json::serialize(json::object{
                       {"error", "top: the query cannot be read: " + parsed.error().message()}}))};
    for (const auto p : parsed->params()) {
      if (p.key != "n")
        return {400, utf8::make_valid(json::serialize(
                         json::object{{"error", "top: unknown parameter '" + p.key + "' (n)"}}))};
      const auto* end = p.value.data() + p.value.size();
      const auto [at, ec] = std::from_chars(p.value.data(), end, n);
      if (ec == std::errc::result_out_of_range && at == end) {
        n = static_cast<std::size_t>(-1);  // a huge n: capped like any n over the bound
      } else if (ec != std::errc{} || at != end || n == 0) {
        return {400, utf8::make_valid(json::serialize(json::object{
                         {"error", "top: n must be a whole number from 1 (got '" + p.value +
                                       "'); an n over " + std::to_string(top_settings::max_top) +
                                       " is capped"}}))};
      }
    }
  }
  auto a = backend.top(n);
  if (!a) return {404, "{\"error\":\"this gateway keeps no top-N\"}"};
  return {200, top_json(*a)};
}

}  // namespace sluice::observability
