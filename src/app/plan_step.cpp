// SPDX-License-Identifier: Apache-2.0
// The request path's plan step (request_path.cpp has the order): route (canonical target, the
// route's head rules), present (the API key as sent), identify (plan, caller) and
// prepare_check (the limits that apply, their keys and costs).

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

bool has_uppercase_free_method(std::string_view method) {
  return std::none_of(method.begin(), method.end(), [](char c) { return c >= 'a' && c <= 'z'; });
}

}  // namespace

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

}  // namespace sluice::app
