// SPDX-License-Identifier: Apache-2.0
// The worker's token leases (limiter::lease_book), driven as the request path drives it:
// split() a check, decide the rest on a real memory store (which implements lease and
// refund as the Redis script does: tests/unit/store/token_bucket_table_test.cpp), settle().
#include "sluice/limiter/lease_book.hpp"

#include "sluice/limiter/keys.hpp"
#include "sluice/store/memory_store.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

namespace sluice::limiter {
namespace {

using namespace std::chrono_literals;
using clock = lease_book::clock;

constexpr std::int64_t epoch_ms = 1'700'000'000'000;

// 10/10s burst 10: one token per second.
bucket_params ten_per_ten_s() {
  config::limit_params p;
  p.rate.count = 10;
  p.rate.period = 10s;
  p.burst = 10;
  return bucket_params::from(p);
}

limit_check leased(const std::string& name, std::int64_t lease, std::int64_t cost = 1,
                   bool shadow = false) {
  limit_check l;
  l.key = bucket_key(name, key_namespace::global, "*");
  l.bucket = ten_per_ten_s();
  l.cost = cost;
  l.lease = lease;
  l.shadow = shadow;
  return l;
}

// A store, a lease book and a worker's clock.
struct worker {
  std::int64_t now_ms = epoch_ms;
  store::memory_store store{[this] { return now_ms; }};
  lease_book book;
  clock::time_point now = clock::time_point{} + 1h;
  std::uint64_t generation = 1, epoch = 0;
  std::vector<std::chrono::milliseconds> times{250ms, 250ms};
  int round_trips = 0;

  // What the request path does with one request.
  check_outcome decide(check_request req) {
    lease_split s;
    if (!book.split(req, times, generation, epoch, now, s)) {
      ++round_trips;
      return store.decide(req);
    }
    if (req.limits.empty()) return book.settle(s, nullptr, now);
    ++round_trips;
    const check_outcome rest = store.decide(req);
    return book.settle(s, &rest, now);
  }
  check_outcome one(const limit_check& l) {
    check_request r;
    r.limits.push_back(l);
    return decide(r);
  }
};

TEST(lease_book, a_lease_pays_for_the_next_requests_without_a_round_trip) {
  worker w;
  const auto l = leased("hot", 4);
  for (int i = 0; i < 4; ++i) {
    const auto out = w.one(l);
    ASSERT_TRUE(out.allowed) << i;
    ASSERT_EQ(out.limits.size(), 1u);
    EXPECT_TRUE(out.limits[0].admits);
    EXPECT_EQ(out.limits[0].limit, 10);
    // The bucket holds 6 after the lease; this worker holds 3, 2, 1, 0 more.
    EXPECT_EQ(out.limits[0].remaining, 6 + 3 - i) << i;
  }
  EXPECT_EQ(w.round_trips, 1);
  EXPECT_EQ(w.book.grants(), 1u);
  EXPECT_EQ(w.book.tokens_leased(), 3u);
  EXPECT_EQ(w.book.local_decisions(), 3u);
  // The lease is spent: the next request takes a new one.
  EXPECT_TRUE(w.one(l).allowed);
  EXPECT_EQ(w.round_trips, 2);
}

TEST(lease_book, the_bucket_never_admits_more_than_its_tokens) {
  worker w;
  const auto l = leased("hot", 4);
  int admitted = 0;
  for (int i = 0; i < 30; ++i) admitted += w.one(l).allowed ? 1 : 0;
  EXPECT_EQ(admitted, 10);  // the burst; no time passed
  EXPECT_LE(w.round_trips, 30 - 10 + 3 + 1);
}

TEST(lease_book, an_ended_lease_returns_its_tokens_with_the_next_check) {
  worker w;
  const auto l = leased("hot", 4);
  ASSERT_TRUE(w.one(l).allowed);  // bucket 10 -> 6, lease holds 3
  w.now += 300ms;                 // the lease ended (250 ms)
  const auto out = w.one(l);      // returns 3 (bucket 9), takes 4 (bucket 5), spends 1
  ASSERT_TRUE(out.allowed);
  EXPECT_EQ(w.round_trips, 2);
  EXPECT_EQ(w.book.tokens_returned(), 3u);
  EXPECT_EQ(out.limits[0].remaining, 5 + 3);  // the bucket's, and this worker's lease
  EXPECT_EQ(*w.store.peek(l.key), (std::pair<std::int64_t, std::int64_t>{5'000, epoch_ms}));
}

TEST(lease_book, a_reload_or_a_new_store_connection_ends_every_lease) {
  worker w;
  const auto l = leased("hot", 4);
  ASSERT_TRUE(w.one(l).allowed);
  w.generation = 2;
  ASSERT_TRUE(w.one(l).allowed);
  EXPECT_EQ(w.round_trips, 2);
  EXPECT_EQ(w.book.tokens_returned(), 3u);  // same bucket: its tokens go back
  w.epoch = 7;
  ASSERT_TRUE(w.one(l).allowed);
  EXPECT_EQ(w.round_trips, 3);
  EXPECT_EQ(w.book.tokens_returned(), 3u);  // another connection: they are not given back
}

TEST(lease_book, a_refused_request_gives_a_covered_limit_its_cost_back) {
  worker w;
  std::vector<limit_check> limits{leased("hot", 4), leased("cold", 0)};
  limits[1].bucket.burst = 1;  // one request only
  check_request r;
  r.limits = limits;
  ASSERT_TRUE(w.decide(r).allowed);  // hot: lease of 4, 3 left; cold: spent
  const auto refused = w.decide(r);  // hot covered by the lease, cold refuses
  EXPECT_FALSE(refused.allowed);
  EXPECT_TRUE(refused.limits[0].admits);
  EXPECT_FALSE(refused.limits[1].admits);
  // hot's lease still holds 3: three requests of hot alone are paid without a round trip.
  const int before = w.round_trips;
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(w.one(limits[0]).allowed);
  EXPECT_EQ(w.round_trips, before);
}

TEST(lease_book, one_lease_request_per_key_in_flight) {
  worker w;
  const auto l = leased("hot", 4);
  check_request a, b;
  a.limits.push_back(l);
  b.limits.push_back(l);
  lease_split sa, sb;
  ASSERT_TRUE(w.book.split(a, w.times, 1, 0, w.now, sa));
  ASSERT_TRUE(w.book.split(b, w.times, 1, 0, w.now, sb));
  ASSERT_EQ(a.limits.size(), 1u);
  ASSERT_EQ(b.limits.size(), 1u);
  EXPECT_EQ(a.limits[0].lease, 4);
  EXPECT_EQ(b.limits[0].lease, 0);  // the first one's lease is on its way: no second one
  const auto ra = w.store.decide(a);
  const auto rb = w.store.decide(b);
  EXPECT_EQ(ra.limits[0].granted, 4);
  EXPECT_EQ(rb.limits[0].granted, 0);
  w.book.settle(sb, &rb, w.now);
  w.book.settle(sa, &ra, w.now);
  EXPECT_EQ(w.book.grants(), 1u);
  EXPECT_EQ(w.book.size(), 1u);
}

TEST(lease_book, a_failed_check_forgets_the_lease_asked_for_and_restores_the_request) {
  worker w;
  const auto l = leased("hot", 4);
  ASSERT_TRUE(w.one(l).allowed);  // lease holds 3
  check_request r;
  r.limits.push_back(leased("hot", 4, 5));  // cost 5: the lease cannot pay; 3 go back
  lease_split s;
  ASSERT_TRUE(w.book.split(r, w.times, 1, 0, w.now, s));
  ASSERT_EQ(r.limits.size(), 1u);
  EXPECT_EQ(r.limits[0].refund, 3);
  w.book.failed(s, r);  // (the store did not answer)
  ASSERT_EQ(r.limits.size(), 1u);
  EXPECT_EQ(r.limits[0].lease, 0);
  EXPECT_EQ(r.limits[0].refund, 0);
  EXPECT_EQ(w.book.size(), 0u);
  // The next request asks for a lease again, returning nothing (the 3 were lost).
  check_request n;
  n.limits.push_back(l);
  lease_split s2;
  ASSERT_TRUE(w.book.split(n, w.times, 1, 0, w.now, s2));
  EXPECT_EQ(n.limits[0].lease, 4);
  EXPECT_EQ(n.limits[0].refund, 0);
}

TEST(lease_book, a_shadow_limit_keeps_its_spend_when_the_request_is_refused) {
  worker w;
  std::vector<limit_check> limits{leased("shadowed", 4, 1, true), leased("cold", 0)};
  limits[1].bucket.burst = 1;
  check_request r;
  r.limits = limits;
  ASSERT_TRUE(w.decide(r).allowed);   // shadowed: lease 4, 3 left
  EXPECT_FALSE(w.decide(r).allowed);  // shadowed covered (2 left), cold refuses
  const int before = w.round_trips;
  EXPECT_TRUE(w.one(limits[0]).allowed);  // 1 left
  EXPECT_TRUE(w.one(limits[0]).allowed);  // 0 left
  EXPECT_EQ(w.round_trips, before);
  EXPECT_TRUE(w.one(limits[0]).allowed);  // a new lease
  EXPECT_EQ(w.round_trips, before + 1);
}

TEST(lease_book, a_request_without_leasing_limits_is_left_alone) {
  worker w;
  check_request r;
  r.limits.push_back(leased("plain", 0));
  lease_split s;
  EXPECT_FALSE(w.book.split(r, w.times, 1, 0, w.now, s));
  EXPECT_EQ(r.limits.size(), 1u);
  EXPECT_EQ(w.book.size(), 0u);
}

}  // namespace
}  // namespace sluice::limiter
