// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// What kind of counting a limiting algorithm does (config::algorithm, rules.hpp).

#include "sluice/config/rules.hpp"

namespace sluice::config {

/// Whether `a` admits the count of its rate per window of the rate's period — fixed_window,
/// sliding_window, sliding_log, calendar — rather than from a bucket that refills
/// (token_bucket, which alone takes a `burst`) or from slots held (concurrency).
constexpr bool is_window_algorithm(algorithm a) noexcept {
  return a == algorithm::fixed_window || a == algorithm::sliding_window ||
         a == algorithm::sliding_log || a == algorithm::calendar;
}

}  // namespace sluice::config
