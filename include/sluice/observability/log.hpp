// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// Logging helpers: spdlog set-up and the hot-path log throttle.

#include "sluice/log_throttle.hpp"

#include <string_view>

namespace sluice::observability {

/// Configures the default spdlog logger (stderr, level from `level`: trace..off).
void setup_logging(std::string_view level);

/// The hot-path log throttle (defined in the base library so every room can use it).
using log_throttle = sluice::log_throttle;

}  // namespace sluice::observability
