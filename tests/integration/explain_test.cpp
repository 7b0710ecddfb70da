// SPDX-License-Identifier: Apache-2.0
// sluice-test-support: gateway_fixture redis_server upstream_server http_client runtime_fixture
// GET /admin/explain ("why was I limited?") and the status page (GET /) on a real gateway (runtime
// with its admin listener, from a rules file on disk), a real upstream and, for the redis store, a
// real redis-server: the explanation names the route, the caller's plan and each limit with its
// stated guarantee and the state a request would see; asking spends nothing (the next real
// request gets what the explanation said, and on Redis no key is written by asking); once
// the key is spent it names the refusing limit and its Retry-After. The status page is
// self-contained, and in headless Chromium (Debian's `chromium`) its script renders the
// routes, the live decision rates and an explanation.

#include "harness.hpp"
#include "support/runtime_fixture.hpp"
#include "support/temp_dir.hpp"

#include <boost/json.hpp>

#include "support/child_process.hpp"

#include "sluice/store/cluster_slots.hpp"

#include <signal.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <thread>

namespace sluice::test {
namespace {

namespace json = boost::json;
using namespace std::chrono_literals;

constexpr const char* rules_yaml = R"(
listen: 127.0.0.1:0
store: STORE
identity: {api_key: {header: X-API-Key}}
plans: {free: {limits: []}, pro: {limits: []}}
api_keys: {key-a: free, key-p: pro}
upstreams: {api: {url: UPSTREAM_URL}, rpc: {url: UPSTREAM_URL, http2: true}}
routes:
  - name: items
    match: {path_prefix: /v1/items}
    upstream: api
    limits:
      - name: items_key
        by: api_key
        rate: ITEMS_RATE
        burst: 3
        plans: {pro: {rate: 100/1m, burst: 100}}
  - name: open
    match: {path_prefix: /open}
    upstream: api
  - name: rpc
    match: {path_prefix: /rpc.Items/}
    upstream: rpc
    limits:
      - {name: rpc_ip, by: ip, rate: 5/1m, burst: 5}
)";

struct explain_world {
  /// `items_rate`: the rate of the items route's limit (burst 3).
  explicit explain_world(store_kind kind, const std::string& items_rate = "3/1m")
      : redis(kind == store_kind::redis ? std::make_unique<redis_server>() : nullptr),
        rt(substitute(rules_yaml,
                      {{"UPSTREAM_URL", upstream.url()},
                       {"ITEMS_RATE", items_rate},
                       {"STORE", redis ? "{type: redis, address: \"127.0.0.1:" +
                                             std::to_string(redis->port()) +
                                             "\", timeout: " + redis_test_deadline() + "}"
                                       : "{type: memory}"}})) {}
  client_response get(const std::string& target, const header_list& headers = {}) const {
    return test::get(rt.port(), target, headers);
  }
  client_response admin(const std::string& target, const std::string& method = "GET") const {
    return rt.admin(target, method);
  }
  /// GET /admin/explain?QUERY: 200 and its JSON.
  json::object explain(const std::string& query) const {
    auto r = admin("/admin/explain?" + query);
    EXPECT_EQ(r.status, 200u) << r.body;
    EXPECT_EQ(r.header("Content-Type"), "application/json");
    if (r.status != 200) return json::object{{"status", r.status}, {"body", r.body}};
    return json::parse(r.body).as_object();
  }

  std::unique_ptr<redis_server> redis;
  upstream_server upstream;
  runtime_fixture rt;
};

std::string text(const json::value& v) {
  return std::string(v.as_string());
}

class explain : public ::testing::TestWithParam<store_kind> {};

TEST_P(explain, names_route_plan_limits_and_spends_nothing) {
  // 3/1h: one token per 20 minutes, so no token comes back while the test runs, however slow
  // the machine.
  explain_world w(GetParam(), "3/1h");
  for (int i = 0; i < 5; ++i) {
    auto e = w.explain("path=/v1/items/7&api_key=key-a");
    EXPECT_EQ(text(e.at("route")), "items");
    EXPECT_EQ(text(e.at("caller").at("plan")), "free");
    EXPECT_EQ(text(e.at("caller").at("identity")), "api_key");
    const auto& limits = e.at("limits").as_array();
    ASSERT_EQ(limits.size(), 1u);
    const auto& l = limits[0].as_object();
    EXPECT_EQ(text(l.at("name")), "items_key");
    EXPECT_EQ(text(l.at("algorithm")), "token_bucket");
    EXPECT_NE(text(l.at("stated_guarantee")).find("burst 3"), std::string::npos)
        << l.at("stated_guarantee");
    // What the request's headers would say: Remaining 2 after it, every time (nothing spent).
    EXPECT_TRUE(l.at("now").at("admits").as_bool());
    EXPECT_EQ(l.at("now").at("remaining").as_int64(), 2);
    EXPECT_EQ(l.at("now").at("limit").as_int64(), 3);
    EXPECT_EQ(text(e.at("outcome").at("decision")), "allowed");
  }
  if (w.redis) {
    EXPECT_EQ(w.redis->command({"DBSIZE"}).integer, 0) << "explaining wrote a key";
  }
  // The real requests get what the explanation said: 2, 1, 0, then 429.
  for (long remaining : {2, 1, 0}) {
    auto r = w.get("/v1/items/7", {{"X-API-Key", "key-a"}});
    EXPECT_EQ(r.status, 200u);
    EXPECT_EQ(r.header("X-RateLimit-Remaining"), std::to_string(remaining));
  }
  auto e = w.explain("path=/v1/items/7&api_key=key-a");
  EXPECT_EQ(text(e.at("outcome").at("decision")), "limited");
  EXPECT_EQ(e.at("outcome").at("status").as_int64(), 429);
  EXPECT_EQ(text(e.at("outcome").at("limit")), "items_key");
  const auto retry = e.at("outcome").at("retry_after_ms").as_int64();
  EXPECT_GT(retry, 1'140'000);  // one token per 20 min, less the time the test took
  EXPECT_LE(retry, 1'200'000);
  EXPECT_FALSE(e.at("limits").as_array()[0].at("now").at("admits").as_bool());
  auto refused = w.get("/v1/items/7", {{"X-API-Key", "key-a"}});
  EXPECT_EQ(refused.status, 429u);
  // The refusal's Retry-After is what explain said just before it and what it says just
  // after (the wait only shrinks): between the two, in whole seconds rounded up.
  const auto after =
      w.explain("path=/v1/items/7&api_key=key-a").at("outcome").at("retry_after_ms").as_int64();
  const long long said = std::stoll(refused.header("Retry-After"));
  EXPECT_LE(said, (retry + 999) / 1000);
  EXPECT_GE(said, (after + 999) / 1000);

  // Another plan's parameters; a route without limits; no route; an unknown key.
  auto pro = w.explain("path=/v1/items&api_key=key-p");
  SCOPED_TRACE(json::serialize(pro));
  EXPECT_EQ(text(pro.at("caller").at("plan")), "pro");
  EXPECT_EQ(pro.at("limits").as_array()[0].at("now").at("remaining").as_int64(), 99);
  auto open = w.explain("path=/open/x");
  ASSERT_TRUE(open.contains("outcome")) << json::serialize(open);
  EXPECT_EQ(text(open.at("outcome").at("decision")), "unlimited");
  auto none = w.explain("path=/nowhere");
  SCOPED_TRACE(json::serialize(none));
  EXPECT_TRUE(none.at("route").is_null());
  EXPECT_EQ(none.at("outcome").at("status").as_int64(), 404);
  // A route whose upstream speaks HTTP/2 (gRPC) is explained as its HTTP/2 clients' requests
  // are decided (an HTTP/1.1 request to it gets 505 before any limit).
  auto rpc = w.explain("method=POST&path=/rpc.Items/Get");
  SCOPED_TRACE(json::serialize(rpc));
  EXPECT_EQ(text(rpc.at("route")), "rpc");
  ASSERT_EQ(rpc.at("limits").as_array().size(), 1u);
  EXPECT_EQ(rpc.at("limits").as_array()[0].at("now").at("remaining").as_int64(), 4);
  EXPECT_EQ(text(rpc.at("outcome").at("decision")), "allowed");
  EXPECT_EQ(w.get("/rpc.Items/Get").status, 505u);
  auto anon = w.explain("path=/v1/items&api_key=nobody&ip=192.0.2.7");
  EXPECT_EQ(text(anon.at("caller").at("identity")), "anonymous");
  EXPECT_EQ(text(anon.at("request").at("ip")), "192.0.2.7");
}

// Where Redis holds each bucket: the key (a group hash in the default hash layout) with the
// bucket's field, and the key's cluster hash slot; nothing of it on the memory store.
TEST_P(explain, names_where_redis_holds_each_bucket) {
  explain_world w(GetParam());
  auto e = w.explain("path=/v1/items/7&api_key=key-a");
  const auto& l = e.at("limits").as_array().at(0).as_object();
  if (!w.redis) {
    EXPECT_FALSE(l.contains("redis")) << json::serialize(l);
    return;
  }
  ASSERT_TRUE(l.contains("redis")) << json::serialize(l);
  const auto& where = l.at("redis").as_object();
  const std::string key = text(where.at("key"));
  const std::string field = text(where.at("field"));
  EXPECT_EQ(key.rfind("sl:{items_key|k|#", 0), 0u) << key;
  EXPECT_EQ(field, "rkey-a");
  EXPECT_EQ(where.at("slot").as_int64(), store::key_hash_slot(key));
  EXPECT_EQ(w.redis->command({"EXISTS", key}).integer, 0);  // explaining writes nothing
  ASSERT_EQ(w.get("/v1/items/7", {{"X-API-Key", "key-a"}}).status, 200u);
  EXPECT_EQ(w.redis->command({"HEXISTS", key, field}).integer, 1)
      << "the request's bucket is where explain said";
}

TEST_P(explain, bad_queries_get_400) {
  explain_world w(GetParam());
  EXPECT_EQ(w.admin("/admin/explain").status, 400u);
  EXPECT_EQ(w.admin("/admin/explain?method=GET").status, 400u);          // no path
  EXPECT_EQ(w.admin("/admin/explain?path=v1").status, 400u);             // not origin-form
  EXPECT_EQ(w.admin("/admin/explain?path=/a&colour=red").status, 400u);  // unknown parameter
  EXPECT_EQ(w.admin("/admin/explain?path=/a&path=/b").status, 400u);     // twice
  // A malformed method or client address: 400 naming it.
  for (const auto& [query, named] : std::vector<std::pair<std::string, std::string>>{
           {"path=/v1/items&method=FROB%20", "method 'FROB '"},
           {"path=/v1/items&ip=not-an-ip", "ip 'not-an-ip' is not an IP address"},
           {"path=/v1/items&ip=%5B::1%5D", "ip '[::1]'"},
           {"path=/v1/items&ip=192.0.2.300", "ip '192.0.2.300'"}}) {
    const auto r = w.admin("/admin/explain?" + query);
    EXPECT_EQ(r.status, 400u) << query;
    EXPECT_NE(r.body.find(named), std::string::npos) << query << ": " << r.body;
  }
  EXPECT_EQ(w.explain("path=/v1/items&ip=::1").at("request").at("ip").as_string(), "::1");
}

// The answer echoes the query's decoded bytes (path, key, method, ip): ill-formed UTF-8
// among them comes back as U+FFFD, so the body is still JSON (RFC 8259 §8.1); explain()
// parses it strictly (Boost.JSON checks UTF-8).
TEST_P(explain, ill_formed_utf8_in_the_query_still_answers_json) {
  explain_world w(GetParam());
  auto e = w.explain("path=/v1/items/%FF%C3%A9&api_key=key-%FF");
  EXPECT_EQ(text(e.at("request").at("path")), "/v1/items/\xEF\xBF\xBD\xC3\xA9");
  // A method or address with such bytes is malformed: 400 (plain text, not JSON).
  EXPECT_EQ(w.admin("/admin/explain?path=/v1/items&method=G%C0T").status, 400u);
  EXPECT_EQ(w.admin("/admin/explain?path=/v1/items&ip=%FE1").status, 400u);
}

// GET /: one HTML document with nothing fetched from elsewhere; /admin/config reports the
// last refused reload (what the page shows) until a reload succeeds.
TEST(status_page, is_self_contained_and_reports_the_last_reload_error) {
  explain_world w(store_kind::memory);
  auto page = w.admin("/");
  EXPECT_EQ(page.status, 200u);
  EXPECT_EQ(page.header("Content-Type"), "text/html; charset=utf-8");
  EXPECT_NE(page.body.find("<form id=\"explain\""), std::string::npos);
  EXPECT_FALSE(std::regex_search(page.body, std::regex(R"((src|href)\s*=\s*["']?(https?:)?//)")))
      << "an external asset";
  EXPECT_EQ(page.body.find("<link"), std::string::npos);
  EXPECT_EQ(w.admin("/", "POST").status, 405u);

  auto config = json::parse(w.admin("/admin/config").body).as_object();
  EXPECT_TRUE(config.at("last_reload_error").is_null());
  const std::string good = [&] {
    std::ifstream in(w.rt.file());
    return std::string(std::istreambuf_iterator<char>(in), {});
  }();
  std::ofstream(w.rt.file()) << good << "\nroutes: oops\n";  // a duplicate key: refused
  EXPECT_EQ(w.admin("/admin/reload", "POST").status, 400u);
  config = json::parse(w.admin("/admin/config").body).as_object();
  ASSERT_TRUE(config.at("last_reload_error").is_string());
  EXPECT_NE(text(config.at("last_reload_error")).find("rules.yaml:"), std::string::npos)
      << config.at("last_reload_error");
  std::ofstream(w.rt.file()) << good;
  EXPECT_EQ(w.admin("/admin/reload", "POST").status, 200u);
  config = json::parse(w.admin("/admin/config").body).as_object();
  EXPECT_TRUE(config.at("last_reload_error").is_null());
}

// The page in a real browser, driven through the DevTools protocol (tests/support/browser.py):
// after some traffic (3 requests admitted, 1 refused), headless Chromium loads the page, runs
// `steps` (JSON: waits and evaluations, each wait naming what it awaits when it times out) and
// returns the DOM it ends with; the PNG screenshot of the page is kept as a test artifact
// (artifacts/<name>.png beside the test binary, or in $SLUICE_TEST_ARTIFACTS). The limit is
// 3/1h: the refused caller stays refused however long Chromium takes (at 3/1m a token came back
// after 20 s — a loaded machine's browser start could outlast it, and the page then explained
// an admission). The DOM is empty (the test failed) when the browser did not finish.
struct browser_run {
  std::string dom;
  std::filesystem::path screenshot;
};

browser_run run_browser(const explain_world& w, const std::string& name, const std::string& steps) {
  const char* const chromium = "/usr/lib/chromium/chromium";
  temp_dir dir("chromium");
  const char* env = std::getenv("SLUICE_TEST_ARTIFACTS");
  const std::filesystem::path artifacts =
      env && *env ? std::filesystem::path(env) : std::filesystem::current_path() / "artifacts";
  std::filesystem::create_directories(artifacts);
  browser_run out{"", artifacts / (name + ".png")};
  std::filesystem::remove(out.screenshot);
  std::ofstream(dir.path / "steps.json") << steps;
  const std::string url = "http://127.0.0.1:" + std::to_string(w.rt.admin_port()) + "/";
  // Budgets for a wait, not assertions: scaled by SLUICE_TEST_TIME_FACTOR (wait_exit scales
  // its own).
  const auto budget = scaled(std::chrono::seconds(60));
  const auto seconds = [](std::chrono::milliseconds d) { return std::to_string(d.count() / 1000); };
  child_process browser(
      {"/usr/bin/timeout", seconds(scaled(90s)), "/usr/bin/python3",
       std::string(SLUICE_SOURCE_DIR) + "/tests/support/browser.py", "--chromium", chromium,
       "--profile", (dir.path / "profile").string(), "--url", url, "--steps",
       (dir.path / "steps.json").string(), "--dom", (dir.path / "dom.html").string(),
       "--screenshot", out.screenshot.string(), "--timeout", seconds(budget)},
      dir.path / "out.txt", dir.path / "err.txt");
  const auto exit = browser.wait_exit(95s);
  EXPECT_EQ(exit.value_or(-1), 0) << browser.out() << browser.err();
  if (exit.value_or(-1) != 0) return out;
  std::ifstream in(dir.path / "dom.html");
  out.dom.assign(std::istreambuf_iterator<char>(in), {});
  EXPECT_FALSE(out.dom.empty()) << "no DOM from chromium";
  return out;
}

bool has_chromium() {
  return std::filesystem::exists("/usr/lib/chromium/chromium");
}

// The page as the browser renders it: the routes and guarantees from /admin/config, a rate
// row per route and decision drawn by the page's script from two /metrics samples (a
// non-zero count among them), the store connected, no reload error; and a screenshot.
TEST(status_page, renders_in_a_browser) {
  if (!has_chromium()) GTEST_SKIP() << "chromium is not installed";
  explain_world w(store_kind::memory, "3/1h");
  for (int i = 0; i < 4; ++i)
    w.get("/v1/items", {{"X-API-Key", "key-a"}});  // 3 admitted, 1 refused
  // The rate rows are the script's once a cell holds a per-second rate ("0.0"; the server
  // writes "–" there).
  const auto run = run_browser(w, "status_page", R"json([
    {"wait": "document.body.innerText.includes('last reload: no error')"},
    {"wait": "[...document.querySelectorAll('#rates td.num')].some(td => td.textContent.includes('.'))"},
    {"wait": "[...document.querySelectorAll('#rates td')].some(td => td.textContent === 'limited')"}
  ])json");
  ASSERT_FALSE(run.dom.empty());
  const auto& dom = run.dom;
  SCOPED_TRACE(dom.substr(0, 4000));
  EXPECT_NE(dom.find("last reload: no error"), std::string::npos);
  EXPECT_NE(dom.find("<td rowspan=\"1\">items</td>"), std::string::npos);       // the route table
  EXPECT_NE(dom.find("exact: at most 3 + 3/1h x w units"), std::string::npos);  // its guarantee
  EXPECT_NE(dom.find("<td>items</td><td>allowed</td>"), std::string::npos);     // a rate row
  EXPECT_NE(dom.find("<td>items</td><td>limited</td>"), std::string::npos);
  // A decision count that is not zero: the 3 admitted requests.
  EXPECT_TRUE(
      std::regex_search(dom, std::regex("<td>items</td><td>allowed</td><td class=\"num\">[^<]*</td>"
                                        "<td class=\"num\">3</td>")))
      << "no non-zero allowed count";
  EXPECT_NE(dom.find("connected</td><td class=\"ok\">yes"), std::string::npos);
  // The screenshot: a PNG file of some size.
  std::ifstream png(run.screenshot, std::ios::binary);
  const std::string bytes(std::istreambuf_iterator<char>(png), {});
  ASSERT_GT(bytes.size(), 10'000u) << run.screenshot;
  EXPECT_EQ(bytes.substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));
}

// The explain form, filled in and submitted as a user would (requestSubmit runs the submit
// handler): the page shows the refused caller's verdict in place.
TEST(status_page, explains_from_its_form_in_a_browser) {
  if (!has_chromium()) GTEST_SKIP() << "chromium is not installed";
  explain_world w(store_kind::memory, "3/1h");
  for (int i = 0; i < 4; ++i)
    w.get("/v1/items", {{"X-API-Key", "key-a"}});  // 3 admitted, 1 refused
  const auto run = run_browser(w, "status_page_explain", R"json([
    {"eval": "(() => { const f = document.getElementById('explain'); f.elements.path.value = '/v1/items'; f.elements.api_key.value = 'key-a'; f.requestSubmit(); })()"},
    {"wait": "document.getElementById('verdict').textContent.includes('route items')"}
  ])json");
  ASSERT_FALSE(run.dom.empty());
  SCOPED_TRACE(run.dom.substr(0, 4000));
  EXPECT_NE(run.dom.find("route items: limited (429) by items_key"), std::string::npos);
}

INSTANTIATE_TEST_SUITE_P(stores, explain, ::testing::Values(store_kind::memory, store_kind::redis),
                         [](const auto& info) {
                           return info.param == store_kind::memory ? "memory" : "redis";
                         });

}  // namespace
}  // namespace sluice::test
