// SPDX-License-Identifier: Apache-2.0
#include "sluice/log_throttle.hpp"

namespace sluice {

bool log_throttle::admit(std::uint64_t& suppressed) {
  const auto now = std::chrono::duration_cast<std::chrono::milliseconds>(
                       std::chrono::steady_clock::now().time_since_epoch())
                       .count();
  auto next = next_ms_.load(std::memory_order_relaxed);
  if (now >= next && next_ms_.compare_exchange_strong(next, now + interval_ms_)) {
    suppressed = dropped_.exchange(0);
    return true;
  }
  dropped_.fetch_add(1, std::memory_order_relaxed);
  return false;
}

}  // namespace sluice
