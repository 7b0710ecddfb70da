// SPDX-License-Identifier: Apache-2.0
// sluice-test-support: gateway_fixture redis_server upstream_server http_client
// GET /metrics on the admin listener: a real gateway (runtime with its admin listener, from a
// rules file on disk), real upstreams and, for the redis store, a real redis-server that the
// test freezes and kills. Traffic is sent over real HTTP and the scraped exposition is checked
// line by line: its format (text format 0.0.4) and the exact value of every counter the
// traffic moved.

#include "harness.hpp"
#include "support/child_process.hpp"
#include "support/temp_dir.hpp"

#include "sluice/app/runtime.hpp"
#include "sluice/config/loader.hpp"

#include "sluice/version.hpp"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

namespace sluice::test {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using steady = std::chrono::steady_clock;

/// One scrape, parsed: every sample line as `name{labels}` -> value, and every family's
/// TYPE. Parsing checks the text format 0.0.4 as it goes (ADD_FAILUREs name the line).
struct scrape {
  std::map<std::string, double> series;
  std::map<std::string, std::string> types;

  /// The value of `key` (`name` or `name{a="x",b="y"}`, labels in exposition order).
  double at(const std::string& key) const {
    auto it = series.find(key);
    if (it == series.end()) {
      ADD_FAILURE() << "no series " << key;
      return -1;
    }
    return it->second;
  }
  bool has(const std::string& key) const { return series.count(key) != 0; }
};

scrape parse(const std::string& text) {
  scrape s;
  static const std::regex help(R"(# HELP ([a-zA-Z_:][a-zA-Z0-9_:]*) \S.*)");
  static const std::regex type(R"(# TYPE ([a-zA-Z_:][a-zA-Z0-9_:]*) (counter|gauge|histogram))");
  static const std::regex sample(
      R"(([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\.)*")"
      R"((?:,[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\.)*")*\})? (-?[0-9]+(?:\.[0-9]+)?(?:e[-+]?[0-9]+)?|\+Inf|-Inf|NaN))");
  EXPECT_FALSE(text.empty());
  EXPECT_EQ(text.back(), '\n') << "the exposition ends with a line feed";
  std::set<std::string> helped;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    std::smatch m;
    if (std::regex_match(line, m, help)) {
      EXPECT_TRUE(helped.insert(m[1]).second) << "HELP twice: " << line;
    } else if (std::regex_match(line, m, type)) {
      EXPECT_TRUE(helped.count(m[1])) << "TYPE before HELP: " << line;
      EXPECT_TRUE(s.types.emplace(m[1], m[2]).second) << "TYPE twice: " << line;
    } else if (std::regex_match(line, m, sample)) {
      std::string name = m[1];
      // A histogram's series carry a suffix; the family's TYPE comes first.
      std::string family = name;
      for (const char* suffix : {"_bucket", "_sum", "_count"}) {
        const std::string sx = suffix;
        if (!s.types.count(family) && family.size() > sx.size() &&
            family.compare(family.size() - sx.size(), sx.size(), sx) == 0) {
          family = family.substr(0, family.size() - sx.size());
        }
      }
      EXPECT_TRUE(s.types.count(family)) << "sample without a TYPE: " << line;
      if (s.types.count(family) && s.types[family] == "counter") {
        EXPECT_TRUE(name.ends_with("_total")) << "counter names end in _total: " << line;
      }
      // sluice's own families, and the process_ ones every client library exports.
      EXPECT_TRUE(name.starts_with("sluice_") || name.starts_with("process_")) << line;
      const std::string key = name + m[2].str();
      const std::string v = m[3];
      const double value = v == "+Inf" ? HUGE_VAL : std::stod(v);
      EXPECT_TRUE(s.series.emplace(key, value).second) << "series twice: " << line;
    } else {
      ADD_FAILURE() << "not a 0.0.4 line: '" << line << "'";
    }
  }
  return s;
}

/// Upstreams, an optional redis-server, and a runtime (gateway + admin listener on port 0)
/// from a rules file in which UPSTREAM_URL, SLOW_URL, GONE_URL and STORE are substituted.
struct metrics_world {
  metrics_world(store_kind kind, const std::string& yaml, unsigned workers,
                const std::string& store_extra = "")
      // redis-server first: a child process keeps copies of the listening sockets open when
      // it starts (they are inherited), and `gone` must stop listening for good.
      : kind(kind), redis(kind == store_kind::redis ? std::make_unique<redis_server>() : nullptr) {
    canned_response late;
    late.delay = 400ms;  // past the `slow` upstream's 100 ms timeout: 504
    slow.set_response(late);
    const std::string gone_url = gone.url();
    gone.stop();  // nothing listens there any more: connections are refused (502)
    std::string store =
        kind == store_kind::redis
            ? "{type: redis, address: \"127.0.0.1:" + std::to_string(redis->port()) + "\"" +
                  // (no deadline of the test's own: 250 ms, scaled, where the default 5 ms is
                  // one a loaded machine can miss, and every count here is the store's)
                  (store_extra.empty() ? ", timeout: " + redis_test_deadline() : store_extra) + "}"
            : "{type: memory}";
    file = dir.path / "rules.yaml";
    std::ofstream(file) << substitute(yaml, {{"UPSTREAM_URL", upstream.url()},
                                             {"SLOW_URL", slow.url()},
                                             {"GONE_URL", gone_url},
                                             {"STORE", store}});
    auto loaded = config::load_file(file.string());
    if (!loaded.ok()) throw std::runtime_error(loaded.diagnostics.front().to_string());
    app::runtime_options options;
    options.gateway.listen = "127.0.0.1:0";
    options.gateway.admin = "127.0.0.1:0";
    options.gateway.workers = workers;
    options.watch = false;  // reloads here are the admin's only
    rt = std::make_unique<app::runtime>(file.string(), loaded.value, options);
    rt->start();
  }

  std::uint16_t port() const { return rt->gateway().endpoint().port(); }
  client_response get(const std::string& target, const header_list& headers = {}) const {
    return test::get(port(), target, headers);
  }
  client_response admin(const std::string& method, const std::string& target) const {
    http_connection c(rt->admin_endpoint()->port());
    return c.request(method, target);
  }
  /// GET /metrics: 200 with the 0.0.4 Content-Type, parsed.
  scrape metrics() const {
    auto r = admin("GET", "/metrics");
    EXPECT_EQ(r.status, 200u) << r.body;
    EXPECT_EQ(r.header("Content-Type"), "text/plain; version=0.0.4");
    return parse(r.body);
  }
  /// `promtool check metrics` (Debian's prometheus package) on a scrape: it parses the text
  /// as Prometheus does and lints names, units, HELP and histograms; no finding is allowed.
  void expect_promtool_clean() const {
    if (!fs::exists("/usr/bin/promtool")) GTEST_SKIP() << "prometheus is not installed";
    const fs::path scraped = dir.path / "scrape.txt", findings = dir.path / "promtool.txt";
    std::ofstream(scraped) << admin("GET", "/metrics").body;
    const int rc = std::system(("/usr/bin/promtool check metrics < " + scraped.string() + " > " +
                                findings.string() + " 2>&1")
                                   .c_str());
    std::ifstream in(findings);
    const std::string said(std::istreambuf_iterator<char>(in), {});
    EXPECT_EQ(rc, 0) << said;
    EXPECT_EQ(said, "") << "promtool check metrics";
  }

  store_kind kind;
  std::unique_ptr<redis_server> redis;
  temp_dir dir;
  fs::path file;
  upstream_server upstream, slow, gone;
  std::unique_ptr<app::runtime> rt;
};

/// The `sluice_requests_total` series of `route`, `decision` and client `protocol`.
std::string req(const std::string& route, const std::string& decision,
                const std::string& protocol = "http/1.1") {
  return "sluice_requests_total{route=\"" + route + "\",decision=\"" + decision + "\",protocol=\"" +
         protocol + "\"}";
}
/// `sluice_http_request_duration_seconds_count` of `route`, `code_class` and client `protocol`.
std::string exchanges(const std::string& route, const std::string& code_class,
                      const std::string& protocol = "http/1.1") {
  return "sluice_http_request_duration_seconds_count{route=\"" + route + "\",code_class=\"" +
         code_class + "\",protocol=\"" + protocol + "\"}";
}
std::string policy(const std::string& route, const std::string& p) {
  return "sluice_failure_policy_applied_total{route=\"" + route + "\",policy=\"" + p + "\"}";
}

const header_list key_a{{"X-API-Key", "key-a"}};

// ---------------------------------------------------------------------------------------------
// Allowed, limited, unlimited, shadow-limited, 502, 504 and refused traffic: exact counts.

const char* const traffic_rules = R"(
store: STORE
identity: {api_key: {header: X-API-Key}}
plans: {free: {limits: []}}
api_keys: {key-a: free}
upstreams:
  api: {url: UPSTREAM_URL}
  slow: {url: SLOW_URL, timeout: 100ms}
  gone: {url: GONE_URL}
routes:
  - name: search
    match: {path_prefix: /v1/search}
    upstream: api
    limits:
      - {name: search_key, by: api_key, rate: 3/1m, burst: 3}
  - name: shadowed
    match: {path_prefix: /v1/shadowed}
    upstream: api
    limits:
      - {name: shadow_key, by: api_key, rate: 1/1m, burst: 1, mode: shadow}
  - name: slow
    match: {path_prefix: /v1/slow}
    upstream: slow
  - name: gone
    match: {path_prefix: /v1/gone}
    upstream: gone
  - name: open
    match: {path_prefix: /v1/open}
    upstream: api
)";

class metrics_cases : public testing::TestWithParam<store_kind> {};

TEST_P(metrics_cases, counts_every_decision_exactly) {
  metrics_world w(GetParam(), traffic_rules, 2);

  // Before any traffic: every family is there, every route at 0.
  {
    auto m = w.metrics();
    EXPECT_EQ(m.types.at("sluice_requests_total"), "counter");
    EXPECT_EQ(m.types.at("sluice_store_check_duration_seconds"), "histogram");
    EXPECT_EQ(m.types.at("sluice_store_breaker_state"), "gauge");
    EXPECT_EQ(m.at(req("search", "allowed")), 0);
    EXPECT_EQ(m.at(req("open", "unlimited")), 0);
    EXPECT_EQ(m.at("sluice_store_checks_total"), 0);
    EXPECT_EQ(m.at("sluice_config_generation"), 1);
    EXPECT_EQ(m.at("sluice_build_info{version=\"" + std::string(sluice::version) +
                   "\",revision=\"" + std::string(sluice::revision) + "\"}"),
              1);
  }

  // search: burst 3 -> 3 allowed, then 2 limited (429).
  for (int i = 0; i < 5; ++i) EXPECT_EQ(w.get("/v1/search", key_a).status, i < 3 ? 200u : 429u);
  // shadowed: both forwarded; the second would have been refused by the shadow limit.
  for (int i = 0; i < 2; ++i) EXPECT_EQ(w.get("/v1/shadowed", key_a).status, 200u);
  // open: no limit applies.
  for (int i = 0; i < 2; ++i) EXPECT_EQ(w.get("/v1/open").status, 200u);
  // Upstream failures: refused connection (502), no answer within 100 ms (504).
  EXPECT_EQ(w.get("/v1/gone").status, 502u);
  EXPECT_EQ(w.get("/v1/slow").status, 504u);
  // Refused before any decision: no route (404), a non-canonical target (400).
  EXPECT_EQ(w.get("/nowhere").status, 404u);
  EXPECT_EQ(w.get("/v1/%2e%2e/%2e%2e/x").status, 400u);

  auto m = w.metrics();
  EXPECT_EQ(m.at(req("search", "allowed")), 3);
  EXPECT_EQ(m.at(req("search", "limited")), 2);
  EXPECT_EQ(m.at(req("search", "unlimited")), 0);
  EXPECT_EQ(m.at(req("search", "fail_open")), 0);
  EXPECT_EQ(m.at(req("search", "fail_closed")), 0);
  EXPECT_EQ(m.at(req("shadowed", "allowed")), 2);
  EXPECT_EQ(m.at(req("shadowed", "limited")), 0);
  EXPECT_EQ(m.at("sluice_shadow_limited_total{route=\"shadowed\"}"), 1);
  EXPECT_EQ(m.at("sluice_shadow_limited_total{route=\"search\"}"), 0);
  EXPECT_EQ(m.at(req("open", "unlimited")), 2);
  EXPECT_EQ(m.at(req("gone", "unlimited")), 1);
  EXPECT_EQ(m.at(req("slow", "unlimited")), 1);
  EXPECT_EQ(m.at("sluice_upstream_errors_total{route=\"gone\",status=\"502\"}"), 1);
  EXPECT_EQ(m.at("sluice_upstream_errors_total{route=\"gone\",status=\"504\"}"), 0);
  EXPECT_EQ(m.at("sluice_upstream_errors_total{route=\"slow\",status=\"504\"}"), 1);
  EXPECT_EQ(m.at("sluice_upstream_errors_total{route=\"search\",status=\"502\"}"), 0);
  EXPECT_EQ(m.at("sluice_bad_requests_total"), 2);
  // Per upstream: a response head timed for each of the 7 forwarded to api (search 3,
  // shadowed 2, open 2), none from slow (no head in time) or gone (never connected); the
  // failures by cause.
  EXPECT_EQ(m.types.at("sluice_upstream_response_duration_seconds"), "histogram");
  EXPECT_EQ(m.at("sluice_upstream_response_duration_seconds_count{upstream=\"api\"}"), 7);
  EXPECT_EQ(m.at("sluice_upstream_response_duration_seconds_bucket{upstream=\"api\",le=\"+Inf\"}"),
            7);
  EXPECT_GT(m.at("sluice_upstream_response_duration_seconds_sum{upstream=\"api\"}"), 0);
  EXPECT_LT(m.at("sluice_upstream_response_duration_seconds_sum{upstream=\"api\"}"), 7 * 1.0);
  EXPECT_EQ(m.at("sluice_upstream_response_duration_seconds_count{upstream=\"slow\"}"), 0);
  EXPECT_EQ(m.at("sluice_upstream_response_duration_seconds_count{upstream=\"gone\"}"), 0);
  for (const char* up : {"api", "slow", "gone"}) {
    for (const char* cause :
         {"unreachable", "timeout", "closed", "malformed", "too_large", "body_failed", "tls"}) {
      const bool failed = (std::string(up) == "gone" && std::string(cause) == "unreachable") ||
                          (std::string(up) == "slow" && std::string(cause) == "timeout");
      EXPECT_EQ(m.at(std::string("sluice_upstream_failures_total{upstream=\"") + up +
                     "\",cause=\"" + cause + "\"}"),
                failed ? 1 : 0)
          << up << " " << cause;
    }
  }
  // The pool holds what it was given back: at least one api connection, never more than
  // were opened.
  EXPECT_GE(m.at("sluice_upstream_idle_connections"), 1);
  EXPECT_LE(m.at("sluice_upstream_idle_connections"),
            m.at("sluice_upstream_connections_opened_total"));
  for (const char* to : {"open", "half_open", "closed"}) {
    EXPECT_EQ(m.at(std::string("sluice_store_breaker_transitions_total{to=\"") + to + "\"}"), 0)
        << to;
  }
  for (const char* p : {"fail_open", "fail_closed", "local"})
    EXPECT_EQ(m.at(policy("search", p)), 0) << p;

  // Seven checks were decided (5 search, 2 shadowed), each timed once. On Redis the second
  // refusal of search is answered by the over-limit cache when it reaches the worker that saw
  // the first (two workers): then six reached the store.
  const double cached = m.at("sluice_store_cached_refusals_total");
  EXPECT_LE(cached, GetParam() == store_kind::redis ? 1 : 0);
  const double reached = 7 - cached;
  EXPECT_EQ(m.at("sluice_store_checks_total"), reached);
  EXPECT_EQ(m.at("sluice_store_check_duration_seconds_count"), reached);
  EXPECT_EQ(m.at("sluice_store_check_duration_seconds_bucket{le=\"+Inf\"}"), reached);
  EXPECT_GT(m.at("sluice_store_check_duration_seconds_sum"), 0);
  EXPECT_LT(m.at("sluice_store_check_duration_seconds_sum"), 7 * 0.25);
  // Buckets are cumulative.
  double previous = 0;
  for (const char* le : {"0.0001", "0.00025", "0.0005", "0.001", "0.0025", "0.005", "0.01", "0.025",
                         "0.05", "0.1", "0.25", "1", "2.5", "5", "10", "+Inf"}) {
    const double v =
        m.at(std::string("sluice_store_check_duration_seconds_bucket{le=\"") + le + "\"}");
    EXPECT_GE(v, previous) << le;
    previous = v;
  }
  for (const char* c : {"timeouts", "errors", "unavailable", "late_replies", "breaker_opens"})
    EXPECT_EQ(m.at(std::string("sluice_store_") + c + "_total"), 0) << c;
  // The store connections: one per worker for redis, the one shared memory store.
  const double stores = GetParam() == store_kind::redis ? 2 : 1;
  EXPECT_EQ(m.at("sluice_store_connected"), stores);
  EXPECT_EQ(m.at("sluice_store_breaker_state{state=\"closed\"}"), stores);
  EXPECT_EQ(m.at("sluice_store_breaker_state{state=\"open\"}"), 0);
  EXPECT_EQ(m.at("sluice_store_breaker_state{state=\"half_open\"}"), 0);
  // The memory store holds key-a's two drained buckets (search_key, shadow_key); Redis
  // holds its own.
  EXPECT_EQ(m.at("sluice_store_buckets"), GetParam() == store_kind::redis ? 0 : 2);
  EXPECT_EQ(m.at("sluice_store_evictions_total"), 0);
  if (GetParam() == store_kind::redis) {
    EXPECT_GE(m.at("sluice_store_script_loads_total"), 2);  // each connection loads it
  }
  // Upstream connections: each request either opened one or reused a pooled one (the 504's
  // connection is not kept; the refused one never opened).
  // A stale pooled connection is retried on a new one: counted as a reuse, a retry and a
  // new connection.
  EXPECT_GE(m.at("sluice_upstream_connections_opened_total"), 1);
  EXPECT_EQ(m.at("sluice_upstream_connections_opened_total") +
                m.at("sluice_upstream_connection_reuses_total") -
                m.at("sluice_upstream_retries_total{reason=\"not_sent\"}") -
                m.at("sluice_upstream_retries_total{reason=\"idempotent\"}"),
            3 + 2 + 2 + 1);  // search allowed, shadowed, open, slow

  // The same numbers as the gateway's own counters.
  const auto st = w.rt->gateway().stats();
  EXPECT_EQ(st.allowed, 5u);
  EXPECT_EQ(st.rejected, 2u);
  EXPECT_EQ(st.unlimited, 4u);
  EXPECT_EQ(st.shadow_rejections, 1u);
  EXPECT_EQ(st.upstream_errors, 2u);
  EXPECT_EQ(st.bad_requests, 2u);
  EXPECT_EQ(st.requests, 13u);

  // Reloads: a valid one moves the generation and its timestamp, an invalid one is counted
  // as failed and changes neither.
  const double loaded = m.at("sluice_config_last_reload_success_timestamp_seconds");
  const double now =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  EXPECT_GT(loaded, now - 60);
  EXPECT_LE(loaded, now + 1);
  EXPECT_EQ(m.at("sluice_config_reloads_total{result=\"ok\"}"), 0);
  // The wall clock past the load's time, so that the reload's is later.
  ASSERT_EVENTUALLY(
      1s,
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count() >
          loaded + 0.001);
  EXPECT_EQ(w.admin("POST", "/admin/reload").status, 200u);
  auto m2 = w.metrics();
  EXPECT_EQ(m2.at("sluice_config_generation"), 2);
  EXPECT_EQ(m2.at("sluice_config_reloads_total{result=\"ok\"}"), 1);
  EXPECT_EQ(m2.at("sluice_config_reloads_total{result=\"failed\"}"), 0);
  const double reloaded = m2.at("sluice_config_last_reload_success_timestamp_seconds");
  EXPECT_GT(reloaded, loaded);
  // Counts carry over a reload (they follow the route's name).
  EXPECT_EQ(m2.at(req("search", "allowed")), 3);
  std::ofstream(w.file, std::ios::trunc) << "routes: [nonsense\n";
  EXPECT_EQ(w.admin("POST", "/admin/reload").status, 400u);
  auto m3 = w.metrics();
  EXPECT_EQ(m3.at("sluice_config_generation"), 2);
  EXPECT_EQ(m3.at("sluice_config_reloads_total{result=\"failed\"}"), 1);
  EXPECT_EQ(m3.at("sluice_config_last_reload_success_timestamp_seconds"), reloaded);

  // Only GET and HEAD.
  EXPECT_EQ(w.admin("POST", "/metrics").status, 405u);
  w.expect_promtool_clean();
}

// HTTP/1.1 and HTTP/2 requests on one route, each counted under its own `protocol` label:
// sluice_requests_total by decision and sluice_http_request_duration_seconds by status class.
TEST_P(metrics_cases, each_request_is_counted_under_its_client_protocol) {
  const std::string curl = "/usr/bin/curl";
  if (!std::filesystem::exists(curl)) GTEST_SKIP() << "curl is missing (scripts/setup installs it)";
  metrics_world w(GetParam(), "http2: true\n" + std::string(traffic_rules), 2);
  int n = 0;
  auto over_h2 = [&](const std::string& target) {
    const auto out = w.dir.path / ("h2-" + std::to_string(n) + ".out");
    child_process c({curl, "-sS", "-o", "/dev/null", "-w", "%{http_code} %{http_version}",
                     "--max-time", "10", "--http2-prior-knowledge", "-H", "X-API-Key: key-a",
                     "http://127.0.0.1:" + std::to_string(w.port()) + target},
                    out, w.dir.path / ("h2-" + std::to_string(n++) + ".err"));
    EXPECT_EQ(c.wait_exit(20s).value_or(-1), 0) << c.err();
    return c.out();
  };
  // search (burst 3, one key): 2 allowed over HTTP/1.1, then 1 allowed and 2 limited over h2.
  for (int i = 0; i < 2; ++i) EXPECT_EQ(w.get("/v1/search", key_a).status, 200u);
  EXPECT_EQ(over_h2("/v1/search"), "200 2");
  EXPECT_EQ(over_h2("/v1/search"), "429 2");
  EXPECT_EQ(over_h2("/v1/search"), "429 2");
  // open (no limit): 1 over h2, 3 over HTTP/1.1.
  EXPECT_EQ(over_h2("/v1/open"), "200 2");
  for (int i = 0; i < 3; ++i) EXPECT_EQ(w.get("/v1/open").status, 200u);

  scrape m;
  (void)eventually(
      [&] {
        m = w.metrics();
        return m.at(exchanges("open", "2xx", "http/1.1")) == 3 &&
               m.at(exchanges("open", "2xx", "h2")) == 1;
      },
      5s);  // (the counts are asserted below)
  EXPECT_EQ(m.at(req("search", "allowed", "http/1.1")), 2);
  EXPECT_EQ(m.at(req("search", "limited", "http/1.1")), 0);
  EXPECT_EQ(m.at(req("search", "allowed", "h2")), 1);
  EXPECT_EQ(m.at(req("search", "limited", "h2")), 2);
  EXPECT_EQ(m.at(req("open", "unlimited", "http/1.1")), 3);
  EXPECT_EQ(m.at(req("open", "unlimited", "h2")), 1);
  for (const char* decision : {"unlimited", "fail_open", "fail_closed"})
    EXPECT_EQ(m.at(req("search", decision, "h2")), 0) << decision;
  EXPECT_EQ(m.at(exchanges("search", "2xx", "http/1.1")), 2);
  EXPECT_EQ(m.at(exchanges("search", "4xx", "http/1.1")), 0);
  EXPECT_EQ(m.at(exchanges("search", "2xx", "h2")), 1);
  EXPECT_EQ(m.at(exchanges("search", "4xx", "h2")), 2);
  EXPECT_EQ(m.at(exchanges("open", "2xx", "http/1.1")), 3);
  EXPECT_EQ(m.at(exchanges("open", "2xx", "h2")), 1);
  w.expect_promtool_clean();
}

INSTANTIATE_TEST_SUITE_P(stores, metrics_cases,
                         testing::Values(store_kind::memory, store_kind::redis), store_name);

// ---------------------------------------------------------------------------------------------
// Store failures against a real redis-server: frozen (timeouts, the breaker opens) and killed
// (unavailable), each failure answered by its route's policy, and the counters that say so.

const char* const failure_rules = R"(
store: STORE
identity: {api_key: {header: X-API-Key}}
plans: {free: {limits: []}}
api_keys: {key-a: free}
upstreams: {api: {url: UPSTREAM_URL}}
routes:
  - name: open
    match: {path_prefix: /v1/open}
    upstream: api
    on_store_failure: fail_open
    limits:
      - {name: open_key, by: api_key, rate: 100/1m, burst: 100}
  - name: closed
    match: {path_prefix: /v1/closed}
    upstream: api
    on_store_failure: fail_closed
    limits:
      - {name: closed_key, by: api_key, rate: 100/1m, burst: 100}
  - name: local
    match: {path_prefix: /v1/local}
    upstream: api
    on_store_failure: local
    limits:
      - {name: local_key, by: api_key, rate: 100/1m, burst: 100}
)";

/// What the test saw per route, to compare with the scraped counters.
struct tally {
  std::map<std::string, std::map<std::string, int>> decisions;  // route -> decision -> n
  int sent = 0;

  /// GET /v1/<route> with key-a, classified by what came back.
  void get(const metrics_world& w, const std::string& route) {
    auto r = w.get("/v1/" + route, key_a);
    ++sent;
    const bool quota = r.has("X-RateLimit-Remaining");
    std::string d;
    if (r.status == 200 && quota)
      d = "allowed";
    else if (r.status == 200)
      d = "fail_open";
    else if (r.status == 429)
      d = "limited";
    else if (r.status == 503)
      d = "fail_closed";
    else
      ADD_FAILURE() << route << ": " << r.status << " " << r.body;
    ++decisions[route][d];
  }
  int n(const std::string& route, const std::string& d) const {
    auto r = decisions.find(route);
    if (r == decisions.end()) return 0;
    auto it = r->second.find(d);
    return it == r->second.end() ? 0 : it->second;
  }
};

/// Expects every requests and failure-policy counter to equal what `t` saw, and the store
/// counters to account for every check: each one was decided, timed out, failed or refused.
void expect_matches(const scrape& m, const tally& t, int local_applied) {
  double failures = 0, decided = 0;
  for (const char* route : {"open", "closed", "local"}) {
    for (const char* d : {"allowed", "limited", "fail_open", "fail_closed"}) {
      EXPECT_EQ(m.at(req(route, d)), t.n(route, d)) << route << " " << d;
    }
    for (const char* p : {"fail_open", "fail_closed", "local"}) failures += m.at(policy(route, p));
    decided += t.n(route, "allowed") + t.n(route, "limited");
  }
  EXPECT_EQ(m.at(policy("open", "fail_open")), t.n("open", "fail_open"));
  EXPECT_EQ(m.at(policy("closed", "fail_closed")), t.n("closed", "fail_closed"));
  EXPECT_EQ(m.at(policy("local", "local")), local_applied);
  EXPECT_EQ(m.at(policy("open", "fail_closed")) + m.at(policy("open", "local")) +
                m.at(policy("closed", "fail_open")) + m.at(policy("closed", "local")) +
                m.at(policy("local", "fail_open")) + m.at(policy("local", "fail_closed")),
            0);
  EXPECT_EQ(m.at("sluice_store_timeouts_total") + m.at("sluice_store_errors_total") +
                m.at("sluice_store_unavailable_total"),
            failures);
  EXPECT_EQ(m.at("sluice_store_checks_total"), decided - local_applied);
  EXPECT_EQ(m.at("sluice_store_check_duration_seconds_count"), t.sent);
}

TEST(metrics_store_failure, frozen_then_killed_redis) {
  // One worker, so that one breaker sees every failure; a 50 ms deadline.
  metrics_world w(store_kind::redis, failure_rules, 1, ", timeout: 50ms");
  tally t;
  int local_applied = 0;
  for (const char* route : {"open", "closed", "local"}) t.get(w, route);
  {
    auto m = w.metrics();
    expect_matches(m, t, local_applied);
    EXPECT_EQ(m.at("sluice_store_checks_total"), 3);
    EXPECT_EQ(m.at("sluice_store_connected"), 1);
  }

  // Frozen (SIGSTOP): five checks miss their deadline, the breaker opens, and the next check
  // is refused at once.
  w.redis->pause();
  for (int i = 0; i < 5; ++i) t.get(w, "open");
  t.get(w, "closed");
  {
    auto m = w.metrics();
    EXPECT_EQ(t.n("open", "fail_open"), 5);
    EXPECT_EQ(t.n("closed", "fail_closed"), 1);
    expect_matches(m, t, local_applied);
    EXPECT_EQ(m.at("sluice_store_timeouts_total"), 5);
    EXPECT_EQ(m.at("sluice_store_unavailable_total"), 1);
    EXPECT_EQ(m.at("sluice_store_breaker_opens_total"), 1);
    EXPECT_EQ(m.at("sluice_store_breaker_transitions_total{to=\"open\"}"), 1);
    EXPECT_EQ(m.at("sluice_store_breaker_transitions_total{to=\"half_open\"}"), 0);
    EXPECT_EQ(m.at("sluice_store_breaker_state{state=\"open\"}"), 1);
    EXPECT_EQ(m.at("sluice_store_breaker_state{state=\"closed\"}"), 0);
    // Each timed-out check waited out its deadline.
    EXPECT_GE(m.at("sluice_store_check_duration_seconds_bucket{le=\"+Inf\"}") -
                  m.at("sluice_store_check_duration_seconds_bucket{le=\"0.025\"}"),
              5);
  }

  // Thawed: a half-open probe brings the store back.
  w.redis->resume();
  (void)eventually(
      [&] {
        t.get(w, "open");
        return t.n("open", "allowed") >= 2;
      },
      5s);
  ASSERT_EQ(t.n("open", "allowed"), 2) << "the store did not come back";
  const double reconnects = [&] {
    auto m = w.metrics();
    expect_matches(m, t, local_applied);
    EXPECT_EQ(m.at("sluice_store_breaker_state{state=\"closed\"}"), 1);
    EXPECT_EQ(m.at("sluice_store_connected"), 1);
    // open -> half_open (a probe) -> closed; a probe that failed first reopened it.
    const double half_opens = m.at("sluice_store_breaker_transitions_total{to=\"half_open\"}");
    EXPECT_GE(half_opens, 1);
    EXPECT_EQ(m.at("sluice_store_breaker_transitions_total{to=\"closed\"}"), 1);
    EXPECT_EQ(m.at("sluice_store_breaker_transitions_total{to=\"open\"}"), half_opens);
    return m.at("sluice_store_reconnects_total");
  }();

  // Killed: checks are refused (or fail in flight); each route answers with its policy.
  w.redis->kill();
  for (int i = 0; i < 3; ++i) {
    t.get(w, "open");
    t.get(w, "closed");
    t.get(w, "local");
    ++local_applied;
  }
  EXPECT_EQ(t.n("local", "allowed"), 4);  // the local limiter admits (burst 100 x share)
  {
    // The worker notices the lost connection at once or on its next use.
    scrape m;
    (void)eventually(
        [&] {
          m = w.metrics();
          return m.at("sluice_store_connected") == 0;
        },
        3s);
    EXPECT_EQ(m.at("sluice_store_connected"), 0);
    expect_matches(m, t, local_applied);
    EXPECT_EQ(m.at(policy("closed", "fail_closed")), 1 + 3);
    EXPECT_EQ(m.at(policy("local", "local")), 3);
    EXPECT_EQ(m.at(req("closed", "fail_closed")), 1 + 3);
  }

  // Restarted: the connection comes back, and the reconnect is counted.
  w.redis->restart();
  const int before = t.n("open", "allowed");
  (void)eventually(
      [&] {
        t.get(w, "open");
        return t.n("open", "allowed") != before;
      },
      5s);
  ASSERT_EQ(t.n("open", "allowed"), before + 1) << "the store did not come back";
  auto m = w.metrics();
  expect_matches(m, t, local_applied);
  EXPECT_GT(m.at("sluice_store_reconnects_total"), reconnects);
  EXPECT_EQ(m.at("sluice_store_connected"), 1);
  w.expect_promtool_clean();  // with fail_open, fail_closed, local, breaker and reconnects
}

// ---------------------------------------------------------------------------------------------
// What clients see (durations by route and status class, bytes), and the process.

TEST(metrics_clients, durations_by_route_and_status_class_bytes_and_the_process) {
  metrics_world w(store_kind::memory, traffic_rules, 2);
  {
    // Before any traffic: every route of the rules and "" (unrouted), every class, at 0.
    auto m = w.metrics();
    EXPECT_EQ(m.types.at("sluice_http_request_duration_seconds"), "histogram");
    EXPECT_EQ(m.types.at("sluice_http_received_bytes_total"), "counter");
    EXPECT_EQ(m.types.at("sluice_http_sent_bytes_total"), "counter");
    for (const char* route : {"", "search", "shadowed", "slow", "gone", "open"}) {
      for (const char* c : {"none", "1xx", "2xx", "3xx", "4xx", "5xx"})
        EXPECT_EQ(m.at(exchanges(route, c)), 0) << route << " " << c;
      EXPECT_EQ(m.at("sluice_http_sent_bytes_total{route=\"" + std::string(route) + "\"}"), 0);
    }
  }

  for (int i = 0; i < 5; ++i) EXPECT_EQ(w.get("/v1/search", key_a).status, i < 3 ? 200u : 429u);
  {
    http_connection c(w.port());
    EXPECT_EQ(c.request("POST", "/v1/open", {}, "twelve bytes").status, 200u);
  }
  EXPECT_EQ(w.get("/v1/gone").status, 502u);
  EXPECT_EQ(w.get("/v1/slow").status, 504u);
  EXPECT_EQ(w.get("/nowhere").status, 404u);
  EXPECT_EQ(w.get("/v1/%2e%2e/%2e%2e/x").status, 400u);

  // An exchange is counted once its last byte is written, which may be just after the client
  // read it: poll until the last one is in, then every count is exact.
  scrape m;
  (void)eventually(
      [&] {
        m = w.metrics();
        return m.at(exchanges("", "4xx")) == 2 && m.at(exchanges("slow", "5xx")) == 1;
      },
      5s);  // (the counts are asserted below)
  EXPECT_EQ(m.at(exchanges("search", "2xx")), 3);
  EXPECT_EQ(m.at(exchanges("search", "4xx")), 2);
  EXPECT_EQ(m.at(exchanges("open", "2xx")), 1);
  EXPECT_EQ(m.at(exchanges("gone", "5xx")), 1);
  EXPECT_EQ(m.at(exchanges("slow", "5xx")), 1);
  EXPECT_EQ(m.at(exchanges("", "4xx")), 2);
  for (const char* route : {"", "search", "shadowed", "slow", "gone", "open"})
    for (const char* c : {"none", "1xx", "3xx"}) EXPECT_EQ(m.at(exchanges(route, c)), 0);
  EXPECT_EQ(m.at(exchanges("shadowed", "2xx")), 0);
  // The 504 waited out the slow upstream's 100 ms timeout: it is in no bucket below 0.1 s.
  EXPECT_EQ(m.at("sluice_http_request_duration_seconds_bucket{route=\"slow\",code_class=\"5xx\","
                 "protocol=\"http/1.1\",le=\"0.05\"}"),
            0);
  EXPECT_GE(m.at("sluice_http_request_duration_seconds_sum{route=\"slow\",code_class=\"5xx\","
                 "protocol=\"http/1.1\"}"),
            0.1);
  // Bytes: the POST's 12-byte body in; every answer's head (and body) out.
  EXPECT_EQ(m.at("sluice_http_received_bytes_total{route=\"open\"}"), 12);
  EXPECT_EQ(m.at("sluice_http_received_bytes_total{route=\"search\"}"), 0);
  for (const char* route : {"", "search", "open", "gone", "slow"})
    EXPECT_GT(m.at("sluice_http_sent_bytes_total{route=\"" + std::string(route) + "\"}"), 50)
        << route;
  EXPECT_EQ(m.at("sluice_http_sent_bytes_total{route=\"shadowed\"}"), 0);

  // The process, read from /proc: a live process has memory, descriptors under its limit, a
  // start time in the past and some CPU time.
  EXPECT_EQ(m.types.at("process_cpu_seconds_total"), "counter");
  for (const char* g : {"process_resident_memory_bytes", "process_virtual_memory_bytes",
                        "process_open_fds", "process_max_fds", "process_start_time_seconds"})
    EXPECT_EQ(m.types.at(g), "gauge") << g;
  EXPECT_GT(m.at("process_resident_memory_bytes"), 1 << 20);
  EXPECT_GE(m.at("process_virtual_memory_bytes"), m.at("process_resident_memory_bytes"));
  EXPECT_GT(m.at("process_open_fds"), 3);
  EXPECT_GE(m.at("process_max_fds"), m.at("process_open_fds"));
  const double now =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  EXPECT_LE(m.at("process_start_time_seconds"), now);
  EXPECT_GT(m.at("process_start_time_seconds"), now - 24 * 3600);
  EXPECT_GT(m.at("process_cpu_seconds_total"), 0);
  // Descriptors follow what the process opens: 20 more client connections held open.
  const double before = m.at("process_open_fds");
  {
    std::vector<std::unique_ptr<http_connection>> held;
    for (int i = 0; i < 20; ++i) {
      held.push_back(std::make_unique<http_connection>(w.port()));
      EXPECT_EQ(held.back()->request("GET", "/v1/open").status, 200u);
    }
    // (The test's own 20 sockets are in this process too: 2 descriptors a connection, 40;
    // some of the earlier connections' may have closed meanwhile.)
    EXPECT_GE(w.metrics().at("process_open_fds"), before + 30);
  }
  w.expect_promtool_clean();
}

}  // namespace
}  // namespace sluice::test
