// SPDX-License-Identifier: Apache-2.0
// store_stats and its atomic mirror, made from the store's counter list (store_counters.hpp):
// every counter of the list is summed by store_stats::add_counts (a cluster over its nodes and
// its own counters, the gateway over its workers) and read back by the mirror's snapshot — a
// counter left out of either, or summed into another, fails here by name.
#include "sluice/store/counter_store.hpp"

#include "store/store_stats_mirror.hpp"
#include "support/store_counts.hpp"

#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

namespace sluice::store {
namespace {

/// Sets the counts of `s` (each element of an array) to base, base + 1, ... in the list's
/// order; returns the value after the last.
std::uint64_t fill_all(store_stats& s, std::uint64_t base) {
  return test::fill_counts(s, base);
}

/// A store_stats whose counts are distinct from each other and, for bases far enough apart,
/// from another's.
store_stats distinct(std::uint64_t base) {
  store_stats s;
  fill_all(s, base);
  return s;
}

/// The number of counts in the list (an array counts each element).
std::size_t count_of_counts() {
  store_stats s;
  return fill_all(s, 0);
}

void expect_sum(std::uint64_t got, std::uint64_t a, std::uint64_t b, std::uint64_t c,
                const char* member) {
  EXPECT_EQ(got, a + b + c) << member;
}

template <std::size_t N>
void expect_sum(const std::array<std::uint64_t, N>& got, const std::array<std::uint64_t, N>& a,
                const std::array<std::uint64_t, N>& b, const std::array<std::uint64_t, N>& c,
                const char* member) {
  for (std::size_t k = 0; k < N; ++k)
    EXPECT_EQ(got[k], a[k] + b[k] + c[k]) << member << "[" << k << "]";
}

void store_into(std::atomic<std::uint64_t>& a, std::uint64_t v) {
  a.store(v);
}

template <std::size_t N>
void store_into(std::array<std::atomic<std::uint64_t>, N>& a,
                const std::array<std::uint64_t, N>& v) {
  for (std::size_t k = 0; k < N; ++k) a[k].store(v[k]);
}

TEST(store_stats, every_counter_is_a_row_of_the_list) {
  // The counters are the list's members, laid out first; only the gauges that do not add up
  // follow them (a counter declared beside the list would move `connected`).
  EXPECT_EQ(offsetof(store_stats, connected), count_of_counts() * sizeof(std::uint64_t));
}

TEST(store_stats, add_counts_sums_every_counter_of_the_list) {
  // Three nodes of a cluster (or three workers), every count distinct.
  const std::array<store_stats, 3> nodes{distinct(1), distinct(1'000), distinct(1'000'000)};
  store_stats sum;
  sum.connected = true;
  sum.breaker = breaker_state::half_open;
  for (const auto& n : nodes) sum.add_counts(n);
#define SLUICE_TEST_SUM(member, ...) \
  expect_sum(sum.member, nodes[0].member, nodes[1].member, nodes[2].member, #member);
  SLUICE_STORE_COUNTERS(SLUICE_TEST_SUM)
#undef SLUICE_TEST_SUM
  // The gauges that do not add up are the caller's.
  EXPECT_TRUE(sum.connected);
  EXPECT_EQ(sum.breaker, breaker_state::half_open);
}

TEST(store_stats, the_sentinel_and_cluster_counters_are_summed) {
  // The counters a plain Redis node never writes are summed all the same (a cluster's sum
  // once left out the Sentinel counters).
  store_stats a, b;
  a.sentinel_unreachable = 1;
  b.sentinel_unreachable = 2;
  a.sentinel_unknown_master = 3;
  b.master_switches = 4;
  b.sentinels_learned = 5;
  a.topology_refreshes = 6;
  b.split_partial_commits = 7;
  a.add_counts(b);
  EXPECT_EQ(a.sentinel_unreachable, 3u);
  EXPECT_EQ(a.sentinel_unknown_master, 3u);
  EXPECT_EQ(a.master_switches, 4u);
  EXPECT_EQ(a.sentinels_learned, 5u);
  EXPECT_EQ(a.topology_refreshes, 6u);
  EXPECT_EQ(a.split_partial_commits, 7u);
}

TEST(store_stats_mirror, snapshot_reads_every_counter_of_the_list) {
  const store_stats want = distinct(7);
  store_stats_mirror m;
#define SLUICE_TEST_STORE(member, ...) store_into(m.member, want.member);
  SLUICE_STORE_COUNTERS(SLUICE_TEST_STORE)
#undef SLUICE_TEST_STORE
  m.connected = true;
  m.breaker = breaker_state::open;
  const store_stats got = m.snapshot();
  const store_stats none;
#define SLUICE_TEST_READ(member, ...) \
  expect_sum(got.member, want.member, none.member, none.member, #member);
  SLUICE_STORE_COUNTERS(SLUICE_TEST_READ)
#undef SLUICE_TEST_READ
  EXPECT_TRUE(got.connected);
  EXPECT_EQ(got.breaker, breaker_state::open);
}

TEST(store_stats_mirror, starts_at_zero_closed_and_not_connected) {
  const store_stats_mirror m;
  const store_stats got = m.snapshot();
  const store_stats none;
#define SLUICE_TEST_ZERO(member, ...) \
  expect_sum(got.member, none.member, none.member, none.member, #member);
  SLUICE_STORE_COUNTERS(SLUICE_TEST_ZERO)
#undef SLUICE_TEST_ZERO
  EXPECT_FALSE(got.connected);
  EXPECT_EQ(got.breaker, breaker_state::closed);
}

TEST(store_stats, labels_of_the_arrays) {
  EXPECT_EQ(error_kind_label(0), "READONLY");
  EXPECT_EQ(error_kind_label(error_kind_count - 1), "other");
  EXPECT_EQ(batch_size_label(0), "1");
  EXPECT_EQ(batch_size_label(batch_bucket(3)), "3-4");
  EXPECT_EQ(batch_size_label(batch_size_buckets - 1), "65+");
}

}  // namespace
}  // namespace sluice::store
