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
// This file drives the steps (decide_now, decide; explain.cpp drives route, identify and the
// check's preparation the same way for a query):
// route and identify are plan_step.cpp's, decide is store_step.cpp's, respond and the failure
// policy are respond_step.cpp's. Nothing reads a body: the session streams an admitted
// request's body afterwards.

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

lua::key_layout key_layout_of(const config::store_settings& store) {
  lua::key_layout layout;
  layout.packed = store.layout == config::store_settings::layout_kind::hash;
  layout.hash_groups = store.hash_groups;
  return layout;
}
namespace {

namespace asio = boost::asio;
namespace bhttp = boost::beast::http;

/// Milliseconds of the steady clock (the most limited callers' minutes).
std::int64_t steady_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
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
