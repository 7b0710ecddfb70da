// SPDX-License-Identifier: Apache-2.0
#pragma once
// Reservations outstanding on this gateway (issue 25, item 7: `/admin/explain` shows them),
// private to the app room. A request admitted with charged limits (`charge:`) holds units it
// has not settled yet; the ledger counts them per bucket from admission until the request's
// charge hook is gone (its settlement sent, or nothing to settle).
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>

namespace sluice::app {

/// Per bucket key (limiter::limit_check::key), the admitted requests of this gateway whose
/// charged units are not settled yet and the units they took at admission (a reservation, or
/// the route's cost of a `when_status` limit). This gateway's only: other gateways sharing the
/// store keep their own. Thread-safe (one mutex, taken twice per charged request and once per
/// explain); an entry that falls to zero is removed, so the map holds only open buckets.
class reservation_ledger {
 public:
  struct entry {
    std::int64_t requests = 0;  ///< admitted requests not yet settled
    std::int64_t units = 0;     ///< the units they took at admission
  };
  /// One request took `units` of `key` at admission.
  void open(std::string_view key, std::int64_t units);
  /// That request's units of `key` are settled (or will be: the settle call is sent).
  void close(std::string_view key, std::int64_t units);
  /// What is outstanding on `key` now ({0, 0}: nothing).
  entry at(std::string_view key) const;

 private:
  struct hash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const noexcept {
      return std::hash<std::string_view>{}(s);
    }
  };
  mutable std::mutex m_;
  std::unordered_map<std::string, entry, hash, std::equal_to<>> open_;
};

}  // namespace sluice::app
