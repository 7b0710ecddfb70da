#include "sluice/store/memory_store.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

// The memory store beyond the shared table (token_bucket_table_test.cpp): atomicity across
// threads (c08, memory variant), expiry of idle buckets, and its real-time clock.

namespace sluice {
namespace {

limiter::check_request request(const std::string& key, std::int64_t n, std::int64_t period_ms,
                               std::int64_t burst) {
  config::limit_params p;
  p.rate.count = n;
  p.rate.period = std::chrono::milliseconds(period_ms);
  p.burst = burst;
  limiter::limit_check lc;
  lc.key = key;
  lc.bucket = limiter::bucket_params::from(p);
  limiter::check_request req;
  req.limits.push_back(lc);
  return req;
}

// c08: 4 workers × 25 checks released together against 5/1m burst 5 → exactly 5 admitted,
// with Remaining 4, 3, 2, 1, 0 each once.
TEST(memory_store, concurrent_checks_admit_exactly_the_burst) {
  store::memory_store store;  // real clock
  std::atomic<bool> go{false};
  std::atomic<int> allowed{0};
  std::vector<std::atomic<int>> remaining_seen(5);
  std::vector<std::thread> workers;
  for (int w = 0; w < 4; ++w) {
    workers.emplace_back([&] {
      while (!go.load()) std::this_thread::yield();
      for (int i = 0; i < 25; ++i) {
        auto out = store.decide(request("{c08}:items_key", 5, 60'000, 5));
        if (out.allowed) {
          ++allowed;
          ++remaining_seen[static_cast<std::size_t>(out.limits[0].remaining)];
        } else {
          EXPECT_EQ(out.limits[0].remaining, 0);
          EXPECT_GT(out.limits[0].retry_after_ms, 11'000);
        }
      }
    });
  }
  go = true;
  for (auto& t : workers) t.join();
  EXPECT_EQ(allowed.load(), 5);
  for (auto& r : remaining_seen) EXPECT_EQ(r.load(), 1);
  EXPECT_EQ(store.stats().checks, 100u);
}

// Multi-limit checks on overlapping keys from many threads: no deadlock (shards are locked in
// index order), and the shared limit admits exactly its burst.
TEST(memory_store, overlapping_multi_limit_checks_do_not_deadlock) {
  store::memory_store store;
  std::atomic<int> allowed{0};
  std::vector<std::thread> workers;
  for (int w = 0; w < 4; ++w) {
    workers.emplace_back([&, w] {
      for (int i = 0; i < 500; ++i) {
        auto req = request("{shared}:global", 1, 3'600'000, 50);
        auto own =
            request("{w" + std::to_string(w) + "}:k" + std::to_string(i % 7), 1000, 1000, 1000);
        // Alternate the order of the two keys between workers.
        if (w % 2) {
          req.limits.push_back(own.limits[0]);
        } else {
          req.limits.insert(req.limits.begin(), own.limits[0]);
        }
        if (store.decide(req).allowed) ++allowed;
      }
    });
  }
  for (auto& t : workers) t.join();
  EXPECT_EQ(allowed.load(), 50);
}

TEST(memory_store, idle_buckets_expire_at_time_to_full) {
  std::int64_t now = 1'700'000'000'000;
  store::memory_store store([&now] { return now; });
  store.decide(request("{e}:a", 1, 10'000, 2));  // 1 token left: 10 s to full
  ASSERT_EQ(store.size(), 1u);
  auto state = store.peek("{e}:a");
  ASSERT_TRUE(state);
  EXPECT_EQ(state->first, 10'000);
  EXPECT_EQ(state->second, now);
  now += 9'999;
  EXPECT_EQ(store.size(), 1u);
  now += 1;
  EXPECT_EQ(store.size(), 0u);
  EXPECT_FALSE(store.peek("{e}:a"));
  // A full bucket is never stored (like the script's DEL).
  auto high = request("{e}:b", 1'000'000, 1'000, 1'000'000);
  store.decide(high);
  now += 1;
  store.decide(request("{e}:c", 1, 1000, 1));
  EXPECT_EQ(store.size(), 1u);  // b expired after 1 ms, c is stored
}

TEST(memory_store, sweep_removes_idle_buckets_nobody_touches) {
  std::int64_t now = 1'700'000'000'000;
  store::memory_store store([&now] { return now; });
  for (int i = 0; i < 5'000; ++i) store.decide(request("{s}:" + std::to_string(i), 1, 1000, 1));
  now += 2'000;  // all idle buckets are full again
  // Keep checking a few keys: the periodic sweep of each shard drops the idle ones.
  ASSERT_EQ(store.stored_entries(), 5'000u);
  for (int i = 0; i < 70'000; ++i) {
    now += 1;
    store.decide(request("{hot}:" + std::to_string(i % 64), 1000, 1000, 1000));
  }
  EXPECT_LE(store.stored_entries(), 64u);
  EXPECT_LE(store.size(), 64u);
}

TEST(memory_store, default_clock_is_real_time_ms) {
  store::memory_store store;
  store.decide(request("{clock}:a", 1, 10'000, 2));
  const auto host = std::chrono::duration_cast<std::chrono::milliseconds>(
                        std::chrono::system_clock::now().time_since_epoch())
                        .count();
  auto state = store.peek("{clock}:a");
  ASSERT_TRUE(state);
  EXPECT_NEAR(static_cast<double>(state->second), static_cast<double>(host), 1'000.0);
}

}  // namespace
}  // namespace sluice
