// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// Loading and validating a rules file with yaml-cpp.

#include "sluice/config/rules.hpp"

#include <chrono>
#include <cstddef>
#include <cstdint>
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

/// Largest rules file load_file() reads: the file is read whole and parsed into a node tree,
/// so a device (`/dev/zero`), a pipe or a runaway file is refused rather than read forever.
inline constexpr std::size_t max_rules_file_bytes = 16 * 1024 * 1024;

/// Reads and loads the rules file at `path`. An unreadable file is one diagnostic with
/// line 0, `path: cannot read file: <reason>`; so is anything but a regular file (symbolic
/// links to one are followed) and a file above max_rules_file_bytes. Never throws.
load_result load_file(const std::string& path);

/// Most workers `workers:` (and `--workers`) may ask for.
inline constexpr unsigned max_workers = 1024;

/// A listening address as `listen:` and `admin:` take it.
struct listen_address {
  std::string host;        ///< an IP literal, without brackets
  std::uint16_t port = 0;  ///< 0 = a free port chosen at bind time
  /// `host:port`, or `[host]:port` for an IPv6 host.
  std::string to_string() const;
};

/// Parses a listening address exactly as the rules file's `listen:` and `admin:` do (for the
/// command line's overrides): `host:port` or `[v6]:port`, the host an IP literal (names are
/// not resolved), the port 0..65535. On refusal returns nullopt and sets `error` to the
/// message the rules file would get, e.g. `invalid address '127.0.0.1:99999': port 99999 is
/// out of range 0..65535 (expected host:port, ...)`. Thread-safe.
std::optional<listen_address> parse_listen_address(std::string_view text, std::string& error);

/// Parses a worker count exactly as `workers:` does: digits, 0..max_workers (0 = one per
/// core). On refusal returns nullopt and sets `error` to the rules file's message, e.g.
/// `workers must not be negative, got -1`. Thread-safe.
std::optional<unsigned> parse_workers(std::string_view text, std::string& error);

/// Parses a duration: `250ms`, `5s`, `1m`, `1h`, `1d`, `30d` (a positive integer and a unit
/// ms|s|m|h|d). Returns nullopt when malformed, zero, or above 2^53 ms.
std::optional<std::chrono::milliseconds> parse_duration(std::string_view text);

/// Parses a rate `N/DURATION` (`100/1m`, `10/1s`; `N/s` is read as `N/1s`).
/// Returns nullopt when malformed, when N is negative, fractional or above 2^53, or when the
/// period is not a duration; N may be 0 here (validation rejects it with a message).
std::optional<rate> parse_rate(std::string_view text);

}  // namespace sluice::config
