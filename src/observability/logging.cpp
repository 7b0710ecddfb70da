// SPDX-License-Identifier: Apache-2.0
#include "sluice/observability/log.hpp"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <string>

namespace sluice::observability {

void setup_logging(std::string_view level) {
  auto logger = spdlog::stderr_color_mt("sluice");
  spdlog::set_default_logger(logger);
  spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%e%z %^%l%$ [%t] %v");
  spdlog::set_level(spdlog::level::from_str(std::string(level)));
}

}  // namespace sluice::observability
