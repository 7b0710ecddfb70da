// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// The circuit breaker of a store connection (a store outage must not cost latency, DESIGN.md
/// "Failure"), as its own unit with an injected clock.

#include "sluice/store/counter_store.hpp"

#include <chrono>
#include <cstdint>
#include <functional>

namespace sluice::store {

/// Closed: every check goes to the server. After `failures` consecutive failed checks (no
/// answer in time, a lost connection, an error reply saying the server cannot serve) it
/// opens: checks are refused at once for `cool_down`, so a stalled store does not cost every
/// request its deadline. Then half-open: one check, the probe, goes through; its success
/// closes the breaker, its failure opens it again for another `cool_down`. Checks sent before
/// it opened do not count once it is open. `failures` 0 disables it (always closed).
/// Not thread-safe (one worker).
class circuit_breaker {
 public:
  using clock_fn = std::function<std::chrono::steady_clock::time_point()>;

  /// `clock` defaults to std::chrono::steady_clock::now.
  circuit_breaker(unsigned failures, std::chrono::milliseconds cool_down, clock_fn clock = {});

  /// What admit() decided for a check.
  enum class admission {
    refused,  ///< open (or a probe is out): fail the check at once
    send,     ///< closed: send it
    probe,    ///< half-open: send it as the probe (report it with record(..., true))
  };
  /// Asks whether a check may go to the server; moves open to half-open once the cool-down
  /// has passed.
  admission admit();

  /// What record() changed.
  enum class transition { none, opened, reopened, closed };
  /// Records the outcome of a sent check (`ok`: the server answered it); `probe`: it was
  /// admitted as the probe.
  transition record(bool ok, bool probe);
  /// The probe never reached the server (the connection went away first): probe again.
  void probe_not_sent();
  /// Ends the cool-down now (a new connection answered its set-up: probe at once).
  void cool_down_over();

  breaker_state state() const { return state_; }
  unsigned consecutive_failures() const { return failures_in_a_row_; }
  /// How long it has been open (or half-open) since it last opened from closed.
  std::chrono::milliseconds open_for() const;

 private:
  void open();

  unsigned failures_;
  std::chrono::milliseconds cool_down_;
  clock_fn clock_;
  breaker_state state_ = breaker_state::closed;
  unsigned failures_in_a_row_ = 0;
  bool probe_out_ = false;
  std::chrono::steady_clock::time_point open_until_{}, opened_at_{};
};

}  // namespace sluice::store
