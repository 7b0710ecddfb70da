// SPDX-License-Identifier: Apache-2.0
#include "sluice/store/memory_store.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

// The memory store beyond the shared table (token_bucket_table_test.cpp): atomicity across
// threads (c08, memory variant), expiry of idle buckets, its clock, and its bound
// (store.max_buckets: expired entries go first, then the ones nearest to full). A step of the
// host's wall clock is tested on the real binary under faketime (clock_step_test.cpp).

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

// The anchored clock starts at the wall clock's time, so windows align as on Redis TIME.
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

TEST(memory_store, default_clock_never_goes_back) {
  store::memory_store store;
  std::int64_t last = 0;
  for (int i = 0; i < 2'000; ++i) {
    auto out = store.decide(request("{clock}:m", 1'000'000, 1'000, 1'000'000));
    EXPECT_GE(out.now_ms, last);
    last = out.now_ms;
  }
}

TEST(memory_store, max_buckets_zero_is_refused) {
  EXPECT_THROW(store::memory_store([] { return std::int64_t{0}; }, 0), std::invalid_argument);
}

// A bound under 32 is one shard: it holds exactly.
TEST(memory_store, a_small_bound_holds_exactly) {
  std::int64_t now = 1'700'000'000'000;
  store::memory_store store([&now] { return now; }, 3);
  EXPECT_EQ(store.capacity(), 3u);
  for (int i = 0; i < 100; ++i) {
    now += 1;
    EXPECT_TRUE(store.decide(request("{b}:" + std::to_string(i), 10, 3'600'000, 10)).allowed);
    EXPECT_LE(store.stored_entries(), 3u);
  }
  EXPECT_EQ(store.stats().buckets, 3u);
  EXPECT_EQ(store.stats().evictions, 97u);
  // A large bound: 64 shards, rounded down to a multiple of them.
  EXPECT_EQ(store::memory_store({}, 1'000'000).capacity(), 64u * 15'625u);
  EXPECT_EQ(store::memory_store({}, 1'000).capacity(), 62u * 16u);
}

// At the bound, a drained and a half-drained bucket keep their state while thousands of fresh
// keys (each one token spent: the nearest to full) come and go: every decision on them is the
// one an unbounded store makes.
TEST(memory_store, at_the_bound_live_buckets_keep_their_decisions) {
  for (std::uint64_t bound : {20u, 640u}) {  // one shard of 20; 40 shards of 16
    SCOPED_TRACE(bound);
    std::int64_t now = 1'700'000'000'000;
    store::memory_store bounded([&now] { return now; }, bound);
    store::memory_store unbounded([&now] { return now; }, 1'000'000);
    ASSERT_EQ(bounded.capacity(), bound);
    auto both = [&](const limiter::check_request& req) {
      auto a = bounded.decide(req);
      auto b = unbounded.decide(req);
      EXPECT_EQ(a.allowed, b.allowed);
      EXPECT_EQ(a.limits[0].remaining, b.limits[0].remaining);
      EXPECT_EQ(a.limits[0].retry_after_ms, b.limits[0].retry_after_ms);
      EXPECT_EQ(a.limits[0].reset_ms, b.limits[0].reset_ms);
      return a;
    };
    auto drained = request("{live}:drained", 10, 3'600'000, 10);  // 10/1h: 6 min a token
    drained.limits[0].cost = 10;
    EXPECT_TRUE(both(drained).allowed);  // 0 left: 1 h to full
    auto half = request("{live}:half", 10, 3'600'000, 10);
    half.limits[0].cost = 5;
    EXPECT_TRUE(both(half).allowed);  // 5 left: 30 min to full
    for (int i = 0; i < 5'000; ++i) {
      now += 1;
      bounded.decide(request("{fresh}:" + std::to_string(i), 10, 3'600'000, 10));  // 9 left
    }
    EXPECT_LE(bounded.stored_entries(), bound);
    const auto st = bounded.stats();
    EXPECT_EQ(st.buckets, bounded.stored_entries());
    EXPECT_EQ(st.evictions, 5'002u - st.buckets);  // every fresh key was live when evicted
    drained.limits[0].cost = 1;
    auto d = both(drained);
    EXPECT_FALSE(d.allowed);
    EXPECT_EQ(d.limits[0].remaining, 0);
    half.limits[0].cost = 1;
    auto h = both(half);
    EXPECT_TRUE(h.allowed);
    EXPECT_EQ(h.limits[0].remaining, 4);
  }
}

// Expired entries make room before any live one is evicted; then the earliest to expire goes.
TEST(memory_store, at_the_bound_expired_buckets_go_first) {
  std::int64_t now = 1'700'000'000'000;
  store::memory_store store([&now] { return now; }, 20);  // one shard of 20
  for (int i = 0; i < 20; ++i) {
    now += 1;
    if (i % 4 == 0)  // 5 buckets 1 ms from full
      store.decide(request("{short}:" + std::to_string(i), 1'000, 1'000, 1'000));
    else  // 15 with 6 min to full (one token of 10/1h spent)
      store.decide(request("{long}:" + std::to_string(i), 10, 3'600'000, 10));
  }
  ASSERT_EQ(store.stored_entries(), 20u);
  now += 10;  // the 5 short ones expired
  for (int i = 20; i < 25; ++i)
    store.decide(request("{long}:" + std::to_string(i), 10, 3'600'000, 10));
  EXPECT_EQ(store.stats().evictions, 0u);
  EXPECT_EQ(store.size(), 20u);
  for (int i = 1; i < 25; ++i) {
    if (i % 4 != 0 || i >= 20) {
      EXPECT_TRUE(store.peek("{long}:" + std::to_string(i))) << i;
    }
  }
  // Full of live buckets: the next one evicts one of them, never the drained bucket.
  auto drained = request("{drained}", 10, 3'600'000, 10);
  drained.limits[0].cost = 10;
  store.decide(drained);
  EXPECT_EQ(store.stats().evictions, 1u);
  for (int i = 0; i < 100; ++i)
    store.decide(request("{more}:" + std::to_string(i), 10, 3'600'000, 10));
  EXPECT_EQ(store.stats().evictions, 101u);
  ASSERT_TRUE(store.peek("{drained}"));
  EXPECT_EQ(store.peek("{drained}")->first, 0);
}

// A check never evicts its own keys, even when they crowd a shard past its share: with one
// shard of one entry, both limits of a two-limit check keep their debits.
TEST(memory_store, a_check_never_evicts_its_own_keys) {
  std::int64_t now = 1'700'000'000'000;
  store::memory_store store([&now] { return now; }, 1);
  auto req = request("{own}:a", 5, 3'600'000, 5);
  req.limits.push_back(request("{own}:b", 5, 3'600'000, 5).limits[0]);
  for (int i = 0; i < 2; ++i) store.decide(req);
  auto out = store.decide(req);
  EXPECT_TRUE(out.allowed);
  EXPECT_EQ(out.limits[0].remaining, 2);
  EXPECT_EQ(out.limits[1].remaining, 2);
  // Another key then evicts one of them (the bound is one entry; the check overshot by one).
  store.decide(request("{own}:c", 5, 3'600'000, 5));
  EXPECT_EQ(store.stored_entries(), 2u);
}

}  // namespace
}  // namespace sluice
