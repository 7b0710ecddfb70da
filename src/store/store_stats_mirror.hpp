// SPDX-License-Identifier: Apache-2.0
#pragma once
// store_stats' atomic mirror: a store's counters written on its worker's thread and read from
// any (a scrape, /status), made from the same counter list (store_counters.hpp) as the plain
// snapshot, so each counter the list gains is mirrored and read back without another line.

#include "sluice/store/counter_store.hpp"

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>

namespace sluice::store {

namespace detail {

/// The atomic counterpart of a counter type of the list: one atomic per count.
template <class T>
struct atomic_counter;
template <>
struct atomic_counter<std::uint64_t> {
  using type = std::atomic<std::uint64_t>;
};
template <std::size_t N>
struct atomic_counter<std::array<std::uint64_t, N>> {
  using type = std::array<std::atomic<std::uint64_t>, N>;
};
template <class T>
using atomic_counter_t = typename atomic_counter<T>::type;

inline void load_into(std::uint64_t& out, const std::atomic<std::uint64_t>& a) noexcept {
  out = a.load(std::memory_order_relaxed);
}

template <std::size_t N>
void load_into(std::array<std::uint64_t, N>& out,
               const std::array<std::atomic<std::uint64_t>, N>& a) noexcept {
  for (std::size_t k = 0; k < N; ++k) out[k] = a[k].load(std::memory_order_relaxed);
}

}  // namespace detail

/// store_stats with every member atomic (each starts at 0, closed, not connected). Written by
/// one thread, read by any; snapshot() reads each member on its own (relaxed): the members of
/// a snapshot are not one instant's, each is a value the counter had.
struct store_stats_mirror {
#define SLUICE_STORE_MIRROR_MEMBER(member, type, ...) detail::atomic_counter_t<type> member{};
  SLUICE_STORE_COUNTERS(SLUICE_STORE_MIRROR_MEMBER)
#undef SLUICE_STORE_MIRROR_MEMBER
  std::atomic<bool> connected{false};
  std::atomic<breaker_state> breaker{breaker_state::closed};

  /// The plain counters, every member of the list read.
  store_stats snapshot() const noexcept {
    store_stats s;
#define SLUICE_STORE_MIRROR_LOAD(member, ...) detail::load_into(s.member, member);
    SLUICE_STORE_COUNTERS(SLUICE_STORE_MIRROR_LOAD)
#undef SLUICE_STORE_MIRROR_LOAD
    s.connected = connected.load(std::memory_order_relaxed);
    s.breaker = breaker.load(std::memory_order_relaxed);
    return s;
  }
};

}  // namespace sluice::store
