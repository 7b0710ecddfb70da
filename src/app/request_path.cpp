// SPDX-License-Identifier: Apache-2.0
// The gateway's request path (DESIGN.md): every request is decided on its head, in order —
//
//   route     canonical target → route (404), what the route allows of the head (413, 403)
//   identify  API key → plan (inline map, key file, the store-backed directory) → caller
//   decide    every applicable limit (plan limits first, then route limits) in one store check;
//             a store failure goes through apply_failure_policy(), the one place that does
//   respond   429 with the quota fields, or a forward verdict the http room relays, the
//             rate-limit fields rendered from the one decided outcome
//
// Nothing here reads a body: the session streams an admitted request's body afterwards.

#include "request_path.hpp"

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

lua::key_layout key_layout_of(const config::store_settings& store) {
  lua::key_layout layout;
  layout.packed = store.layout == config::store_settings::layout_kind::hash;
  layout.hash_groups = store.hash_groups;
  return layout;
}
namespace {

/// Milliseconds of the steady clock (the most limited callers' minutes).
std::int64_t steady_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

/// Whether `v` answers 429 (refused by a limit).
bool refused(const http::verdict& v) {
  return v.what == http::verdict::kind::answer &&
         v.answer.result() == boost::beast::http::status::too_many_requests;
}

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

http::verdict answer(http::response res) {
  http::verdict v;
  v.what = http::verdict::kind::answer;
  v.answer = std::move(res);
  return v;
}

/// The limits a caller of `plan` gets on `route`: plan limits first, then route limits, each
/// in declaration order, one per limit name (bucket scope: a limit named by both is charged once,
/// at its first position); a limit written only as per-plan overrides does not apply to
/// other plans.
compiled_route::plan_limits limits_for(const config::rules& rules, const config::route& route,
                                       const std::string& plan) {
  compiled_route::plan_limits out;
  auto add = [&](const config::limit& l) {
    if (!l.applies_to(plan)) return;
    for (const auto* seen : out.limits) {
      if (seen->name == l.name) return;
    }
    out.limits.push_back(&l);
    out.applied.push_back({l.name, l.algorithm,
                           limiter::bucket_params::for_limit(l, *l.find_params(plan)),
                           l.mode == config::limit_mode::shadow, l.warn_at_bp});
    out.leases = out.leases || l.lease > 0;
    out.lease_time.push_back(l.lease_time);
    std::shared_ptr<const limiter::usage_source> usage;
    if (l.charge.what == config::charge_rule::kind::settle) {
      limiter::usage_source src;
      src.header = l.charge.settle_header;
      src.path = l.charge.settle_path;
      usage = std::make_shared<const limiter::usage_source>(std::move(src));
    }
    out.charges = out.charges || l.charge.what != config::charge_rule::kind::none;
    out.usage.push_back(std::move(usage));
    out.concurrent = out.concurrent || l.algorithm == config::algorithm::concurrency;
    out.warns = out.warns || l.warn_at_bp > 0;
  };
  if (auto p = rules.plans.find(plan); p != rules.plans.end()) {
    for (const auto& l : p->second.limits) add(l);
  }
  for (const auto& l : route.limits) add(l);
  if (!out.charges) out.usage.clear();  // (the plain path carries nothing)
  return out;
}

/// The units a limit with `charge:` takes at admission: the route's cost (when_status); the
/// fixed reservation; or the request header's, capped at its max (the max when the header
/// is absent; at least 1). nullopt: the header is not a whole number.
std::optional<std::int64_t> admission_units(const config::charge_rule& c, std::int64_t cost,
                                            const http::request_head& head) {
  if (c.what != config::charge_rule::kind::settle) return cost;
  if (c.reserve_header.empty()) return c.reserve;
  const auto value = head[c.reserve_header];
  if (value.empty()) return c.reserve_max;
  std::uint64_t n = 0;
  const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), n);
  if (ec == std::errc::result_out_of_range && end == value.data() + value.size())
    return c.reserve_max;  // digits beyond 2^64: capped like any large number
  if (ec != std::errc{} || end != value.data() + value.size()) return std::nullopt;
  return std::clamp<std::int64_t>(
      static_cast<std::int64_t>(std::min<std::uint64_t>(n, config::max_exact_integer)), 1,
      c.reserve_max);
}

bool has_uppercase_free_method(std::string_view method) {
  return std::none_of(method.begin(), method.end(), [](char c) { return c >= 'a' && c <= 'z'; });
}

}  // namespace

snapshot::snapshot(std::shared_ptr<const config::rules> r, std::uint64_t g,
                   std::shared_ptr<const http::tls_bundle> t)
    : rules(std::move(r)), tls(std::move(t)), router(*rules), generation(g) {
  std::unordered_map<std::string, std::shared_ptr<const config::upstream>> upstreams;
  for (const auto& [name, up] : rules->upstreams) {
    upstreams.emplace(name, std::make_shared<const config::upstream>(up));
  }
  std::vector<std::string> plans{"anonymous"};
  for (const auto& [name, plan] : rules->plans) {
    if (name != "anonymous") plans.push_back(name);
  }
  routes.reserve(rules->routes.size());
  for (const auto& route : rules->routes) {
    compiled_route c;
    c.route = &route;
    if (auto it = upstreams.find(route.upstream); it != upstreams.end()) c.upstream = it->second;
    if (tls) c.upstream_tls = tls->upstream(route.upstream);
    for (const auto& plan : plans) c.by_plan.emplace(plan, limits_for(*rules, route, plan));
    c.cors = route.cors ? route.cors.get() : rules->cors.get();
    const auto& anonymous = c.by_plan.at("anonymous");
    for (std::size_t i = 0; i < anonymous.limits.size(); ++i) {
      // (A charged limit is never charged to a preflight: nothing would settle it.)
      if (!anonymous.limits[i]->preflight ||
          anonymous.limits[i]->charge.what != config::charge_rule::kind::none)
        continue;
      c.preflight.limits.push_back(anonymous.limits[i]);
      c.preflight.applied.push_back(anonymous.applied[i]);
      c.preflight.lease_time.push_back(anonymous.lease_time[i]);
      c.preflight.leases = c.preflight.leases || anonymous.limits[i]->lease > 0;
      c.preflight.concurrent = c.preflight.concurrent ||
                               anonymous.limits[i]->algorithm == config::algorithm::concurrency;
    }
    routes.push_back(std::move(c));
  }
  // Sharded limits: each shard's key, in its own part of the slot space.
  const lua::key_layout layout = key_layout_of(rules->store);
  auto shard = [&](const config::limit& l) {
    if (l.shards > 1 && !shard_keys.contains(l.name))
      shard_keys.emplace(l.name, store::spread_shard_keys(l, layout));
  };
  for (const auto& [name, plan] : rules->plans)
    for (const auto& l : plan.limits) shard(l);
  for (const auto& route : rules->routes)
    for (const auto& l : route.limits) shard(l);
}

http::verdict gateway_handler::bad_request(unsigned version, std::string_view detail) {
  counters_.bad_requests.add();
  return answer(http::problem(version, bhttp::status::bad_request, "Bad Request", detail));
}

void gateway_handler::finish(http::verdict& v, const progress& at, http::request_head& head,
                             const http::request_context& ctx) const {
  v.access.handler_tag = at.counted;  // record(): the route's exchange counters
  // The access note is written for the access log, or for a refusal (the most limited
  // callers): a request that is neither logged nor refused pays for no note.
  const bool refusal = shared_.top && refused(v);
  if (shared_.access || refusal) {
    note(v, ctx, at.r, at.p, at.id, at.decided, at.store_failed);
    // A refusal counts toward the most limited callers (status page, /admin/top): by the
    // caller the access log names (its key hash, else its address), route and limit.
    if (refusal && !v.access.route.empty()) {
      shared_.top->record(v.access.key_hash.empty() ? v.access.client : v.access.key_hash,
                          v.access.route, v.access.limit, steady_ms());
    }
  }
  if (at.cors == nullptr) return;
  if (v.what == http::verdict::kind::forward) {
    http::append_cors_fields(*at.cors, head, v.forward.response_fields);
  } else {
    http::field_list fields;
    http::append_cors_fields(*at.cors, head, fields);
    for (auto& [name, value] : fields) v.answer.insert(name, value);
  }
}

std::optional<http::verdict> gateway_handler::start(const snapshot& snap, http::request_head& head,
                                                    progress& at,
                                                    std::optional<routed>& routed_slot) {
  // CORS (Fetch §3.2.3): every answer the gateway makes itself, and every relayed response,
  // carries the fields a browser needs to read it — the route's policy, else the top-level
  // one (a request no route matches gets the top-level one).
  at.cors = snap.rules->cors.get();
  auto routed_or = route(snap, head, at.cors);
  if (auto* v = std::get_if<http::verdict>(&routed_or)) return std::move(*v);
  const routed& r = routed_slot.emplace(std::move(std::get<routed>(routed_or)));
  at.r = &r;
  at.counted = &counters_.of(*snap.rules, snap.generation, *r.route->route);
  at.cors = r.route->cors;
  // A preflight the upstream answers is relayed as it is: the upstream owns that answer
  // (`preflight: forward`, or no CORS policy at all).
  if (r.preflight && (at.cors == nullptr || at.cors->preflight == config::preflight_mode::forward))
    at.cors = nullptr;
  return std::nullopt;
}

std::optional<http::verdict> gateway_handler::front(const snapshot& snap, http::request_head& head,
                                                    const http::request_context& ctx, pending& q) {
  if (auto early = start(snap, head, q.at, q.r)) return early;
  // An HTTP/2 upstream (a gRPC service) is reached from HTTP/2 clients only: an HTTP/1.1
  // request to it is refused before any limit, so it is never charged.
  if (const auto& up = q.r->route->upstream; up && up->http2 && ctx.proto != http::protocol::h2) {
    counters_.bad_requests.add();
    return answer(http::problem(head.version(), bhttp::status::http_version_not_supported,
                                "HTTP Version Not Supported",
                                "this route's upstream speaks HTTP/2; send the request over "
                                "HTTP/2"));
  }
  q.at.p = &q.p;
  q.at.id = &q.id;
  return present(snap, head, ctx, *q.r, q.p);
}

std::optional<http::verdict> gateway_handler::back(const snapshot& snap, http::request_head& head,
                                                   const http::request_context& ctx, pending& q) {
  if (auto early = identify_caller(snap, head, *q.r, q.p, q.id)) return early;
  return prepare_check(snap, head, ctx, *q.r, q.id, q.check, q.charged);
}

void gateway_handler::conclude(const snapshot& snap, http::request_head& head,
                               const http::request_context& ctx, pending& q, store_result& decided,
                               http::verdict& out) {
  q.at.decided = &decided;
  q.at.store_failed = !decided;  // then only `local` decides (on the local store), in respond()
  respond(snap, head, ctx, *q.r, q.id, q.check, decided, out);
  // Costs known after the response: a request the store admitted carries the hook that settles
  // its charged limits (fail_open and `local` decisions have nothing to settle in the store; a
  // forward verdict after a store decision is an admission).
  if (!q.charged.empty() && !q.at.store_failed && out.what == http::verdict::kind::forward) {
    out.forward.watch.add(http::exchange_watch(std::make_unique<charge_hook>(
        snap.rules, store_.shared_store(), executor_, settlements_, std::move(q.charged),
        decided->now_ms, shared_.reservations)));
  }
  if (!q.slot.empty()) hold_slots(q, decided, q.at.store_failed, out);
  finish(out, q.at, head, ctx);
}

void gateway_handler::stamp_slot(pending& q) {
  q.slot = slots_->stamp(q.check);
}

void gateway_handler::hold_slots(pending& q, const store_result& decided, bool on_local,
                                 http::verdict& out) {
  if (!decided) return;  // fail_open, fail_closed: no store took a slot
  const limiter::check_request& sent = on_local || q.sent.limits.empty() ? q.check : q.sent;
  // (An answer's watch ends when the verdict is dropped, after the answer is sent.)
  out.forward.watch.add(slots_->hold(q.slot, sent, *decided, on_local));
}

bool gateway_handler::needs_directory(const snapshot& snap, const routed& r, const presented& p) {
  return !r.preflight && !p.plan && !p.key.empty() && snap.rules->identity.directory.enabled;
}

bool gateway_handler::decide_now(http::request_head& head, const http::request_context& ctx,
                                 http::verdict& out) {
  // Only a store that always decides in memory, and no plan directory (its lookup waits):
  // then nothing below can need a wait, and a false return has done nothing. (The store is
  // asked first: on the Redis store the snapshot is loaded once, by decide().)
  if (!store_.in_memory()) return false;
  // One snapshot decides the whole request, whatever reloads happen meanwhile.
  std::shared_ptr<const snapshot> snap = shared_.current.load();
  if (snap->rules->identity.directory.enabled) return false;
  counters_.requests.add();
  pending q;
  std::optional<http::verdict> early = front(*snap, head, ctx, q);
  if (!early) early = back(*snap, head, ctx, q);
  if (early) {
    out = std::move(*early);
    finish(out, q.at, head, ctx);
    return true;
  }
  if (q.id.limits->concurrent) stamp_slot(q);
  store_result decided{make_error_code(sluice::errc::store_unavailable)};
  store_.decide_now(q.check, decided);
  conclude(*snap, head, ctx, q, decided, out);
  return true;
}

asio::awaitable<http::verdict> gateway_handler::decide(http::request_head& head,
                                                       const http::request_context& ctx) {
  counters_.requests.add();
  // One snapshot decides the whole request, whatever reloads happen meanwhile.
  const std::shared_ptr<const snapshot> snap = shared_.current.load();
  const config::rules& rules = *snap->rules;
  pending q;
  http::verdict v;
  // decide_now()'s steps, with the directory's round trip between them: only for a key the
  // snapshot does not know.
  std::optional<http::verdict> early = front(*snap, head, ctx, q);
  if (!early && needs_directory(*snap, *q.r, q.p)) co_await look_up_plan(*snap, q.p);
  if (!early) early = back(*snap, head, ctx, q);
  if (early) {
    v = std::move(*early);
    finish(v, q.at, head, ctx);
    co_return v;
  }
  if (q.id.limits->concurrent) {
    stamp_slot(q);
    q.sent = q.check;  // the store step takes `check` itself: the slots are read from a copy
  }
  store_result decided{make_error_code(sluice::errc::store_unavailable)};
  // (Directory down: the store is known to be failing.)
  if (!q.id.directory_down) {
    const compiled_route::plan_limits& limits = *q.id.limits;
    const store_plan plan{
        &limits.limits,   &limits.lease_time,
        limits.leases,    rules.store.over_limit_cache && limits.cacheable(),
        snap->generation, q.r->route->route->on_store_failure == config::failure_policy::local};
    co_await store_.decide(q.check, plan, decided);
  }
  conclude(*snap, head, ctx, q, decided, v);
  co_return v;
}

asio::awaitable<std::optional<http::verdict>> gateway_handler::caller(
    const snapshot& snap, const http::request_head& head, const http::request_context& ctx,
    const routed& r, presented& p, identified& id) {
  if (auto refused = present(snap, head, ctx, r, p)) co_return refused;
  if (needs_directory(snap, r, p)) co_await look_up_plan(snap, p);
  co_return identify_caller(snap, head, r, p, id);
}

asio::awaitable<void> gateway_handler::look_up_plan(const snapshot& snap, presented& p) {
  auto looked = co_await directory_plan(snap.rules->identity.directory, p.key);
  p.directory_down = looked.unavailable;
  p.plan = std::move(looked.plan);
}

std::optional<http::verdict> gateway_handler::identify_caller(const snapshot& snap,
                                                              const http::request_head& head,
                                                              const routed& r, presented& p,
                                                              identified& id) {
  if (r.preflight) {
    // A preflight carries no credentials (Fetch §3.2.2): never authenticated, never a 401;
    // charged only to the limits that say so, keyed as the anonymous caller.
    id.who = identity::anonymous_caller(*snap.rules, p.client, p.client_text);
    id.limits = &r.route->preflight;
    return std::nullopt;
  }
  if (auto refused = identify(snap, head, p, id)) return refused;
  id.limits = &r.route->for_plan(id.who.plan);
  return std::nullopt;
}

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

std::variant<gateway_handler::routed, http::verdict> gateway_handler::route(
    const snapshot& snap, http::request_head& head, const config::cors_policy*& cors) {
  const unsigned version = head.version();
  // Methods are case-sensitive (RFC 9110 §9.1): `post` is not POST, and letting it fall
  // through to another route would skip the POST route's limits. Refuse it instead.
  if (!has_uppercase_free_method(head.method_string())) {
    return bad_request(version,
                       "method names are case-sensitive and sluice routes upper-case methods");
  }
  auto target = http::canonicalize(head.target());
  if (!target) return bad_request(version, "the request target cannot be made canonical");
  // An absolute-form target's authority replaces Host, for routing and for the upstream.
  if (!target->authority.empty()) head.set(bhttp::field::host, target->authority);

  // A preflight is routed as the request it announces (Access-Control-Request-Method): a
  // route that takes only GET must still see the OPTIONS a browser sends before that GET,
  // whether the route has a CORS policy (the gateway answers it, or forwards it by
  // `preflight: forward`) or none (it is forwarded: the upstream answers CORS itself).
  const bool preflight = http::is_preflight(head);
  const config::route* matched = nullptr;
  if (preflight)
    matched = snap.router.match(head[bhttp::field::access_control_request_method],
                                head[bhttp::field::host], target->path);
  if (matched == nullptr)
    matched = snap.router.match(head.method_string(), head[bhttp::field::host], target->path);
  if (matched == nullptr) {
    counters_.bad_requests.add();
    return answer(
        http::problem(version, bhttp::status::not_found, "Not Found", "no route matches"));
  }
  const config::route& rt = *matched;
  const compiled_route& compiled = snap.compiled(rt);
  cors = compiled.cors;  // the route's answers (403, 413) carry its own CORS policy

  const bool websocket = http::is_websocket_upgrade(head);
  if (websocket && !rt.upgrade) {
    counters_.bad_requests.add();
    return answer(http::problem(version, bhttp::status::forbidden, "Forbidden",
                                "route '" + rt.name + "' does not allow WebSocket upgrades"));
  }
  // A declared body over the route's limit is refused before any of it is read, and before
  // any limit is charged.
  if (rt.max_request_body != config::unlimited_size) {
    const auto declared = head[bhttp::field::content_length];
    std::uint64_t length = 0;
    if (!declared.empty()) {
      std::from_chars(declared.data(), declared.data() + declared.size(), length);
      if (length > rt.max_request_body) {
        counters_.bad_requests.add();
        auto res = http::problem(version, bhttp::status::payload_too_large, "Content Too Large",
                                 "the request body is larger than the route's max_request_body (" +
                                     std::to_string(rt.max_request_body) + " bytes)");
        res.set(bhttp::field::connection, "close");
        return answer(std::move(res));
      }
    }
  }
  return routed{&compiled, std::move(*target), websocket, preflight};
}

std::optional<http::verdict> gateway_handler::present(const snapshot& snap,
                                                      const http::request_head& head,
                                                      const http::request_context& ctx,
                                                      const routed& r, presented& p) {
  const config::rules& rules = *snap.rules;
  const auto origin = identity::locate_client(ctx.peer.address(), head, rules.identity);
  p.client = origin.address;
  // Keyed on a trusted proxy's own address (its clients share one bucket): counted by reason.
  if (origin.source != identity::address_source::peer &&
      origin.source != identity::address_source::forwarded)
    counters_.client_fallbacks[static_cast<std::size_t>(origin.source)].add();
  if (p.client == ctx.peer.address() && ctx.peer.address().is_v4()) p.client_text = ctx.peer_text;
  if (r.preflight) return std::nullopt;  // no credentials: the key is never read
  // API key → plan: inline map, key file here; the store-backed directory (cached) next.
  auto key = identity::presented_key(rules, head, r.target.query);
  if (const auto* err = std::get_if<identity::caller_error>(&key)) {
    return bad_request(head.version(), identity::describe(*err));
  }
  p.key = std::move(std::get<std::string>(key));
  p.plan = identity::static_plan(rules, p.key);
  return std::nullopt;
}

std::optional<http::verdict> gateway_handler::identify(const snapshot& snap,
                                                       const http::request_head& head, presented& p,
                                                       identified& out) {
  const config::rules& rules = *snap.rules;
  // A directory that cannot be read is a store failure, never "unknown key": the route's
  // policy applies later, as for a failed check; under `local` the caller is limited as
  // anonymous (by client address: an unverified key must not buy a bucket of its own).
  if (p.directory_down) {
    out.who = identity::anonymous_caller(rules, p.client, p.client_text);
    out.directory_down = true;
    return std::nullopt;
  }
  auto made =
      identity::make_caller(rules, std::move(p.key), std::move(p.plan), p.client, p.client_text);
  if (auto* err = std::get_if<identity::caller_error>(&made)) {
    if (*err == identity::caller_error::unknown_key) {
      counters_.bad_requests.add();
      return answer(http::problem(head.version(), bhttp::status::unauthorized, "Unauthorized",
                                  identity::describe(*err)));
    }
    return bad_request(head.version(), identity::describe(*err));
  }
  out.who = std::move(std::get<identity::caller>(made));
  out.directory_down = false;
  return std::nullopt;
}

std::optional<http::verdict> gateway_handler::prepare_check(const snapshot& snap,
                                                            http::request_head& head,
                                                            const http::request_context& ctx,
                                                            const routed& r, const identified& id,
                                                            limiter::check_request& check,
                                                            std::vector<charged_limit>& charged) {
  const config::rules& rules = *snap.rules;
  const config::route& rt = *r.route->route;
  // The shadow marker and the decision time are the gateway's to set: a client's copy never
  // reaches the upstream.
  if (!rules.shadow_header.empty()) head.erase(rules.shadow_header);
  if (!rules.decision_time_header.empty()) head.erase(rules.decision_time_header);

  const auto& prepared = *id.limits;
  const bool policy_decides =
      id.directory_down && rt.on_store_failure != config::failure_policy::local;
  if (prepared.limits.empty() && !policy_decides) {
    route_counters& counted = counters_.of(rules, snap.generation, rt);
    counted.of(ctx.proto).unlimited.add();
    http::verdict v;
    forward(r, head, ctx, false, {}, counted, v);
    return v;
  }
  check.limits.reserve(prepared.limits.size());
  for (std::size_t i = 0; i < prepared.limits.size(); ++i) {
    const config::limit& l = *prepared.limits[i];
    auto key = identity::limit_identity(l, id.who, rules, head);
    if (!key) {
      return bad_request(head.version(),
                         identity::describe(identity::caller_error::conflicting_values));
    }
    const auto& a = prepared.applied[i];
    if (l.shards > 1) {
      // A sharded global limit: one of its S buckets at random, each its own key (and slot).
      const auto& keys = snap.shard_keys.at(l.name);
      check.limits.push_back(
          {keys[jitter_() % keys.size()], l.algorithm, a.bucket, rt.cost, a.shadow});
      continue;
    }
    std::int64_t cost = rt.cost;
    if (prepared.charges && l.charge.what != config::charge_rule::kind::none) {
      const auto units = admission_units(l.charge, rt.cost, head);
      if (!units) {
        return bad_request(head.version(), "the " + l.charge.reserve_header +
                                               " request header must be a whole number of "
                                               "units to reserve (limit '" +
                                               l.name + "')");
      }
      cost = *units;
    }
    check.limits.push_back({limiter::bucket_key(l.name, key->first, key->second), l.algorithm,
                            a.bucket, cost, a.shadow});
    check.limits.back().block_ms = l.block.count();  // (never with shards: a config error)
    if (prepared.charges && l.charge.what != config::charge_rule::kind::none)
      charged.push_back({check.limits.back(), &l.charge, prepared.usage[i]});
  }
  return std::nullopt;
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

/// The plan of `key` in the store-backed directory: from this worker's cache when fresh
/// (no round trip), else one HGET on this worker's directory connection, cached for
/// `cache_ttl` (found) or `negative_ttl` (absent). A failed read (store down, timeout,
/// error reply) is `unavailable` for this request only: the route's failure policy applies.
asio::awaitable<gateway_handler::directory_answer> gateway_handler::directory_plan(
    config::directory_settings d, std::string key) {
  // Keys longer than this are never looked up: real keys are short, and a bound keeps the
  // cache's memory bounded by cache_size × this.
  constexpr std::size_t max_directory_key = 256;
  if (key.size() > max_directory_key) co_return directory_answer{};
  if (!cache_ || cache_hash_ != d.hash || cache_->capacity() != d.cache_size) {
    if (cache_)
      cache_->reset(d.cache_size);
    else
      cache_ = std::make_unique<identity::plan_cache>(d.cache_size);
    cache_hash_ = d.hash;
  }
  std::string plan;
  switch (cache_->get(key, identity::plan_cache::clock::now(), plan)) {
    case identity::cache_state::found:
      co_return directory_answer{std::move(plan)};
    case identity::cache_state::not_found:
      co_return directory_answer{};
    case identity::cache_state::miss:
      break;
  }
  if (!directory_) co_return directory_answer{std::nullopt, true};
  auto found = co_await directory_->hget(d.hash, key);
  if (!found) {
    std::uint64_t suppressed = 0;
    if (shared_.store_failure_log.admit(suppressed))
      spdlog::warn(
          "plan directory lookup failed ({}); the route's store failure policy "
          "applies ({} similar lines suppressed)",
          found.error().message(), suppressed);
    co_return directory_answer{std::nullopt, true};
  }
  // The hash may have changed while we waited: the cache was reset for the new one.
  if (cache_hash_ == d.hash)
    cache_->put(key, *found, identity::plan_cache::clock::now(),
                *found ? d.cache_ttl : d.negative_ttl);
  co_return directory_answer{std::move(*found)};
}

void gateway_handler::log_store_failure(const boost::system::error_code& ec,
                                        const std::string& route, const char* policy) {
  std::uint64_t suppressed = 0;
  if (shared_.store_failure_log.admit(suppressed)) {
    spdlog::warn("store check failed ({}); route {} applies {} ({} similar lines suppressed)",
                 ec.message(), route, policy, suppressed);
  }
}

}  // namespace sluice::app
