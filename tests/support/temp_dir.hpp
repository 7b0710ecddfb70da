// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// Test helper: a fresh private directory under the system's temporary directory, removed
/// with everything in it when the object goes. Header-only.

#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <string>
#include <system_error>

namespace sluice::test {

/// A fresh private directory `path` (named `sluice-<tag>-<pid>-<n>`), removed at the end.
struct temp_dir {
  explicit temp_dir(const std::string& tag = "test") {
    static std::atomic<int> n{0};
    path = std::filesystem::temp_directory_path() /
           ("sluice-" + tag + "-" + std::to_string(::getpid()) + "-" + std::to_string(n++));
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~temp_dir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  temp_dir(const temp_dir&) = delete;
  temp_dir& operator=(const temp_dir&) = delete;

  std::filesystem::path path;
};

}  // namespace sluice::test
