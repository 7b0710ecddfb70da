// SPDX-License-Identifier: Apache-2.0
// The command line: --version, --check-config, --config refusing a bad file, and the
// --listen / --admin / --workers overrides.
// sluice-test-support: gateway_fixture

#include "sluice/version.hpp"

#include <gtest/gtest.h>

#include <sys/wait.h>
#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

namespace {

struct run_result {
  int exit_code = -1;
  std::string output;  // stdout and stderr
};

/// Runs `sluice ARGS` (or, with `prefix_binary` false, the command line ARGS as written).
run_result run(const std::string& args, bool prefix_binary = true) {
  run_result r;
  const std::string cmd =
      (prefix_binary ? std::string(SLUICE_BINARY) + " " : std::string()) + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return r;
  std::array<char, 4096> buf{};
  while (auto n = fread(buf.data(), 1, buf.size(), p)) r.output.append(buf.data(), n);
  const int status = pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

std::string write_temp(const std::string& name, const std::string& text) {
  auto dir = std::filesystem::temp_directory_path() / ("sluice-cli-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  auto path = dir / name;
  std::ofstream(path) << text;
  return path.string();
}

TEST(cli, version) {
  auto r = run("--version");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.output, "sluice " + std::string(sluice::version) + "\nrevision " +
                          std::string(sluice::revision) + "\n");
}

// The version names the commit it was built from (cmake/SluiceVersion.cmake): a build of a
// git tree is "<base>" on a tag, else "<base>+<commits>.g<first 12 hex digits of revision>"
// ("~" before the first tag).
TEST(cli, version_names_the_revision) {
  const std::string v(sluice::version), rev(sluice::revision);
  if (rev == "unknown") GTEST_SKIP() << "built outside a git tree: " << v;
  ASSERT_EQ(rev.size(), 40u) << rev;
  const auto plus = v.find_first_of("+~");  // after a tag, or before the first one
  if (plus == std::string::npos) return;    // a tagged commit: the tag is the name
  EXPECT_EQ(v.substr(v.size() - 13), "g" + rev.substr(0, 12)) << v;
  const auto dot = v.find(".g", plus);
  ASSERT_NE(dot, std::string::npos) << v;
  EXPECT_GT(std::stoll(v.substr(plus + 1, dot - plus - 1)), 0) << v;
}

TEST(cli, check_config_accepts_the_default_rules) {
  auto r = run("--check-config " SLUICE_SOURCE_DIR "/config/sluice.yaml");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find(": OK: 3 routes"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("; store: redis 127.0.0.1:6379, buckets in 65536 hashes per limit\n"),
            std::string::npos)
      << r.output;
}

// Case c04/c05: a cost that no burst can admit is a config error with file:line: path.
TEST(cli, check_config_and_config_refuse_a_bad_file) {
  const std::string bad = write_temp("rules.yaml", R"(store: {type: memory}
identity: {api_key: {header: X-API-Key}}
plans: {free: {limits: []}, pro: {limits: []}}
api_keys: {key-a: free, key-p: pro}
upstreams: {api: {url: "http://127.0.0.1:8081"}}
routes:
  - name: export
    match: {path_prefix: /v1/export}
    upstream: api
    limits:
      - name: export_key
        by: api_key
        rate: 2/1m
        burst: 2
        plans: {pro: {rate: 5/1m, burst: 5}, free: {rate: 0/1m, burst: 0}}
)");
  auto check = run("--check-config " + bad);
  EXPECT_NE(check.exit_code, 0);
  EXPECT_NE(
      check.output.find(
          bad +
          ":15: routes[0].limits[0].plans.free.burst: cost 1 can never be admitted by burst 0"),
      std::string::npos)
      << check.output;
  auto start = run("--config " + bad + " --listen 127.0.0.1:0");
  EXPECT_NE(start.exit_code, 0);
  EXPECT_EQ(start.output.find("listening"), std::string::npos) << start.output;
}

// A valid rules file that needs nothing else running (memory store).
std::string memory_rules() {
  return write_temp("memory.yaml", R"(listen: 127.0.0.1:0
store: {type: memory}
upstreams: {api: {url: "http://127.0.0.1:1"}}
routes:
  - {name: all, match: {path_prefix: /}, upstream: api}
)");
}

// --listen, --admin and --workers are checked as the file's listen:, admin: and workers: are
// (same parser, same messages, naming the option), and nothing starts. `timeout` bounds the
// run in case a bad value were accepted and the gateway started.
TEST(cli, overrides_are_validated_before_anything_starts) {
  const std::string rules = memory_rules();
  const std::string expected = " (expected host:port, such as 0.0.0.0:8080 or \"[::1]:8080\")\n";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--listen 127.0.0.1:99999",
       "sluice: --listen: invalid address '127.0.0.1:99999': port 99999 is out of range 0..65535" +
           expected},
      {"--listen 127.0.0.1:-1",
       "sluice: --listen: invalid address '127.0.0.1:-1': the port '-1' is not a number" +
           expected},
      {"--admin 127.0.0.1:70000",
       "sluice: --admin: invalid address '127.0.0.1:70000': port 70000 is out of range 0..65535" +
           expected},
      {"--listen 127.0.0.1:abc",
       "sluice: --listen: invalid address '127.0.0.1:abc': the port 'abc' is not a number" +
           expected},
      {"--listen localhost:8093",
       "sluice: --listen: invalid address 'localhost:8093': a listening address must be an IP "
       "address, such as 127.0.0.1:8080 or \"[::1]:8080\" (host names are not resolved)\n"},
      {"--workers -1", "sluice: --workers: workers must not be negative, got -1\n"},
      {"--workers 4294967295", "sluice: --workers: workers must be at most 1024, got 4294967295\n"},
      {"--workers 1e3", "sluice: --workers: expected an integer written in digits, got 1e3\n"},
      {"--listen 127.0.0.1:99999 --workers 2000",
       "sluice: --listen: invalid address '127.0.0.1:99999': port 99999 is out of range 0..65535" +
           expected + "sluice: --workers: workers must be at most 1024, got 2000\n"},
  };
  for (const auto& [args, message] : cases) {
    auto r =
        run("timeout 10 " + std::string(SLUICE_BINARY) + " --config " + rules + " " + args, false);
    EXPECT_EQ(r.exit_code, 2) << args << "\n" << r.output;
    EXPECT_EQ(r.output, message) << args;
    auto check = run("--check-config " + rules + " " + args);
    EXPECT_EQ(check.exit_code, 2) << args << "\n" << check.output;
    EXPECT_EQ(check.output, message) << args;
  }
}

// Valid overrides reach the gateway: it listens where --listen says (IPv6 written in brackets
// is handed over as such) and stops on SIGINT.
TEST(cli, valid_overrides_start_the_gateway) {
  const std::string rules = memory_rules();
  auto r = run("timeout -s INT --preserve-status 3 " + std::string(SLUICE_BINARY) + " --config " +
                   rules + " --listen 127.0.0.1:0 --admin 127.0.0.1:0 --workers 0",
               false);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("listening on 127.0.0.1:"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("admin listening on 127.0.0.1:"), std::string::npos) << r.output;
}

// A rules file is read whole: a device or a pipe is refused at once, not read forever.
TEST(cli, check_config_refuses_what_is_not_a_regular_file) {
  auto r = run("timeout 10 " + std::string(SLUICE_BINARY) + " --check-config /dev/zero", false);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_EQ(r.output,
            "/dev/zero: cannot read file: not a regular file (a character device)\n"
            "/dev/zero: 1 error(s)\n");
  auto start = run("timeout 10 " + std::string(SLUICE_BINARY) + " --config /dev/zero", false);
  EXPECT_EQ(start.exit_code, 1) << start.output;
  EXPECT_NE(start.output.find("/dev/zero: cannot read file: not a regular file (a character "
                              "device)\n/dev/zero: not started: 1 error(s)\n"),
            std::string::npos)
      << start.output;
}

TEST(cli, unreadable_file) {
  auto r = run("--check-config /nonexistent/rules.yaml");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("/nonexistent/rules.yaml"), std::string::npos) << r.output;
}

}  // namespace
