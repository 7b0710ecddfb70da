// SPDX-License-Identifier: Apache-2.0
#include "reservation_ledger.hpp"

namespace sluice::app {

void reservation_ledger::open(std::string_view key, std::int64_t units) {
  const std::lock_guard lock(m_);
  auto it = open_.find(key);
  if (it == open_.end()) it = open_.emplace(std::string(key), entry{}).first;
  ++it->second.requests;
  it->second.units += units;
}

void reservation_ledger::close(std::string_view key, std::int64_t units) {
  const std::lock_guard lock(m_);
  const auto it = open_.find(key);
  if (it == open_.end()) return;
  it->second.units -= units;
  if (--it->second.requests <= 0) open_.erase(it);
}

reservation_ledger::entry reservation_ledger::at(std::string_view key) const {
  const std::lock_guard lock(m_);
  const auto it = open_.find(key);
  return it == open_.end() ? entry{} : it->second;
}

}  // namespace sluice::app
