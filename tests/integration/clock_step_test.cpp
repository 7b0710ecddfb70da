// SPDX-License-Identifier: Apache-2.0
// sluice-test-support: upstream_server http_client
// A step of the host's wall clock changes no decision of the memory store (issue 10, item 5):
// the real `sluice` binary runs under libfaketime (Debian's `faketime` package, preloaded with
// FAKETIME_TIMESTAMP_FILE so the test moves the wall clock while the process runs, and
// FAKETIME_DONT_FAKE_MONOTONIC=1 so only CLOCK_REALTIME moves, as settimeofday or an NTP step
// would: libfaketime's README, "Changing the 'x' modifier during run-time" and the Java
// example). A bucket drained to 5 tokens still holds 5 after a +1 h step (a store on the wall
// clock refills it to full) and is neither emptied nor blocked after a -1 h step.
//
// The step is proved to have reached the process: each step is followed by a SIGHUP reload,
// and /metrics' sluice_config_last_reload_success_timestamp_seconds (system_clock) moves by
// the step.

#include "support/child_process.hpp"
#include "support/http_client.hpp"
#include "support/temp_dir.hpp"
#include "support/upstream_server.hpp"

#include <gtest/gtest.h>

#include <signal.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <system_error>
#include <thread>

namespace sluice::test {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

/// libfaketime's multi-threaded preload library (/usr/lib/<multiarch>/faketime/), or "".
std::string libfaketime() {
  std::error_code ec;
  for (const auto& dir : fs::directory_iterator("/usr/lib", ec)) {
    const fs::path lib = dir.path() / "faketime" / "libfaketimeMT.so.1";
    if (fs::exists(lib, ec)) return lib.string();
  }
  return "";
}

/// The value of `sluice_config_last_reload_success_timestamp_seconds` on /metrics, or -1.
double reload_timestamp(std::uint16_t admin_port) {
  const auto body = get(admin_port, "/metrics").body;
  static const std::regex line(
      R"re(\nsluice_config_last_reload_success_timestamp_seconds (\S+))re");
  std::smatch m;
  return std::regex_search(body, m, line) ? std::stod(m[1]) : -1;
}

struct faked_world {
  temp_dir dir{"clock-step"};
  fs::path rules = dir.path / "rules.yaml";
  fs::path faketime = dir.path / "faketime.rc";
  upstream_server upstream;
  std::unique_ptr<sluice_process> gateway;
  int generation = 1;

  explicit faked_world(const std::string& lib) {
    step("+0");
    write_rules();
    gateway = std::make_unique<sluice_process>(
        rules, dir.path, 2,
        std::vector<std::string>{"/usr/bin/env", "LD_PRELOAD=" + lib,
                                 "FAKETIME_TIMESTAMP_FILE=" + faketime.string(),
                                 "FAKETIME_NO_CACHE=1", "FAKETIME_DONT_FAKE_MONOTONIC=1"});
  }

  void write_rules() {
    std::ofstream(rules) << "# generation " << generation
                         << "\nstore: {type: memory}\n"
                            "upstreams: {api: {url: \""
                         << upstream.url()
                         << "\"}}\n"
                            "routes:\n"
                            "  - name: all\n"
                            "    match: {path_prefix: /}\n"
                            "    upstream: api\n"
                            "    limits: [{name: hourly, by: global, rate: 10/1h, burst: 10}]\n";
  }

  /// Sets the process's wall clock offset (libfaketime's relative format: "+1h", "-1h").
  void step(const std::string& offset) { std::ofstream(faketime) << offset << "\n"; }

  /// Reloads (SIGHUP, a changed file) and waits for the new generation's timestamp.
  double reload() {
    ++generation;
    write_rules();
    const double before = reload_timestamp(gateway->admin_port);
    gateway->signal(SIGHUP);
    double t = before;
    (void)eventually([&] { return (t = reload_timestamp(gateway->admin_port)) != before; }, 2s);
    return t;
  }

  /// One request: its status and X-RateLimit-Remaining.
  std::pair<unsigned, std::string> hit() {
    auto r = get(gateway->port, "/x");
    return {r.status, r.header("X-RateLimit-Remaining")};
  }
};

TEST(clock_step, a_wall_clock_step_changes_no_memory_store_decision) {
  const std::string lib = libfaketime();
  ASSERT_FALSE(lib.empty()) << "libfaketime not found under /usr/lib/*/faketime/: scripts/setup "
                               "installs Debian's faketime package";
  faked_world w(lib);
  ASSERT_TRUE(w.gateway->wait_listening()) << w.gateway->log();

  // Drain the bucket to 5 tokens (10/1h: one token every 6 minutes, none refills meanwhile).
  for (int i = 0; i < 5; ++i) {
    auto [status, remaining] = w.hit();
    EXPECT_EQ(status, 200u);
    EXPECT_EQ(remaining, std::to_string(9 - i));
  }
  const double t0 = w.reload();

  // +1 h: the process's wall clock moved (the reload's timestamp says so), the bucket did not
  // refill: 5 tokens, one spent.
  w.step("+1h");
  const double t1 = w.reload();
  EXPECT_NEAR(t1 - t0, 3600.0, 30.0) << "the wall clock step did not reach the gateway";
  {
    auto [status, remaining] = w.hit();
    EXPECT_EQ(status, 200u);
    EXPECT_EQ(remaining, "4") << "a +1h step refilled the bucket";
  }

  // -1 h from the start (2 h back): neither emptied nor blocked.
  w.step("-1h");
  const double t2 = w.reload();
  EXPECT_NEAR(t2 - t0, -3600.0, 30.0) << "the wall clock step did not reach the gateway";
  for (int left = 3; left >= 0; --left) {
    auto [status, remaining] = w.hit();
    EXPECT_EQ(status, 200u) << "a -1h step blocked the bucket";
    EXPECT_EQ(remaining, std::to_string(left));
  }
  // Now empty, as 10 requests leave it, and the wait is one token's 6 minutes, not hours.
  auto r = get(w.gateway->port, "/x");
  EXPECT_EQ(r.status, 429u);
  const int retry_after =
      std::stoi(r.header("Retry-After").empty() ? "0" : r.header("Retry-After"));
  EXPECT_GT(retry_after, 350);
  EXPECT_LE(retry_after, 360);

  w.gateway->signal(SIGTERM);
  EXPECT_EQ(w.gateway->wait_exit(5s), std::optional<int>(0)) << w.gateway->log();
}

}  // namespace
}  // namespace sluice::test
