// SPDX-License-Identifier: Apache-2.0
// A worker's slot book with the memory store: ids are unique, a request's check is stamped
// with its slot, the slots an admitted request took are held (a refused request holds none),
// one renewal request covers every held slot, a release gives back exactly one request's.
#include "sluice/limiter/slot_book.hpp"

#include "sluice/limiter/keys.hpp"
#include "sluice/store/memory_store.hpp"

#include <gtest/gtest.h>

#include <set>
#include <string>

namespace sluice::limiter {
namespace {

constexpr std::int64_t t0 = 1'700'000'040'000;

limit_check concurrency(const std::string& name, std::int64_t n, std::int64_t ttl_ms) {
  limit_check l;
  l.key = bucket_key(name, key_namespace::api_key, "k1");
  l.algorithm = config::algorithm::concurrency;
  l.bucket.window_limit = n;
  l.bucket.window_ms = ttl_ms;
  return l;
}

limit_check window(const std::string& name, std::int64_t n) {
  limit_check l;
  l.key = bucket_key(name, key_namespace::api_key, "k1");
  l.algorithm = config::algorithm::fixed_window;
  l.bucket.window_limit = n;
  l.bucket.window_ms = 60'000;
  return l;
}

TEST(slot_book, ids_are_unique_and_carry_the_prefix) {
  slot_book book("a1b2.3");
  std::set<std::string> ids;
  for (int i = 0; i < 100; ++i) ids.insert(book.next_id());
  EXPECT_EQ(ids.size(), 100u);
  EXPECT_EQ(*ids.begin(), "a1b2.3.1");
}

TEST(slot_book, holds_renews_and_releases_what_the_store_took) {
  std::int64_t now = t0;
  store::memory_store mem([&now] { return now; });
  slot_book book("w");
  auto make = [&] {
    check_request req;
    req.limits = {window("calls", 3), concurrency("inflight", 2, 3'000),
                  concurrency("shared", 5, 9'000)};
    return req;
  };
  // Two admitted requests hold two slots each; the third is refused and holds none.
  std::vector<std::string> ids;
  for (int i = 0; i < 3; ++i) {
    auto req = make();
    const std::string id = book.next_id();
    ASSERT_TRUE(slot_book::stamp(req, id));
    EXPECT_EQ(req.limits[1].slot, id);
    EXPECT_EQ(req.limits[0].slot, "");
    const auto out = mem.decide(req);
    EXPECT_EQ(out.allowed, i < 2);
    EXPECT_EQ(book.hold(id, req, out), i < 2 ? 2u : 0u);
    ids.push_back(id);
  }
  EXPECT_EQ(book.held(), 4u);
  EXPECT_EQ(book.held_by_limit().at("inflight"), 2);
  EXPECT_EQ(book.renew_period_ms(), 1'000);  // a third of the shortest slot_ttl

  // One renewal request renews all four; after the first ttl they are still held.
  now = t0 + 2'000;
  const auto renewal = book.renewal();
  ASSERT_EQ(renewal.limits.size(), 4u);
  const auto renewed = mem.decide(renewal);
  for (const auto& lo : renewed.limits) EXPECT_TRUE(lo.admits);
  now = t0 + 4'000;
  auto req = make();
  slot_book::stamp(req, book.next_id());
  EXPECT_FALSE(mem.decide(req).allowed);  // inflight: both slots renewed to t0 + 5,000

  // Releasing one request's slots frees exactly its two; a second release holds nothing.
  const auto rel = book.release(ids[0]);
  ASSERT_EQ(rel.limits.size(), 2u);
  for (const auto& lo : mem.decide(rel).limits) EXPECT_TRUE(lo.admits);
  EXPECT_EQ(book.held(), 2u);
  EXPECT_EQ(book.held_by_limit().at("inflight"), 1);
  EXPECT_TRUE(book.release(ids[0]).limits.empty());
  EXPECT_TRUE(book.release(ids[2]).limits.empty());  // refused: held nothing
  const std::string id = book.next_id();
  slot_book::stamp(req, id);
  const auto out = mem.decide(req);
  EXPECT_TRUE(out.allowed);
  EXPECT_EQ(out.limits[1].remaining, 0);
  EXPECT_EQ(out.limits[2].remaining, 3);
}

}  // namespace
}  // namespace sluice::limiter
