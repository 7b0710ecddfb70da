// SPDX-License-Identifier: Apache-2.0
// sluice-test-support: http_client
// WebSocket upgrades through the real `sluice` binary with real WebSocket peers (Debian's
// python3-websockets): an echo upstream (tests/support/ws_echo.py) that counts the requests and
// handshakes it saw, and a client (tests/support/ws_client.py) that connects through the
// gateway, exchanges text and a 1 MiB binary message and checks every echo. Covered: the
// tunnel both ways, an upgrade refused by a limit (429, never reaches the upstream),
// `upgrade: false` (403), the upstream closing the tunnel, `tunnel_idle_timeout`, and the
// `sluice_tunnels_open` / `sluice_tunnels_total` metrics on the admin listener.

#include "support/child_process.hpp"
#include "support/eventually.hpp"
#include "support/http_client.hpp"
#include "support/temp_dir.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace sluice::test {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using steady = std::chrono::steady_clock;

/// Debian's interpreter: python3-websockets installs into its dist-packages only.
const std::string python = "/usr/bin/python3";
const std::string timeout_tool = "/usr/bin/timeout";
const std::string support_dir = std::string(SLUICE_SOURCE_DIR) + "/tests/support/";

/// Whether Debian's python3 can import websockets (scripts/setup installs python3-websockets).
bool have_websockets(const fs::path& dir) {
  child_process probe({python, "-c", "import websockets"}, dir / "probe.out", dir / "probe.err");
  return probe.wait_exit(10s) == 0;
}

/// The echo upstream, run under `timeout` and stopped by its pid at the end.
class ws_echo {
 public:
  explicit ws_echo(const fs::path& dir)
      : counts_(dir / "ws_counts"),
        child_({timeout_tool, "60", python, support_dir + "ws_echo.py", "--count-file",
                counts_.string(), "--lifetime", "55"},
               dir / "echo.out", dir / "echo.err") {}

  /// Waits (10 s at most) for its "port N" line.
  bool wait_port() {
    static const std::regex line(R"(port (\d+))");
    bool found = false;
    (void)eventually(
        [&] {
          std::smatch m;
          const auto out = child_.out();
          if (std::regex_search(out, m, line)) {
            port = static_cast<std::uint16_t>(std::stoul(m[1]));
            found = true;
          }
          return found || !child_.running();
        },
        10s);
    return found;
  }

  /// HTTP requests the upstream read (upgrades or not), and handshakes it accepted.
  long long requests() const { return count("requests"); }
  long long handshakes() const { return count("handshakes"); }
  std::string log() const { return child_.out() + child_.err(); }

  std::uint16_t port = 0;

 private:
  long long count(const std::string& what) const {
    std::ifstream in(counts_);
    std::string name;
    long long n = 0;
    while (in >> name >> n) {
      if (name == what) return n;
    }
    return -1;
  }

  fs::path counts_;
  child_process child_;
};

/// One run of ws_client.py: its exit status and its output line.
struct client_result {
  int exit = -1;
  std::string output;
};

std::vector<std::string> client_argv(std::uint16_t port, const std::string& path,
                                     const std::vector<std::string>& args) {
  std::vector<std::string> argv = {timeout_tool, "20",
                                   python,       support_dir + "ws_client.py",
                                   "--url",      "ws://127.0.0.1:" + std::to_string(port) + path};
  argv.insert(argv.end(), args.begin(), args.end());
  return argv;
}

/// A client started in the background (for tunnels held open while the test looks).
class background_client {
 public:
  background_client(const fs::path& dir, std::uint16_t port, const std::string& path,
                    const std::vector<std::string>& args) {
    static std::atomic<int> n{0};
    const auto tag = "client-bg-" + std::to_string(n++);
    child_ = std::make_unique<child_process>(client_argv(port, path, args), dir / (tag + ".out"),
                                             dir / (tag + ".err"));
  }
  /// Waits for it to end (25 s at most).
  client_result finish() {
    client_result r;
    r.exit = child_->wait_exit(25s).value_or(-1);
    r.output = child_->out() + child_->err();
    return r;
  }

 private:
  std::unique_ptr<child_process> child_;
};

client_result run_client(const fs::path& dir, std::uint16_t port, const std::string& path,
                         const std::vector<std::string>& args) {
  return background_client(dir, port, path, args).finish();
}

/// The number after `key=` in a client's output line, or -1.
double fact(const std::string& output, const std::string& key) {
  const std::regex re(key + R"(=([0-9.]+))");
  std::smatch m;
  return std::regex_search(output, m, re) ? std::stod(m[1]) : -1;
}

/// The sum of every sample of `name` (any labels) in a Prometheus text exposition, or nullopt
/// when there is none.
std::optional<double> metric(const std::string& text, const std::string& name) {
  std::istringstream in(text);
  std::string line;
  std::optional<double> sum;
  while (std::getline(in, line)) {
    if (line.empty() || line.front() == '#' || line.rfind(name, 0) != 0) continue;
    if (line.size() <= name.size() || (line[name.size()] != ' ' && line[name.size()] != '{')) {
      continue;
    }
    sum = sum.value_or(0) + std::stod(line.substr(line.rfind(' ') + 1));
  }
  return sum;
}

/// The rules: a limited route and a catch-all, with `extra` routes in between.
std::string rules(std::uint16_t echo_port, const std::string& extra = "") {
  return "store: {type: memory}\n"
         "upstreams: {ws: {url: \"http://127.0.0.1:" +
         std::to_string(echo_port) +
         "\"}}\n"
         "routes:\n"
         "  - {name: limited, match: {path_prefix: /limited}, upstream: ws,\n"
         "     limits: [{name: ws_limit, by: ip, rate: 2/1m, burst: 2}]}\n" +
         extra + "  - {name: echo, match: {path_prefix: /}, upstream: ws}\n";
}

/// An echo upstream and a `sluice` process in front of it.
struct ws_world {
  ws_world() : echo(dir.path) {}

  /// Starts both; "" when they run, else why not.
  std::string start(const std::string& extra_routes = "") {
    if (!have_websockets(dir.path)) {
      return "Debian's python3-websockets is missing (scripts/setup installs it)";
    }
    if (!echo.wait_port()) return "the echo upstream did not start:\n" + echo.log();
    const auto file = dir.path / "rules.yaml";
    std::ofstream(file) << rules(echo.port, extra_routes);
    gateway = std::make_unique<sluice_process>(file, dir.path);
    if (!gateway->wait_listening()) return "sluice did not start:\n" + gateway->log();
    return "";
  }

  client_result client(const std::string& path, const std::vector<std::string>& args = {}) {
    return run_client(dir.path, gateway->port, path, args);
  }

  std::string metrics() const {
    auto r = get(gateway->admin_port, "/metrics");
    EXPECT_EQ(r.status, 200u);
    return r.body;
  }

  /// Polls /metrics (2 s at most) until `name` sums to `want`; its last value.
  std::optional<double> wait_metric(const std::string& name, double want) const {
    std::optional<double> v;
    (void)eventually([&] { return (v = metric(metrics(), name)) == want; }, 2s);
    return v;
  }

  temp_dir dir{"upgrade"};
  ws_echo echo;
  std::unique_ptr<sluice_process> gateway;
};

std::string show(std::optional<double> v) {
  return v ? std::to_string(*v) : "absent";
}

/// The lines of `text` that mention `what` (to show a scrape's tunnel series on failure).
std::string lines_with(const std::string& text, const std::string& what) {
  std::istringstream in(text);
  std::string line;
  std::string out;
  while (std::getline(in, line)) {
    if (line.find(what) != std::string::npos) out += line + "\n";
  }
  return out.empty() ? "(no line mentions " + what + ")" : out;
}

const header_list upgrade_headers = {{"Connection", "Upgrade"},
                                     {"Upgrade", "websocket"},
                                     {"Sec-WebSocket-Version", "13"},
                                     {"Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="}};

// The tunnel carries messages both ways (the upstream speaks first), text and a 1 MiB binary
// message, and the upstream's 101 head reaches the client with its Upgrade fields.
TEST(upgrade, websocket_echo_both_ways_with_a_1MiB_message) {
  ws_world w;
  const auto why = w.start();
  ASSERT_EQ(why, "");

  auto first = w.client("/echo", {"--texts", "5", "--binary", "1048576"});
  EXPECT_EQ(first.exit, 0) << first.output;
  EXPECT_NE(first.output.find("greeting=1 texts=5 binary=1048576"), std::string::npos)
      << first.output;
  auto second = w.client("/echo/again", {"--texts", "1"});
  EXPECT_EQ(second.exit, 0) << second.output;
  EXPECT_EQ(w.echo.handshakes(), 2) << w.echo.log();

  // The 101 as the client sees it (RFC 6455 §1.3's sample key and its accept value).
  http_connection raw(w.gateway->port);
  raw.send_raw(
      "GET /echo HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: Upgrade\r\n"
      "Upgrade: websocket\r\nSec-WebSocket-Version: 13\r\n"
      "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n");
  auto r = raw.read_response(/*head_request=*/true);
  EXPECT_EQ(r.status, 101u) << r.body;
  EXPECT_EQ(r.header("Sec-WebSocket-Accept"), "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=");
  EXPECT_NE(r.header("Upgrade").find("websocket"), std::string::npos);
  EXPECT_NE(r.header("Connection").find("pgrade"), std::string::npos) << r.header("Connection");
  raw.close();
  // (the upstream counts just after its 101)
  (void)eventually([&] { return w.echo.handshakes() >= 3; }, 2s);
  EXPECT_EQ(w.echo.handshakes(), 3);
}

// An upgrade is limited once like any request: the third of `rate: 2/1m, burst: 2` gets 429
// with the usual fields and never reaches the upstream.
TEST(upgrade, a_limited_upgrade_gets_429_and_never_reaches_the_upstream) {
  ws_world w;
  const auto why = w.start();
  ASSERT_EQ(why, "");

  for (int i = 0; i < 2; ++i) {
    auto ok = w.client("/limited", {"--texts", "2"});
    EXPECT_EQ(ok.exit, 0) << "upgrade " << i + 1 << ": " << ok.output;
  }
  auto refused = w.client("/limited", {"--expect-status", "429"});
  EXPECT_EQ(refused.exit, 0) << refused.output;
  EXPECT_EQ(w.echo.handshakes(), 2) << w.echo.log();
  EXPECT_EQ(w.echo.requests(), 2);

  http_connection raw(w.gateway->port);
  auto r = raw.request("GET", "/limited", upgrade_headers);
  EXPECT_EQ(r.status, 429u) << r.body;
  EXPECT_FALSE(r.header("Retry-After").empty());
  EXPECT_EQ(r.header("Content-Type"), "application/problem+json");
  EXPECT_EQ(w.echo.requests(), 2) << "a refused upgrade reached the upstream";

  auto m = w.metrics();
  EXPECT_EQ(metric(m, "sluice_tunnels_total"), 2.0) << lines_with(m, "tunnels");
}

// `upgrade: false`: a request carrying Upgrade gets 403 (problem+json) and never reaches the
// upstream; the same route still forwards a request without Upgrade.
TEST(upgrade, upgrade_false_refuses_with_403) {
  ws_world w;
  const auto why =
      w.start("  - {name: closed, match: {path_prefix: /closed}, upstream: ws, upgrade: false}\n");
  ASSERT_EQ(why, "");

  auto refused = w.client("/closed", {"--expect-status", "403"});
  EXPECT_EQ(refused.exit, 0) << refused.output;
  http_connection raw(w.gateway->port);
  auto r = raw.request("GET", "/closed/x", upgrade_headers);
  EXPECT_EQ(r.status, 403u) << r.body;
  EXPECT_EQ(r.header("Content-Type"), "application/problem+json");
  EXPECT_EQ(w.echo.requests(), 0) << "an upgrade on an `upgrade: false` route reached the upstream";
  EXPECT_EQ(w.echo.handshakes(), 0);

  // No Upgrade: forwarded (the echo upstream answers a plain GET with 426 Upgrade Required).
  auto plain = get(w.gateway->port, "/closed/plain");
  EXPECT_EQ(plain.status, 426u) << plain.body;
  EXPECT_EQ(w.echo.requests(), 1);
}

// The upstream ending the tunnel ends it for the client: a dropped TCP connection (no close
// frame: only the gateway closing the client side can tell the client), and a clean close.
TEST(upgrade, the_upstream_closing_closes_the_client_side) {
  ws_world w;
  const auto why = w.start();
  ASSERT_EQ(why, "");

  auto dropped = w.client("/echo", {"--texts", "1", "--command", "drop-me"});
  EXPECT_EQ(dropped.exit, 0) << dropped.output;
  EXPECT_EQ(fact(dropped.output, "close_code"), 1006) << dropped.output;
  const double after = fact(dropped.output, "closed_after");
  EXPECT_GE(after, 0) << dropped.output;
  EXPECT_LT(after, 1.0) << dropped.output;

  auto closed = w.client("/echo", {"--texts", "1", "--command", "close-me"});
  EXPECT_EQ(closed.exit, 0) << closed.output;
  EXPECT_EQ(fact(closed.output, "close_code"), 1000) << closed.output;

  const auto open = w.wait_metric("sluice_tunnels_open", 0);
  EXPECT_EQ(open, 0.0) << show(open);
}

// `tunnel_idle_timeout: 1s`: a tunnel with no byte either way is closed about 1 s later; a
// tunnel on a route with the default (300 s) stays open meanwhile.
TEST(upgrade, an_idle_tunnel_is_closed_after_tunnel_idle_timeout) {
  ws_world w;
  const auto why = w.start(
      "  - {name: idle, match: {path_prefix: /idle}, upstream: ws, tunnel_idle_timeout: 1s}\n");
  ASSERT_EQ(why, "");

  background_client held(w.dir.path, w.gateway->port, "/echo", {"--texts", "1", "--hold", "2.5"});
  auto idle = w.client("/idle", {"--texts", "1", "--idle", "4"});
  EXPECT_EQ(idle.exit, 0) << idle.output;
  const double after = fact(idle.output, "closed_after");
  EXPECT_GE(after, 0.8) << idle.output;
  EXPECT_LE(after, 2.2) << idle.output;
  std::cout << "[ upgrade  ] idle tunnel closed " << after << " s after its last byte\n";

  auto kept = held.finish();
  EXPECT_EQ(kept.exit, 0) << "a tunnel under the default idle timeout: " << kept.output;
}

// /metrics counts tunnels: open while a client holds one, back to 0 after every close, and the
// total counts each 101 relayed.
TEST(upgrade, metrics_count_open_and_total_tunnels) {
  ws_world w;
  const auto why = w.start();
  ASSERT_EQ(why, "");

  const auto before = w.metrics();
  EXPECT_NE(before.find("# TYPE sluice_tunnels_open gauge"), std::string::npos)
      << lines_with(before, "tunnels");
  EXPECT_NE(before.find("# TYPE sluice_tunnels_total counter"), std::string::npos);
  EXPECT_EQ(metric(before, "sluice_tunnels_total"), 0.0);

  background_client held(w.dir.path, w.gateway->port, "/echo", {"--texts", "1", "--hold", "3"});
  const auto open = w.wait_metric("sluice_tunnels_open", 1);
  EXPECT_EQ(open, 1.0) << "while one tunnel is held: " << show(open);
  for (int i = 0; i < 2; ++i) {
    auto r = w.client("/echo", {"--texts", "2"});
    EXPECT_EQ(r.exit, 0) << r.output;
  }
  auto kept = held.finish();
  EXPECT_EQ(kept.exit, 0) << kept.output;

  const auto closed = w.wait_metric("sluice_tunnels_open", 0);
  EXPECT_EQ(closed, 0.0) << "after every tunnel closed: " << show(closed);
  const auto after = w.metrics();
  EXPECT_EQ(metric(after, "sluice_tunnels_total"), 3.0) << lines_with(after, "tunnels");
  EXPECT_EQ(w.echo.handshakes(), 3);
}

}  // namespace
}  // namespace sluice::test
