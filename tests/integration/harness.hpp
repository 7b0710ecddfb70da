// SPDX-License-Identifier: Apache-2.0
#pragma once
// Shared helpers of the integration tests: a store choice, a schedule on the test's clock,
// and a compact request helper. Every test runs a real upstream, a real gateway and, for the
// redis store, a real redis-server on free loopback ports.

#include "support/bucket_view.hpp"
#include "support/eventually.hpp"
#include "support/gateway_fixture.hpp"
#include "support/http_client.hpp"
#include "support/redis_server.hpp"
#include "support/upstream_server.hpp"

#include "sluice/limiter/keys.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <latch>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace sluice::test {

enum class store_kind { memory, redis };

inline std::string store_name(const testing::TestParamInfo<store_kind>& info) {
  return info.param == store_kind::memory ? "memory" : "redis";
}

/// Sleeps until `t` seconds after construction (the case tables' t).
class schedule {
 public:
  schedule() : start_(std::chrono::steady_clock::now()) {}
  void at(double t) const {
    std::this_thread::sleep_until(start_ +
                                  std::chrono::microseconds(static_cast<long long>(t * 1e6)));
  }

 private:
  std::chrono::steady_clock::time_point start_;
};

/// The Redis store deadline test worlds give their checks: 250 ms, scaled (the default 5 ms
/// is one a loaded machine can miss, and these tests count the store's answers), as
/// rules-file text ("250ms").
inline std::string redis_test_deadline() {
  return std::to_string(scaled(std::chrono::milliseconds(250)).count()) + "ms";
}

/// A test world: upstream, optional redis-server, and a gateway from `yaml` in which
/// `UPSTREAM_URL` and `STORE` are substituted (the Redis store's deadline, 250 ms, scales
/// with SLUICE_TEST_TIME_FACTOR).
struct world {
  explicit world(store_kind kind, const std::string& yaml, unsigned workers = 2,
                 std::string store_extra = "")
      : kind(kind) {
    if (kind == store_kind::redis) redis = std::make_unique<redis_server>();
    gateway = std::make_unique<gateway_fixture>(render(yaml, store_extra), workers);
  }

  std::string render(const std::string& yaml, const std::string& store_extra = "") const {
    std::string store =
        kind == store_kind::redis
            ? "{type: redis, address: \"127.0.0.1:" + std::to_string(redis->port()) +
                  "\", timeout: " + redis_test_deadline() + store_extra + "}"
            : "{type: memory" + store_extra + "}";
    return substitute(yaml, {{"UPSTREAM_URL", upstream.url()}, {"STORE", store}});
  }

  std::uint16_t port() const { return gateway->port(); }

  client_response get(const std::string& target, const header_list& headers = {}) const {
    return test::get(port(), target, headers);
  }
  client_response send(const std::string& method, const std::string& target,
                       const header_list& headers = {}) const {
    http_connection c(port());
    return c.request(method, target, headers);
  }

  /// The buckets in this world's Redis under the default layout (hash groups; redis only).
  bucket_view buckets() const { return {*redis, lua::key_layout{}}; }
  /// The raw stored string of the bucket `key` (a bucket_key(); redis only).
  redis_reply raw(const std::string& key) const { return buckets().get(key); }
  /// PTTL of the Redis key holding the bucket `key` (its group hash; redis only).
  long long pttl(const std::string& key) const { return buckets().pttl(key); }

  store_kind kind;
  upstream_server upstream;
  std::unique_ptr<redis_server> redis;
  std::unique_ptr<gateway_fixture> gateway;
};

/// Checks `redis` ran (INFO commandstats): FCALLs (the function library) plus EVALSHAs (the
/// script fallback).
inline long long check_calls(const redis_server& redis) {
  const auto r = redis.command({"INFO", "commandstats"});
  long long calls = 0;
  for (const std::string mark : {"cmdstat_fcall:calls=", "cmdstat_evalsha:calls="}) {
    if (const auto at = r.str.find(mark); at != std::string::npos)
      calls += std::stoll(r.str.substr(at + mark.size()));
  }
  return calls;
}

/// Expects a response's status and rate-limit fields; -1 skips a field, and
/// `retry_after` -1 on a 2xx also asserts that Retry-After is absent.
inline void expect_row(const client_response& r, unsigned status, long long limit,
                       long long remaining, long long reset, long long retry_after,
                       const std::string& what) {
  SCOPED_TRACE(what);
  EXPECT_EQ(r.status, status) << r.body;
  if (limit >= 0) {
    EXPECT_EQ(r.header("X-RateLimit-Limit"), std::to_string(limit));
  }
  if (remaining >= 0) {
    EXPECT_EQ(r.header("X-RateLimit-Remaining"), std::to_string(remaining));
  }
  if (reset >= 0) {
    EXPECT_EQ(r.header("X-RateLimit-Reset"), std::to_string(reset));
  }
  if (retry_after >= 0) {
    EXPECT_EQ(r.header("Retry-After"), std::to_string(retry_after));
  } else if (status < 300) {
    EXPECT_FALSE(r.has("Retry-After"));
  }
  if (status == 429) {
    // Suite-wide 429 rules (case c02): whole delta-seconds, never 0, a problem body.
    const auto ra = r.header("Retry-After");
    EXPECT_FALSE(ra.empty());
    EXPECT_NE(ra.front(), '0');
    EXPECT_EQ(ra.find_first_not_of("0123456789"), std::string::npos);
    EXPECT_EQ(r.header("Content-Type"), "application/problem+json");
  }
}

/// The level and stamp of a token bucket's stored state "<level units> <stamp ms>".
inline std::pair<long long, long long> bucket_state(const redis_reply& r) {
  auto space = r.str.find(' ');
  return {std::stoll(r.str.substr(0, space)), std::stoll(r.str.substr(space + 1))};
}

/// Case c08's burst: opens one connection per request to `ports` (round robin), releases all
/// `n` `GET /v1/items` (X-API-Key: key-a) together with a latch, and returns the responses.
/// Expects the whole burst to finish within 1 s.
inline std::vector<client_response> burst(const std::vector<std::uint16_t>& ports, int n) {
  std::vector<std::unique_ptr<http_connection>> conns;
  for (int i = 0; i < n; ++i)
    conns.push_back(std::make_unique<http_connection>(ports[i % ports.size()]));
  std::vector<client_response> out(n);
  std::latch go(n + 1);
  std::vector<std::thread> threads;
  for (int i = 0; i < n; ++i) {
    threads.emplace_back([&, i] {
      go.arrive_and_wait();
      out[i] = conns[i]->request("GET", "/v1/items", {{"X-API-Key", "key-a"}});
    });
  }
  const auto start = std::chrono::steady_clock::now();
  go.arrive_and_wait();
  for (auto& t : threads) t.join();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(1));
  return out;
}

}  // namespace sluice::test
