// SPDX-License-Identifier: Apache-2.0
// The request path's respond step (request_path.cpp has the order): the 429 or the forward
// verdict from the one decided outcome, the failure policy when the store did not decide, and
// the access note and counters of every answer.

#include "request_path.hpp"
#include "request_steps.hpp"

#include "sluice/errc.hpp"
#include "sluice/http/cors.hpp"
#include "sluice/http/headers.hpp"
#include "sluice/http/problem.hpp"
#include "sluice/limiter/keys.hpp"
#include "sluice/store/cluster_slots.hpp"

#include <spdlog/spdlog.h>
#include <boost/beast/http/field.hpp>

#include <algorithm>
#include <charconv>
#include <cmath>

namespace sluice::app {

using namespace steps;

namespace {

namespace asio = boost::asio;
namespace bhttp = boost::beast::http;

/// The `local` failure policy's share of a limit: burst and rate scaled by `share`, never
/// below the request's cost (a limit that could never admit would lie).
limiter::bucket_params scaled(const config::limit_params& p, double share, std::int64_t cost) {
  config::limit_params q = p;
  q.burst = std::max<std::int64_t>(cost, static_cast<std::int64_t>(std::floor(p.burst * share)));
  q.rate.count =
      std::max<std::int64_t>(1, static_cast<std::int64_t>(std::floor(p.rate.count * share)));
  return limiter::bucket_params::from(q);
}

}  // namespace

void gateway_handler::note(http::verdict& v, const http::request_context& ctx, const routed* r,
                           const presented* p, const identified* id,
                           const boost::system::result<limiter::check_outcome>* decided,
                           bool store_failed) const {
  http::access_note& n = v.access;
  if (r != nullptr) {
    n.route = r->route->route->name;
    if (v.what == http::verdict::kind::forward) n.upstream = r->route->route->upstream;
  }
  n.client = p != nullptr && !p->client.is_unspecified() ? p->client.to_string() : ctx.peer_text;
  // The key: as presented, or as identify() took it (it moves the key into the caller).
  const std::string& key = p != nullptr && !p->key.empty() ? p->key
                           : id != nullptr                 ? id->who.api_key
                                                           : n.key_hash;
  // (Hashed for the access log, or for the most limited callers when refused: a request
  // that is neither logged nor refused costs no HMAC.)
  if (!key.empty() && (shared_.access || refused(v)))
    n.key_hash = observability::key_hash(key, shared_.access_key);
  if (decided == nullptr) {
    // Answered before any limit (404, 401, 400...), or a route without limits.
    n.decision = v.what == http::verdict::kind::forward && r != nullptr ? "unlimited" : "";
    return;
  }
  if (store_failed) {
    switch (r->route->route->on_store_failure) {
      case config::failure_policy::fail_open:
        n.decision = "fail_open";
        return;
      case config::failure_policy::fail_closed:
        n.decision = "fail_closed";
        return;
      case config::failure_policy::local:
        n.decision = "local";
        break;  // decided by the local store: its outcome is in `decided`
    }
  }
  if (!*decided || id == nullptr || id->limits == nullptr) return;
  const outcome_summary sum = summarize(**decided, id->limits->applied);
  n.remaining = sum.remaining;
  if (sum.deciding < id->limits->limits.size()) n.limit = id->limits->limits[sum.deciding]->name;
  if (!store_failed) n.decision = sum.decision;
}

outcome_summary summarize(const limiter::check_outcome& out,
                          const std::vector<limiter::applied_limit>& applied) {
  outcome_summary sum;
  // The shadow limit that would have refused and frees up last (named when none enforced
  // refused: the request was shadow-limited by it).
  std::size_t shadow = sum.deciding;
  std::int64_t shadow_retry = 0;
  for (std::size_t i = 0; i < out.limits.size() && i < applied.size(); ++i) {
    const auto& lo = out.limits[i];
    if (applied[i].shadow) {
      if (!lo.admits &&
          (shadow == outcome_summary{}.deciding || lo.retry_after_ms > shadow_retry)) {
        shadow = i;
        shadow_retry = lo.retry_after_ms;
      }
      continue;
    }
    if (sum.remaining < 0 || lo.remaining < sum.remaining) sum.remaining = lo.remaining;
    if (!lo.admits &&
        (sum.deciding == outcome_summary{}.deciding || lo.retry_after_ms > sum.retry_after_ms)) {
      sum.deciding = i;
      sum.retry_after_ms = lo.retry_after_ms;
    }
  }
  const bool shadow_refused = shadow != outcome_summary{}.deciding;
  sum.decision = !out.allowed ? "limited" : shadow_refused ? "shadow-limited" : "allowed";
  if (out.allowed && shadow_refused) {
    sum.deciding = shadow;
    sum.retry_after_ms = shadow_retry;
  }
  return sum;
}

bool gateway_handler::records() const {
  return true;  // the client-facing metrics (durations, bytes) and the access log
}

void gateway_handler::record(const http::request_head& head, const http::request_context& ctx,
                             const http::verdict& v, const http::exchange_result& ex) noexcept {
  auto* counted = static_cast<route_counters*>(v.access.handler_tag);
  (counted != nullptr ? counted->exchanges : counters_.unrouted).record(ex, ctx.proto);
  if (!shared_.access) return;
  observability::access_record a;
  a.unix_ms = ex.unix_ms;
  a.client = v.access.client.empty() ? std::string_view(ctx.peer_text) : v.access.client;
  a.method = std::string_view(head.method_string().data(), head.method_string().size());
  a.target = std::string_view(head.target().data(), head.target().size());
  // The session sets version 20 on an HTTP/2 stream's head before it records it.
  a.protocol = head.version() == 20 ? "HTTP/2.0" : head.version() == 10 ? "HTTP/1.0" : "HTTP/1.1";
  a.status = ex.status;
  a.route = v.access.route;
  a.decision = v.access.decision;
  a.limit = v.access.limit;
  a.remaining = v.access.remaining;
  a.upstream = v.access.upstream;
  a.upstream_status = ex.upstream_status;
  a.upstream_ms = ex.upstream_ms;
  a.total_ms = ex.total_ms;
  a.bytes_in = ex.bytes_in;
  a.bytes_out = ex.bytes_out;
  a.key_hash = v.access.key_hash;
  shared_.access->write(a);
}

void gateway_handler::respond(const snapshot& snap, http::request_head& head,
                              const http::request_context& ctx, const routed& r,
                              const identified& id, limiter::check_request& check,
                              boost::system::result<limiter::check_outcome>& decided,
                              http::verdict& out) {
  const config::rules& rules = *snap.rules;
  const config::route& rt = *r.route->route;
  const unsigned version = head.version();
  route_counters& counted = counters_.of(rules, snap.generation, rt);
  const auto& prepared = *id.limits;

  // The applied list is the snapshot's, except under `local`, which rescales it.
  std::vector<limiter::applied_limit> rescaled;
  const std::vector<limiter::applied_limit>* applied = &prepared.applied;
  if (!decided) {
    rescaled = prepared.applied;
    if (auto v = apply_failure_policy(snap, head, r, id, decided.error(), ctx, check, rescaled,
                                      decided, counted)) {
      out = std::move(*v);
      return;
    }
    applied = &rescaled;
  }
  const limiter::check_outcome& outcome = *decided;
  // Shadow limits (DESIGN.md): each was decided as if alone; a would-be refusal is counted
  // and, with `shadow_header:`, named to the upstream, and changes nothing else.
  if (!rules.decision_time_header.empty() && outcome.now_ms > 0)
    head.set(rules.decision_time_header, std::to_string(outcome.now_ms));
  const auto shadow_hits = limiter::shadow_violations(*applied, outcome);
  if (!shadow_hits.empty()) {
    counted.shadow_limited.add();
    if (!rules.shadow_header.empty()) {
      std::string names;
      for (const auto& n : shadow_hits) names += (names.empty() ? "" : ", ") + n;
      head.set(rules.shadow_header, names);
    }
  }
  // The quota fields, rendered once: set on a 429, relayed with a forwarded response.
  std::string lines;
  limiter::append_quota_lines(lines, *applied, outcome, rules.headers);
  if (prepared.warns) count_warnings(prepared, *applied, rt.cost, head, outcome);
  if (!outcome.allowed) {
    counted.of(ctx.proto).limited.add();
    for (std::size_t i = 0; i < outcome.limits.size() && i < prepared.limits.size(); ++i) {
      if (outcome.limits[i].block == limiter::limit_outcome::block_event::started)
        counters_.blocks_started.of(prepared.limits[i]->name).add();
    }
    // `retry_after_jitter:` only ever adds to the honest wait.
    const auto retry = limiter::jittered_retry_after(
        limiter::retry_after_seconds(*applied, outcome), rules.retry_after_jitter, jitter_());
    auto violated = limiter::violated_policies(*applied, outcome);
    http::response res{bhttp::status::too_many_requests, version};
    res.set(bhttp::field::server, "sluice");
    res.set(bhttp::field::content_type, "application/problem+json");
    res.body() = limiter::quota_exceeded_body(violated, retry);
    http::set_lines(res.base(), lines);
    res.set(bhttp::field::retry_after, std::to_string(retry));
    out = answer(std::move(res));
    return;
  }
  counted.of(ctx.proto).allowed.add();
  forward(r, head, ctx, true, std::move(lines), counted, out);
}

void gateway_handler::count_warnings(const compiled_route::plan_limits& prepared,
                                     const std::vector<limiter::applied_limit>& applied,
                                     std::int64_t cost, const http::request_head& head,
                                     const limiter::check_outcome& outcome) {
  const std::size_t n = std::min({prepared.limits.size(), applied.size(), outcome.limits.size()});
  for (std::size_t i = 0; i < n; ++i) {
    if (applied[i].warn_at_bp <= 0) continue;
    const config::limit& l = *prepared.limits[i];
    // What this limit took for the request (`check` may have been moved into the store call by
    // now): one slot for a concurrency limit; a settled charge's reservation (admission_units,
    // which prepare_check() found valid); else the route's cost.
    const std::int64_t took = l.algorithm == config::algorithm::concurrency
                                  ? 1
                                  : admission_units(l.charge, cost, head).value_or(cost);
    if (limiter::crossed_warning(applied[i], outcome.limits[i], took, outcome.allowed))
      counters_.warnings.of(applied[i].name).add();
  }
}

std::optional<http::verdict> gateway_handler::apply_failure_policy(
    const snapshot& snap, const http::request_head& head, const routed& r, const identified& id,
    const boost::system::error_code& ec, const http::request_context& ctx,
    limiter::check_request& check, std::vector<limiter::applied_limit>& applied,
    boost::system::result<limiter::check_outcome>& decided, route_counters& counted) {
  const config::route& rt = *r.route->route;
  switch (rt.on_store_failure) {
    case config::failure_policy::fail_open: {
      counted.of(ctx.proto).fail_open.add();
      log_store_failure(ec, rt.name, "fail_open");
      // Nothing true can be said about the quota: no quota fields.
      http::verdict v;
      forward(r, head, ctx, true, {}, counted, v);
      return v;
    }
    case config::failure_policy::fail_closed: {
      counted.of(ctx.proto).fail_closed.add();
      log_store_failure(ec, rt.name, "fail_closed");
      auto res = http::problem(
          head.version(), bhttp::status::service_unavailable, "Rate Limiter Unavailable",
          "the rate limiter cannot decide this request right now; retry later");
      res.set(bhttp::field::retry_after, "1");
      return answer(std::move(res));
    }
    case config::failure_policy::local: {
      counted.local.add();
      log_store_failure(ec, rt.name, "local");
      const auto& limits = id.limits->limits;
      for (std::size_t i = 0; i < check.limits.size(); ++i) {
        check.limits[i].bucket =
            scaled(*limits[i]->find_params(id.who.plan), snap.rules->store.local_share, rt.cost);
        applied[i].bucket = check.limits[i].bucket;
      }
      decided = shared_.local_store.decide(check);
      return std::nullopt;
    }
  }
  return std::nullopt;
}

void gateway_handler::forward(const routed& r, const http::request_head& head,
                              const http::request_context& ctx, bool limited,
                              std::string quota_lines, route_counters& counted,
                              http::verdict& v) const {
  if (r.preflight && r.route->cors != nullptr &&
      r.route->cors->preflight == config::preflight_mode::answer) {
    v.answer = http::preflight_answer(*r.route->cors, head, {});
    http::set_lines(v.answer.base(), quota_lines);
    return;
  }
  const config::route& rt = *r.route->route;
  v.what = http::verdict::kind::forward;
  http::forward_plan& f = v.forward;
  f.upstream = r.route->upstream;
  f.upstream_tls = r.route->upstream_tls;
  f.target = f.upstream->base_path + r.target.path;
  if (!r.target.query.empty()) {
    f.target += '?';
    f.target += r.target.query;
  }
  f.client_address = ctx.peer_text;
  f.limited = limited;
  f.added_lines = std::move(quota_lines);
  f.max_request_body = rt.max_request_body;
  f.max_response_body = rt.max_response_body;
  f.tunnel_idle_timeout = rt.tunnel_idle_timeout;
  f.upgrade = r.websocket;
  f.on_failure = [c = &counted](http::upstream_failure failure, std::string_view what) {
    (failure == http::upstream_failure::timeout ? c->gateway_timeout : c->bad_gateway).add();
    if (c->upstream) {
      c->upstream->failures[static_cast<std::size_t>(failure)].add();
      c->upstream->note_failure(failure, what);
    }
  };
  if (counted.upstream) {
    f.on_response_head = [u = counted.upstream](std::chrono::nanoseconds d) {
      u->response.observe(d);
    };
  }
}

}  // namespace sluice::app
