// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// Test helper: the check script run on a real Redis at simulated store times (the
/// `check_request::now_ms_override` of a table), with the stored state's expiry on that same
/// clock.
///
/// The script arms a key's expiry in milliseconds from its decision (PEXPIRE, SET PX), and
/// Redis counts them on its own wall clock, while a table's steps move the simulated time by
/// seconds or days in microseconds of real time. Compared against the memory store (whose clock
/// is the simulated one), a key could then live past its simulated expiry, or — on a loaded
/// machine, real time outrunning a short simulated step — vanish before it: two clocks in one
/// assertion. store_time_keys takes Redis's clock out: each step runs in one transaction with
/// the reads that check it and a PERSIST of every key it touched (Redis reads its clock once per
/// transaction, so nothing expires inside it), and the test expires the keys itself at the
/// store time the script armed them for (the outcome's Reset: "the state matters exactly until
/// Reset", lua/common.lua). A hash field carries its own expiry stamp in store time already
/// (the script reads a field past it as missing), so under the hash layout only the hash's own
/// expiry is lifted. Header-only; link redis_server.

#include "support/redis_server.hpp"

#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace sluice::test {

/// Keys of one Redis whose expiry follows a simulated store clock (see the file comment).
class store_time_keys {
 public:
  explicit store_time_keys(const redis_server& server) : server_(server) {}

  /// Before a step at store time `now_ms`: deletes every key whose store-time expiry is at or
  /// before it (the memory store reads an entry expired at `now_ms` as missing, likewise).
  void expire_until(std::int64_t now_ms) {
    for (auto it = expires_.begin(); it != expires_.end();) {
      if (it->second <= now_ms) {
        server_.command({"DEL", it->first});
        it = expires_.erase(it);
      } else {
        ++it;
      }
    }
  }

  /// Runs `script` (an EVAL argv) and then `reads`, then PERSIST of each of `keys` (the Redis
  /// keys the step may have armed), as one transaction. Returns the replies of the script and
  /// of the reads, in order (one reply, the error, when the transaction did not run).
  std::vector<redis_reply> step(const std::vector<std::string>& script,
                                const std::vector<std::vector<std::string>>& reads,
                                const std::vector<std::string>& keys) const {
    std::vector<std::vector<std::string>> all{script};
    all.insert(all.end(), reads.begin(), reads.end());
    for (const auto& k : keys) all.push_back({"PERSIST", k});
    auto replies = server_.transaction(all);
    if (replies.size() == all.size()) replies.resize(1 + reads.size());
    return replies;
  }

  /// After a step at `now_ms` that armed `key` for `reset_ms` (the limit's Reset in its
  /// outcome): the key expires at now_ms + reset_ms in store time, or later if it was armed
  /// later already (a refusal that writes nothing only raises an expiry, never lowers it; a
  /// write re-arms it to its new Reset, which a debit only moves later); reset_ms <= 0: the
  /// script deleted the state.
  void armed(const std::string& key, std::int64_t now_ms, std::int64_t reset_ms) {
    if (reset_ms <= 0) {
      expires_.erase(key);
      return;
    }
    auto& at = expires_[key];
    at = std::max(at, now_ms + reset_ms);
  }

 private:
  const redis_server& server_;
  std::map<std::string, std::int64_t> expires_;  // Redis key -> store time of its expiry (ms)
};

}  // namespace sluice::test
