// SPDX-License-Identifier: Apache-2.0
// sluice-test-support: gateway_fixture upstream_server http_client runtime_fixture redis_server
// A real Prometheus (Debian's `prometheus`) scrapes a real gateway's admin listener with the
// shipped configuration (docker/prometheus.yml, its target replaced, and its alerting rules
// docker/sluice-alerts.yml): the scrape is up, the counters it stores equal the traffic sent,
// and every query of the shipped Grafana dashboard (docker/grafana-dashboard.json) is valid
// PromQL that Prometheus evaluates — the decision-rate panels with data. promtool checks the
// configuration and the rules; SluiceGatewayDown fires live once the gateway is gone.

#include "harness.hpp"
#include "support/child_process.hpp"
#include "support/redis_server.hpp"
#include "support/runtime_fixture.hpp"
#include "support/temp_dir.hpp"

#include <boost/json.hpp>
#include <boost/url/encode.hpp>
#include <boost/url/rfc/unreserved_chars.hpp>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <optional>
#include <regex>
#include <string>
#include <thread>
#include <vector>

namespace sluice::test {
namespace {

namespace fs = std::filesystem;
namespace json = boost::json;
using namespace std::chrono_literals;

const fs::path source_dir = SLUICE_SOURCE_DIR;

std::string read_file(const fs::path& p) {
  std::ifstream in(p);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

/// GET `path` on Prometheus's HTTP API: the JSON, or null when it does not answer.
json::value api(std::uint16_t port, const std::string& path) {
  try {
    http_connection c(port);
    auto r = c.request("GET", path);
    if (r.status != 200 && r.status != 400 && r.status != 422) return nullptr;
    return json::parse(r.body);
  } catch (const std::exception&) {
    return nullptr;
  }
}

/// An instant query: Prometheus's JSON answer.
json::value query(std::uint16_t port, const std::string& promql) {
  return api(port,
             "/api/v1/query?query=" + boost::urls::encode(promql, boost::urls::unreserved_chars));
}

/// The first value of an instant query, or nullopt (no answer, an error, no series).
std::optional<double> value_at(std::uint16_t port, const std::string& promql) {
  auto r = query(port, promql);
  if (!r.is_object() || r.at("status") != "success") return std::nullopt;
  const auto& result = r.at("data").at("result").as_array();
  if (result.empty()) return std::nullopt;
  return std::stod(std::string(result[0].at("value").as_array()[1].as_string()));
}

/// A real Prometheus (Debian's) on a free loopback port with the shipped configuration
/// (docker/prometheus.yml): its target the admin listener on `admin_port`, scraping and
/// evaluating every second, with `rules` (the text of a rule file) as its alerting rules.
/// Stopped by its pid when destroyed.
struct prometheus_run {
  temp_dir dir{"prometheus"};
  std::uint16_t port = free_loopback_port();
  std::optional<child_process> server;

  prometheus_run(std::uint16_t admin_port, const std::string& rules) {
    std::string config = read_file(source_dir / "docker" / "prometheus.yml");
    config = std::regex_replace(config, std::regex("scrape_interval: 15s"), "scrape_interval: 1s");
    config = std::regex_replace(config, std::regex("evaluation_interval: 15s"),
                                "evaluation_interval: 1s");
    config = std::regex_replace(config, std::regex("127\\.0\\.0\\.1:9090"),
                                "127.0.0.1:" + std::to_string(admin_port));
    config = std::regex_replace(config, std::regex("- sluice-alerts\\.yml"),
                                "- " + (dir.path / "sluice-alerts.yml").string());
    std::ofstream(dir.path / "prometheus.yml") << config;
    std::ofstream(dir.path / "sluice-alerts.yml") << rules;
    server.emplace(
        std::vector<std::string>{
            "/usr/bin/prometheus", "--config.file=" + (dir.path / "prometheus.yml").string(),
            "--storage.tsdb.path=" + (dir.path / "data").string(),
            "--web.listen-address=127.0.0.1:" + std::to_string(port), "--log.level=warn"},
        dir.path / "out.txt", dir.path / "err.txt");
  }
};

constexpr const char* rules_yaml = R"(
listen: 127.0.0.1:0
store: {type: memory}
identity: {api_key: {header: X-API-Key}}
plans: {free: {limits: []}}
api_keys: {key-a: free}
upstreams: {api: {url: UPSTREAM_URL}}
routes:
  - name: items
    match: {path_prefix: /v1/items}
    upstream: api
    limits:
      - {name: items_key, by: api_key, rate: 5/1m, burst: 5}
)";

TEST(prometheus, scrapes_the_admin_listener_and_evaluates_the_dashboard) {
  const char* const prometheus = "/usr/bin/prometheus";
  if (!fs::exists(prometheus)) GTEST_SKIP() << "prometheus is not installed";
  const fs::path shipped = source_dir / "docker" / "prometheus.yml";
  if (fs::exists("/usr/bin/promtool")) {
    EXPECT_EQ(
        std::system(("/usr/bin/promtool check config " + shipped.string() + " >/dev/null").c_str()),
        0)
        << "promtool check config docker/prometheus.yml";
  }

  upstream_server upstream;
  runtime_fixture rt(substitute(rules_yaml, {{"UPSTREAM_URL", upstream.url()}}));
  for (int i = 0; i < 7; ++i) get(rt.port(), "/v1/items", {{"X-API-Key", "key-a"}});  // 5 + 2

  // The shipped configuration, scraping this gateway every second.
  prometheus_run run(rt.admin_port(), read_file(source_dir / "docker" / "sluice-alerts.yml"));
  const std::uint16_t port = run.port;
  child_process& server = *run.server;
  const temp_dir& dir = run.dir;

  // Up to 30 s for the first scrapes to be stored (a start and two 1 s scrapes, usually).
  auto value_of = [&](const std::string& promql) { return value_at(port, promql); };
  std::optional<double> allowed;
  (void)eventually(
      [&] {
        if (!server.running()) return true;  // (reported below)
        allowed = value_of(R"(sum(sluice_requests_total{route="items",decision="allowed"}))");
        return allowed && value_of("up{job=\"sluice\"}") &&
               value_of("count(sluice_config_generation)");
      },
      30s);
  ASSERT_TRUE(allowed) << "nothing scraped; prometheus stderr:\n"
                       << read_file(dir.path / "err.txt");
  EXPECT_EQ(*allowed, 5);
  EXPECT_EQ(value_of(R"(sum(sluice_requests_total{route="items",decision="limited"}))"), 2);
  EXPECT_EQ(value_of(R"(up{job="sluice"})"), 1);
  // The alerting rules are loaded (and none fires: the store is connected, nothing refused).
  auto rules = api(port, "/api/v1/rules");
  ASSERT_TRUE(rules.is_object());
  std::size_t loaded = 0;
  for (const auto& g : rules.at("data").at("groups").as_array())
    loaded += g.at("rules").as_array().size();
  EXPECT_EQ(loaded, 12u);

  // Every dashboard query, with Grafana's variables as Grafana would fill them, once three
  // scrapes are stored (a rate needs two samples in its window).
  (void)eventually(
      [&] { return value_of(R"(count_over_time(up{job="sluice"}[1m]))").value_or(0) >= 3; }, 15s);
  const auto dashboard = json::parse(read_file(source_dir / "docker" / "grafana-dashboard.json"));
  std::size_t queries = 0, with_data = 0;
  for (const auto& panel : dashboard.at("panels").as_array()) {
    for (const auto& target : panel.at("targets").as_array()) {
      std::string expr(target.at("expr").as_string());
      expr = std::regex_replace(expr, std::regex("\\$instance"), ".*");
      expr = std::regex_replace(expr, std::regex("\\$__rate_interval"), "1m");
      expr = std::regex_replace(expr, std::regex("\\$__range"), "5m");
      auto r = query(port, expr);
      ASSERT_TRUE(r.is_object()) << expr;
      EXPECT_EQ(r.at("status"), "success") << panel.at("title") << ": " << expr << "\n" << r;
      ++queries;
      if (r.at("status") == "success" && !r.at("data").at("result").as_array().empty()) ++with_data;
    }
  }
  EXPECT_GE(queries, 15u);
  EXPECT_GE(with_data, 8u) << "of " << queries << " dashboard queries";
}

// The gateway-gone alert, live: Prometheus scrapes a gateway, the gateway stops, and
// SluiceGatewayDown fires (its `for:` shortened to 2 s in this copy of the rules: the rule
// itself is the shipped one, its delay is what docker/sluice-alerts.test.yml checks).
TEST(prometheus, the_gateway_down_alert_fires_once_the_gateway_is_gone) {
  if (!fs::exists("/usr/bin/prometheus")) GTEST_SKIP() << "prometheus is not installed";
  upstream_server upstream;
  std::optional<runtime_fixture> rt;
  rt.emplace(substitute(rules_yaml, {{"UPSTREAM_URL", upstream.url()}}));
  std::string rules = read_file(source_dir / "docker" / "sluice-alerts.yml");
  rules = std::regex_replace(rules, std::regex("for: [0-9]+m"), "for: 2s");
  prometheus_run run(rt->admin_port(), rules);

  auto firing = [&](const std::string& name) {
    const auto r = api(run.port, "/api/v1/alerts");
    if (!r.is_object() || r.at("status") != "success") return false;
    for (const auto& a : r.at("data").at("alerts").as_array()) {
      if (a.at("labels").at("alertname") == name.c_str() && a.at("state") == "firing") return true;
    }
    return false;
  };
  // Up first (scraped at least once), and the alert silent.
  (void)eventually(
      [&] { return !run.server->running() || value_at(run.port, R"(up{job="sluice"})") == 1.0; },
      30s);
  ASSERT_EQ(value_at(run.port, R"(up{job="sluice"})"), 1.0) << "never scraped; prometheus stderr:\n"
                                                            << read_file(run.dir.path / "err.txt");
  EXPECT_FALSE(firing("SluiceGatewayDown"));

  rt.reset();  // the gateway is gone: its admin listener closed
  EXPECT_EVENTUALLY(60s, firing("SluiceGatewayDown")) << api(run.port, "/api/v1/alerts");
  EXPECT_EQ(value_at(run.port, R"(up{job="sluice"})"), 0.0);
}

}  // namespace
}  // namespace sluice::test
