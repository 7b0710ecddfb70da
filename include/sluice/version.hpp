#pragma once
/// @file
/// The version string of this build (from CMake's project version).

#include <string_view>

namespace sluice {

/// `sluice --version` prints this, for example "0.1.0".
inline constexpr std::string_view version = SLUICE_VERSION;

}  // namespace sluice
