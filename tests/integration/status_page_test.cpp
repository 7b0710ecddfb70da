// SPDX-License-Identifier: Apache-2.0
// sluice-test-support: gateway_fixture redis_server upstream_server http_client runtime_fixture
// sluice-test-support: scripted_upstream
// The status page rendered on the server and the most limited callers (issue 29),
// on a real gateway (runtime with its admin listener), a real upstream and, for the redis store, a
// real redis-server: three API keys driven over their limits by different amounts come out of `GET
// /admin/top` in order, named by the access log's key hash; an anonymous caller refused by a plan
// limit on a route without limits of its own is named by its address. The page holds all of it with
// scripts off (a plain fetch, and headless Chromium with scripts disabled): plan limits on every
// route, no zero rows, the top-N; a hostile query string is escaped wherever the page echoes it.

#include "harness.hpp"
#include "support/child_process.hpp"
#include "support/runtime_fixture.hpp"
#include "support/scripted_upstream.hpp"
#include "support/temp_dir.hpp"

#include "sluice/observability/access_log.hpp"

#include <boost/json.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

namespace sluice::test {
namespace {

namespace json = boost::json;

constexpr const char* rules_yaml = R"(
listen: 127.0.0.1:0
store: STORE
identity: {api_key: {header: X-API-Key}}
plans:
  anonymous: {limits: [{name: anon, by: ip, rate: 2/1m, burst: 2}]}
  free: {limits: [{name: free_daily, by: api_key, rate: 1000/1d, burst: 1000}]}
api_keys: {key-a: free, key-b: free, key-c: free}
upstreams: {api: {url: UPSTREAM_URL}, gone: {url: "http://127.0.0.1:CLOSED_PORT"}}
status: {top: 5, window: 5m, graph_step: 1s}
routes:
  - name: items
    match: {path_prefix: /v1/items}
    upstream: api
    limits:
      - {name: items_key, by: api_key, rate: 2/1m, burst: 2}
  - name: open
    match: {path_prefix: /open}
    upstream: api
  - name: idle
    match: {path_prefix: /idle}
    upstream: api
  - name: down
    match: {path_prefix: /down}
    upstream: gone
)";

constexpr const char* secret = "status-test-secret";

struct status_world {
  explicit status_world(store_kind kind)
      : redis(kind == store_kind::redis ? std::make_unique<redis_server>() : nullptr),
        rt(substitute(rules_yaml, {{"UPSTREAM_URL", upstream.url()},
                                   {"CLOSED_PORT", std::to_string(closed_port())},
                                   {"STORE", redis ? "{type: redis, address: \"127.0.0.1:" +
                                                         std::to_string(redis->port()) + "\"}"
                                                   : "{type: memory}"}})) {}

  /// Sends `n` requests with `key`, counting the 429s.
  int drive(const std::string& key, int n) const {
    int refused = 0;
    for (int i = 0; i < n; ++i) {
      auto r = test::get(rt.port(), "/v1/items", {{"X-API-Key", key}});
      refused += r.status == 429;
    }
    return refused;
  }
  /// key-a 12 refusals, key-b 6, key-c 3 (each has 2 admitted first); an anonymous caller 1
  /// refusal by the anonymous plan's `anon` on `open`.
  void drive_all() const {
    EXPECT_EQ(drive("key-a", 14), 12);
    EXPECT_EQ(drive("key-b", 8), 6);
    EXPECT_EQ(drive("key-c", 5), 3);
    int anon = 0;
    for (int i = 0; i < 3; ++i) anon += test::get(rt.port(), "/open/x").status == 429;
    EXPECT_EQ(anon, 1);
  }

  static const bool secret_set;
  std::unique_ptr<redis_server> redis;
  upstream_server upstream;
  runtime_fixture rt;
};

// The key hashes' secret, set before any gateway is built (the gateway reads it once).
const bool status_world::secret_set = [] {
  return ::setenv("SLUICE_ACCESS_LOG_KEY", secret, 1) == 0;
}();

class status_top : public testing::TestWithParam<store_kind> {};

TEST_P(status_top, three_keys_over_their_limits_come_out_of_admin_top_in_order) {
  ASSERT_TRUE(status_world::secret_set);
  status_world w(GetParam());
  w.drive_all();
  auto r = w.rt.admin("/admin/top");
  ASSERT_EQ(r.status, 200u) << r.body;
  EXPECT_EQ(r.header("Content-Type"), "application/json");
  const auto o = json::parse(r.body).as_object();
  EXPECT_EQ(o.at("n").as_int64(), 5);  // status.top
  EXPECT_EQ(o.at("window_minutes").as_int64(), 5);
  EXPECT_FALSE(o.at("capped").as_bool());
  EXPECT_EQ(o.at("total").as_int64(), 22);
  const auto& top = o.at("top").as_array();
  ASSERT_EQ(top.size(), 4u) << r.body;
  const std::tuple<std::string, std::string, std::string, int> expected[] = {
      {observability::key_hash("key-a", secret), "items", "items_key", 12},
      {observability::key_hash("key-b", secret), "items", "items_key", 6},
      {observability::key_hash("key-c", secret), "items", "items_key", 3},
      {"127.0.0.1", "open", "anon", 1}};
  for (std::size_t i = 0; i < 4; ++i) {
    const auto& row = top[i].as_object();
    const auto& [caller, route, limit, refusals] = expected[i];
    EXPECT_EQ(row.at("caller").as_string(), caller) << i;
    EXPECT_EQ(row.at("route").as_string(), route) << i;
    EXPECT_EQ(row.at("limit").as_string(), limit) << i;
    EXPECT_EQ(row.at("refusals").as_int64(), refusals) << i;
    EXPECT_EQ(row.at("error").as_int64(), 0) << i;
  }
  // The raw key never appears.
  EXPECT_EQ(r.body.find("key-a"), std::string::npos);

  auto two = json::parse(w.rt.admin("/admin/top?n=2").body).as_object();
  EXPECT_EQ(two.at("top").as_array().size(), 2u);
  // An n over the bound is capped, and the answer says so.
  auto capped = w.rt.admin("/admin/top?n=100000");
  ASSERT_EQ(capped.status, 200u);
  const auto c = json::parse(capped.body).as_object();
  EXPECT_TRUE(c.at("capped").as_bool());
  EXPECT_EQ(c.at("n").as_int64(), 100);
  EXPECT_EQ(c.at("asked").as_int64(), 100000);
  EXPECT_EQ(c.at("note").as_string(), "n=100000 is over the bound; capped at 100");
  EXPECT_EQ(c.at("top").as_array().size(), 4u);
  // A bad n or another parameter: 400 with the reason.
  auto bad = w.rt.admin("/admin/top?n=ten");
  EXPECT_EQ(bad.status, 400u);
  EXPECT_NE(bad.body.find("n must be a whole number"), std::string::npos) << bad.body;
  EXPECT_EQ(w.rt.admin("/admin/top?m=1").status, 400u);
  EXPECT_EQ(w.rt.admin("/admin/top", "POST").status, 405u);
}

// The page as a plain fetch sees it (no script runs): everything is there.
TEST_P(status_top, the_page_rendered_on_the_server_shows_plan_limits_counts_and_the_top_n) {
  ASSERT_TRUE(status_world::secret_set);
  status_world w(GetParam());
  w.drive_all();
  auto page = w.rt.admin("/");
  ASSERT_EQ(page.status, 200u);
  const std::string& b = page.body;
  SCOPED_TRACE(b.substr(0, 6000));
  EXPECT_EQ(b.find("loading"), std::string::npos);
  EXPECT_NE(b.find("version "), std::string::npos);
  EXPECT_NE(b.find(" workers"), std::string::npos);
  EXPECT_NE(b.find("last reload: no error"), std::string::npos);
  EXPECT_NE(b.find("<td>connected</td><td class=\"ok\">yes"), std::string::npos);
  // Upstream health and responses by status.
  EXPECT_NE(b.find("<tr><td>api</td>"), std::string::npos);
  EXPECT_NE(b.find("<td>429 limited</td><td class=\"num\">22</td>"), std::string::npos);
  // Each route with its own limits and the plan limits that apply there: `open` has none of
  // its own, and the anonymous plan's `anon` is listed on it.
  EXPECT_NE(b.find("<td rowspan=\"2\">open</td>"), std::string::npos);
  EXPECT_NE(b.find("<td>anon</td><td>plan anonymous</td><td>ip</td>"), std::string::npos);
  EXPECT_NE(b.find("<td>free_daily</td><td>plan free</td><td>api_key</td>"), std::string::npos);
  EXPECT_NE(b.find("<td>items_key</td><td>route</td><td>api_key</td>"), std::string::npos);
  EXPECT_EQ(b.find("no limits"), std::string::npos);
  // Decisions: no zero rows (`idle` saw nothing; nothing failed open).
  EXPECT_NE(b.find("<td>items</td><td>limited</td>"), std::string::npos);
  EXPECT_NE(b.find("<td>open</td><td>limited</td>"), std::string::npos);
  EXPECT_EQ(b.find("<td>idle</td><td>"), std::string::npos);
  EXPECT_EQ(b.find("<td>fail_open</td>"), std::string::npos);
  // The top-N, in order.
  const auto a = b.find("<td>" + observability::key_hash("key-a", secret) + "</td>");
  const auto bb = b.find("<td>" + observability::key_hash("key-b", secret) + "</td>");
  const auto c = b.find("<td>" + observability::key_hash("key-c", secret) + "</td>");
  ASSERT_NE(a, std::string::npos);
  ASSERT_NE(bb, std::string::npos);
  ASSERT_NE(c, std::string::npos);
  EXPECT_LT(a, bb);
  EXPECT_LT(bb, c);
  EXPECT_NE(b.find("<td>127.0.0.1</td><td>open</td><td>anon</td><td class=\"num\">1</td>"),
            std::string::npos);
}

// Responses by status class as clients saw them, each class split into what was relayed and
// what the gateway answered itself; an upstream's last error in words.
TEST_P(status_top, responses_by_class_and_an_upstreams_last_error) {
  status_world w(GetParam());
  w.drive_all();  // 2+2+2 on items and 2 on open admitted (2xx relayed), 22 limited by route or
                  // plan (429)
  EXPECT_EQ(test::get(w.rt.port(), "/down/x", {{"X-API-Key", "key-c"}}).status, 502u);
  EXPECT_EQ(test::get(w.rt.port(), "/nowhere").status, 404u);
  auto page = w.rt.admin("/");
  ASSERT_EQ(page.status, 200u);
  const std::string& b = page.body;
  SCOPED_TRACE(b.substr(0, 8000));
  EXPECT_NE(b.find("<tr><td>2xx</td><td>relayed from upstreams</td><td class=\"num\">8</td></tr>"),
            std::string::npos);
  EXPECT_NE(b.find("<tr><td>4xx</td><td>429 limited</td><td class=\"num\">22</td></tr>"),
            std::string::npos);
  EXPECT_NE(b.find("<tr><td>4xx</td><td>400 / 401 / 404 before any limit</td>"
                   "<td class=\"num\">1</td></tr>"),
            std::string::npos);
  EXPECT_NE(b.find("<tr><td>5xx</td><td>502 upstream failed</td><td class=\"num\">1</td></tr>"),
            std::string::npos);
  EXPECT_EQ(b.find("<td>3xx</td>"), std::string::npos);  // zero rows are left out
  EXPECT_EQ(b.find("<td>5xx</td><td>relayed"), std::string::npos);
  // The upstream that refused the connection: its failure and its last error, in words.
  const auto gone = b.find("<tr><td>gone</td>");
  ASSERT_NE(gone, std::string::npos);
  const auto row = b.substr(gone, b.find("</tr>", gone) - gone);
  EXPECT_NE(row.find("unreachable 1"), std::string::npos) << row;
  EXPECT_NE(row.find("<td>unreachable: Connection refused"), std::string::npos) << row;
  EXPECT_NE(row.find(" ago)</td>"), std::string::npos) << row;
}

// The per-route rate graphs: the admin listener samples the route counters every
// `graph_step` (1 s here); once two samples frame the traffic, each route that saw requests
// has an inline SVG graph (forwarded and refused), drawn on the server; a route that saw
// nothing has none.
TEST_P(status_top, rate_graphs_draw_each_route_that_saw_requests) {
  status_world w(GetParam());
  w.drive_all();
  std::string b;
  (void)eventually(
      [&] {
        b = w.rt.admin("/").body;
        return b.find("<tr data-route=\"items\">") != std::string::npos &&
               b.find("<tr data-route=\"open\">") != std::string::npos;
      },
      std::chrono::seconds(30));
  SCOPED_TRACE(b.substr(0, 8000));
  const auto items = b.find("<tr data-route=\"items\">");
  ASSERT_NE(items, std::string::npos);
  const auto row = b.substr(items, b.find("</tr>", items) - items);
  // Both lines, with at least one point each; the peak names a positive rate.
  EXPECT_NE(row.find("<svg class=\"graph\""), std::string::npos) << row;
  EXPECT_NE(row.find("<polyline class=\"ok\" fill=\"none\" points=\""), std::string::npos);
  EXPECT_NE(row.find("<polyline class=\"bad\" fill=\"none\" points=\""), std::string::npos);
  EXPECT_EQ(row.find("peak 0</title>"), std::string::npos) << row;
  EXPECT_NE(b.find("<tr data-route=\"open\">"), std::string::npos);
  EXPECT_EQ(b.find("<tr data-route=\"idle\">"), std::string::npos);  // saw nothing
  EXPECT_NE(b.find("one point per 1 s"), std::string::npos);
}

INSTANTIATE_TEST_SUITE_P(stores, status_top,
                         ::testing::Values(store_kind::memory, store_kind::redis), store_name);

// Everything the page echoes from its query string is escaped: the explain form's values,
// the notes on a bad n and an unknown parameter.
TEST(status_page, a_hostile_query_string_is_escaped_wherever_it_is_echoed) {
  status_world w(store_kind::memory);
  auto page = w.rt.admin(
      "/?n=%3Cb%3Ex&path=%22%3E%3Cscript%3Ealert(1)%3C/script%3E&api_key=%27%3E%3Cimg%20src%3Dx"
      "%20onerror%3Dalert(2)%3E&ip=%26amp&method=%3C%2Ftextarea%3E&%3Csvg%20onload%3Dalert(3)%3E="
      "1");
  ASSERT_EQ(page.status, 200u);
  const std::string& b = page.body;
  SCOPED_TRACE(b.substr(0, 6000));
  EXPECT_EQ(b.find("<script>alert"), std::string::npos);
  EXPECT_EQ(b.find("<img"), std::string::npos);
  EXPECT_EQ(b.find("<svg onload"), std::string::npos);
  EXPECT_EQ(b.find("<b>"), std::string::npos);
  EXPECT_EQ(b.find("</textarea>"), std::string::npos);
  EXPECT_NE(b.find("value=\"&quot;&gt;&lt;script&gt;alert(1)&lt;/script&gt;\""), std::string::npos);
  EXPECT_NE(b.find("value=\"&#39;&gt;&lt;img src=x onerror=alert(2)&gt;\""), std::string::npos);
  EXPECT_NE(b.find("value=\"&amp;amp\""), std::string::npos);
  EXPECT_NE(b.find("n &#39;&lt;b&gt;x&#39; is not a whole number"), std::string::npos);
  EXPECT_NE(b.find("unknown parameter &#39;&lt;svg onload=alert(3)&gt;&#39;"), std::string::npos);
  // Exactly one script element: the page's own.
  std::size_t scripts = 0;
  for (auto at = b.find("<script"); at != std::string::npos; at = b.find("<script", at + 1))
    ++scripts;
  EXPECT_EQ(scripts, 1u);
  // An n over the bound is capped on the page too, and it says so.
  auto capped = w.rt.admin("/?n=5000");
  EXPECT_NE(capped.body.find("n=5000 is over the bound; capped at 100"), std::string::npos);
}

// Headless Chromium with the page's scripts disabled (the DevTools protocol's
// Emulation.setScriptExecutionDisabled; `--blink-settings=scriptEnabled=false` with
// `--dump-dom` dumps nothing, as --dump-dom reads the DOM by script) shows the DOM it built
// from the server's HTML alone: plan limits and the top-N are in it.
TEST(status_page, headless_chromium_with_scripts_off_shows_plan_limits_and_the_top_n) {
  const char* const chromium = "/usr/lib/chromium/chromium";
  if (!std::filesystem::exists(chromium)) GTEST_SKIP() << "chromium is not installed";
  status_world w(store_kind::memory);
  w.drive_all();
  temp_dir dir("chromium-noscript");
  const std::string url = "http://127.0.0.1:" + std::to_string(w.rt.admin_port()) + "/";
  // Scripts really are off: the page script's functions were never defined.
  std::ofstream(dir.path / "steps.json") << R"json([
    {"eval": "(() => { if (typeof poll !== 'undefined') throw new Error('the page script ran'); })()"}
  ])json";
  const auto screenshot = dir.path / "status_page_scripts_off.png";
  child_process browser(
      {"/usr/bin/timeout", "90", "/usr/bin/python3",
       std::string(SLUICE_SOURCE_DIR) + "/tests/support/browser.py", "--chromium", chromium,
       "--profile", (dir.path / "profile").string(), "--url", url, "--steps",
       (dir.path / "steps.json").string(), "--dom", (dir.path / "dom.html").string(),
       "--screenshot", screenshot.string(), "--timeout", "60", "--scripts-off"},
      dir.path / "out.txt", dir.path / "err.txt");
  const auto exit = browser.wait_exit(std::chrono::seconds(95));
  ASSERT_EQ(exit.value_or(-1), 0) << browser.out() << browser.err();
  std::ifstream in(dir.path / "dom.html");
  const std::string dom(std::istreambuf_iterator<char>(in), {});
  ASSERT_FALSE(dom.empty()) << "no DOM from chromium";
  SCOPED_TRACE(dom.substr(0, 6000));
  EXPECT_NE(dom.find("<td>anon</td><td>plan anonymous</td>"), std::string::npos);
  EXPECT_NE(dom.find("<td>free_daily</td><td>plan free</td>"), std::string::npos);
  EXPECT_NE(dom.find("<td>" + observability::key_hash("key-a", secret) +
                     "</td><td>items</td><td>items_key</td><td class=\"num\">12</td>"),
            std::string::npos);
  EXPECT_NE(dom.find("<td>127.0.0.1</td><td>open</td><td>anon</td>"), std::string::npos);
  EXPECT_NE(dom.find("last reload: no error"), std::string::npos);
  EXPECT_EQ(dom.find("<td>idle</td><td>"), std::string::npos);  // no zero rows
}

}  // namespace
}  // namespace sluice::test
