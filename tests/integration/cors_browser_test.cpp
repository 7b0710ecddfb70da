// SPDX-License-Identifier: Apache-2.0
// sluice-test-support: gateway_fixture redis_server upstream_server http_client
// CORS in a real browser (issue 12, item 2): headless Chromium loads a page from one loopback
// origin (a test server on its own port) whose script calls the gateway — another origin —
// with `fetch` until it is limited, then POSTs what it read back to the page's server. The
// test checks that the page read status 429 and the Retry-After the gateway sent, and, as the
// control, that a route without a `cors:` policy is a network error to the page.
//
// Bounded: Chromium runs in its own process group and is killed by that id after the result
// arrives or after 60 s; the page itself gives up after 10 requests. The test is skipped when
// Chromium is not installed (scripts/setup installs it).

#include "harness.hpp"
#include "support/child_process.hpp"
#include "support/temp_dir.hpp"

#include <signal.h>

#include <filesystem>
#include <regex>

namespace sluice::test {
namespace {

const char* const chromium_path = "/usr/lib/chromium/chromium";

const char* const rules_text = R"(
store: {type: memory}
identity: {api_key: {header: X-API-Key}, unknown_key: reject}
api_keys: {key-a: anonymous}
upstreams: {api: {url: UPSTREAM_URL}}
routes:
  - name: items
    match: {path_prefix: /v1/items}
    upstream: api
    cors: {origins: [PAGE_ORIGIN], methods: [GET], headers: [X-API-Key], max_age: 10m}
    limits:
      - {name: items_key, by: api_key, rate: 3/1h, burst: 3}
  - name: plain
    match: {path_prefix: /plain}
    upstream: api
)";

// The page: the control fetch first, then fetches until a 429 (at most 10), then the report.
std::string page(const std::string& gateway) {
  return R"(<!doctype html><html><body><pre id="out">running</pre><script>
const gw = ")" +
         gateway + R"(";
const opts = {headers: {"X-API-Key": "key-a"}, cache: "no-store"};
async function run() {
  const lines = [];
  try {
    const r = await fetch(gw + "/plain", opts);
    lines.push("control=" + r.status);
  } catch (e) {
    lines.push("control=" + e.name);
  }
  for (let i = 0; i < 10; i++) {
    const r = await fetch(gw + "/v1/items", opts);
    lines.push("status=" + r.status + " retry-after=" + r.headers.get("Retry-After") +
               " remaining=" + r.headers.get("X-RateLimit-Remaining") +
               " ratelimit=" + r.headers.get("RateLimit"));
    if (r.status === 429) break;
  }
  return lines.join("\n");
}
run().catch(e => "error=" + e).then(text => {
  document.getElementById("out").textContent = text;
  return fetch("/result", {method: "POST", body: text});
});
</script></body></html>)";
}

TEST(cors_browser, a_page_on_another_origin_reads_the_429_and_its_retry_after) {
  if (!std::filesystem::exists(chromium_path)) GTEST_SKIP() << "chromium is not installed";
  upstream_server page_server;  // the page's origin; it also receives the report
  const std::string origin = "http://127.0.0.1:" + std::to_string(page_server.port());
  world w(store_kind::memory, substitute(rules_text, {{"PAGE_ORIGIN", "\"" + origin + "\""}}));
  const std::string gateway = "http://127.0.0.1:" + std::to_string(w.port());
  canned_response html;
  html.headers = {{"Content-Type", "text/html"}};
  html.body = page(gateway);
  page_server.set_response(html);

  temp_dir dir("chromium");
  auto browser = std::make_unique<child_process>(
      std::vector<std::string>{
          "/usr/bin/setsid", chromium_path, "--headless", "--no-sandbox", "--disable-gpu",
          "--disable-dev-shm-usage", "--no-first-run", "--no-default-browser-check",
          "--disable-extensions", "--disable-background-networking", "--disable-component-update",
          "--disable-sync", "--disable-domain-reliability", "--no-pings",
          "--user-data-dir=" + (dir.path / "profile").string(), origin + "/index.html"},
      dir.path / "out.txt", dir.path / "err.txt");
  // setsid execs in place (a fresh child is no group leader): the group id is the pid.
  const pid_t group = browser->pid();

  std::string report;
  (void)eventually(
      [&] {
        for (const auto& r : page_server.requests()) {
          if (r.target == "/result") report = r.body;
        }
        return !report.empty() || !browser->running();
      },
      std::chrono::seconds(60));
  ::kill(-group, SIGKILL);  // the browser and every process it started
  browser.reset();
  ASSERT_FALSE(report.empty()) << "no report from the page; chromium stderr:\n"
                               << [&] {
                                    std::ifstream in(dir.path / "err.txt");
                                    return std::string(std::istreambuf_iterator<char>(in), {});
                                  }();

  SCOPED_TRACE(report);
  // Without a CORS policy the browser hides the answer: a TypeError, not a status.
  EXPECT_NE(report.find("control=TypeError"), std::string::npos);
  // Three admitted, each with its quota readable; then the 429 and its Retry-After.
  EXPECT_NE(report.find("status=200 retry-after=null remaining=2"), std::string::npos);
  EXPECT_NE(report.find("status=200 retry-after=null remaining=0"), std::string::npos);
  std::smatch m;
  ASSERT_TRUE(std::regex_search(report, m,
                                std::regex("status=429 retry-after=(\\d+) remaining=0 "
                                           "ratelimit=(\\S+)")));
  const int retry = std::stoi(m[1].str());
  EXPECT_GE(retry, 1199);  // one token per 1200 s
  EXPECT_LE(retry, 1200);
  EXPECT_NE(m[2].str(), "null");
  // The gateway counted exactly the page's three admitted requests and one refusal.
  EXPECT_EQ(w.gateway->gateway().stats().rejected, 1u);
}

}  // namespace
}  // namespace sluice::test
