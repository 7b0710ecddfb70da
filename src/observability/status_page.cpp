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
#include <charconv>
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
      "</tr></thead>\n<tbody>";
  if (s.upstreams.empty()) out += "<tr><td class=\"muted\" colspan=\"5\">none used yet</td></tr>";
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
           td(failures.empty() ? "none" : failures, failures.empty() ? "ok" : "bad") + "</tr>\n";
  }
  out += "</tbody>\n</table>\n";
}

/// Responses by who answered and with what: the gateway's own answers by status, and those
/// relayed from upstreams (their status is the upstream's).
void status_classes(std::string& out, const metrics_sample& s) {
  std::uint64_t forwarded = 0, limited = 0, fail_closed = 0, bad_gateway = 0, timeout = 0;
  for (const auto& r : s.routes) {
    forwarded += r.allowed + r.unlimited + r.fail_open;
    limited += r.limited;
    fail_closed += r.fail_closed;
    bad_gateway += r.bad_gateway;
    timeout += r.gateway_timeout;
  }
  forwarded -= std::min(forwarded, bad_gateway + timeout);
  out +=
      "<h2>Responses by status</h2>\n<table id=\"classes\">\n<thead><tr><th>class</th>"
      "<th>status</th><th>count</th></tr></thead>\n<tbody>";
  const std::tuple<const char*, const char*, std::uint64_t> rows[] = {
      {"2xx–5xx", "relayed from upstreams", forwarded},
      {"4xx", "429 limited", limited},
      {"4xx", "400 / 401 / 404 before any limit", s.bad_requests},
      {"5xx", "502 upstream failed", bad_gateway},
      {"5xx", "503 store failed (fail_closed)", fail_closed},
      {"5xx", "504 upstream timed out", timeout}};
  bool any = false;
  for (const auto& [cls, what, n] : rows) {
    if (n == 0) continue;  // zero rows are left out
    any = true;
    out += "<tr>" + td(cls) + td(what) + num(n) + "</tr>\n";
  }
  if (!any) out += "<tr><td class=\"muted\" colspan=\"3\">no requests yet</td></tr>";
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

std::string status_page_html(admin_backend& backend, std::string_view target) {
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
  }

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
