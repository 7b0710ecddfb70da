// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// `api_keys_file:` a plan directory of API keys kept in a file of its own, for deployments
/// with hundreds of thousands of keys that change more often than the rules. Reloaded by
/// itself (poll()) without touching the rules snapshot.
///
/// Format: one `KEY PLAN` per line, separated by spaces or tabs; blank lines and lines whose
/// first non-blank byte is `#` are ignored. A key is any run of non-blank bytes (no escaping:
/// keys are compared byte for byte).

#include "sluice/config/loader.hpp"
#include "sluice/string_hash.hpp"

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace sluice::config {

/// A hot-reloadable file of API key → plan name.
///
/// Thread-safety: find(), size() and stats() are safe from any thread concurrently with one
/// thread calling poll() or reload() (the map is swapped through an atomic shared_ptr; a
/// lookup sees the old or the new map whole, never a mix).
class api_key_file {
 public:
  /// Most diagnostics one load reports (a wrong file can have a million bad lines).
  static constexpr std::size_t max_diagnostics = 20;

  /// Largest key file read (about two million keys of 40 bytes): the file is read whole, so
  /// a larger one, or anything but a regular file (`/dev/zero`, a pipe), is refused with
  /// `cannot read file: ...`. Deployments with more keys use the Redis directory.
  static constexpr std::size_t max_file_bytes = 128 * 1024 * 1024;

  /// Loads `path`; every plan a line names must be one of `plan_names`. Returns the file
  /// object, or null with the diagnostics (`path:line: api_keys_file: message`; line 0 when
  /// the file cannot be read, is not a regular file or is above max_file_bytes). Never throws.
  static std::pair<std::shared_ptr<api_key_file>, std::vector<diagnostic>> load(
      std::string path, std::vector<std::string> plan_names);

  /// The plan of `key`, or nullopt when the file does not list it. O(1) expected.
  std::optional<std::string> find(std::string_view key) const;

  /// Re-reads the file if its modification time, size or inode changed since the last
  /// (attempted) load. Returns the diagnostics of a refused reload — the last good map stays —
  /// or nothing when unchanged or swapped in. Call from one thread at a time.
  std::vector<diagnostic> poll();

  /// Re-reads the file unconditionally (SIGHUP, admin reload). Same result as poll().
  std::vector<diagnostic> reload();

  /// The path as configured (resolved against the rules file's directory).
  const std::string& path() const { return path_; }

  /// Number of keys in the current map.
  std::size_t size() const;

  /// Counters: maps swapped in after the first load, and refused reloads.
  struct counters {
    std::uint64_t reloads = 0;
    std::uint64_t failures = 0;
  };
  counters stats() const { return {reloads_.load(), failures_.load()}; }

  /// Use load().
  api_key_file(std::string path, std::vector<std::string> plan_names);

 private:
  using key_map = std::unordered_map<std::string, std::string, string_hash, std::equal_to<>>;

  struct file_id {
    std::int64_t mtime_ns = -1, size = -1;
    std::uint64_t inode = 0;
    bool operator==(const file_id&) const = default;
  };

  std::vector<diagnostic> read(std::shared_ptr<const key_map>& out);

  std::string path_;
  std::vector<std::string> plan_names_;
  std::atomic<std::shared_ptr<const key_map>> map_;
  file_id seen_;
  std::atomic<std::uint64_t> reloads_{0}, failures_{0};
};

}  // namespace sluice::config
