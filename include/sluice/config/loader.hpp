#pragma once
/// @file
/// Loading and validating a rules file with yaml-cpp.

#include "sluice/config/rules.hpp"

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::config {

/// One problem found in a rules file. Rendered as `file:line: path: message`, for example
/// `rules.yaml:14: routes[0].limits[0].burst: cost 1 can never be admitted by burst 0`.
struct diagnostic {
  std::string file;
  int line = 0;      ///< 1-based; 0 when the problem has no position (file unreadable)
  std::string path;  ///< dotted field path, `routes[0].limits[1].rate`
  std::string message;

  /// `file:line: path: message` (the line is omitted when 0, the path when empty).
  std::string to_string() const;
};

/// The outcome of loading: a validated snapshot, or every diagnostic found.
struct load_result {
  std::shared_ptr<const rules> value;  ///< null when `diagnostics` is non-empty
  std::vector<diagnostic> diagnostics;
  bool ok() const { return value != nullptr; }
};

/// Parses and validates the YAML text `text`; `file` names it in diagnostics.
/// Every problem is reported (not only the first), sorted by line; the snapshot is returned
/// only when there is none. Never throws: YAML syntax errors become diagnostics too.
/// Thread-safe (no shared state).
load_result load_string(std::string_view text, std::string file);

/// Reads and loads the rules file at `path`. An unreadable file is one diagnostic with
/// line 0, `path: cannot read file: <reason>`. Never throws.
load_result load_file(const std::string& path);

/// Parses a duration: `250ms`, `5s`, `1m`, `1h`, `1d`, `30d` (a positive integer and a unit
/// ms|s|m|h|d). Returns nullopt when malformed, zero, or above 2^53 ms.
std::optional<std::chrono::milliseconds> parse_duration(std::string_view text);

/// Parses a rate `N/DURATION` (`100/1m`, `10/1s`; `N/s` is read as `N/1s`).
/// Returns nullopt when malformed, when N is negative, fractional or above 2^53, or when the
/// period is not a duration; N may be 0 here (validation rejects it with a message).
std::optional<rate> parse_rate(std::string_view text);

}  // namespace sluice::config
