// SPDX-License-Identifier: Apache-2.0
// Concurrency (case c08) and bucket scope (case c15): one atomic decision per check, one
// bucket per (limit name, identity) across workers and gateway instances.
// sluice-test-support: gateway_fixture redis_server upstream_server http_client

#include "harness.hpp"

#include <set>

#include <latch>
#include <map>
#include <mutex>

namespace sluice::test {
namespace {

const char* const c08_rules = R"(
store: STORE
identity: {api_key: {header: X-API-Key}}
plans: {free: {limits: []}}
api_keys: {key-a: free}
upstreams: {api: {url: UPSTREAM_URL}}
routes:
  - name: items
    match: {path_prefix: /v1/items}
    upstream: api
    limits:
      - {name: items_key, by: api_key, rate: 5/1m, burst: 5}
)";

void expect_exactly_five(const std::vector<client_response>& responses, std::size_t upstream_hits) {
  std::map<std::string, int> remaining_of_200;
  int ok = 0, limited = 0;
  for (const auto& r : responses) {
    if (r.status == 200) {
      ++ok;
      ++remaining_of_200[r.header("X-RateLimit-Remaining")];
    } else {
      ASSERT_EQ(r.status, 429u) << r.body;
      ++limited;
      EXPECT_EQ(r.header("X-RateLimit-Remaining"), "0");
      EXPECT_EQ(r.header("X-RateLimit-Limit"), "5");
      EXPECT_EQ(r.header("Retry-After"), "12");
    }
  }
  EXPECT_EQ(ok, 5);
  EXPECT_EQ(limited, static_cast<int>(responses.size()) - 5);
  for (auto r : {"4", "3", "2", "1", "0"}) EXPECT_EQ(remaining_of_200[r], 1) << "Remaining " << r;
  EXPECT_EQ(upstream_hits, 5u);
}

// c08 with the redis store: two gateway instances on one Redis, 50 requests each.
TEST(concurrency, c08_two_instances_one_redis_admit_exactly_five) {
  world w(store_kind::redis, c08_rules);
  gateway_fixture second(w.render(c08_rules));
  auto responses = burst({w.port(), second.port()}, 100);
  expect_exactly_five(responses, w.upstream.request_count());
}

// c08 with the memory store: one instance, 4 workers, 100 connections.
TEST(concurrency, c08_memory_store_four_workers_admit_exactly_five) {
  world w(store_kind::memory, c08_rules, 4);
  auto responses = burst({w.port()}, 100);
  expect_exactly_five(responses, w.upstream.request_count());
}

// 100 requests released together on 100 connections to one instance on Redis.
TEST(concurrency, hundred_connections_one_redis_instance_burst_five) {
  world w(store_kind::redis, c08_rules, 2);
  auto responses = burst({w.port()}, 100);
  expect_exactly_five(responses, w.upstream.request_count());
}

const char* const c15_rules = R"(
store: STORE
identity: {api_key: {header: X-API-Key}}
plans: {free: {limits: []}}
api_keys: {key-a: free}
upstreams: {api: {url: UPSTREAM_URL}}
routes:
  - {name: search, match: {path_prefix: /v1/search}, upstream: api,
     limits: [{name: search, by: api_key, rate: 5/1m, burst: 5}]}
  - {name: upload, match: {path_prefix: /v1/upload}, upstream: api,
     limits: [{name: upload, by: api_key, rate: 2/1m, burst: 2}]}
  - {name: a, match: {path_prefix: /v1/a}, upstream: api,
     limits: [{name: plan_total, by: api_key, rate: 3/1m, burst: 3}]}
  - {name: b, match: {path_prefix: /v1/b}, upstream: api,
     limits: [{name: plan_total, by: api_key, rate: 3/1m, burst: 3}]}
)";

struct c15_row {
  const char* method;
  const char* path;
  unsigned status;
  long long limit, remaining, retry_after;
};

void run_c15(const std::vector<std::uint16_t>& ports, const upstream_server& up) {
  const std::vector<c15_row> rows = {
      {"POST", "/v1/upload", 200, 2, 1, -1}, {"POST", "/v1/upload", 200, 2, 0, -1},
      {"POST", "/v1/upload", 429, 2, 0, 30}, {"GET", "/v1/search", 200, 5, 4, -1},
      {"GET", "/v1/search", 200, 5, 3, -1},  {"GET", "/v1/search", 200, 5, 2, -1},
      {"GET", "/v1/search", 200, 5, 1, -1},  {"GET", "/v1/search", 200, 5, 0, -1},
      {"GET", "/v1/search", 429, 5, 0, 12},  {"GET", "/v1/a", 200, 3, 2, -1},
      {"GET", "/v1/b", 200, 3, 1, -1},       {"GET", "/v1/a", 200, 3, 0, -1},
      {"GET", "/v1/b", 429, 3, 0, 20}};
  schedule s;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    s.at(0.1 * static_cast<double>(i));
    http_connection c(ports[i % ports.size()]);  // a new connection each: spread over workers
    auto r = c.request(rows[i].method, rows[i].path, {{"X-API-Key", "key-a"}});
    expect_row(r, rows[i].status, rows[i].limit, rows[i].remaining, -1, rows[i].retry_after,
               "row " + std::to_string(i + 1));
  }
  EXPECT_EQ(up.request_count(), 10u);
}

// c15 on Redis with two instances, alternating.
TEST(bucket_scope, c15_redis_two_instances) {
  world w(store_kind::redis, c15_rules);
  gateway_fixture second(w.render(c15_rules));
  run_c15({w.port(), second.port()}, w.upstream);
  const auto names = w.buckets().buckets();
  EXPECT_EQ(names, (std::set<std::string>{"sl:{plan_total|k|rkey-a}", "sl:{search|k|rkey-a}",
                                          "sl:{upload|k|rkey-a}"}));
}

// c15 on the memory store with four workers.
TEST(bucket_scope, c15_memory_four_workers) {
  world w(store_kind::memory, c15_rules, 4);
  run_c15({w.port()}, w.upstream);
}

}  // namespace
}  // namespace sluice::test
