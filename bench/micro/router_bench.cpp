// SPDX-License-Identifier: Apache-2.0
// Route matching over the 20-route table of fixture.hpp, and target canonicalisation.

#include "fixture.hpp"

#include "sluice/http/router.hpp"

#include <benchmark/benchmark.h>

#include <cstdlib>

namespace sluice::micro {
namespace {

namespace bhttp = boost::beast::http;

const http::router& bench_router() {
  static const http::router r(bench_rules());
  return r;
}

// Matches `req` (method, Host, canonical path) and checks the route it lands on.
void match_request(benchmark::State& state, const http::request& req, std::string_view want) {
  const http::router& r = bench_router();
  auto target = http::canonicalize(req.target());
  if (!target) std::abort();
  const std::string path = target->path;
  const auto* hit = r.match(req.method_string(), req[bhttp::field::host], path);
  if (want.empty() ? hit != nullptr : (hit == nullptr || hit->name != want)) {
    state.SkipWithError("unexpected route");
    return;
  }
  for (auto _ : state) {
    benchmark::DoNotOptimize(r.match(req.method_string(), req[bhttp::field::host], path));
  }
}

// Route 1: exact path + method.
void BM_RouterMatchFirstExact(benchmark::State& state) {
  match_request(state, make_request(bhttp::verb::get, "/healthz"), "health");
}
BENCHMARK(BM_RouterMatchFirstExact);

// Route 9: prefix + method, after a same-prefix route of another method.
void BM_RouterMatchPrefixMethod(benchmark::State& state) {
  match_request(state, make_request(bhttp::verb::get, "/v1/search?q=x"), "search");
}
BENCHMARK(BM_RouterMatchPrefixMethod);

// Route 6: `*` glob segments.
void BM_RouterMatchGlobStar(benchmark::State& state) {
  match_request(state, make_request(bhttp::verb::get, "/v1/users/42/items/7"), "user_item");
}
BENCHMARK(BM_RouterMatchGlobStar);

// Route 12: `**` glob after a `*`, any method.
void BM_RouterMatchGlobDoubleStar(benchmark::State& state) {
  match_request(state, make_request(bhttp::verb::put, "/v1/orders/9/lines/3/notes/1"),
                "order_lines");
}
BENCHMARK(BM_RouterMatchGlobDoubleStar);

// Route 16: host condition (case-insensitive, port ignored).
void BM_RouterMatchHost(benchmark::State& state) {
  match_request(state, make_request(bhttp::verb::get, "/v2/things", "Tenant.Example.Test:8443"),
                "tenant_api");
}
BENCHMARK(BM_RouterMatchHost);

// Route 19 of 20: the three-limit route, every earlier route tried first.
void BM_RouterMatchLate(benchmark::State& state) {
  match_request(state, make_request(bhttp::verb::get, "/v1/items/123"), "items");
}
BENCHMARK(BM_RouterMatchLate);

// Route 20: the catch-all, after all 19 others failed.
void BM_RouterMatchCatchAll(benchmark::State& state) {
  match_request(state, make_request(bhttp::verb::get, "/nothing/else/matches"), "default");
}
BENCHMARK(BM_RouterMatchCatchAll);

// Canonicalises one request target.
void canonicalize_target(benchmark::State& state, std::string_view target) {
  if (!http::canonicalize(target)) {
    state.SkipWithError("target refused");
    return;
  }
  for (auto _ : state) benchmark::DoNotOptimize(http::canonicalize(target));
}

void BM_CanonicalizeSimple(benchmark::State& state) {
  canonicalize_target(state, "/v1/items/123");
}
BENCHMARK(BM_CanonicalizeSimple);

void BM_CanonicalizeQuery(benchmark::State& state) {
  canonicalize_target(state, "/v1/search?q=rate+limit&page=2&api_key=key-a");
}
BENCHMARK(BM_CanonicalizeQuery);

void BM_CanonicalizeDotsAndEscapes(benchmark::State& state) {
  canonicalize_target(state, "//v1/./users/%7Ealice/../bob//items/%41%62c/x%20y");
}
BENCHMARK(BM_CanonicalizeDotsAndEscapes);

void BM_CanonicalizeAbsoluteForm(benchmark::State& state) {
  canonicalize_target(state, "http://api.example.test:8080/v1/orders/9/lines?x=1");
}
BENCHMARK(BM_CanonicalizeAbsoluteForm);

// A long (1 KiB) path of plain segments.
void BM_CanonicalizeLong(benchmark::State& state) {
  std::string t;
  while (t.size() < 1024) t += "/segment-" + std::to_string(t.size());
  canonicalize_target(state, t);
}
BENCHMARK(BM_CanonicalizeLong);

}  // namespace
}  // namespace sluice::micro
