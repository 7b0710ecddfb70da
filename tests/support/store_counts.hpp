// SPDX-License-Identifier: Apache-2.0
#pragma once
// Distinct counts for the store's counter list (store_counters.hpp) in tests: every count of a
// store_stats (each element of an array) set to base, base + 1, ... in the list's order, so a
// count read from the wrong member, or summed into another, shows.

#include "sluice/store/counter_store.hpp"

#include <array>
#include <cstddef>
#include <cstdint>

namespace sluice::test {

inline void fill_count(std::uint64_t& count, std::uint64_t& next) {
  count = next++;
}

template <std::size_t N>
void fill_count(std::array<std::uint64_t, N>& counts, std::uint64_t& next) {
  for (auto& c : counts) c = next++;
}

/// Sets every count of `s` from `base` up, in the list's order; returns the value after the last.
inline std::uint64_t fill_counts(store::store_stats& s, std::uint64_t base) {
  std::uint64_t next = base;
#define SLUICE_TEST_FILL(member, ...) fill_count(s.member, next);
  SLUICE_STORE_COUNTERS(SLUICE_TEST_FILL)
#undef SLUICE_TEST_FILL
  return next;
}

}  // namespace sluice::test
