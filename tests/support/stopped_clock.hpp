// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// Test helper: a stopped wall clock for a redis-server, moved by the test alone.
///
/// Runs the server under the test clock preload (tests/preload/clock_step.cpp, its
/// SLUICE_CLOCK_NOW_FILE mode): Redis's TIME, the scripts' store clock and its key expiry all
/// read the time this object holds, which moves only by set() and advance(). A scenario then
/// has one clock — the test's — however slowly the machine runs it: no key expires while the
/// test is slow, and a Retry-After is exact. (The server's monotonic clock, which its event
/// loop and timeouts run on, is left alone.) Header-only.
///
///   test::stopped_clock clock(SLUICE_CLOCK_STEP_PRELOAD, 1'700'000'000'000);
///   test::redis_server redis({}, clock.env());
///   clock.advance(std::chrono::milliseconds(500));

#include "support/temp_dir.hpp"

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace sluice::test {

/// A stopped clock at `start_ms` (ms since the epoch), read by processes started with env().
class stopped_clock {
 public:
  /// `preload`: the path of the clock preload library (SLUICE_CLOCK_STEP_PRELOAD).
  stopped_clock(std::string preload, std::int64_t start_ms)
      : preload_(std::move(preload)), file_(dir_.path / "now") {
    set(start_ms);
  }

  /// The environment entries that put a process on this clock (redis_server's `env`).
  std::vector<std::string> env() const {
    return {"LD_PRELOAD=" + preload_, "SLUICE_CLOCK_NOW_FILE=" + file_.string()};
  }

  /// Sets the clock to `ms` (ms since the epoch). The file is replaced whole (written beside
  /// it, then renamed), so a reader sees the old time or the new one, never a torn one.
  void set(std::int64_t ms) {
    const auto next = dir_.path / "now.next";
    std::ofstream(next, std::ios::trunc) << ms << "\n";
    std::filesystem::rename(next, file_);
    now_ms_ = ms;
  }
  /// Moves the clock on by `d`.
  void advance(std::chrono::milliseconds d) { set(now_ms_ + d.count()); }
  /// The time it shows, ms since the epoch.
  std::int64_t now_ms() const { return now_ms_; }

 private:
  temp_dir dir_{"stopped-clock"};
  std::string preload_;
  std::filesystem::path file_;
  std::int64_t now_ms_ = 0;
};

}  // namespace sluice::test
