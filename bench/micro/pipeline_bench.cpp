// SPDX-License-Identifier: Apache-2.0
// Everything the gateway decides on a request head, in its order, without I/O: canonicalise,
// route, client address, API key and plan, caller, each limit's identity and key, the memory
// store's decision and the quota header fields.

#include "fixture.hpp"

#include "sluice/http/router.hpp"
#include "sluice/identity/identity.hpp"
#include "sluice/limiter/check.hpp"
#include "sluice/limiter/decision.hpp"
#include "sluice/limiter/keys.hpp"
#include "sluice/store/memory_store.hpp"

#include <benchmark/benchmark.h>

#include <string>
#include <variant>
#include <vector>

namespace sluice::micro {
namespace {

namespace bhttp = boost::beast::http;

/// Decides one request head as the gateway does and renders its quota fields (for an admitted
/// and a refused request alike). Returns 1 when admitted, 0 when refused by a limit, -1 when
/// refused before the decision (400/401/404).
int decide_head(const http::router& router, store::memory_store& store, const http::request& req,
                const boost::asio::ip::address& peer) {
  const config::rules& rules = bench_rules();
  auto target = http::canonicalize(req.target());
  if (!target) return -1;
  const config::route* route =
      router.match(req.method_string(), req[bhttp::field::host], target->path);
  if (route == nullptr) return -1;
  const auto client = identity::client_address(peer, req, rules.identity.trusted_proxies);
  auto presented = identity::presented_key(rules, req, target->query);
  if (!std::holds_alternative<std::string>(presented)) return -1;
  std::string key = std::move(std::get<std::string>(presented));
  auto plan = identity::static_plan(rules, key);
  auto identified = identity::make_caller(rules, std::move(key), std::move(plan), client);
  if (!std::holds_alternative<identity::caller>(identified)) return -1;
  const auto& who = std::get<identity::caller>(identified);

  std::vector<const config::limit*> limits;
  if (auto p = rules.plans.find(who.plan); p != rules.plans.end()) {
    for (const auto& l : p->second.limits) {
      if (l.applies_to(who.plan)) limits.push_back(&l);
    }
  }
  for (const auto& l : route->limits) {
    if (l.applies_to(who.plan)) limits.push_back(&l);
  }
  limiter::check_request check;
  std::vector<limiter::applied_limit> applied;
  for (const config::limit* l : limits) {
    auto id = identity::limit_identity(*l, who, rules, req);
    if (!id) return -1;
    const auto bucket = limiter::bucket_params::from(*l->find_params(who.plan));
    check.limits.push_back({limiter::bucket_key(l->name, id->first, id->second), l->algorithm,
                            bucket, route->cost, false});
    applied.push_back({l->name, l->algorithm, bucket, false});
  }
  const auto outcome = store.decide(check);
  std::string lines;
  limiter::append_quota_lines(lines, applied, outcome, rules.headers);
  benchmark::DoNotOptimize(lines.data());
  return outcome.allowed ? 1 : 0;
}

// A pro caller (two plan limits) on the three-limit `items` route: five limits in one check,
// behind a trusted proxy with X-Forwarded-For; the key rotates over 1,000 values so buckets
// are not all one hot entry (only key-p has a plan, the rest are anonymous by address).
void BM_HeadDecisionFiveLimits(benchmark::State& state) {
  const http::router router(bench_rules());
  store::memory_store store;
  std::vector<http::request> reqs;
  for (int i = 0; i < 1000; ++i) {
    auto req = make_request(bhttp::verb::get, "/v1/items/" + std::to_string(i) + "?view=full");
    req.set("X-API-Key", "key-p");
    req.set("X-Forwarded-For", "198.51.100." + std::to_string(i % 250) + ", 10.1.2.3");
    reqs.push_back(std::move(req));
  }
  const auto peer = address("10.0.0.1");
  if (decide_head(router, store, reqs[0], peer) != 1) {
    state.SkipWithError("not admitted");
    return;
  }
  std::size_t i = 0;
  std::int64_t admitted = 0;
  for (auto _ : state) {
    admitted += decide_head(router, store, reqs[i], peer) == 1;
    if (++i == reqs.size()) i = 0;
  }
  // The plan's 50/s limit soon refuses most: refused checks cost the same walk.
  state.counters["admitted"] =
      benchmark::Counter(static_cast<double>(admitted), benchmark::Counter::kAvgIterations);
}
BENCHMARK(BM_HeadDecisionFiveLimits);

// An anonymous caller on the catch-all route (one limit by address), no proxy.
void BM_HeadDecisionCatchAll(benchmark::State& state) {
  const http::router router(bench_rules());
  store::memory_store store;
  const auto req = make_request(bhttp::verb::get, "/some/page?x=1");
  const auto peer = address("203.0.113.7");
  if (decide_head(router, store, req, peer) != 1) {
    state.SkipWithError("not admitted");
    return;
  }
  // default_ip is 100/1s: decide at most that often per address, so spread over addresses.
  std::vector<boost::asio::ip::address> peers;
  for (int i = 0; i < 65536; ++i) {
    peers.push_back(boost::asio::ip::address_v4(0xcb000000u + static_cast<unsigned>(i)));
  }
  std::size_t i = 0;
  std::int64_t admitted = 0;
  for (auto _ : state) {
    admitted += decide_head(router, store, req, peers[i]) == 1;
    if (++i == peers.size()) i = 0;
  }
  state.counters["admitted"] =
      benchmark::Counter(static_cast<double>(admitted), benchmark::Counter::kAvgIterations);
}
BENCHMARK(BM_HeadDecisionCatchAll);

}  // namespace
}  // namespace sluice::micro
