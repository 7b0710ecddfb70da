// SPDX-License-Identifier: Apache-2.0
// sluice-test-serial
// sluice-test-support: runtime_fixture http_client redis_server test_ca
// HTTP/2 bodies, 100-continue, drain and reload (issue 26, item 1), through real sockets: the
// real `sluice` binary (or the runtime in-process), a python HTTP/1.1 upstream and python3-h2
// clients (tests/support/h2_flow.py).
// - A slow reader (32 KiB stream window, each DATA frame acknowledged after a pause) of a
//   32 MiB response the upstream streams as fast as it can gets every byte, and the gateway's
//   peak resident memory (VmHWM in /proc/<pid>/status) grows by far less than the body: the
//   client's flow control holds the upstream back.
// - A 24 MiB upload to an upstream that reads slowly arrives whole, with the same bound: the
//   stream's window reopens only as the upstream takes the bytes.
// - `expect: 100-continue` (RFC 9110 §10.1.1 over RFC 9113 §8.1): an admitted request gets 100
//   and its body reaches the upstream; a 429 or a 413 is answered before any body byte is sent,
//   and the stream is then reset with NO_ERROR so the client stops.
// - SIGTERM with a stream in flight: GOAWAY (NO_ERROR, last stream 1), the stream's answer
//   still comes, a stream opened after it is not processed (never reaches the upstream), the
//   connection closes and the process exits 0.
// - A reload while an HTTP/2 connection is open applies to the next stream on it.
// - An HTTP/2 upstream over TLS (ALPN h2, the upstream's ca_file): a python3-grpcio service
//   with a certificate from a test CA gets unary and client-streaming calls through the
//   gateway, their trailing metadata back; request trailers reach an HTTP/2 upstream (nghttpd's
//   log of the frames it received).
// Memory figures are peaks, not timings; runs alone (it measures the process).
// Skipped when python3-h2 is missing (scripts/setup installs it).

#include "support/child_process.hpp"
#include "support/eventually.hpp"
#include "support/http_client.hpp"
#include "support/redis_server.hpp"
#include "support/runtime_fixture.hpp"
#include "support/temp_dir.hpp"
#include "support/test_ca.hpp"

#include <gtest/gtest.h>
#include <boost/json.hpp>

#include <signal.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>

namespace sluice::test {
namespace {

namespace fs = std::filesystem;
namespace json = boost::json;
using namespace std::chrono_literals;

const std::string python = "/usr/bin/python3";
const std::string script = std::string(SLUICE_SOURCE_DIR) + "/tests/support/h2_flow.py";

bool have_h2() {
  if (!fs::exists(python)) return false;
  temp_dir dir{"h2-check"};
  child_process p({python, "-c", "import h2, hyperframe, hpack"}, dir.path / "o", dir.path / "e");
  return p.wait_exit(30s) == 0;
}

/// Polls `pred` every 10 ms for at most `limit`; whether it became true.
template <typename F>
bool wait_until(F pred, std::chrono::milliseconds limit) {
  return eventually(pred, limit);  // (support/eventually.hpp: scaled, with a short backoff)
}

/// The python upstream (h2_flow.py upstream); its output lists the requests it saw.
struct flow_upstream {
  flow_upstream() {
    proc = std::make_unique<child_process>(std::vector<std::string>{python, script, "upstream"},
                                           dir.path / "up.out", dir.path / "up.err");
    if (!wait_until([&] { return proc->out().find("ready ") != std::string::npos; }, 30s))
      throw std::runtime_error("the upstream did not start: " + proc->err());
    const auto out = proc->out();
    port = static_cast<std::uint16_t>(std::stoul(out.substr(out.find("ready ") + 6)));
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port); }
  /// Whether the upstream has seen a request whose `METHOD PATH` starts with `call`.
  bool saw(const std::string& call) const {
    return proc->out().find("call " + call) != std::string::npos;
  }
  temp_dir dir{"h2-flow-up"};
  std::uint16_t port = 0;
  std::unique_ptr<child_process> proc;
};

std::string rules(const std::string& upstream) {
  return "store: {type: memory}\n"
         "http2: true\n"
         "identity: {api_key: {header: X-API-Key}}\n"
         "plans: {free: {limits: []}}\n"
         "api_keys: {k1: free}\n"
         "upstreams: {api: {url: \"" +
         upstream +
         "\"}}\n"
         "routes:\n"
         "  - name: limited\n"
         "    match: {path_prefix: /limited}\n"
         "    upstream: api\n"
         "    limits: [{name: per_key, by: api_key, rate: 1/1m, burst: 1}]\n"
         "  - {name: small, match: {path_prefix: /small}, upstream: api, max_request_body: 1KiB}\n"
         "  - {name: slow, match: {path_prefix: /slow}, upstream: api, max_request_body: 64MiB}\n"
         "  - {name: all, match: {path_prefix: /}, upstream: api}\n";
}

/// The gateway as its own process (its memory is its own), one worker.
struct world {
  std::string start() {
    std::ofstream(file) << rules(upstream.url());
    gateway = std::make_unique<sluice_process>(file, dir.path, 1);
    if (!gateway->wait_listening()) return "sluice did not start:\n" + gateway->log();
    return "";
  }
  /// The gateway's peak resident set (VmHWM), in KiB.
  long peak_kib() const {
    std::ifstream in("/proc/" + std::to_string(gateway->pid()) + "/status");
    std::string line;
    while (std::getline(in, line)) {
      if (line.rfind("VmHWM:", 0) == 0) return std::stol(line.substr(6));
    }
    return -1;
  }
  temp_dir dir{"h2-flow"};
  fs::path file = dir.path / "rules.yaml";
  flow_upstream upstream;
  std::unique_ptr<sluice_process> gateway;
};

/// Runs h2_flow.py with `args`: its output (the test fails when it does not exit 0).
std::string client(std::vector<std::string> args, const fs::path& dir) {
  static int n = 0;
  const auto tag = "client-" + std::to_string(n++);
  args.insert(args.begin(), {python, script});
  child_process p(args, dir / (tag + ".out"), dir / (tag + ".err"));
  const auto rc = p.wait_exit(120s);
  EXPECT_EQ(rc, 0) << p.err();
  return p.out();
}

/// What a small forwarded stream needs, so the peak measured next is the body's alone.
void warm_up(world& w) {
  EXPECT_EQ(client({"upload", std::to_string(w.gateway->port), "/slow/warm", "70000"}, w.dir.path),
            "status 200 body got 70000 intact\n");
  EXPECT_EQ(
      client({"slow-read", std::to_string(w.gateway->port), "/big/200000", "32768"}, w.dir.path),
      "status 200 bytes 200000 intact\n");
}

/// Growth of the gateway's peak memory allowed while a body 2-3 times as large passes.
constexpr long bound_kib = 12 * 1024;

TEST(h2_flow, a_slow_reader_of_a_large_stream_gets_every_byte_with_bounded_gateway_memory) {
  if (!have_h2()) GTEST_SKIP() << "python3-h2 is missing (scripts/setup installs it)";
  world w;
  ASSERT_EQ(w.start(), "");
  warm_up(w);
  const long before = w.peak_kib();
  ASSERT_GT(before, 0);
  const std::uint64_t size = 32ull << 20;
  EXPECT_EQ(client({"slow-read", std::to_string(w.gateway->port), "/big/" + std::to_string(size),
                    "32768"},
                   w.dir.path),
            "status 200 bytes " + std::to_string(size) + " intact\n");
  const long grew = w.peak_kib() - before;
  EXPECT_LT(grew, bound_kib) << "the gateway's peak memory grew by " << grew
                             << " KiB for a 32 MiB body";
  std::cout << "peak memory growth, slow reader of 32 MiB: " << grew << " KiB\n";
}

TEST(h2_flow, an_upload_to_a_slow_upstream_is_streamed_not_buffered) {
  if (!have_h2()) GTEST_SKIP() << "python3-h2 is missing (scripts/setup installs it)";
  world w;
  ASSERT_EQ(w.start(), "");
  warm_up(w);
  const long before = w.peak_kib();
  const std::uint64_t size = 24ull << 20;
  EXPECT_EQ(client({"upload", std::to_string(w.gateway->port), "/slow/up", std::to_string(size)},
                   w.dir.path),
            "status 200 body got " + std::to_string(size) + " intact\n");
  const long grew = w.peak_kib() - before;
  EXPECT_LT(grew, bound_kib) << "the gateway's peak memory grew by " << grew
                             << " KiB for a 24 MiB upload";
  std::cout << "peak memory growth, 24 MiB upload to a slow upstream: " << grew << " KiB\n";
}

json::object continued(world& w, const std::string& path, std::uint64_t n) {
  const auto out = client(
      {"continue", std::to_string(w.gateway->port), path, std::to_string(n), "k1"}, w.dir.path);
  try {
    return json::parse(out).as_object();
  } catch (const std::exception&) {
    ADD_FAILURE() << "client output: " << out;
    return {};
  }
}

TEST(h2_flow, expect_continue_admitted_gets_100_and_a_refusal_reads_no_body) {
  if (!have_h2()) GTEST_SKIP() << "python3-h2 is missing (scripts/setup installs it)";
  world w;
  ASSERT_EQ(w.start(), "");
  const std::uint64_t n = 300000;  // several windows: the body waits for the 100
  // Admitted: 100, then the body, whole at the upstream.
  auto ok = continued(w, "/limited/a", n);
  EXPECT_EQ(ok["interim"], (json::array{100}));
  EXPECT_EQ(ok["status"], 200);
  EXPECT_EQ(ok["sent"], n);
  EXPECT_EQ(ok["body"], "got 300000 intact");
  // Refused by the limit: 429 with no 100 and no body byte sent; the stream reset NO_ERROR.
  auto limited = continued(w, "/limited/b", n);
  EXPECT_EQ(limited["interim"], json::array{});
  EXPECT_EQ(limited["status"], 429);
  EXPECT_EQ(limited["sent"], 0);
  EXPECT_EQ(limited["reset"], 0);  // NO_ERROR
  // Over the route's max_request_body by its content-length: 413, the same way.
  auto large = continued(w, "/small/c", n);
  EXPECT_EQ(large["interim"], json::array{});
  EXPECT_EQ(large["status"], 413);
  EXPECT_EQ(large["sent"], 0);
  EXPECT_EQ(large["reset"], 0);
  // The refused ones never reached the upstream.
  EXPECT_TRUE(w.upstream.saw("POST /limited/a"));
  EXPECT_FALSE(w.upstream.saw("POST /limited/b"));
  EXPECT_FALSE(w.upstream.saw("POST /small/c"));
}

TEST(h2_flow, sigterm_sends_goaway_the_stream_in_flight_finishes_a_new_one_is_not_taken) {
  if (!have_h2()) GTEST_SKIP() << "python3-h2 is missing (scripts/setup installs it)";
  world w;
  ASSERT_EQ(w.start(), "");
  const auto started = w.dir.path / "started";
  child_process drain(
      {python, script, "drain", std::to_string(w.gateway->port), "/hold/800", started.string()},
      w.dir.path / "drain.out", w.dir.path / "drain.err");
  // The stream is in flight once the upstream holds it.
  ASSERT_TRUE(wait_until([&] { return w.upstream.saw("GET /hold/800"); }, 30s)) << drain.err();
  w.gateway->signal(SIGTERM);
  ASSERT_EQ(drain.wait_exit(60s), 0) << drain.err();
  const auto got = json::parse(drain.out()).as_object();
  EXPECT_EQ(got.at("goaway"), 0) << drain.out();       // NO_ERROR
  EXPECT_EQ(got.at("last_stream"), 1) << drain.out();  // stream 3 is above it: not processed
  EXPECT_EQ(got.at("status1"), 200) << drain.out();
  EXPECT_EQ(got.at("body1"), "held") << drain.out();
  EXPECT_EQ(got.at("stream3"), "ignored") << drain.out();
  EXPECT_EQ(got.at("closed"), true) << drain.out();
  EXPECT_FALSE(w.upstream.saw("GET /new/"));
  EXPECT_EQ(w.gateway->wait_exit(30s), 0) << w.gateway->log();
}

TEST(h2_flow, a_reload_applies_to_the_next_stream_on_an_open_connection) {
  if (!have_h2()) GTEST_SKIP() << "python3-h2 is missing (scripts/setup installs it)";
  flow_upstream up;
  runtime_fixture gw(rules(up.url()));
  temp_dir dir{"h2-reload"};
  const auto trigger = dir.path / "reloaded";
  child_process twice(
      {python, script, "twice", std::to_string(gw.port()), "/gone/a", "/gone/b", trigger.string()},
      dir.path / "twice.out", dir.path / "twice.err");
  ASSERT_TRUE(wait_until([&] { return !twice.out().empty(); }, 30s)) << twice.err();
  EXPECT_EQ(twice.out(), "200 ");
  // The next rules have no route for /gone: the second stream on the same connection is 404.
  auto next = rules(up.url());
  next.erase(next.find("  - {name: all"));
  std::ofstream(gw.file()) << next;
  ASSERT_EQ(gw.admin("/admin/reload", "POST").status, 200u);
  std::ofstream(trigger).put('\n');
  ASSERT_EQ(twice.wait_exit(60s), 0) << twice.err();
  EXPECT_EQ(twice.out(), "200 404\n");
  EXPECT_TRUE(up.saw("GET /gone/a"));
  EXPECT_FALSE(up.saw("GET /gone/b"));
}

std::string h2_upstream_rules(const std::string& url, const std::string& extra) {
  return "store: {type: memory}\n"
         "http2: true\n"
         "upstreams: {echo: {url: \"" +
         url + "\", http2: true" + extra +
         "}}\n"
         "routes:\n"
         "  - {name: echo, match: {path_prefix: /}, upstream: echo}\n";
}

TEST(h2_flow, grpc_calls_reach_an_http2_upstream_over_tls_with_alpn_h2) {
  if (!have_h2()) GTEST_SKIP() << "python3-h2 is missing (scripts/setup installs it)";
  temp_dir dir{"h2-tls-up"};
  test_ca ca(dir.path);
  const auto cert = ca.issue(cert_request("127.0.0.1").names({"IP:127.0.0.1"}));
  const auto echo = std::string(SLUICE_SOURCE_DIR) + "/tests/support/grpc_echo.py";
  const auto port = free_loopback_port();
  child_process service(
      {python, echo, "server", std::to_string(port), cert.cert.string(), cert.key.string()},
      dir.path / "svc.out", dir.path / "svc.err");
  ASSERT_TRUE(wait_until([&] { return service.out().find("ready") != std::string::npos; }, 30s))
      << service.err();
  runtime_fixture gw(h2_upstream_rules("https://127.0.0.1:" + std::to_string(port),
                                       ", ca_file: " + ca.cert().string()));
  const json::array steps{json::object{{"method", "unary"}, {"key", ""}, {"payload", "hello"}},
                          json::object{{"method", "collect"}, {"key", ""}, {"payload", "a,b,c"}}};
  child_process py(
      {python, echo, "client", "127.0.0.1:" + std::to_string(gw.port()), json::serialize(steps)},
      dir.path / "py.out", dir.path / "py.err");
  ASSERT_EQ(py.wait_exit(60s), 0) << py.err();
  const auto got = json::parse(py.out()).as_array();
  ASSERT_EQ(got.size(), 2u) << py.out();
  EXPECT_EQ(got[0].at("code"), "OK") << py.out();
  EXPECT_EQ(got[0].at("messages"), (json::array{"hello"}));
  EXPECT_EQ(got[0].at("trailing").at("x-echo-trailer"), "yes");
  EXPECT_EQ(got[1].at("code"), "OK") << py.out();
  EXPECT_EQ(got[1].at("messages"), (json::array{"a+b+c"}));  // three messages, one stream
  EXPECT_EQ(got[1].at("trailing").at("x-echo-trailer"), "collect");
  EXPECT_NE(service.out().find("call Collect"), std::string::npos);
}

TEST(h2_flow, an_https_upstream_that_does_not_select_h2_is_a_502) {
  if (!have_h2()) GTEST_SKIP() << "python3-h2 is missing (scripts/setup installs it)";
  temp_dir dir{"h2-tls-h1"};
  test_ca ca(dir.path);
  const auto cert = ca.issue(cert_request("127.0.0.1").names({"IP:127.0.0.1"}));
  const auto port = free_loopback_port();
  // An HTTP/1.1-only TLS server (no ALPN h2).
  child_process h1(
      {"/usr/bin/openssl", "s_server", "-accept", "127.0.0.1:" + std::to_string(port), "-cert",
       cert.cert.string(), "-key", cert.key.string(), "-www", "-alpn", "http/1.1"},
      dir.path / "s.out", dir.path / "s.err");
  ASSERT_TRUE(wait_until([&] { return h1.out().find("ACCEPT") != std::string::npos; }, 30s))
      << h1.err();
  runtime_fixture gw(h2_upstream_rules("https://127.0.0.1:" + std::to_string(port),
                                       ", ca_file: " + ca.cert().string()));
  EXPECT_EQ(client({"trailers", std::to_string(gw.port()), "/x"}, dir.path), "status 502\n");
}

TEST(h2_flow, request_trailers_reach_an_http2_upstream) {
  if (!have_h2()) GTEST_SKIP() << "python3-h2 is missing (scripts/setup installs it)";
  if (!fs::exists("/usr/sbin/nghttpd")) GTEST_SKIP() << "nghttpd is missing (nghttp2-server)";
  temp_dir dir{"h2-trailers"};
  fs::create_directories(dir.path / "root");
  std::ofstream(dir.path / "root" / "x") << "file\n";
  const auto port = free_loopback_port();
  child_process nghttpd({"/usr/sbin/nghttpd", "--no-tls", "-v", "-a", "127.0.0.1", "-d",
                         (dir.path / "root").string(), std::to_string(port)},
                        dir.path / "d.out", dir.path / "d.err");
  runtime_fixture gw(h2_upstream_rules("http://127.0.0.1:" + std::to_string(port), ""));
  // nghttpd listens once its port accepts a connection.
  ASSERT_TRUE(wait_until(
      [&] {
        try {
          http_connection probe(port, 1s);
          return true;
        } catch (const std::exception&) {
          return false;
        }
      },
      30s));
  EXPECT_EQ(client({"trailers", std::to_string(gw.port()), "/x"}, dir.path), "status 200\n");
  ASSERT_TRUE(wait_until(
      [&] { return nghttpd.out().find("x-checksum: abc-sum") != std::string::npos; }, 10s))
      << nghttpd.out();
}

}  // namespace
}  // namespace sluice::test
