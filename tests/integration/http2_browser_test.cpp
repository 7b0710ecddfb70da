// SPDX-License-Identifier: Apache-2.0
// sluice-test-support: runtime_fixture upstream_server http_client test_ca
// HTTP/2 in a real browser (issue 26): headless Chromium loads a page over TLS (a test CA's
// certificate, trusted through --ignore-certificate-errors-spki-list) from the gateway, and
// the page's script makes 20 API calls at once on a route limited to 5 per hour per key. The
// page shows what it read — 5 × 200 and 15 × 429 with their Retry-After — and POSTs it back.
// One connection carried it all: Chromium's net log has one HTTP/2 session, which every later
// request found in its pool; the gateway logged and counted every call as HTTP/2; and the
// page's own Resource Timing says `h2` for each call.
//
// Bounded: Chromium runs in its own process group and is killed by that id after the report
// arrives or after 60 s. Skipped when Chromium or openssl is not installed (scripts/setup
// installs them).

#include "support/child_process.hpp"
#include "support/http_client.hpp"
#include "support/runtime_fixture.hpp"
#include "support/temp_dir.hpp"
#include "support/test_ca.hpp"
#include "support/upstream_server.hpp"

#include <gtest/gtest.h>

#include <signal.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace sluice::test {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

const char* const chromium_path = "/usr/lib/chromium/chromium";

std::string read_all(const fs::path& p) {
  std::ifstream in(p);
  return {std::istreambuf_iterator<char>(in), {}};
}

/// The base64 SHA-256 of `cert`'s SubjectPublicKeyInfo (what Chromium's
/// --ignore-certificate-errors-spki-list takes), by openssl.
std::string spki_hash(const fs::path& cert, const fs::path& dir) {
  child_process p({"/bin/sh", "-c",
                   "openssl x509 -in '" + cert.string() +
                       "' -pubkey -noout | openssl pkey -pubin -outform der | openssl dgst "
                       "-sha256 -binary | openssl enc -base64"},
                  dir / "spki.out", dir / "spki.err");
  if (p.wait_exit(20s).value_or(-1) != 0) return {};
  auto out = p.out();
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  return out;
}

// The page: 20 calls at once, then what each read (and its Resource Timing protocol), shown
// and POSTed to /result.
const char* const page = R"(<!doctype html><html><body><pre id="out">running</pre><script>
const calls = [];
for (let i = 0; i < 20; i++) {
  calls.push(fetch("/v1/items/" + i, {headers: {"X-API-Key": "key-a"}, cache: "no-store"})
    .then(r => r.text().then(() =>  // read whole: its Resource Timing entry is then written
      "status=" + r.status + " retry-after=" + r.headers.get("Retry-After") +
      " remaining=" + r.headers.get("X-RateLimit-Remaining")))
    .catch(e => "error=" + e));
}
Promise.all(calls).then(lines => {
  const protocols = performance.getEntriesByType("resource")
    .filter(e => e.name.includes("/v1/items/")).map(e => e.nextHopProtocol);
  lines.push("protocols=" + protocols.join(","));
  const text = lines.join("\n");
  document.getElementById("out").textContent = text;
  return fetch("/result", {method: "POST", body: text});
});
</script></body></html>)";

/// What Chromium's net log (--log-net-log) says of its HTTP/2 sessions.
struct net_log_counts {
  std::size_t sessions = 0;  ///< HTTP2_SESSION_INITIALIZED events
  std::size_t reused = 0;    ///< HTTP2_SESSION_POOL_FOUND_EXISTING_SESSION events
};

/// Reads a net log (JSON: "constants" naming the event types by number, then one event a
/// line, each ending with its type; the browser may have been killed before closing it).
net_log_counts net_log_sessions(const std::string& text) {
  net_log_counts out;
  auto id_of = [&](const std::string& name) {
    std::smatch m;
    return std::regex_search(text, m, std::regex("\"" + name + "\":(\\d+)")) ? m[1].str()
                                                                             : std::string("-");
  };
  const std::string initialized = "\"type\":" + id_of("HTTP2_SESSION_INITIALIZED") + "}";
  const std::string found = "\"type\":" + id_of("HTTP2_SESSION_POOL_FOUND_EXISTING_SESSION") + "}";
  const auto events = text.find("\"events\"");
  if (events == std::string::npos) return out;
  auto ends_with = [](const std::string& line, const std::string& tail) {
    return line.size() >= tail.size() &&
           line.compare(line.size() - tail.size(), tail.size(), tail) == 0;
  };
  std::istringstream in(text.substr(events));
  for (std::string line; std::getline(in, line);) {
    while (!line.empty() && (line.back() == ',' || line.back() == '\r')) line.pop_back();
    if (ends_with(line, initialized)) ++out.sessions;
    if (ends_with(line, found)) ++out.reused;
  }
  return out;
}

/// The value of the unlabelled or labelled series `series` in a /metrics text (-1: absent).
double metric(const std::string& text, const std::string& series) {
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(series + " ", 0) == 0) return std::stod(line.substr(series.size() + 1));
  }
  return -1;
}

TEST(http2_browser, twenty_calls_share_one_http2_connection_and_the_page_reads_the_429s) {
  if (!fs::exists(chromium_path)) GTEST_SKIP() << "chromium is not installed";
  if (!have_openssl()) GTEST_SKIP() << "openssl is missing (scripts/setup installs it)";
  temp_dir dir("h2-browser");
  test_ca ca(dir.path);
  const auto cert = ca.issue(cert_request("localhost").names({"DNS:localhost", "IP:127.0.0.1"}));
  const std::string spki = spki_hash(cert.cert, dir.path);
  ASSERT_FALSE(spki.empty());

  upstream_server upstream;  // the page, the API's answers, and the page's report
  canned_response html;
  html.headers = {{"Content-Type", "text/html"}};
  html.body = page;
  upstream.set_response(html);
  const auto log = dir.path / "access.log";
  runtime_fixture gw(
      "store: {type: memory}\n"
      "http2: true\n"
      "access_log: {path: " +
      log.string() +
      ", format: plain}\n"
      "tls:\n  certificates:\n    - {cert: " +
      cert.cert.string() + ", key: " + cert.key.string() +
      "}\n"
      "identity: {api_key: {header: X-API-Key}}\n"
      "plans: {free: {limits: []}}\n"
      "api_keys: {key-a: free}\n"
      "upstreams: {site: {url: \"" +
      upstream.url() +
      "\"}}\n"
      "routes:\n"
      "  - name: items\n"
      "    match: {path_prefix: /v1/items}\n"
      "    upstream: site\n"
      "    limits: [{name: items_key, by: api_key, rate: 5/1h, burst: 5}]\n"
      "  - {name: site, match: {path_prefix: /}, upstream: site}\n");
  const std::string origin = "https://127.0.0.1:" + std::to_string(gw.port());

  auto browser = std::make_unique<child_process>(
      std::vector<std::string>{
          "/usr/bin/setsid", chromium_path, "--headless", "--no-sandbox", "--disable-gpu",
          "--disable-dev-shm-usage", "--no-first-run", "--no-default-browser-check",
          "--disable-extensions", "--disable-background-networking", "--disable-component-update",
          "--disable-sync", "--disable-domain-reliability", "--no-pings",
          "--ignore-certificate-errors-spki-list=" + spki,
          "--log-net-log=" + (dir.path / "netlog.json").string(),
          "--user-data-dir=" + (dir.path / "profile").string(), origin + "/index.html"},
      dir.path / "out.txt", dir.path / "err.txt");
  // setsid execs in place (a fresh child is no group leader): the group id is the pid.
  const pid_t group = browser->pid();

  std::string report;
  (void)eventually(
      [&] {
        for (const auto& r : upstream.requests()) {
          if (r.target == "/result") report = r.body;
        }
        return !report.empty() || !browser->running();
      },
      60s);
  ::kill(-group, SIGKILL);  // the browser and every process it started
  browser.reset();
  ASSERT_FALSE(report.empty()) << "no report from the page; chromium stderr:\n"
                               << read_all(dir.path / "err.txt");
  SCOPED_TRACE(report);

  // What the page read: 5 admitted, 15 refused, each refusal's Retry-After readable.
  int ok = 0, refused = 0;
  static const std::regex line_re("status=(\\d+) retry-after=(\\S+) remaining=(\\S+)");
  std::istringstream in(report);
  for (std::string line; std::getline(in, line);) {
    std::smatch m;
    if (!std::regex_match(line, m, line_re)) continue;
    if (m[1] == "200") {
      ++ok;
      EXPECT_EQ(m[2].str(), "null") << line;
    } else if (m[1] == "429") {
      ++refused;
      const int retry = std::stoi(m[2].str());  // one token per 720 s
      EXPECT_GE(retry, 1) << line;
      EXPECT_LE(retry, 720) << line;
      EXPECT_EQ(m[3].str(), "0") << line;
    }
  }
  EXPECT_EQ(ok, 5);
  EXPECT_EQ(refused, 15);
  // The page's Resource Timing: every call went over HTTP/2.
  std::smatch p;
  ASSERT_TRUE(std::regex_search(report, p, std::regex("protocols=(\\S*)")));
  EXPECT_EQ(p[1].str(), "h2,h2,h2,h2,h2,h2,h2,h2,h2,h2,h2,h2,h2,h2,h2,h2,h2,h2,h2,h2");

  // Chromium's net log: one HTTP/2 session in all, and every later request (the 20 calls, the
  // favicon, the report) found it in the pool. (Chromium may preconnect a spare socket at
  // start; the log shows it never carried a session.)
  const auto net = net_log_sessions(read_all(dir.path / "netlog.json"));
  EXPECT_EQ(net.sessions, 1u);
  EXPECT_GE(net.reused, 21u);
  // The gateway counted the calls as HTTP/2.
  const std::string metrics = gw.admin("/metrics").body;
  EXPECT_EQ(metric(metrics,
                   "sluice_requests_total{route=\"items\",decision=\"allowed\","
                   "protocol=\"h2\"}"),
            5);
  EXPECT_EQ(metric(metrics,
                   "sluice_requests_total{route=\"items\",decision=\"limited\","
                   "protocol=\"h2\"}"),
            15);
  EXPECT_EQ(metric(metrics,
                   "sluice_requests_total{route=\"items\",decision=\"allowed\","
                   "protocol=\"http/1.1\"}"),
            0);
  // Every call is logged as HTTP/2.0.
  std::vector<std::string> logged;
  (void)eventually(
      [&] {
        logged.clear();
        std::istringstream lines(read_all(log));
        for (std::string l; std::getline(lines, l);)
          if (l.find("\"GET /v1/items/") != std::string::npos) logged.push_back(l);
        return logged.size() >= 20;
      },
      10s);
  for (const auto& l : logged) EXPECT_NE(l.find(" HTTP/2.0\" "), std::string::npos) << l;
  const std::size_t calls = logged.size();
  EXPECT_EQ(calls, 20u);
}

}  // namespace
}  // namespace sluice::test
