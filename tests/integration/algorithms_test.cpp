// SPDX-License-Identifier: Apache-2.0
// Window algorithms through real HTTP (issue 5): the c01 fixed-window table at its real window
// offsets, the c07 fixed-window variant, c08 runs 2 and 3 (and the sliding log) with two
// gateway instances on one Redis and with one four-worker memory instance, shadow mode with
// the upstream marker, and Retry-After jitter.
// sluice-test-support: gateway_fixture redis_server upstream_server http_client

#include "harness.hpp"

#include <latch>
#include <map>
#include <set>

namespace sluice::test {
namespace {

std::int64_t host_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

/// Sleeps until the store clock (the host's real-time clock, which Redis TIME shares on
/// loopback) reads `offset_ms` into a window of `window_ms`; returns the window's start.
std::int64_t wait_for_offset(std::int64_t window_ms, std::int64_t offset_ms) {
  const std::int64_t now = host_ms();
  std::int64_t start = now - now % window_ms;
  if (now - start > offset_ms) start += window_ms;
  std::this_thread::sleep_for(std::chrono::milliseconds(start + offset_ms - now));
  return start;
}

/// Sleeps until `start + offset_ms` on the store clock.
void sleep_until_ms(std::int64_t at_ms) {
  const std::int64_t now = host_ms();
  if (at_ms > now) std::this_thread::sleep_for(std::chrono::milliseconds(at_ms - now));
}

std::string rules_with(const std::string& limit, const std::string& extra = "") {
  return R"(
store: STORE
identity: {api_key: {header: X-API-Key}}
plans: {free: {limits: []}}
api_keys: {key-a: free}
upstreams: {api: {url: UPSTREAM_URL}}
)" + extra +
         R"(
routes:
  - name: items
    match: {path_prefix: /v1/items}
    upstream: api
    limits:
      - )" +
         limit + "\n";
}

// c01, fixed-window main table, exactly as written: 5/1m, six requests at window offsets
// 5.2 .. 5.7 s, against the memory store and the redis store side by side.
TEST(fixed_window, c01_main_table_at_real_window_offsets) {
  const std::string rules =
      rules_with("{name: items_key, by: api_key, algorithm: fixed_window, rate: 5/1m}");
  world mem(store_kind::memory, rules);
  world red(store_kind::redis, rules);
  struct row {
    unsigned status;
    long long remaining, reset, retry_after;
  };
  const row rows[] = {{200, 4, 55, -1}, {200, 3, 55, -1}, {200, 2, 55, -1},
                      {200, 1, 55, -1}, {200, 0, 55, -1}, {429, 0, 55, 55}};
  const std::int64_t start = wait_for_offset(60'000, 5'200);
  for (int i = 0; i < 6; ++i) {
    sleep_until_ms(start + 5'200 + 100 * i);
    for (world* w : {&mem, &red}) {
      auto r = w->get("/v1/items", {{"X-API-Key", "key-a"}});
      expect_row(r, rows[i].status, 5, rows[i].remaining, rows[i].reset, rows[i].retry_after,
                 std::string(w == &mem ? "memory" : "redis") + " #" + std::to_string(i + 1));
      EXPECT_EQ(r.header("RateLimit-Policy"), "\"items_key\";q=5;w=60");
    }
  }
  EXPECT_LT(host_ms() - start, 5'900) << "the rows must stay 100 ms from a rounding boundary";
  EXPECT_EQ(mem.upstream.request_count(), 5u);
  EXPECT_EQ(red.upstream.request_count(), 5u);
  // The window counter is 5, not 6: a refused request counts nothing.
  const auto raw = red.raw("sl:{items_key|k|rkey-a}");
  EXPECT_EQ(raw.str, std::to_string(start / 60'000) + ":5");
}

// c07, fixed-window variant: a window key found without a TTL is re-armed by the next
// request to at most the window's end, and is gone one second after the window.
TEST(fixed_window, c07_persisted_window_key_is_re_armed) {
  world w(store_kind::redis,
          rules_with("{name: items_key, by: api_key, algorithm: fixed_window, rate: 3/10s}"));
  const std::int64_t start = wait_for_offset(10'000, 1'000);
  const std::string key = "sl:{items_key|k|rkey-a}";
  EXPECT_EQ(w.get("/v1/items", {{"X-API-Key", "key-a"}}).status, 200u);
  ASSERT_EQ(w.buckets().persist(key), 1);  // the bucket's group hash loses its expiry
  ASSERT_EQ(w.pttl(key), -1);
  EXPECT_EQ(w.get("/v1/items", {{"X-API-Key", "key-a"}}).status, 200u);
  const auto pttl = w.pttl(key);
  EXPECT_GT(pttl, 0);
  EXPECT_LE(pttl, start + 10'000 - host_ms() + 100);
  sleep_until_ms(start + 11'000);
  EXPECT_FALSE(w.buckets().exists(key));
  EXPECT_EQ(w.redis->command({"EXISTS", w.buckets().where(key).key}).integer, 0);
}

void expect_exactly_five(const std::vector<client_response>& responses, std::size_t upstream_hits,
                         config::algorithm a) {
  std::map<std::string, int> remaining_of_200;
  int ok = 0;
  for (const auto& r : responses) {
    if (r.status == 200) {
      ++ok;
      ++remaining_of_200[r.header("X-RateLimit-Remaining")];
      continue;
    }
    ASSERT_EQ(r.status, 429u) << r.body;
    EXPECT_EQ(r.header("X-RateLimit-Remaining"), "0");
    EXPECT_EQ(r.header("X-RateLimit-Limit"), "5");
    if (a == config::algorithm::fixed_window) {
      EXPECT_EQ(r.header("Retry-After"), r.header("X-RateLimit-Reset"));
    }
  }
  EXPECT_EQ(ok, 5);
  for (auto r : {"4", "3", "2", "1", "0"}) EXPECT_EQ(remaining_of_200[r], 1) << "Remaining " << r;
  EXPECT_EQ(upstream_hits, 5u);
}

struct c08_run {
  const char* name;
  config::algorithm algo;
  const char* limit;
};

const c08_run c08_runs[] = {
    {"fixed_window", config::algorithm::fixed_window,
     "{name: items_key, by: api_key, algorithm: fixed_window, rate: 5/1m}"},
    {"sliding_window", config::algorithm::sliding_window,
     "{name: items_key, by: api_key, algorithm: sliding_window, rate: 5/1m}"},
    {"sliding_log", config::algorithm::sliding_log,
     "{name: items_key, by: api_key, algorithm: sliding_log, rate: 5/1m}"},
};

/// Run 2 starts at a window offset between 5 s and 50 s (so the burst stays in one window).
void wait_for_c08_offset() {
  const std::int64_t off = host_ms() % 60'000;
  if (off < 5'000 || off > 49'000) wait_for_offset(60'000, 5'000);
}

// c08 runs 2 and 3 (and the sliding log): two gateway instances on one Redis.
TEST(concurrency_algorithms, c08_two_instances_one_redis_admit_exactly_five) {
  for (const auto& run : c08_runs) {
    SCOPED_TRACE(run.name);
    world w(store_kind::redis, rules_with(run.limit));
    gateway_fixture second(w.render(rules_with(run.limit)));
    wait_for_c08_offset();
    auto responses = burst({w.port(), second.port()}, 100);
    expect_exactly_five(responses, w.upstream.request_count(), run.algo);
    if (run.algo == config::algorithm::fixed_window) {
      const auto raw = w.raw("sl:{items_key|k|rkey-a}").str;
      EXPECT_EQ(raw.substr(raw.find(':')), ":5");
    }
  }
}

// c08 with the memory store: one instance, 4 workers, 100 connections.
TEST(concurrency_algorithms, c08_memory_store_four_workers_admit_exactly_five) {
  for (const auto& run : c08_runs) {
    SCOPED_TRACE(run.name);
    world w(store_kind::memory, rules_with(run.limit), 4);
    wait_for_c08_offset();
    auto responses = burst({w.port()}, 100);
    expect_exactly_five(responses, w.upstream.request_count(), run.algo);
  }
}

// Shadow mode: evaluated on its own bucket, counted, invisible to the client, named to the
// upstream in `shadow_header` (a client's own copy of that field is dropped).
TEST(shadow_mode, counted_marked_upstream_and_invisible_to_the_client) {
  for (auto kind : {store_kind::memory, store_kind::redis}) {
    const std::string rules = R"(
store: STORE
shadow_header: X-Sluice-Shadow
identity: {api_key: {header: X-API-Key}}
plans: {free: {limits: []}}
api_keys: {key-a: free}
upstreams: {api: {url: UPSTREAM_URL}}
routes:
  - name: items
    match: {path_prefix: /v1/items}
    upstream: api
    limits:
      - {name: items_key, by: api_key, algorithm: fixed_window, rate: 100/1m}
      - {name: items_trial, by: api_key, algorithm: sliding_log, rate: 2/1m, mode: shadow}
)";
    world w(kind, rules);
    for (int i = 0; i < 4; ++i) {
      auto r = w.get("/v1/items", {{"X-API-Key", "key-a"}, {"X-Sluice-Shadow", "forged"}});
      EXPECT_EQ(r.status, 200u) << r.body;
      EXPECT_EQ(r.header("X-RateLimit-Limit"), "100");
      EXPECT_EQ(r.header("X-RateLimit-Remaining"), std::to_string(99 - i));
      EXPECT_EQ(r.header("RateLimit-Policy"), "\"items_key\";q=100;w=60");
      EXPECT_EQ(r.header("RateLimit").find("items_trial"), std::string::npos);
    }
    const auto reqs = w.upstream.requests();
    ASSERT_EQ(reqs.size(), 4u);
    EXPECT_FALSE(reqs[0].has("X-Sluice-Shadow"));
    EXPECT_FALSE(reqs[1].has("X-Sluice-Shadow"));
    EXPECT_EQ(reqs[2].header("X-Sluice-Shadow"), "items_trial");
    EXPECT_EQ(reqs[3].header("X-Sluice-Shadow"), "items_trial");
    EXPECT_EQ(w.gateway->gateway().stats().shadow_rejections, 2u);
    if (kind == store_kind::redis) {
      // The shadow bucket holds only what it admitted alone: 2 stamps.
      EXPECT_EQ(w.redis->command({"LLEN", "sl:{items_trial|k|rkey-a}"}).integer, 2);
    }
  }
}

// retry_after_jitter adds whole seconds in [0, jitter] to the honest Retry-After, never less.
TEST(retry_after_jitter, never_below_the_honest_wait_and_spread) {
  world w(store_kind::memory, rules_with("{name: items_key, by: api_key, rate: 1/1m, burst: 1}",
                                         "retry_after_jitter: 5s\n"));
  EXPECT_EQ(w.get("/v1/items", {{"X-API-Key", "key-a"}}).status, 200u);
  std::set<long long> seen;
  for (int i = 0; i < 40; ++i) {
    auto r = w.get("/v1/items", {{"X-API-Key", "key-a"}});
    ASSERT_EQ(r.status, 429u);
    const long long ra = std::stoll(r.header("Retry-After"));
    EXPECT_GE(ra, 60);  // honest: one token at 1/1m after the first spend, within this second
    EXPECT_LE(ra, 65);
    EXPECT_EQ(r.header("X-RateLimit-Reset"), "60");  // jitter touches Retry-After only
    seen.insert(ra);
  }
  EXPECT_GE(seen.size(), 2u);
}

}  // namespace
}  // namespace sluice::test
