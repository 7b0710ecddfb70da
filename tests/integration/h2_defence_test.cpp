// SPDX-License-Identifier: Apache-2.0
// sluice-test-support: upstream_server redis_server
// HTTP/2's known attacks and bad input (issue 26, item 4 and "Bad input"), with frames crafted
// by tests/integration/h2_attacks.py (python3-h2's hpack and hyperframe) against the real
// `sluice` binary on an h2c listener. Each attack (a CONTINUATION flood, a 1 MB HPACK header
// list, 10,000 streams on one connection with the gateway's SETTINGS acknowledged or not, a
// SETTINGS flood, a PING flood, a SETTINGS frame of 33 entries, rapid reset) ends the
// attacker's connection with the RFC 9113 GOAWAY code docs/operating.md gives, the gateway's
// resident memory grows by less than 64 MB, and clients that come after it (curl over h2c and
// over HTTP/1.1) are answered 200; a header list over the limit but not a bomb is 431 and the
// connection goes on. An illegal request field (uppercase name, connection-specific field,
// `te` other than trailers, a pseudo-header after a regular one, a missing or repeated one)
// resets its stream with PROTOCOL_ERROR, the connection goes on serving,
// and the upstream never sees the request; a PING or SETTINGS frame of a bad length is
// GOAWAY FRAME_SIZE_ERROR. A gRPC request over the route's max_request_body is HTTP 200,
// trailers-only, grpc-status 8, before the upstream sees it: declared (answered at once, the
// body never sent) or not (for an HTTP/2 upstream, the body is read whole first). Skipped
// when python3-h2, python3-grpcio or curl is missing (scripts/setup installs them).

#include "support/child_process.hpp"
#include "support/grpc_echo.hpp"
#include "support/temp_dir.hpp"
#include "support/upstream_server.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <optional>
#include <regex>
#include <string>
#include <vector>

namespace sluice::test {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

const std::string python = "/usr/bin/python3";
const std::string curl_path = "/usr/bin/curl";
const std::string attacks = std::string(SLUICE_SOURCE_DIR) + "/tests/integration/h2_attacks.py";

bool have_h2() {
  if (!fs::exists(python) || !fs::exists(curl_path)) return false;
  temp_dir dir{"h2-check"};
  child_process p({python, "-c", "import h2, hpack, hyperframe"}, dir.path / "o", dir.path / "e");
  return p.wait_exit(30s) == 0;
}

/// A program's exit status and output.
struct ran {
  int status = -1;
  std::string out, err;
};

ran run(const std::vector<std::string>& argv, const fs::path& dir) {
  static std::atomic<int> n{0};
  const auto t = "run-" + std::to_string(n++);
  child_process p(argv, dir / (t + ".out"), dir / (t + ".err"));
  ran r;
  r.status = p.wait_exit(60s).value_or(-1);
  r.out = p.out();
  r.err = p.err();
  if (!r.out.empty() && r.out.back() == '\n') r.out.pop_back();
  return r;
}

/// The resident memory of process `pid` in bytes (VmRSS of /proc/<pid>/status); 0 if unread.
std::uint64_t rss_bytes(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoull(line.substr(6)) * 1024;
  }
  return 0;
}

/// The real gateway (one worker) with an h2c listener: /open and /bad to an HTTP/1.1 upstream,
/// /grpc-h1/ to it with a 64-byte body limit, and, with an echo service, /echo.Echo/ to it
/// over HTTP/2 with the same limit.
struct gateway {
  explicit gateway(const std::string& echo_url = {}) {
    std::string rules =
        "store: {type: memory}\n"
        "http2: true\n"
        "upstreams:\n"
        "  api: {url: \"" +
        upstream.url() + "\"}\n";
    if (!echo_url.empty()) rules += "  echo: {url: \"" + echo_url + "\", http2: true}\n";
    rules +=
        "routes:\n"
        "  - {name: open, match: {path_prefix: /open}, upstream: api}\n"
        "  - {name: bad, match: {path_prefix: /bad}, upstream: api}\n"
        "  - {name: grpc-h1, match: {path_prefix: /grpc-h1/}, upstream: api, "
        "max_request_body: 64}\n";
    if (!echo_url.empty()) {
      rules +=
          "  - {name: echo, match: {path_prefix: /echo.Echo/}, upstream: echo, "
          "max_request_body: 64}\n";
    }
    std::ofstream(dir.path / "rules.yaml") << rules;
    proc.emplace(dir.path / "rules.yaml", dir.path, 1);
    if (!proc->wait_listening()) throw std::runtime_error("sluice did not start: " + proc->log());
  }
  std::string url(const std::string& path) const {
    return "http://127.0.0.1:" + std::to_string(proc->port) + path;
  }
  /// Runs h2_attacks.py in `mode` against the listener: the line it printed.
  std::string attack(const std::string& mode, const std::string& path = {}) {
    std::vector<std::string> argv = {python, attacks, std::to_string(proc->port), mode};
    if (!path.empty()) argv.push_back(path);
    const auto r = run(argv, dir.path);
    EXPECT_EQ(r.status, 0) << r.err;
    return r.out;
  }
  /// The status curl got for GET `path`, over h2c with prior knowledge or HTTP/1.1.
  std::string get(const std::string& path, bool h2) {
    std::vector<std::string> argv = {
        curl_path, "-sS",       "--max-time", "20",
        "-o",      "/dev/null", "-w",         "%{http_code} %{http_version}"};
    argv.push_back(h2 ? "--http2-prior-knowledge" : "--http1.1");
    argv.push_back(url(path));
    return run(argv, dir.path).out;
  }
  /// Requests the upstream saw for `path`.
  std::size_t upstream_saw(const std::string& path) const {
    std::size_t n = 0;
    for (const auto& r : upstream.requests()) n += r.target == path ? 1 : 0;
    return n;
  }
  temp_dir dir{"h2-defence"};
  upstream_server upstream;
  std::optional<sluice_process> proc;
};

/// Runs `mode`: what the attacker saw must match `expected` (a regex over the script's line);
/// the gateway's memory grows by less than 64 MB; clients after it are served.
void expect_attack(const std::string& mode, const std::string& expected) {
  gateway gw;
  ASSERT_EQ(gw.get("/open/before", true), "200 2");
  const auto before = rss_bytes(gw.proc->pid());
  ASSERT_GT(before, 0u);
  const auto got = gw.attack(mode);
  EXPECT_TRUE(std::regex_match(got, std::regex(expected))) << mode << ": " << got;
  const auto after = rss_bytes(gw.proc->pid());
  EXPECT_LT(after, before + 64ull * 1024 * 1024) << mode << ": " << before << " -> " << after;
  EXPECT_EQ(gw.get("/open/after", true), "200 2") << mode;
  EXPECT_EQ(gw.get("/open/after", false), "200 1.1") << mode;
  EXPECT_TRUE(gw.proc->running()) << gw.proc->log();
}

#define SKIP_WITHOUT_H2() \
  if (!have_h2()) GTEST_SKIP() << "python3-h2 or curl is missing (scripts/setup installs them)"

TEST(h2_defence, continuation_flood_is_enhance_your_calm) {
  SKIP_WITHOUT_H2();
  expect_attack("continuation-flood", "goaway 11");
}

TEST(h2_defence, a_1mb_header_list_is_enhance_your_calm) {
  SKIP_WITHOUT_H2();
  expect_attack("header-list", "goaway 11");
}

TEST(h2_defence, a_header_list_over_the_limit_is_431_and_the_connection_goes_on) {
  SKIP_WITHOUT_H2();
  gateway gw;
  // ~44 KB decoded, over client.max_header_size (32 KiB) but under 4 times it.
  EXPECT_EQ(gw.attack("header-list-over"), "status 431 then 200");
  EXPECT_EQ(gw.upstream_saw("/open/x"), 0u);
}

TEST(h2_defence, streams_past_the_acknowledged_cap_are_protocol_error) {
  SKIP_WITHOUT_H2();
  expect_attack("streams-acked", "goaway 1");
}

TEST(h2_defence, streams_past_an_unacknowledged_cap_are_refused_then_enhance_your_calm) {
  SKIP_WITHOUT_H2();
  // The first 150 at once: the 50 past the cap are REFUSED_STREAM (RFC 9113 §5.1.2) while the
  // cap is not acknowledged; more than 100 streams ended at once within a second: GOAWAY.
  expect_attack("streams-unacked", "rst 7 refused 50 goaway 11");
}

TEST(h2_defence, settings_flood_is_enhance_your_calm) {
  SKIP_WITHOUT_H2();
  expect_attack("settings-flood", "goaway 11");
}

TEST(h2_defence, ping_flood_is_enhance_your_calm) {
  SKIP_WITHOUT_H2();
  expect_attack("ping-flood", "goaway 11");
}

TEST(h2_defence, a_settings_frame_of_33_entries_is_enhance_your_calm) {
  SKIP_WITHOUT_H2();
  expect_attack("settings-entries", "goaway 11");
}

TEST(h2_defence, rapid_reset_is_enhance_your_calm) {
  SKIP_WITHOUT_H2();
  expect_attack("rapid-reset", "goaway 11");
}

TEST(h2_defence, an_illegal_field_resets_its_stream_and_never_reaches_the_upstream) {
  SKIP_WITHOUT_H2();
  gateway gw;
  // RFC 9113 §8.2: malformed requests are stream errors of type PROTOCOL_ERROR (1); the
  // connection then serves the next request (stream 3) normally.
  for (const char* name : {"uppercase", "connection", "keep-alive", "transfer-encoding", "upgrade",
                           "te", "pseudo-after", "no-path", "two-methods"}) {
    EXPECT_EQ(gw.attack(std::string("bad-") + name), "rst 1 status 200") << name;
  }
  EXPECT_EQ(gw.upstream_saw("/bad/x"), 0u);
  // `te: trailers` is the one allowed value: the control.
  EXPECT_EQ(gw.attack("bad-te-trailers"), "status 200");
  EXPECT_EQ(gw.upstream_saw("/bad/x"), 1u);
  EXPECT_EQ(gw.upstream_saw("/open/after"), 10u);
  EXPECT_TRUE(gw.proc->running()) << gw.proc->log();
}

TEST(h2_defence, a_frame_of_a_bad_length_is_frame_size_error) {
  SKIP_WITHOUT_H2();
  gateway gw;
  EXPECT_EQ(gw.attack("bad-ping-length"), "goaway 6");      // RFC 9113 §6.7
  EXPECT_EQ(gw.attack("bad-settings-length"), "goaway 6");  // RFC 9113 §6.5
  EXPECT_EQ(gw.get("/open/after", true), "200 2");
  EXPECT_TRUE(gw.proc->running()) << gw.proc->log();
}

TEST(h2_defence, a_grpc_body_over_the_limit_is_resource_exhausted_before_the_upstream) {
  SKIP_WITHOUT_H2();
  if (!have_grpcio()) GTEST_SKIP() << "python3-grpcio is missing (scripts/setup installs it)";
  echo_service echo;
  gateway gw(echo.url());
  // An HTTP/2 upstream: a declared length over the limit is answered at once (the body is
  // never sent); without one, the body is read up to the limit first.
  EXPECT_EQ(gw.attack("grpc-declared"), "status 200 grpc-status 8 trailers-only");
  EXPECT_EQ(gw.attack("grpc-undeclared"), "status 200 grpc-status 8 trailers-only");
  EXPECT_EQ(echo.calls(), 0u) << echo.proc->out();
  // An HTTP/1.1 upstream (the streaming relay): a declared length over the limit is refused
  // before a byte goes upstream.
  EXPECT_EQ(gw.attack("grpc-declared", "/grpc-h1/x"), "status 200 grpc-status 8 trailers-only");
  EXPECT_EQ(gw.upstream_saw("/grpc-h1/x"), 0u);
}

}  // namespace
}  // namespace sluice::test
