// SPDX-License-Identifier: Apache-2.0
// Identity extraction: the client address (with and without trusted proxies), the presented
// API key (header, query), the caller and each limit's bucket identity.

#include "fixture.hpp"

#include "sluice/identity/identity.hpp"

#include <benchmark/benchmark.h>

#include <optional>
#include <string>
#include <variant>
#include <vector>

namespace sluice::micro {
namespace {

namespace bhttp = boost::beast::http;

// client_address() of `req` from `peer` under `trusted`; checks the expected result first.
void client_address_case(benchmark::State& state, const http::request& req,
                         std::string_view peer_text, const std::vector<config::cidr>& trusted,
                         std::string_view want) {
  const auto peer = address(peer_text);
  if (identity::client_address(peer, req, trusted).to_string() != want) {
    state.SkipWithError("unexpected client address");
    return;
  }
  for (auto _ : state) benchmark::DoNotOptimize(identity::client_address(peer, req, trusted));
}

const std::vector<config::cidr> no_proxies;

void BM_ClientAddressNoProxies(benchmark::State& state) {
  auto req = make_request(bhttp::verb::get, "/v1/items");
  req.set("X-Forwarded-For", "198.51.100.1");  // ignored: no proxy is trusted
  client_address_case(state, req, "203.0.113.7", no_proxies, "203.0.113.7");
}
BENCHMARK(BM_ClientAddressNoProxies);

void BM_ClientAddressUntrustedPeer(benchmark::State& state) {
  auto req = make_request(bhttp::verb::get, "/v1/items");
  req.set("X-Forwarded-For", "198.51.100.1");  // ignored: the peer is not a trusted proxy
  client_address_case(state, req, "203.0.113.7", bench_rules().identity.trusted_proxies,
                      "203.0.113.7");
}
BENCHMARK(BM_ClientAddressUntrustedPeer);

// A trusted peer and a three-entry X-Forwarded-For whose two right-most hops are trusted.
void BM_ClientAddressXffThreeHops(benchmark::State& state) {
  auto req = make_request(bhttp::verb::get, "/v1/items");
  req.set("X-Forwarded-For", "198.51.100.1, 203.0.113.9, 192.168.4.4, 10.1.2.3");
  client_address_case(state, req, "10.0.0.1", bench_rules().identity.trusted_proxies,
                      "203.0.113.9");
}
BENCHMARK(BM_ClientAddressXffThreeHops);

// X-Forwarded-For over two field lines, IPv6 entries, an IPv4-mapped peer.
void BM_ClientAddressXffTwoLinesV6(benchmark::State& state) {
  auto req = make_request(bhttp::verb::get, "/v1/items");
  req.insert("X-Forwarded-For", "2001:db8:1:2::77");
  req.insert("X-Forwarded-For", "fd00::1, 10.9.9.9");
  client_address_case(state, req, "::ffff:10.0.0.1", bench_rules().identity.trusted_proxies,
                      "2001:db8:1:2::77");
}
BENCHMARK(BM_ClientAddressXffTwoLinesV6);

void BM_ClientKeyV4(benchmark::State& state) {
  const auto a = address("203.0.113.7");
  for (auto _ : state) benchmark::DoNotOptimize(identity::client_key(a, bench_rules().identity));
}
BENCHMARK(BM_ClientKeyV4);

void BM_ClientKeyV6Prefix64(benchmark::State& state) {
  const auto a = address("2001:db8:1:2:3:4:5:6");
  for (auto _ : state) benchmark::DoNotOptimize(identity::client_key(a, bench_rules().identity));
}
BENCHMARK(BM_ClientKeyV6Prefix64);

// presented_key() of `req` with query `query`; checks the expected key first.
void presented_key_case(benchmark::State& state, const http::request& req, std::string_view query,
                        std::string_view want) {
  const config::rules& rules = bench_rules();
  auto k = identity::presented_key(rules, req, query);
  if (!std::holds_alternative<std::string>(k) || std::get<std::string>(k) != want) {
    state.SkipWithError("unexpected key");
    return;
  }
  for (auto _ : state) benchmark::DoNotOptimize(identity::presented_key(rules, req, query));
}

void BM_PresentedKeyHeader(benchmark::State& state) {
  auto req = make_request(bhttp::verb::get, "/v1/search");
  req.set("X-API-Key", "key-a");
  presented_key_case(state, req, "", "key-a");
}
BENCHMARK(BM_PresentedKeyHeader);

void BM_PresentedKeyQuery(benchmark::State& state) {
  auto req = make_request(bhttp::verb::get, "/v1/search?q=rate+limit&page=2&api_key=key-a");
  presented_key_case(state, req, "q=rate+limit&page=2&api_key=key-a", "key-a");
}
BENCHMARK(BM_PresentedKeyQuery);

// Header and a percent-encoded query copy that agree.
void BM_PresentedKeyHeaderAndQuery(benchmark::State& state) {
  auto req = make_request(bhttp::verb::get, "/v1/search?api_key=key%2Da&q=x");
  req.set("X-API-Key", "key-a");
  presented_key_case(state, req, "api_key=key%2Da&q=x", "key-a");
}
BENCHMARK(BM_PresentedKeyHeaderAndQuery);

void BM_PresentedKeyNone(benchmark::State& state) {
  auto req = make_request(bhttp::verb::get, "/v1/search?q=x");
  presented_key_case(state, req, "q=x", "");
}
BENCHMARK(BM_PresentedKeyNone);

// make_caller() for a key and plan (what follows the directory lookup).
void BM_MakeCallerKnownKey(benchmark::State& state) {
  const config::rules& rules = bench_rules();
  const auto client = address("203.0.113.7");
  for (auto _ : state) {
    benchmark::DoNotOptimize(
        identity::make_caller(rules, std::string("key-p"), std::string("pro"), client));
  }
}
BENCHMARK(BM_MakeCallerKnownKey);

void BM_MakeCallerAnonymousV6(benchmark::State& state) {
  const config::rules& rules = bench_rules();
  const auto client = address("2001:db8:1:2:3:4:5:6");
  for (auto _ : state) {
    benchmark::DoNotOptimize(identity::make_caller(rules, std::string(), std::nullopt, client));
  }
}
BENCHMARK(BM_MakeCallerAnonymousV6);

// identify(): presented_key, static_plan, make_caller, from the inline key map.
void BM_IdentifyInlineKey(benchmark::State& state) {
  const config::rules& rules = bench_rules();
  auto req = make_request(bhttp::verb::get, "/v1/search");
  req.set("X-API-Key", "key-p");
  const auto client = address("203.0.113.7");
  for (auto _ : state) benchmark::DoNotOptimize(identity::identify(rules, req, "", client));
}
BENCHMARK(BM_IdentifyInlineKey);

// limit_identity() of the first limit of route `route` (index `index`) for a pro caller.
void limit_identity_case(benchmark::State& state, std::string_view route, std::size_t index) {
  const config::rules& rules = bench_rules();
  auto req = make_request(bhttp::verb::get, "/v1/items");
  req.set("X-API-Key", "key-p");
  req.set("X-User", "user-1234");
  req.set("X-Tenant", "tenant-42");
  auto who = identity::make_caller(rules, "key-p", "pro", address("203.0.113.7"));
  const auto& caller = std::get<identity::caller>(who);
  const config::limit& l = route_named(route).limits.at(index);
  if (!identity::limit_identity(l, caller, rules, req)) {
    state.SkipWithError("no identity");
    return;
  }
  for (auto _ : state) benchmark::DoNotOptimize(identity::limit_identity(l, caller, rules, req));
}

void BM_LimitIdentityApiKey(benchmark::State& state) {
  limit_identity_case(state, "items", 0);
}
BENCHMARK(BM_LimitIdentityApiKey);
void BM_LimitIdentityIp(benchmark::State& state) {
  limit_identity_case(state, "items", 1);
}
BENCHMARK(BM_LimitIdentityIp);
void BM_LimitIdentityGlobal(benchmark::State& state) {
  limit_identity_case(state, "items", 2);
}
BENCHMARK(BM_LimitIdentityGlobal);
void BM_LimitIdentityUser(benchmark::State& state) {
  limit_identity_case(state, "users_me", 0);
}
BENCHMARK(BM_LimitIdentityUser);
void BM_LimitIdentityHeader(benchmark::State& state) {
  limit_identity_case(state, "orders_create", 0);
}
BENCHMARK(BM_LimitIdentityHeader);

}  // namespace
}  // namespace sluice::micro
