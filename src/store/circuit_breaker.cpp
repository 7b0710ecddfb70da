// SPDX-License-Identifier: Apache-2.0
// The circuit breaker of a store connection (include/sluice/store/circuit_breaker.hpp).

#include "sluice/store/circuit_breaker.hpp"

namespace sluice::store {

circuit_breaker::circuit_breaker(unsigned failures, std::chrono::milliseconds cool_down,
                                 clock_fn clock)
    : failures_(failures), cool_down_(cool_down), clock_(std::move(clock)) {
  if (!clock_) clock_ = [] { return std::chrono::steady_clock::now(); };
}

circuit_breaker::admission circuit_breaker::admit() {
  if (state_ == breaker_state::closed) return admission::send;
  if (state_ == breaker_state::open) {
    if (clock_() < open_until_) return admission::refused;
    state_ = breaker_state::half_open;
  }
  if (probe_out_) return admission::refused;
  probe_out_ = true;
  return admission::probe;
}

void circuit_breaker::open() {
  state_ = breaker_state::open;
  open_until_ = clock_() + cool_down_;
}

circuit_breaker::transition circuit_breaker::record(bool ok, bool probe) {
  if (failures_ == 0) return transition::none;
  if (probe) {
    probe_out_ = false;
    if (ok) {
      failures_in_a_row_ = 0;
      state_ = breaker_state::closed;
      return transition::closed;
    }
    open();
    return transition::reopened;
  }
  if (state_ != breaker_state::closed) return transition::none;  // sent before it opened
  if (ok) {
    failures_in_a_row_ = 0;
    return transition::none;
  }
  if (++failures_in_a_row_ < failures_) return transition::none;
  opened_at_ = clock_();
  open();
  return transition::opened;
}

void circuit_breaker::probe_not_sent() {
  probe_out_ = false;
}

void circuit_breaker::cool_down_over() {
  if (state_ == breaker_state::open) open_until_ = clock_();
}

std::chrono::milliseconds circuit_breaker::open_for() const {
  return std::chrono::duration_cast<std::chrono::milliseconds>(clock_() - opened_at_);
}

}  // namespace sluice::store
