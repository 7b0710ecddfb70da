// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// Durations written as the rules file writes them, for diagnostics, /admin pages and the
/// guarantee each limit carries.

#include <chrono>
#include <string>

namespace sluice::config {

/// `d` in the largest unit of the rules file's duration syntax that holds it whole: days,
/// hours, minutes, seconds, else milliseconds (`7d`, `90m`, `30s`, `250ms`; 0 gives `0d`).
/// parse_duration() reads every positive result back to `d`. Never throws but std::bad_alloc.
std::string duration_text(std::chrono::milliseconds d);

}  // namespace sluice::config
