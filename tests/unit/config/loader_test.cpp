// SPDX-License-Identifier: Apache-2.0
// sluice-test-support: http_client
// (linked for SLUICE_SOURCE_DIR, which the support libraries define: the docs tests read
// docs/operating.md from the source tree)
#include "sluice/config/loader.hpp"

#include "sluice/config/key_file.hpp"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

// Config tests: inline YAML and the exact diagnostic text (STYLE.md, "Tests").

namespace sluice::config {
namespace {

using namespace std::chrono_literals;

std::vector<std::string> diags(std::string_view yaml) {
  const load_result r = load_string(yaml, "rules.yaml");
  std::vector<std::string> out;
  for (const auto& d : r.diagnostics) out.push_back(d.to_string());
  EXPECT_EQ(r.ok(), out.empty());
  return out;
}

std::shared_ptr<const rules> load_ok(std::string_view yaml) {
  const load_result r = load_string(yaml, "rules.yaml");
  for (const auto& d : r.diagnostics) ADD_FAILURE() << d.to_string();
  EXPECT_TRUE(r.ok());
  return r.value;
}

// ---------------------------------------------------------------------------------------------
// The example of DESIGN.md, "The rules file". `pro_day` uses fixed_window, which this release
// does not implement yet; the positive test swaps it for a token bucket.

constexpr std::string_view design_example = R"(listen: 0.0.0.0:8080
admin: 127.0.0.1:9090            # /metrics /healthz /readyz /admin/config, POST /admin/reload
workers: 0                       # 0 = one per core

store:
  type: redis                    # memory (embedded, one instance) | redis | redis-cluster
  address: 127.0.0.1:6379        # redis-cluster: nodes: [host:port, ...]
  timeout: 5ms                   # deadline of one check; then the route's failure policy applies
  # password_env: SLUICE_REDIS_PASSWORD   # the password is read from this environment variable
  # local_share: 0.25            # `local` failure policy: the share of each limit one instance enforces alone

headers: [x-ratelimit, ietf]     # which rate-limit header sets to send; [] sends none
# retry_after_jitter: 2s         # optional: add up to this much random delay to Retry-After (never less than honest)

upstreams:
  api: {url: http://127.0.0.1:8081}

identity:
  api_key: {header: X-API-Key}   # may also name a query parameter
  user: {header: X-User-Id}      # set by an auth layer in front of, or inside, the gateway
  trusted_proxies: [10.0.0.0/8]  # X-Forwarded-For is believed only from these
  unknown_key: anonymous         # anonymous (use plan `anonymous`, keyed by client IP) | reject (401)

plans:                           # limits that follow a caller on every route, keyed by API key
  anonymous: {limits: [{name: anon, rate: 60/1m}]}
  free:      {limits: [{name: free_minute, rate: 100/1m, burst: 100}]}
  pro:       {limits: [{name: pro_second, rate: 50/1s, burst: 100},
                       {name: pro_day, algorithm: fixed_window, rate: 100000/1d}]}

api_keys:                        # small deployments; large ones look keys up in the store
  key-a: free
  key-p: pro

routes:                          # first match wins; a request matching no route gets 404
  - name: login
    match: {path_prefix: /login, methods: [POST]}
    upstream: api
    on_store_failure: fail_closed  # fail_open | fail_closed | local
    limits:
      - {name: login_ip, by: ip, rate: 10/1m, burst: 5}
  - name: search
    match: {path_prefix: /v1/search}
    upstream: api
    cost: 1
    on_store_failure: fail_open
    limits:
      - name: search_key
        by: api_key              # api_key | user | ip | global | header:NAME
        plans: {free: {rate: 10/1m}, pro: {rate: 100/1m, burst: 200}}
      - {name: search_ip, by: ip, rate: 1000/1m, burst: 200}
  - name: default
    match: {path_prefix: /}
    upstream: api
)";

std::string design_example_supported() {
  std::string s(design_example);
  const std::string from = "algorithm: fixed_window, ";
  s.replace(s.find(from), from.size(), "");
  return s;
}

TEST(design_example, loads_with_the_written_values) {
  auto r = load_ok(design_example_supported());
  ASSERT_TRUE(r);
  EXPECT_EQ(r->source, "rules.yaml");
  EXPECT_EQ(r->listen_host, "0.0.0.0");
  EXPECT_EQ(r->listen_port, 8080);
  EXPECT_EQ(r->admin_host, "127.0.0.1");
  EXPECT_EQ(r->admin_port, 9090);
  EXPECT_EQ(r->workers, 0u);
  EXPECT_EQ(r->store.type, store_settings::kind::redis);
  EXPECT_EQ(r->store.host, "127.0.0.1");
  EXPECT_EQ(r->store.port, 6379);
  EXPECT_EQ(r->store.timeout, 5ms);
  EXPECT_EQ(r->store.password_env, "");
  EXPECT_DOUBLE_EQ(r->store.local_share, 1.0);
  EXPECT_EQ(r->store.layout, store_settings::layout_kind::hash);
  EXPECT_EQ(r->store.hash_groups, 65536u);
  EXPECT_EQ(r->store.max_buckets, 1'000'000u);
  EXPECT_TRUE(r->headers.x_ratelimit);
  EXPECT_TRUE(r->headers.ietf);
  EXPECT_EQ(r->retry_after_jitter, 0ms);

  ASSERT_EQ(r->upstreams.size(), 1u);
  const upstream& api = r->upstreams.at("api");
  EXPECT_EQ(api.name, "api");
  EXPECT_EQ(api.url, "http://127.0.0.1:8081");
  EXPECT_EQ(api.host, "127.0.0.1");
  EXPECT_EQ(api.port, 8081);
  EXPECT_EQ(api.base_path, "");

  EXPECT_EQ(r->identity.api_key_header, "X-API-Key");
  EXPECT_EQ(r->identity.api_key_query, "");
  EXPECT_EQ(r->identity.user_header, "X-User-Id");
  ASSERT_EQ(r->identity.trusted_proxies.size(), 1u);
  const cidr& net = r->identity.trusted_proxies[0];
  EXPECT_EQ(net.text, "10.0.0.0/8");
  EXPECT_FALSE(net.v6);
  EXPECT_EQ(net.prefix, 8);
  EXPECT_EQ(net.bytes[0], 10);
  EXPECT_EQ(r->identity.unknown_key, unknown_key_policy::anonymous);

  ASSERT_EQ(r->plans.size(), 3u);
  const plan& anonymous = r->plans.at("anonymous");
  ASSERT_EQ(anonymous.limits.size(), 1u);
  EXPECT_EQ(anonymous.limits[0].name, "anon");
  EXPECT_EQ(anonymous.limits[0].by, identity_kind::api_key);
  EXPECT_EQ(anonymous.limits[0].params.rate.count, 60);
  EXPECT_EQ(anonymous.limits[0].params.rate.period, 1min);
  EXPECT_EQ(anonymous.limits[0].params.burst, 60);  // default: N of the rate
  const plan& pro = r->plans.at("pro");
  ASSERT_EQ(pro.limits.size(), 2u);
  EXPECT_EQ(pro.limits[0].name, "pro_second");
  EXPECT_EQ(pro.limits[0].params.rate.count, 50);
  EXPECT_EQ(pro.limits[0].params.rate.period, 1s);
  EXPECT_EQ(pro.limits[0].params.burst, 100);
  EXPECT_EQ(pro.limits[1].name, "pro_day");
  EXPECT_EQ(pro.limits[1].params.rate.count, 100000);
  EXPECT_EQ(pro.limits[1].params.rate.period, 24h);
  EXPECT_EQ(pro.limits[1].line, 28);
  EXPECT_EQ(r->plans.at("free").limits.at(0).params.burst, 100);

  ASSERT_EQ(r->api_keys.size(), 2u);
  EXPECT_EQ(r->api_keys.at("key-a"), "free");
  EXPECT_EQ(r->api_keys.at("key-p"), "pro");

  ASSERT_EQ(r->routes.size(), 3u);
  const route& login = r->routes[0];
  EXPECT_EQ(login.name, "login");
  EXPECT_EQ(login.line, 35);
  EXPECT_EQ(login.match.path_prefix, "/login");
  EXPECT_EQ(login.match.methods, std::vector<std::string>{"POST"});
  EXPECT_EQ(login.upstream, "api");
  EXPECT_EQ(login.cost, 1);
  EXPECT_EQ(login.on_store_failure, failure_policy::fail_closed);
  ASSERT_EQ(login.limits.size(), 1u);
  EXPECT_EQ(login.limits[0].name, "login_ip");
  EXPECT_EQ(login.limits[0].by, identity_kind::ip);
  EXPECT_EQ(login.limits[0].algorithm, algorithm::token_bucket);
  EXPECT_EQ(login.limits[0].params.rate.count, 10);
  EXPECT_EQ(login.limits[0].params.rate.period, 1min);
  EXPECT_EQ(login.limits[0].params.burst, 5);
  EXPECT_EQ(login.limits[0].mode, limit_mode::enforce);

  const route& search = r->routes[1];
  EXPECT_EQ(search.name, "search");
  EXPECT_TRUE(search.match.methods.empty());
  EXPECT_EQ(search.on_store_failure, failure_policy::fail_open);
  ASSERT_EQ(search.limits.size(), 2u);
  const limit& key = search.limits[0];
  EXPECT_EQ(key.name, "search_key");
  EXPECT_FALSE(key.has_default_params);
  ASSERT_EQ(key.plan_overrides.size(), 2u);
  EXPECT_EQ(key.plan_overrides.at("free").rate.count, 10);
  EXPECT_EQ(key.plan_overrides.at("free").rate.period, 1min);
  EXPECT_EQ(key.plan_overrides.at("free").burst, 10);
  EXPECT_EQ(key.plan_overrides.at("pro").rate.count, 100);
  EXPECT_EQ(key.plan_overrides.at("pro").burst, 200);
  EXPECT_EQ(key.find_params("anonymous"), nullptr);  // no default rate: not limited here
  ASSERT_NE(key.find_params("pro"), nullptr);
  EXPECT_EQ(key.find_params("pro")->burst, 200);
  EXPECT_EQ(search.limits[1].name, "search_ip");
  EXPECT_EQ(search.limits[1].params.burst, 200);
  EXPECT_TRUE(search.limits[1].applies_to("anonymous"));

  const route& fallback = r->routes[2];
  EXPECT_EQ(fallback.name, "default");
  EXPECT_EQ(fallback.match.path_prefix, "/");
  EXPECT_TRUE(fallback.limits.empty());
  EXPECT_EQ(fallback.on_store_failure, failure_policy::fail_open);
}

TEST(design_example, as_written_loads_with_its_fixed_window) {
  auto r = load_ok(design_example);
  EXPECT_EQ(r->plans.at("pro").limits.at(1).algorithm, algorithm::fixed_window);
  EXPECT_EQ(r->plans.at("pro").limits.at(1).params.rate.count, 100000);
}

TEST(design_example, redis_cluster_needs_nodes_not_an_address) {
  std::string s = design_example_supported();
  s.replace(s.find("type: redis "), 12, "type: redis-cluster");
  EXPECT_EQ(diags(s),
            (std::vector<std::string>{
                "rules.yaml:6: store.nodes: type redis-cluster needs nodes: seed nodes of the "
                "cluster (host:port list)",
                "rules.yaml:7: store.address: type redis-cluster finds its masters through "
                "store.nodes: remove address"}));
}

// ---------------------------------------------------------------------------------------------
// Defaults and the less common spellings.

TEST(defaults, a_cluster_store_with_its_nodes_and_split_limits) {
  auto r = load_ok(
      "upstreams: {api: {url: http://127.0.0.1:8081}}\n"
      "store:\n"
      "  type: redis-cluster\n"
      "  nodes: [127.0.0.1:7000, \"node-b.example:7001\"]\n"
      "  password_env: REDIS_PW\n"
      "  timeout: 20ms\n"
      "plans: {free: {limits: [{name: per_min, rate: 10/1m}]}}\n"
      "routes:\n"
      "  - name: a\n"
      "    match: {path_prefix: /a}\n"
      "    upstream: api\n"
      "    limits: [{name: a_key, by: api_key, rate: 5/1s},\n"
      "             {name: a_shadow, by: ip, rate: 5/1s, mode: shadow}]\n");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->store.type, store_settings::kind::redis_cluster);
  EXPECT_TRUE(r->store.redis());
  ASSERT_EQ(r->store.nodes.size(), 2u);
  EXPECT_EQ(r->store.nodes[1].host, "node-b.example");
  EXPECT_EQ(r->store.nodes[1].port, 7001);
  EXPECT_EQ(r->store.timeout, 20ms);
  // A plan limit and a route limit can be in one request: both may be split over slots
  // (their stated guarantees say what that costs); a shadow limit never is.
  EXPECT_TRUE(r->plans.at("free").limits.at(0).split_on_cluster);
  EXPECT_TRUE(r->routes.at(0).limits.at(0).split_on_cluster);
  EXPECT_FALSE(r->routes.at(0).limits.at(1).split_on_cluster);
}

TEST(defaults, a_sentinel_store_with_every_field) {
  auto r = load_ok(
      "upstreams: {api: {url: http://127.0.0.1:8081}}\n"
      "store:\n"
      "  type: redis-sentinel\n"
      "  sentinels: [127.0.0.1:26379, \"sentinel-b.example:26380\"]\n"
      "  master: mymaster\n"
      "  sentinel_password_env: SENTINEL_PW\n"
      "  sentinel_timeout: 300ms\n"
      "  password_env: REDIS_PW\n"
      "  timeout: 20ms\n"
      "  layout: key\n");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->store.type, store_settings::kind::redis_sentinel);
  EXPECT_TRUE(r->store.redis());
  ASSERT_EQ(r->store.sentinels.size(), 2u);
  EXPECT_EQ(r->store.sentinels[0].host, "127.0.0.1");
  EXPECT_EQ(r->store.sentinels[0].port, 26379);
  EXPECT_EQ(r->store.sentinels[1].host, "sentinel-b.example");
  EXPECT_EQ(r->store.sentinels[1].port, 26380);
  EXPECT_EQ(r->store.master_name, "mymaster");
  EXPECT_EQ(r->store.sentinel_password_env, "SENTINEL_PW");
  EXPECT_EQ(r->store.sentinel_timeout, 300ms);
  EXPECT_EQ(r->store.password_env, "REDIS_PW");
  EXPECT_EQ(r->store.timeout, 20ms);
  EXPECT_EQ(r->store.layout, store_settings::layout_kind::key);
}

TEST(defaults, a_redis_store_over_tls_as_an_acl_user) {
  auto r = load_ok(
      "upstreams: {api: {url: http://127.0.0.1:8081}}\n"
      "store:\n"
      "  type: redis\n"
      "  username: sluice\n"
      "  tls:\n"
      "    ca_file: /dev/null\n"
      "    server_name: redis.internal\n"
      "    cert_file: /dev/null\n"
      "    key_file: /dev/null\n");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->store.username, "sluice");
  EXPECT_TRUE(r->store.tls.enabled);
  EXPECT_EQ(r->store.tls.ca_file, "/dev/null");
  EXPECT_EQ(r->store.tls.server_name, "redis.internal");
  EXPECT_TRUE(r->store.tls.verify);
  EXPECT_EQ(r->store.tls.cert_file, "/dev/null");
  EXPECT_EQ(r->store.tls.key_file, "/dev/null");
  auto off = load_ok(
      "upstreams: {api: {url: http://127.0.0.1:8081}}\n"
      "store: {type: redis, tls: {enabled: false}}\n");
  ASSERT_TRUE(off);
  EXPECT_FALSE(off->store.tls.enabled);
}

TEST(defaults, a_minimal_file_gets_every_default) {
  auto r = load_ok(R"(upstreams: {api: {url: "http://backend"}}
routes:
  - {name: all, match: {path_prefix: /}, upstream: api}
)");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->listen_host, "0.0.0.0");
  EXPECT_EQ(r->listen_port, 8080);
  EXPECT_EQ(r->admin_host, "");
  EXPECT_EQ(r->workers, 0u);
  EXPECT_EQ(r->store.type, store_settings::kind::memory);
  EXPECT_TRUE(r->headers.x_ratelimit);
  EXPECT_TRUE(r->headers.ietf);
  EXPECT_EQ(r->identity.api_key_header, "X-API-Key");
  EXPECT_EQ(r->identity.unknown_key, unknown_key_policy::anonymous);
  EXPECT_TRUE(r->identity.trusted_proxies.empty());
  ASSERT_EQ(r->plans.size(), 1u);  // the implicit `anonymous` plan, without limits
  EXPECT_EQ(r->plans.at("anonymous").name, "anonymous");
  EXPECT_TRUE(r->plans.at("anonymous").limits.empty());
  EXPECT_EQ(r->upstreams.at("api").port, 80);
  EXPECT_EQ(r->upstreams.at("api").max_idle, 256u);
  EXPECT_EQ(r->routes.at(0).cost, 1);
  EXPECT_TRUE(r->routes.at(0).limits.empty());
}

TEST(defaults, other_spellings_load) {
  auto r = load_ok(R"(listen: "[::1]:0"
admin: "[::1]:9090"
workers: 4
store: {type: memory, timeout: 250ms, password_env: SLUICE_REDIS_PASSWORD, local_share: 0.25,
        layout: key}
headers: []
retry_after_jitter: 2s
upstreams: {api: {url: "http://[::1]:8081/base/", timeout: 30s, connect_timeout: 1s}}
identity:
  api_key: {query: key}
  trusted_proxies: ["fd00::/8", 192.168.1.7]
  unknown_key: reject
plans: {gold: {limits: []}}
api_keys: {k1: gold, k2: anonymous}
routes:
  - name: r
    match: {path_prefix: /v1, methods: [get, Post, get]}
    upstream: api
    cost: 2
    on_store_failure: local
    limits:
      - {name: tenant, by: "header:X-Tenant", rate: 10/s, mode: shadow}
      - {name: month, by: global, rate: 1/30d, burst: 1000}
      - {name: fast, by: user, rate: 3/250ms, burst: 3}
)");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->listen_host, "::1");
  EXPECT_EQ(r->listen_port, 0);
  EXPECT_EQ(r->admin_host, "::1");
  EXPECT_EQ(r->admin_port, 9090);
  EXPECT_EQ(r->workers, 4u);
  EXPECT_EQ(r->store.timeout, 250ms);
  EXPECT_EQ(r->store.password_env, "SLUICE_REDIS_PASSWORD");
  EXPECT_DOUBLE_EQ(r->store.local_share, 0.25);
  EXPECT_EQ(r->store.layout, store_settings::layout_kind::key);
  EXPECT_FALSE(r->headers.x_ratelimit);
  EXPECT_FALSE(r->headers.ietf);
  EXPECT_EQ(r->retry_after_jitter, 2s);
  const upstream& api = r->upstreams.at("api");
  EXPECT_EQ(api.host, "::1");
  EXPECT_EQ(api.port, 8081);
  EXPECT_EQ(api.base_path, "/base");
  EXPECT_EQ(api.timeout, 30s);
  EXPECT_EQ(api.connect_timeout, 1s);
  EXPECT_EQ(r->identity.api_key_header, "");
  EXPECT_EQ(r->identity.api_key_query, "key");
  ASSERT_EQ(r->identity.trusted_proxies.size(), 2u);
  EXPECT_TRUE(r->identity.trusted_proxies[0].v6);
  EXPECT_EQ(r->identity.trusted_proxies[0].prefix, 8);
  EXPECT_EQ(r->identity.trusted_proxies[0].bytes[0], 0xfd);
  EXPECT_FALSE(r->identity.trusted_proxies[1].v6);
  EXPECT_EQ(r->identity.trusted_proxies[1].prefix, 32);
  EXPECT_EQ(r->identity.unknown_key, unknown_key_policy::reject);
  EXPECT_EQ(r->plans.size(), 2u);
  const route& rt = r->routes.at(0);
  EXPECT_EQ(rt.match.methods, (std::vector<std::string>{"GET", "POST"}));
  EXPECT_EQ(rt.cost, 2);
  EXPECT_EQ(rt.on_store_failure, failure_policy::local);
  ASSERT_EQ(rt.limits.size(), 3u);
  EXPECT_EQ(rt.limits[0].by, identity_kind::header);
  EXPECT_EQ(rt.limits[0].header_name, "X-Tenant");
  EXPECT_EQ(rt.limits[0].params.rate.count, 10);
  EXPECT_EQ(rt.limits[0].params.rate.period, 1s);
  EXPECT_EQ(rt.limits[0].mode, limit_mode::shadow);
  EXPECT_EQ(rt.limits[1].by, identity_kind::global);
  EXPECT_EQ(rt.limits[1].params.rate.period, std::chrono::hours{24 * 30});
  EXPECT_EQ(rt.limits[2].by, identity_kind::user);
  EXPECT_EQ(rt.limits[2].params.rate.period, 250ms);
}

TEST(status, top_and_window_read_and_default) {
  auto d = load_ok("upstreams: {api: {url: http://127.0.0.1:8081}}\n");
  ASSERT_TRUE(d);
  EXPECT_EQ(d->status_top, 10u);
  EXPECT_EQ(d->status_window_minutes, 10u);
  auto r = load_ok(
      "upstreams: {api: {url: http://127.0.0.1:8081}}\n"
      "status: {top: 25, window: 1h}\n");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status_top, 25u);
  EXPECT_EQ(r->status_window_minutes, 60u);
  EXPECT_EQ(d->status_graph_minutes, 10u);
  EXPECT_EQ(d->status_graph_step, std::chrono::seconds{10});
  auto g = load_ok(
      "upstreams: {api: {url: http://127.0.0.1:8081}}\n"
      "status: {graph: 30m, graph_step: 5s}\n");
  ASSERT_TRUE(g);
  EXPECT_EQ(g->status_graph_minutes, 30u);
  EXPECT_EQ(g->status_graph_step, std::chrono::seconds{5});
}

TEST(defaults, data_path_settings) {
  auto r = load_ok(
      "upstreams: {api: {url: http://127.0.0.1:8081}}\n"
      "routes:\n"
      "  - {name: a, match: {path_prefix: /a}, upstream: api}\n"
      "  - {name: b, match: {path_prefix: /b}, upstream: api, max_request_body: 1GiB,\n"
      "     max_response_body: 10MB, upgrade: false, tunnel_idle_timeout: 5s}\n"
      "  - {name: c, match: {path_prefix: /c}, upstream: api,\n"
      "     max_request_body: unlimited, max_response_body: 512}\n"
      "drain_timeout: 5s\nclient_timeout: 10s\n");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->routes[0].max_request_body, 16ull * 1024 * 1024);
  EXPECT_EQ(r->routes[0].max_response_body, unlimited_size);
  EXPECT_TRUE(r->routes[0].upgrade);
  EXPECT_EQ(r->routes[0].tunnel_idle_timeout, 300s);
  EXPECT_EQ(r->routes[1].max_request_body, 1024ull * 1024 * 1024);
  EXPECT_EQ(r->routes[1].max_response_body, 10'000'000u);
  EXPECT_FALSE(r->routes[1].upgrade);
  EXPECT_EQ(r->routes[1].tunnel_idle_timeout, 5s);
  EXPECT_EQ(r->routes[2].max_request_body, unlimited_size);
  EXPECT_EQ(r->routes[2].max_response_body, 512u);
  EXPECT_EQ(r->drain_timeout, 5s);
  EXPECT_EQ(r->client.header_timeout, 10s);
  EXPECT_EQ(r->client.keepalive_timeout, 10s);
  EXPECT_EQ(r->client.body_timeout, 10s);
  EXPECT_EQ(r->client.send_timeout, 10s);
}

TEST(defaults, client_section) {
  auto r = load_ok("upstreams: {api: {url: http://127.0.0.1:8081}}\n");
  ASSERT_TRUE(r);
  const client_settings& d = r->client;
  EXPECT_EQ(d.header_timeout, 10s);
  EXPECT_EQ(d.keepalive_timeout, 75s);
  EXPECT_EQ(d.body_timeout, 30s);
  EXPECT_EQ(d.send_timeout, 30s);
  EXPECT_EQ(d.max_connections, 0u);  // auto
  EXPECT_EQ(d.max_headers, 100u);
  EXPECT_EQ(d.max_header_size, 32u * 1024);
  EXPECT_EQ(d.max_uri_length, 8u * 1024);
  EXPECT_EQ(d.body_min_rate, 0u);

  r = load_ok(
      "client: {header_timeout: 2s, keepalive_timeout: 5s, body_timeout: 250ms,\n"
      "         send_timeout: 1m, max_connections: 5000, max_headers: 50,\n"
      "         max_header_size: 16KiB, max_uri_length: 2048, body_min_rate: 2KiB/s}\n");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->client.header_timeout, 2s);
  EXPECT_EQ(r->client.keepalive_timeout, 5s);
  EXPECT_EQ(r->client.body_timeout, 250ms);
  EXPECT_EQ(r->client.send_timeout, 60s);
  EXPECT_EQ(r->client.max_connections, 5000u);
  EXPECT_EQ(r->client.max_headers, 50u);
  EXPECT_EQ(r->client.max_header_size, 16u * 1024);
  EXPECT_EQ(r->client.max_uri_length, 2048u);
  EXPECT_EQ(r->client.body_min_rate, 2048u);

  // The older client_timeout sets the timeouts `client:` leaves out.
  r = load_ok("client_timeout: 7s\nclient: {header_timeout: 3s, max_connections: auto}\n");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->client.header_timeout, 3s);
  EXPECT_EQ(r->client.keepalive_timeout, 7s);
  EXPECT_EQ(r->client.body_timeout, 7s);
  EXPECT_EQ(r->client.send_timeout, 7s);
  EXPECT_EQ(r->client.max_connections, 0u);
}

TEST(defaults, max_buckets) {
  auto r = load_ok("store: {type: memory, max_buckets: 250000}\n");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->store.max_buckets, 250'000u);
  r = load_ok("store: {type: memory, max_buckets: 1}\n");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->store.max_buckets, 1u);
  r = load_ok("store: {type: memory, max_buckets: 1099511627776}\n");  // 2^40
  ASSERT_TRUE(r);
  EXPECT_EQ(r->store.max_buckets, std::uint64_t{1} << 40);
}

TEST(defaults, over_limit_cache) {
  auto r = load_ok("store: {type: redis}\n");
  ASSERT_TRUE(r);
  EXPECT_TRUE(r->store.over_limit_cache);
  r = load_ok("store: {type: redis, over_limit_cache: false}\n");
  ASSERT_TRUE(r);
  EXPECT_FALSE(r->store.over_limit_cache);
}

TEST(defaults, hash_groups_with_layout_hash) {
  auto r = load_ok("store: {type: redis, layout: hash, hash_groups: 1024}\n");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->store.layout, store_settings::layout_kind::hash);
  EXPECT_EQ(r->store.hash_groups, 1024u);
  r = load_ok("store: {type: redis, hash_groups: 16777216}\n");  // layout hash by default
  ASSERT_TRUE(r);
  EXPECT_EQ(r->store.hash_groups, 16777216u);
}

TEST(defaults, empty_sections_are_empty) {
  auto r = load_ok(R"(store:
identity:
upstreams:
plans:
  free:
api_keys:
routes:
)");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->store.type, store_settings::kind::memory);
  EXPECT_TRUE(r->upstreams.empty());
  EXPECT_EQ(r->plans.size(), 2u);
  EXPECT_TRUE(r->plans.at("free").limits.empty());
  EXPECT_TRUE(r->routes.empty());
}

TEST(defaults, overrides_may_name_the_implicit_anonymous_plan_and_limits_may_be_shared) {
  auto r = load_ok(R"(upstreams: {api: {url: http://127.0.0.1:8081}}
plans: {free: {limits: [{name: shared, by: ip, rate: 5/1s, burst: 10}]}}
routes:
  - name: r
    match: {path_prefix: /}
    upstream: api
    limits:
      - {name: shared, by: ip, rate: 5/1s, burst: 10}
      - {name: k, rate: 100/1m, plans: {anonymous: {rate: 10/1m, burst: 1}, free: {burst: 150}}}
)");
  ASSERT_TRUE(r);
  const limit& k = r->routes.at(0).limits.at(1);
  EXPECT_EQ(k.params_for("anonymous").rate.count, 10);
  EXPECT_EQ(k.params_for("anonymous").burst, 1);
  EXPECT_EQ(k.params_for("free").rate.count, 100);  // inherited
  EXPECT_EQ(k.params_for("free").burst, 150);
  EXPECT_EQ(k.params_for("pro").burst, 100);
}

// ---------------------------------------------------------------------------------------------
// The cases: c04 (cost above the tokens), c05 (zero limits), c06 part C (exact arithmetic).

constexpr std::string_view c04 = R"(store: {type: redis}
identity: {api_key: {header: X-API-Key}}
plans: {free: {limits: []}}
api_keys: {key-a: free}
upstreams: {api: {url: http://127.0.0.1:8081}}
routes:
  - name: bulk
    match: {path_prefix: /v1/bulk, methods: [POST]}
    upstream: api
    cost: 4
    limits:
      - {name: api_budget, by: api_key, rate: 1/1s, burst: 10}
  - name: items
    match: {path_prefix: /v1/items}
    upstream: api
    cost: 1
    limits:
      - {name: api_budget, by: api_key, rate: 1/1s, burst: 10}   # same name -> same bucket
)";

std::string with_bulk_cost(std::string_view cost) {
  std::string s(c04);
  s.replace(s.find("cost: 4"), 7, "cost: " + std::string(cost));
  return s;
}

TEST(c04, shared_limit_loads) {
  auto r = load_ok(c04);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->routes.at(0).cost, 4);
  EXPECT_EQ(r->routes.at(0).limits.at(0).params.burst, 10);
  EXPECT_EQ(r->routes.at(1).limits.at(0).name, "api_budget");
}

TEST(c04, cost_above_burst_is_refused_naming_route_and_limit) {
  EXPECT_EQ(diags(with_bulk_cost("11")),
            std::vector<std::string>{"rules.yaml:12: routes[0].limits[0].burst: cost 11 can never "
                                     "be admitted by burst 10"});
}

TEST(c04, cost_zero_is_refused) {
  EXPECT_EQ(
      diags(with_bulk_cost("0")),
      std::vector<std::string>{"rules.yaml:10: routes[0].cost: cost must be at least 1, got 0"});
}

TEST(c04, negative_cost_is_refused) {
  EXPECT_EQ(
      diags(with_bulk_cost("-4")),
      std::vector<std::string>{"rules.yaml:10: routes[0].cost: cost must be at least 1, got -4"});
}

constexpr std::string_view c05_v1 = R"(store: {type: redis}
identity: {api_key: {header: X-API-Key}}
plans: {free: {limits: []}, pro: {limits: []}}
api_keys: {key-a: free, key-p: pro}
upstreams: {api: {url: http://127.0.0.1:8081}}
routes:
  - name: export
    match: {path_prefix: /v1/export}
    upstream: api
    limits:
      - name: export_key
        by: api_key
        rate: 2/1m
        burst: 2
        plans: {pro: {rate: 5/1m, burst: 5}}
)";

std::string c05_with(std::string_view from, std::string_view to) {
  std::string s(c05_v1);
  s.replace(s.find(from), from.size(), to);
  return s;
}

TEST(c05, v1_loads) {
  auto r = load_ok(c05_v1);
  ASSERT_TRUE(r);
  const limit& l = r->routes.at(0).limits.at(0);
  EXPECT_EQ(l.params_for("free").burst, 2);
  EXPECT_EQ(l.params_for("pro").burst, 5);
  EXPECT_EQ(l.params_for("pro").rate.count, 5);
}

TEST(c05, v2_zero_plan_override_is_refused) {
  const std::string v2 =
      c05_with("plans: {pro: {rate: 5/1m, burst: 5}}",
               "plans: {pro: {rate: 5/1m, burst: 5}, free: {rate: 0/1m, burst: 0}}");
  EXPECT_EQ(diags(v2),
            (std::vector<std::string>{
                "rules.yaml:15: routes[0].limits[0].plans.free.rate: rate 0/1m never refills: the "
                "count must be at least 1",
                "rules.yaml:15: routes[0].limits[0].plans.free.burst: cost 1 can never be admitted "
                "by burst 0",
            }));
}

TEST(c05, v2_in_block_style_points_at_the_burst_line) {
  const std::string v2 = c05_with("plans: {pro: {rate: 5/1m, burst: 5}}",
                                  "plans:\n          pro: {rate: 5/1m, burst: 5}\n"
                                  "          free:\n            rate: 1/1m\n            burst: 0");
  EXPECT_EQ(diags(v2), std::vector<std::string>{"rules.yaml:19: routes[0].limits[0].plans.free."
                                                "burst: cost 1 can never be admitted by burst 0"});
}

TEST(c05, rate_zero_with_burst_is_refused) {
  EXPECT_EQ(diags(c05_with("rate: 2/1m\n        burst: 2", "rate: 0/1m\n        burst: 3")),
            std::vector<std::string>{"rules.yaml:13: routes[0].limits[0].rate: rate 0/1m never "
                                     "refills: the count must be at least 1"});
}

TEST(c05, burst_zero_is_refused) {
  EXPECT_EQ(diags(c05_with("rate: 2/1m\n        burst: 2", "rate: 5/1m\n        burst: 0")),
            std::vector<std::string>{"rules.yaml:14: routes[0].limits[0].burst: cost 1 can never "
                                     "be admitted by burst 0"});
}

TEST(c05, negative_rate_is_refused) {
  EXPECT_EQ(diags(c05_with("rate: 2/1m", "rate: -2/1m")),
            std::vector<std::string>{"rules.yaml:13: routes[0].limits[0].rate: negative rate "
                                     "-2/1m: the count must be at least 1"});
}

TEST(c05, negative_burst_is_refused) {
  EXPECT_EQ(diags(c05_with("burst: 2", "burst: -2")),
            std::vector<std::string>{"rules.yaml:14: routes[0].limits[0].burst: burst must not be "
                                     "negative, got -2"});
}

TEST(c05, fixed_window_with_zero_rate_is_refused) {
  EXPECT_EQ(
      diags(c05_with("rate: 2/1m\n        burst: 2\n        plans: {pro: {rate: 5/1m, burst: 5}}",
                     "algorithm: fixed_window\n        rate: 0/1m")),
      (std::vector<std::string>{
          "rules.yaml:14: routes[0].limits[0].rate: rate 0/1m never refills: the count must "
          "be at least 1",
      }));
}

constexpr std::string_view c06 = R"(store: {type: redis}
identity: {api_key: {header: X-API-Key}}
plans: {free: {limits: []}}
api_keys: {key-a: free}
upstreams: {api: {url: http://127.0.0.1:8081}}
routes:
  - name: items
    match: {path_prefix: /v1/items}
    upstream: api
    limits:
      - LIMIT
)";

std::string c06_with(std::string_view limit) {
  std::string s(c06);
  s.replace(s.find("LIMIT"), 5, limit);
  return s;
}

TEST(c06, long_period_and_high_rate_load) {
  auto a = load_ok(c06_with("{name: items_key, by: api_key, rate: 1/30d, burst: 1000}"));
  ASSERT_TRUE(a);
  EXPECT_EQ(a->routes[0].limits[0].params.rate.period.count(), 2'592'000'000);
  auto b = load_ok(c06_with("{name: items_key, by: api_key, rate: 1000000/1s, burst: 1000000}"));
  ASSERT_TRUE(b);
  EXPECT_EQ(b->routes[0].limits[0].params.rate.count, 1'000'000);
  auto d = load_ok(c06_with("{name: items_key, by: api_key, rate: 1/10s, burst: 2}"));
  ASSERT_TRUE(d);
}

TEST(c06, exactly_two_to_the_53_is_accepted_as_a_count) {
  // 2^53 / 1 ms: one token is one unit, capacity 2^53.
  EXPECT_TRUE(load_ok(c06_with("{name: k, rate: 9007199254740992/1ms}")));
}

TEST(c06, capacity_above_two_to_the_53_is_refused) {
  EXPECT_EQ(diags(c06_with("{name: k, rate: 7/1d, burst: 200000000}")),
            std::vector<std::string>{
                "rules.yaml:11: routes[0].limits[0].burst: burst 200000000 with rate 7/1d cannot "
                "be counted exactly: one token is 86400000 units (period_ms / gcd(count, "
                "period_ms) = 86400000 / 1), and burst × 86400000 is above 2^53 = "
                "9007199254740992"});
}

// ---------------------------------------------------------------------------------------------
// One mistake per row, with the exact diagnostics.

struct mistake {
  const char* name;
  const char* yaml;
  std::vector<std::string> expected;
};

void PrintTo(const mistake& m, std::ostream* os) {
  *os << m.name;
}

class mistakes : public ::testing::TestWithParam<mistake> {};

TEST_P(mistakes, are_reported_exactly) {
  EXPECT_EQ(diags(GetParam().yaml), GetParam().expected);
}

// Most rows share this shape: line 1 the upstream, line 2 `routes:`, the route from line 3.
#define UP "upstreams: {api: {url: http://127.0.0.1:8081}}\n"

const mistake mistake_table[] = {
    {"unknown_top_level_key",
     UP "stor: {type: memory}\n",
     {"rules.yaml:2: stor: unknown key 'stor'; did you mean 'store'?"}},
    {"unknown_limit_key_with_suggestion",
     UP "routes:\n"
        "  - name: r\n"
        "    match: {path_prefix: /}\n"
        "    upstream: api\n"
        "    limits:\n"
        "      - {name: a, ratee: 1/1s}\n",
     {"rules.yaml:7: routes[0].limits[0].ratee: unknown key 'ratee'; did you mean 'rate'?",
      "rules.yaml:7: routes[0].limits[0]: missing required key 'rate'"}},
    {"unknown_limit_key_without_suggestion",
     UP "routes:\n"
        "  - name: r\n"
        "    match: {path_prefix: /}\n"
        "    upstream: api\n"
        "    limits:\n"
        "      - {name: a, rate: 1/1s, cost: 2}\n",
     {"rules.yaml:7: routes[0].limits[0].cost: unknown key 'cost'; expected one of name, by, "
      "algorithm, rate, burst, plans, mode, preflight, lease, lease_time, shards, region_share, "
      "max_in_flight, slot_ttl, block, utc_offset, warn_at, charge"}},
    {"unknown_route_key",
     UP "routes:\n"
        "  - name: r\n"
        "    match: {path_prefix: /}\n"
        "    upstream: api\n"
        "    on_store_fail: fail_open\n",
     {"rules.yaml:6: routes[0].on_store_fail: unknown key 'on_store_fail'; did you mean "
      "'on_store_failure'?"}},
    {"unknown_match_key",
     UP "routes:\n"
        "  - name: r\n"
        "    match: {path-prefix: /}\n"
        "    upstream: api\n",
     {"rules.yaml:4: routes[0].match.path-prefix: unknown key 'path-prefix'; did you mean "
      "'path_prefix'?"}},
    {"unknown_identity_key",
     UP "identity: {trusted_proxy: [10.0.0.0/8]}\n",
     {"rules.yaml:2: identity.trusted_proxy: unknown key 'trusted_proxy'; did you mean "
      "'trusted_proxies'?"}},
    {"duplicate_top_level_key",
     UP "listen: 0.0.0.0:8080\n"
        "listen: 0.0.0.0:9000\n",
     {"rules.yaml:3: listen: duplicate key 'listen' (first at line 2)"}},
    {"duplicate_key_in_a_flow_mapping",
     UP "routes:\n"
        "  - name: r\n"
        "    match: {path_prefix: /}\n"
        "    upstream: api\n"
        "    limits:\n"
        "      - {name: a, rate: 1/1s, rate: 100/1s}\n",
     {"rules.yaml:7: routes[0].limits[0].rate: duplicate key 'rate' (first at line 7)"}},
    {"duplicate_plan",
     UP "plans:\n"
        "  free: {limits: []}\n"
        "  free: {limits: [{name: a, rate: 1/1s}]}\n",
     {"rules.yaml:4: plans.free: duplicate key 'free' (first at line 3)"}},
    {"duplicate_route_name",
     UP "routes:\n"
        "  - {name: r, match: {path_prefix: /a}, upstream: api}\n"
        "  - {name: r, match: {path_prefix: /b}, upstream: api}\n",
     {"rules.yaml:4: routes[1].name: duplicate route name 'r' (first at line 3)"}},
    {"duplicate_limit_name_in_a_list",
     UP "routes:\n"
        "  - name: r\n"
        "    match: {path_prefix: /}\n"
        "    upstream: api\n"
        "    limits:\n"
        "      - {name: a, rate: 1/1s}\n"
        "      - {name: a, rate: 1/1s}\n",
     {"rules.yaml:8: routes[0].limits[1].name: duplicate limit name 'a' in this list (first at "
      "line 7)"}},
    {"limit_name_reused_with_another_burst",
     UP "routes:\n"
        "  - {name: r1, match: {path_prefix: /a}, upstream: api, limits: [{name: a, rate: 1/1s, "
        "burst: 10}]}\n"
        "  - {name: r2, match: {path_prefix: /b}, upstream: api, limits: [{name: a, rate: 1/1s, "
        "burst: 20}]}\n",
     {"rules.yaml:4: routes[1].limits[0]: limit 'a' differs in burst from routes[0].limits[0] "
      "(line 3); one name is one bucket, so every definition must be identical"}},
    {"limit_name_reused_by_a_plan_with_another_identity",
     UP
     "plans: {free: {limits: [{name: a, by: ip, rate: 1/1s}]}}\n"
     "routes:\n"
     "  - {name: r1, match: {path_prefix: /a}, upstream: api, limits: [{name: a, rate: 1/1s}]}\n",
     {"rules.yaml:4: routes[0].limits[0]: limit 'a' differs in by from plans.free.limits[0] "
      "(line 2); one name is one bucket, so every definition must be identical"}},
    {"limit_name_reused_with_another_block",
     UP "routes:\n"
        "  - {name: r1, match: {path_prefix: /a}, upstream: api, limits: [{name: a, rate: 5/1m, "
        "block: 10m}]}\n"
        "  - {name: r2, match: {path_prefix: /b}, upstream: api, limits: [{name: a, rate: 5/1m, "
        "block: 15m}]}\n",
     {"rules.yaml:4: routes[1].limits[0]: limit 'a' differs in block from routes[0].limits[0] "
      "(line 3); one name is one bucket, so every definition must be identical"}},
    {"limit_name_reused_with_another_warn_at",
     UP "routes:\n"
        "  - {name: r1, match: {path_prefix: /a}, upstream: api, limits: [{name: a, rate: 5/1m, "
        "warn_at: 50%}]}\n"
        "  - {name: r2, match: {path_prefix: /b}, upstream: api, limits: [{name: a, rate: 5/1m, "
        "warn_at: 80%}]}\n",
     {"rules.yaml:4: routes[1].limits[0]: limit 'a' differs in warn_at from routes[0].limits[0] "
      "(line 3); one name is one bucket, so every definition must be identical"}},
    {"limit_name_reused_with_another_charge",
     UP "routes:\n"
        "  - {name: r1, match: {path_prefix: /a}, upstream: api, limits: [{name: a, rate: 5/1m, "
        "charge: {when_status: [401]}}]}\n"
        "  - {name: r2, match: {path_prefix: /b}, upstream: api, limits: [{name: a, rate: 5/1m, "
        "charge: {when_status: [403]}}]}\n",
     {"rules.yaml:4: routes[1].limits[0]: limit 'a' differs in charge from routes[0].limits[0] "
      "(line 3); one name is one bucket, so every definition must be identical"}},
    {"limit_name_reused_with_another_utc_offset_on_plans_only",
     UP "plans: {free: {limits: []}}\n"
        "routes:\n"
        "  - {name: r1, match: {path_prefix: /a}, upstream: api, limits: [{name: a, algorithm: "
        "calendar, utc_offset: \"+01:00\", plans: {free: {rate: 5/day}}}]}\n"
        "  - {name: r2, match: {path_prefix: /b}, upstream: api, limits: [{name: a, algorithm: "
        "calendar, utc_offset: \"+02:00\", plans: {free: {rate: 5/day}}}]}\n",
     {"rules.yaml:5: routes[1].limits[0]: limit 'a' differs in utc_offset from "
      "routes[0].limits[0] (line 4); one name is one bucket, so every definition must be "
      "identical"}},
    {"limit_name_not_a_key",
     UP "routes:\n"
        "  - {name: r, match: {path_prefix: /}, upstream: api, limits: [{name: \"a:b\", rate: "
        "1/1s}]}\n",
     {"rules.yaml:3: routes[0].limits[0].name: limit name 'a:b' must match [A-Za-z0-9_-]{1,64}"}},
    {"limit_without_name",
     UP "routes:\n"
        "  - {name: r, match: {path_prefix: /}, upstream: api, limits: [{rate: 1/1s}]}\n",
     {"rules.yaml:3: routes[0].limits[0]: missing required key 'name'"}},
    {"fractional_cost",
     UP "routes:\n"
        "  - {name: r, match: {path_prefix: /}, upstream: api, cost: 1.5}\n",
     {"rules.yaml:3: routes[0].cost: cost must be a whole number, got 1.5"}},
    {"cost_above_two_to_the_53",
     UP "routes:\n"
        "  - {name: r, match: {path_prefix: /}, upstream: api, cost: 9007199254740993}\n",
     {"rules.yaml:3: routes[0].cost: cost 9007199254740993 is above 2^53 = 9007199254740992, the "
      "largest integer the store arithmetic represents exactly"}},
    {"cost_above_a_defaulted_burst_points_at_the_limit",
     UP "routes:\n"
        "  - name: r\n"
        "    match: {path_prefix: /}\n"
        "    upstream: api\n"
        "    cost: 5\n"
        "    limits:\n"
        "      - {name: a, rate: 3/1s}\n",
     {"rules.yaml:8: routes[0].limits[0]: cost 5 can never be admitted by burst 3"}},
    {"cost_above_a_plan_override_burst_names_the_plan",
     UP "plans: {gold: {limits: []}}\n"
        "routes:\n"
        "  - name: r\n"
        "    match: {path_prefix: /}\n"
        "    upstream: api\n"
        "    cost: 5\n"
        "    limits:\n"
        "      - name: a\n"
        "        rate: 10/1s\n"
        "        plans:\n"
        "          gold: {rate: 4/1s}\n",
     {"rules.yaml:12: routes[0].limits[0].plans.gold: cost 5 can never be admitted by burst 4"}},
    {"cost_above_a_plan_limit_names_the_route",
     UP "plans: {free: {limits: [{name: a, rate: 10/1m, burst: 3}]}}\n"
        "routes:\n"
        "  - {name: cheap, match: {path_prefix: /a}, upstream: api}\n"
        "  - {name: bulk, match: {path_prefix: /b}, upstream: api, cost: 5}\n",
     {"rules.yaml:2: plans.free.limits[0].burst: cost 5 can never be admitted by burst 3 on route "
      "'bulk'"}},
    {"fractional_burst",
     UP "routes:\n"
        "  - {name: r, match: {path_prefix: /}, upstream: api, limits: [{name: a, rate: 1/1s, "
        "burst: 2.5}]}\n",
     {"rules.yaml:3: routes[0].limits[0].burst: burst must be a whole number, got 2.5"}},
    {"burst_above_two_to_the_53",
     UP "routes:\n"
        "  - {name: r, match: {path_prefix: /}, upstream: api, limits: [{name: a, rate: 1/1ms, "
        "burst: 9007199254740993}]}\n",
     {"rules.yaml:3: routes[0].limits[0].burst: burst 9007199254740993 is above 2^53 = "
      "9007199254740992, the largest integer the store arithmetic represents exactly"}},
    {"rate_count_above_two_to_the_53",
     UP "routes:\n"
        "  - {name: r, match: {path_prefix: /}, upstream: api, limits: [{name: a, rate: "
        "9007199254740993/1s}]}\n",
     {"rules.yaml:3: routes[0].limits[0].rate: rate 9007199254740993/1s: the count is above 2^53 "
      "= 9007199254740992, the largest integer the store arithmetic represents exactly"}},
    {"fractional_rate",
     UP
     "routes:\n"
     "  - {name: r, match: {path_prefix: /}, upstream: api, limits: [{name: a, rate: 0.5/1s}]}\n",
     {"rules.yaml:3: routes[0].limits[0].rate: rate 0.5/1s: the count must be a whole number"}},
    {"rate_without_a_period",
     UP "routes:\n"
        "  - {name: r, match: {path_prefix: /}, upstream: api, limits: [{name: a, rate: 100}]}\n",
     {"rules.yaml:3: routes[0].limits[0].rate: invalid rate '100': expected N/DURATION, such as "
      "100/1m or 10/1s"}},
    {"rate_with_a_bad_unit",
     UP "routes:\n"
        "  - {name: r, match: {path_prefix: /}, upstream: api, limits: [{name: a, rate: 10/1w}]}\n",
     {"rules.yaml:3: routes[0].limits[0].rate: invalid rate '10/1w': '1w' is not a duration (a "
      "whole number and a unit ms, s, m, h or d)"}},
    {"rate_period_below_a_millisecond",
     UP
     "routes:\n"
     "  - {name: r, match: {path_prefix: /}, upstream: api, limits: [{name: a, rate: 10/0ms}]}\n",
     {"rules.yaml:3: routes[0].limits[0].rate: rate 10/0ms: the period is shorter than 1ms"}},
    {"rate_period_absurdly_long",
     UP "routes:\n"
        "  - {name: r, match: {path_prefix: /}, upstream: api, limits: [{name: a, rate: "
        "1/100000d}]}\n",
     {"rules.yaml:3: routes[0].limits[0].rate: rate 1/100000d: the period is longer than 365d"}},
    {"limit_without_rate",
     UP "routes:\n"
        "  - {name: r, match: {path_prefix: /}, upstream: api, limits: [{name: a, burst: 5}]}\n",
     {"rules.yaml:3: routes[0].limits[0]: missing required key 'rate'"}},
    {"override_without_rate_when_the_limit_has_none",
     UP "plans: {gold: {limits: []}}\n"
        "routes:\n"
        "  - {name: r, match: {path_prefix: /}, upstream: api, limits: [{name: a, plans: {gold: "
        "{burst: 5}}}]}\n",
     {"rules.yaml:4: routes[0].limits[0].plans.gold: missing required key 'rate' (the limit has "
      "no default rate)"}},
    {"unknown_algorithm",
     UP "routes:\n"
        "  - {name: r, match: {path_prefix: /}, upstream: api, limits: [{name: a, rate: 1/1s, "
        "algorithm: token-bucket}]}\n",
     {"rules.yaml:3: routes[0].limits[0].algorithm: unknown algorithm 'token-bucket'; did you "
      "mean 'token_bucket'?"}},
    {"algorithm_not_supported_yet",
     UP "routes:\n"
        "  - {name: r, match: {path_prefix: /}, upstream: api, limits: [{name: a, rate: 1/1s, "
        "algorithm: gcra}]}\n",
     {"rules.yaml:3: routes[0].limits[0].algorithm: algorithm gcra is not supported yet "
      "(token_bucket gives the same limits)"}},
    {"unknown_identity_kind",
     UP "routes:\n"
        "  - {name: r, match: {path_prefix: /}, upstream: api, limits: [{name: a, rate: 1/1s, by: "
        "usr}]}\n",
     {"rules.yaml:3: routes[0].limits[0].by: unknown identity 'usr'; did you mean 'user'?"}},
    {"header_identity_without_a_name",
     UP "routes:\n"
        "  - {name: r, match: {path_prefix: /}, upstream: api, limits: [{name: a, rate: 1/1s, by: "
        "\"header:\"}]}\n",
     {"rules.yaml:3: routes[0].limits[0].by: 'header:' needs a header name, such as "
      "header:X-Tenant"}},
    {"unknown_mode",
     UP "routes:\n"
        "  - {name: r, match: {path_prefix: /}, upstream: api, limits: [{name: a, rate: 1/1s, "
        "mode: dry_run}]}\n",
     {"rules.yaml:3: routes[0].limits[0].mode: unknown mode 'dry_run'; expected one of enforce, "
      "shadow"}},
    {"unknown_upstream",
     UP "routes:\n"
        "  - {name: r, match: {path_prefix: /}, upstream: apu}\n",
     {"rules.yaml:3: routes[0].upstream: unknown upstream 'apu'; did you mean 'api'?"}},
    {"route_without_upstream",
     UP "routes:\n"
        "  - {name: r, match: {path_prefix: /}}\n",
     {"rules.yaml:3: routes[0]: missing required key 'upstream'"}},
    {"unknown_plan_in_api_keys",
     UP "plans: {free: {limits: []}}\n"
        "api_keys: {key-a: fre, key-b: platinum}\n",
     {"rules.yaml:3: api_keys: unknown plan 'fre'; did you mean 'free'?",
      "rules.yaml:3: api_keys: unknown plan 'platinum'; plans are free, anonymous"}},
    // An API key is a credential: its entry is named by its line, never by the key.
    {"api_keys_are_never_echoed",
     UP "plans: {free: {limits: []}}\n"
        "api_keys:\n"
        "  sk-live-4f9a: free\n"
        "  sk-live-4f9a: free\n"
        "  sk-live-77b1: {plan: free}\n",
     {"rules.yaml:5: api_keys: duplicate key (first at line 4)",
      "rules.yaml:6: api_keys: expected a string, got a mapping"}},
    {"unknown_plan_in_a_limit_override",
     UP "plans: {free: {limits: []}}\n"
        "routes:\n"
        "  - {name: r, match: {path_prefix: /}, upstream: api, limits: [{name: a, rate: 1/1s, "
        "plans: {fre: {rate: 2/1s}}}]}\n",
     {"rules.yaml:4: routes[0].limits[0].plans.fre: unknown plan 'fre'; did you mean 'free'?"}},
    {"path_prefix_not_absolute",
     UP "routes:\n"
        "  - {name: r, match: {path_prefix: v1/}, upstream: api}\n",
     {"rules.yaml:3: routes[0].match.path_prefix: path_prefix 'v1/' must start with '/'"}},
    {"method_not_a_token",
     UP "routes:\n"
        "  - {name: r, match: {path_prefix: /, methods: [\"GET /\"]}, upstream: api}\n",
     {"rules.yaml:3: routes[0].match.methods[0]: invalid method 'GET /': a method is an HTTP "
      "token"}},
    {"bad_cidr",
     UP "identity: {trusted_proxies: [10.0.0.0/33]}\n",
     {"rules.yaml:2: identity.trusted_proxies[0]: invalid CIDR '10.0.0.0/33': the prefix length "
      "must be a number from 0 to 32"}},
    {"cidr_with_host_bits",
     UP "identity: {trusted_proxies: [\"10.0.0.0/8\", \"2001:db8::1/32\"]}\n",
     {"rules.yaml:2: identity.trusted_proxies[1]: invalid CIDR '2001:db8::1/32': host bits are "
      "set; did you mean '2001:db8::/32'?"}},
    {"cidr_not_an_address",
     UP "identity: {trusted_proxies: [corp-proxy]}\n",
     {"rules.yaml:2: identity.trusted_proxies[0]: invalid CIDR 'corp-proxy': expected an IPv4 or "
      "IPv6 network, such as 10.0.0.0/8 or fd00::/8"}},
    {"listen_without_port",
     UP "listen: 0.0.0.0\n",
     {"rules.yaml:2: listen: invalid address '0.0.0.0': the port is missing (expected host:port, "
      "such as 0.0.0.0:8080 or \"[::1]:8080\")"}},
    {"listen_ipv6_without_brackets",
     UP "listen: \"::1:8080\"\n",
     {"rules.yaml:2: listen: invalid address '::1:8080': an IPv6 address is written in brackets, "
      "such as \"[::1]:8080\" (expected host:port, such as 0.0.0.0:8080 or \"[::1]:8080\")"}},
    {"listen_host_name",
     UP "listen: localhost:8080\n",
     {"rules.yaml:2: listen: invalid address 'localhost:8080': a listening address must be an IP "
      "address, such as 127.0.0.1:8080 or \"[::1]:8080\" (host names are not resolved)"}},
    {"store_port_out_of_range",
     UP "store: {type: redis, address: \"127.0.0.1:65536\"}\n",
     {"rules.yaml:2: store.address: invalid address '127.0.0.1:65536': port 65536 is out of range "
      "1..65535 (expected host:port, such as 0.0.0.0:8080 or \"[::1]:8080\")"}},
    {"url_with_ftp",
     "upstreams: {api: {url: \"ftp://example.com\"}}\n",
     {"rules.yaml:1: upstreams.api.url: invalid url 'ftp://example.com': scheme 'ftp' is not "
      "supported; only http:// and https:// are"}},
    {"url_without_scheme",
     "upstreams: {api: {url: \"127.0.0.1:8081\"}}\n",
     {"rules.yaml:1: upstreams.api.url: invalid url '127.0.0.1:8081': expected "
      "http://host:port[/base] or https://host:port[/base]"}},
    {"upstream_without_url",
     "upstreams: {api: {timeout: 5s}}\n",
     {"rules.yaml:1: upstreams.api: missing required key 'url'"}},
    {"malformed_duration",
     UP "store: {timeout: 5 sec}\n",
     {"rules.yaml:2: store.timeout: invalid duration '5 sec': expected a whole number and a unit "
      "(ms, s, m, h, d), such as 250ms or 5s"}},
    {"malformed_size",
     UP "routes:\n"
        "  - {name: r, match: {path_prefix: /}, upstream: api, max_request_body: 12XB}\n",
     {"rules.yaml:3: routes[0].max_request_body: invalid size '12XB': expected a whole number "
      "of bytes with an optional unit (B, KB, MB, GB, KiB, MiB, GiB), such as 16MiB, or "
      "unlimited"}},
    {"size_too_large",
     UP "routes:\n"
        "  - {name: r, match: {path_prefix: /}, upstream: api, max_response_body: 9999999GiB}\n",
     {"rules.yaml:3: routes[0].max_response_body: size '9999999GiB' is larger than 2^53 bytes "
      "(use unlimited)"}},
    {"upgrade_not_a_boolean",
     UP "routes:\n"
        "  - {name: r, match: {path_prefix: /}, upstream: api, upgrade: yes}\n",
     {"rules.yaml:3: routes[0].upgrade: expected true or false, got 'yes'"}},
    {"over_limit_cache_not_a_boolean",
     UP "store: {type: redis, over_limit_cache: 1}\n",
     {"rules.yaml:2: store.over_limit_cache: expected true or false, got '1'"}},
    {"client_unknown_key",
     UP "client: {header_timeout: 5s, keepalive_timout: 60s}\n",
     {"rules.yaml:2: client.keepalive_timout: unknown key 'keepalive_timout'; did you mean "
      "'keepalive_timeout'?"}},
    {"client_max_connections_zero",
     UP "client: {max_connections: 0}\n",
     {"rules.yaml:2: client.max_connections: max_connections must be at least 1, got 0"}},
    {"client_header_size_too_small",
     UP "client: {max_header_size: 512}\n",
     {"rules.yaml:2: client.max_header_size: max_header_size must be at least 1KiB and at most "
      "1MiB, got 512"}},
    {"client_uri_length_unlimited",
     UP "client: {max_uri_length: unlimited}\n",
     {"rules.yaml:2: client.max_uri_length: max_uri_length must be at least 1 byte and at most "
      "1MiB, got unlimited"}},
    {"client_body_min_rate_without_per_second",
     UP "client: {body_min_rate: 500}\n",
     {"rules.yaml:2: client.body_min_rate: invalid rate '500': expected bytes per second with an "
      "optional unit, such as 1KiB/s (at most 1GiB/s), or 0 for none"}},
    {"client_header_timeout_too_long",
     UP "client: {header_timeout: 2h}\n",
     {"rules.yaml:2: client.header_timeout: header_timeout 2h is longer than the maximum of 1h"}},
    {"upstream_max_idle_over_its_cap",
     "upstreams:\n  api: {url: http://127.0.0.1:8081, max_idle: 65537}\n",
     {"rules.yaml:2: upstreams.api.max_idle: max_idle must be at most 65536, got 65537"}},
    {"upstream_max_idle_negative",
     "upstreams:\n  api: {url: http://127.0.0.1:8081, max_idle: -1}\n",
     {"rules.yaml:2: upstreams.api.max_idle: max_idle must not be negative, got -1"}},
    {"status_top_over_its_cap",
     UP "status: {top: 101}\n",
     {"rules.yaml:2: status.top: top must be at most 100, got 101"}},
    {"status_window_not_whole_minutes",
     UP "status: {window: 90s}\n",
     {"rules.yaml:2: status.window: window must be whole minutes (1m to 60m)"}},
    {"status_graph_not_whole_minutes",
     UP "status: {graph: 90s}\n",
     {"rules.yaml:2: status.graph: graph must be whole minutes (1m to 60m)"}},
    {"status_graph_step_not_whole_seconds",
     UP "status: {graph_step: 1500ms}\n",
     {"rules.yaml:2: status.graph_step: graph_step must be whole seconds (1s to 60s)"}},
    {"status_graph_step_over_a_minute",
     UP "status: {graph_step: 2m}\n",
     {"rules.yaml:2: status.graph_step: graph_step 2m is longer than the maximum of 1m"}},
    {"status_graph_too_many_points",
     UP "status: {graph: 1h, graph_step: 1s}\n",
     {"rules.yaml:2: status: graph / graph_step is over 720 points: take a longer graph_step or a "
      "shorter graph"}},
    {"status_window_over_an_hour",
     UP "status: {window: 2h}\n",
     {"rules.yaml:2: status.window: window 2h is longer than the maximum of 1h"}},
    {"status_unknown_field",
     UP "status: {topn: 5}\n",
     {"rules.yaml:2: status.topn: unknown key 'topn'; did you mean 'top'?"}},
    {"zero_drain_timeout",
     UP "drain_timeout: 0s\n",
     {"rules.yaml:2: drain_timeout: drain_timeout 0s is shorter than 1ms"}},
    {"zero_duration",
     UP "retry_after_jitter: 0s\n",
     {"rules.yaml:2: retry_after_jitter: retry_after_jitter 0s is shorter than 1ms"}},
    {"store_timeout_too_long",
     UP "store: {timeout: 2h}\n",
     {"rules.yaml:2: store.timeout: timeout 2h is longer than the maximum of 1m"}},
    {"unknown_store_type",
     UP "store: {type: redsi}\n",
     {"rules.yaml:2: store.type: unknown store type 'redsi'; did you mean 'redis'?"}},
    {"local_share_above_one",
     UP "store: {local_share: 1.5}\n",
     {"rules.yaml:2: store.local_share: local_share must be in (0, 1], got 1.5"}},
    {"unknown_store_layout",
     UP "store: {layout: keys}\n",
     {"rules.yaml:2: store.layout: unknown store layout 'keys'; did you mean 'key'?"}},
    {"hash_groups_zero",
     UP "store:\n  type: redis\n  hash_groups: 0\n",
     {"rules.yaml:4: store.hash_groups: hash_groups must be at least 1, got 0"}},
    {"hash_groups_too_many",
     UP "store: {hash_groups: 16777217}\n",
     {"rules.yaml:2: store.hash_groups: hash_groups must be at most 16777216, got 16777217"}},
    {"max_buckets_zero",
     UP "store:\n  type: memory\n  max_buckets: 0\n",
     {"rules.yaml:4: store.max_buckets: max_buckets must be at least 1, got 0"}},
    {"max_buckets_negative",
     UP "store: {max_buckets: -5}\n",
     {"rules.yaml:2: store.max_buckets: max_buckets must be at least 1, got -5"}},
    {"max_buckets_fraction",
     UP "store: {max_buckets: 1.5}\n",
     {"rules.yaml:2: store.max_buckets: max_buckets must be a whole number, got 1.5"}},
    {"max_buckets_exponent",
     UP "store: {max_buckets: 1e6}\n",
     {"rules.yaml:2: store.max_buckets: expected an integer written in digits, got 1e6"}},
    {"max_buckets_not_a_number",
     UP "store: {max_buckets: lots}\n",
     {"rules.yaml:2: store.max_buckets: expected an integer, got 'lots'"}},
    {"max_buckets_a_list",
     UP "store: {max_buckets: [1]}\n",
     {"rules.yaml:2: store.max_buckets: expected an integer, got a list"}},
    {"max_buckets_too_many",
     UP "store: {max_buckets: 1099511627777}\n",
     {"rules.yaml:2: store.max_buckets: max_buckets must be at most 1099511627776, got "
      "1099511627777"}},
    {"hash_groups_with_layout_key",
     UP "store:\n  type: redis\n  layout: key\n  hash_groups: 1024\n",
     {"rules.yaml:5: store.hash_groups: hash_groups applies only to layout hash"}},
    {"hash_groups_with_layout_key_and_a_bad_value",
     UP "store: {layout: key, hash_groups: 0}\n",
     {"rules.yaml:2: store.hash_groups: hash_groups applies only to layout hash",
      "rules.yaml:2: store.hash_groups: hash_groups must be at least 1, got 0"}},
    // Integers are written in digits in every field: other notations of a whole number are
    // refused as a spelling, fractions as a value.
    {"hash_groups_in_exponent_notation",
     UP "store: {hash_groups: 1e3}\n",
     {"rules.yaml:2: store.hash_groups: expected an integer written in digits, got 1e3"}},
    {"workers_in_exponent_notation",
     UP "workers: 1E1\n",
     {"rules.yaml:2: workers: expected an integer written in digits, got 1E1"}},
    {"cost_with_a_zero_fraction",
     UP "routes:\n"
        "  - {name: r, match: {path_prefix: /}, upstream: api, cost: 2.0}\n",
     {"rules.yaml:3: routes[0].cost: expected an integer written in digits, got 2.0"}},
    {"burst_with_a_plus_sign",
     UP "routes:\n"
        "  - {name: r, match: {path_prefix: /}, upstream: api, limits: [{name: a, rate: 1/1s, "
        "burst: +5}]}\n",
     {"rules.yaml:3: routes[0].limits[0].burst: expected an integer written in digits, got +5"}},
    {"rate_count_in_exponent_notation",
     UP "routes:\n"
        "  - {name: r, match: {path_prefix: /}, upstream: api, limits: [{name: a, rate: "
        "1e3/1m}]}\n",
     {"rules.yaml:3: routes[0].limits[0].rate: rate 1e3/1m: expected the count as an integer "
      "written in digits, got 1e3"}},
    {"fraction_in_exponent_notation",
     UP "identity: {ipv4_prefix: 25e-1}\n",
     {"rules.yaml:2: identity.ipv4_prefix: ipv4_prefix must be a whole number, got 25e-1"}},
    {"unknown_header_set",
     UP "headers: [x-ratelimit, draft]\n",
     {"rules.yaml:2: headers[1]: unknown header set 'draft'; expected one of x-ratelimit, ietf"}},
    {"unknown_key_policy",
     UP "identity: {unknown_key: deny}\n",
     {"rules.yaml:2: identity.unknown_key: unknown policy 'deny'; expected one of anonymous, "
      "reject"}},
    {"negative_workers",
     UP "workers: -1\n",
     {"rules.yaml:2: workers: workers must not be negative, got -1"}},
    {"routes_not_a_list",
     UP "routes: {name: r}\n",
     {"rules.yaml:2: routes: expected a list, got a mapping"}},
    {"yaml_syntax_error",
     UP "routes:\n"
        "  - {name: r, match: {path_prefix: /}\n",
     {"rules.yaml:4: invalid YAML: end of map flow not found"}},
    {"empty_file", "", {"rules.yaml:1: the rules file is empty"}},
    {"top_level_not_a_mapping",
     "- a\n- b\n",
     {"rules.yaml:1: expected a mapping at the top level, got a list"}},
    {"two_documents", UP "---\n" UP, {"rules.yaml:3: expected one YAML document, found 2"}},
    {"three_documents",
     UP "---\n" UP "---\n" UP,
     {"rules.yaml:3: expected one YAML document, found 3"}},
    // A ',' where no value can start: yaml-cpp's LoadAll reported empty documents there
    // forever (found by fuzzing: a 1-byte file took all memory; fuzz/regressions/rules_loader).
    {"stray_comma",
     ",",
     {"rules.yaml:1: invalid YAML: ',' at column 1 cannot start a value "
      "here (quote it, or put it inside [ ] or { })"}},
    {"stray_comma_after_a_comment",
     "# rules\n,\n" UP,
     {"rules.yaml:2: invalid YAML: ',' at column 1 cannot start a value here (quote it, or put "
      "it inside [ ] or { })"}},
    {"stray_comma_after_a_tag",
     "!t ,",
     {"rules.yaml:1: invalid YAML: ',' at column 4 cannot start a value here (quote it, or put "
      "it inside [ ] or { })"}},
    {"stray_comma_in_a_second_document",
     UP "---\n,\n",
     {"rules.yaml:3: invalid YAML: ',' at column 1 cannot start a value here (quote it, or put "
      "it inside [ ] or { })"}},
    // YAML is Unicode: ill-formed UTF-8 (a Latin-1 file, a stray byte) is refused before
    // parsing, naming line, column and the byte in hex (found by fuzzing: such a
    // route name made /admin/config invalid JSON; fuzz/regressions/rules_loader).
    {"not_utf8",
     UP "routes:\n"
        "  - {name: caf\xE9, match: {path_prefix: /}, upstream: api}\n",
     {"rules.yaml:3: not UTF-8: byte 0xE9 at column 15 does not begin a well-formed UTF-8 "
      "sequence (save the file as UTF-8)"}},
    {"not_utf8_overlong_slash",
     "\xC0\xAF: x\n",
     {"rules.yaml:1: not UTF-8: byte 0xC0 at column 1 does not begin a well-formed UTF-8 "
      "sequence (save the file as UTF-8)"}},
    {"utf8_is_text",
     UP "routes:\n"
        "  - {name: caf\xC3\xA9, match: {path_prefix: /}, upstream: apí}\n",
     {"rules.yaml:3: routes[0].upstream: unknown upstream 'ap\xC3\xAD'; upstreams are api"}},
    {"burst_on_a_window_algorithm",
     UP "routes:\n"
        "  - {name: r, match: {path_prefix: /}, upstream: api, limits: [{name: a, algorithm: "
        "fixed_window, rate: 5/1m, burst: 5}]}\n",
     {"rules.yaml:3: routes[0].limits[0].burst: burst applies only to token_bucket; a "
      "fixed_window limit admits the count of its rate per window"}},
    {"plan_limit_checked_against_every_route",
     UP "plans: {free: {limits: [{name: a, rate: 10/1m, burst: 2}]}}\n"
        "routes:\n"
        "  - {name: r1, match: {path_prefix: /a}, upstream: api, cost: 3}\n"
        "  - {name: r2, match: {path_prefix: /b}, upstream: api, cost: 2}\n"
        "  - {name: r3, match: {path_prefix: /c}, upstream: api, cost: 4}\n",
     {"rules.yaml:2: plans.free.limits[0].burst: cost 3 can never be admitted by burst 2 on route "
      "'r1'",
      "rules.yaml:2: plans.free.limits[0].burst: cost 4 can never be admitted by burst 2 on route "
      "'r3'"}},
    {"plan_limit_with_zero_burst_and_no_routes",
     UP "plans: {free: {limits: [{name: a, rate: 10/1m, burst: 0}]}}\n",
     {"rules.yaml:2: plans.free.limits[0].burst: cost 1 can never be admitted by burst 0"}},
    {"route_without_match_and_name",
     UP "routes:\n"
        "  - {upstream: api}\n",
     {"rules.yaml:3: routes[0]: missing required key 'name'",
      "rules.yaml:3: routes[0]: missing required key 'match'"}},
    {"api_key_without_a_source",
     UP "identity: {api_key: {}}\n",
     {"rules.yaml:2: identity.api_key: api_key needs a header or a query parameter"}},
    {"user_without_header",
     UP "identity: {user: {}}\n",
     {"rules.yaml:2: identity.user: missing required key 'header'"}},
    {"bad_password_env",
     UP "store: {type: redis, password_env: \"REDIS PASSWORD\"}\n",
     {"rules.yaml:2: store.password_env: invalid environment variable name 'REDIS PASSWORD': "
      "expected [A-Za-z_][A-Za-z0-9_]*"}},
    {"sentinel_store_without_sentinels_or_master",
     UP "store: {type: redis-sentinel}\n",
     {"rules.yaml:2: store.sentinels: type redis-sentinel needs sentinels: the Sentinels to ask "
      "(host:port list)",
      "rules.yaml:2: store.master: type redis-sentinel needs master: the name the Sentinels "
      "monitor the master under"}},
    {"sentinel_store_with_an_empty_list",
     UP "store:\n"
        "  type: redis-sentinel\n"
        "  master: mymaster\n"
        "  sentinels: []\n",
     {"rules.yaml:5: store.sentinels: the list is empty: name at least one Sentinel (host:port)"}},
    {"sentinel_store_with_a_bad_address_and_name",
     UP "store:\n"
        "  type: redis-sentinel\n"
        "  master: \"my master\"\n"
        "  sentinels: [127.0.0.1:26379, \"127.0.0.1:0\"]\n"
        "  sentinel_password_env: \"A-B\"\n"
        "  sentinel_timeout: 0ms\n"
        "  address: 127.0.0.1:6379\n",
     {"rules.yaml:4: store.master: invalid master name 'my master': expected the name the "
      "Sentinels monitor (one word)",
      "rules.yaml:5: store.sentinels[1]: invalid address '127.0.0.1:0': port 0 is out of range "
      "1..65535 (expected host:port, such as 0.0.0.0:8080 or \"[::1]:8080\")",
      "rules.yaml:6: store.sentinel_password_env: invalid environment variable name 'A-B': "
      "expected [A-Za-z_][A-Za-z0-9_]*",
      "rules.yaml:7: store.sentinel_timeout: sentinel_timeout 0ms is shorter than 1ms",
      "rules.yaml:8: store.address: type redis-sentinel finds the master through "
      "store.sentinels: remove address"}},
    {"cluster_store_with_an_empty_list",
     UP "store: {type: redis-cluster, nodes: []}\n",
     {"rules.yaml:2: store.nodes: the list is empty: name at least one cluster node (host:port)"}},
    {"cluster_store_with_bad_addresses",
     UP "store:\n"
        "  type: redis-cluster\n"
        "  nodes: [127.0.0.1:7000, \"127.0.0.1:0\", nonsense]\n",
     {"rules.yaml:4: store.nodes[1]: invalid address '127.0.0.1:0': port 0 is out of range "
      "1..65535 (expected host:port, such as 0.0.0.0:8080 or \"[::1]:8080\")",
      "rules.yaml:4: store.nodes[2]: invalid address 'nonsense': the port is missing (expected "
      "host:port, such as 0.0.0.0:8080 or \"[::1]:8080\")"}},
    {"nodes_on_a_plain_redis_store",
     UP "store: {type: redis, nodes: [127.0.0.1:7000]}\n",
     {"rules.yaml:2: store.nodes: applies only to type redis-cluster"}},
    {"sentinel_fields_on_a_plain_redis_store",
     UP "store: {type: redis, master: mymaster, sentinels: [127.0.0.1:26379]}\n",
     {"rules.yaml:2: store.sentinels: applies only to type redis-sentinel",
      "rules.yaml:2: store.master: applies only to type redis-sentinel"}},
    {"store_tls_on_a_memory_store",
     UP "store: {type: memory, tls: {verify: false}}\n",
     {"rules.yaml:2: store.tls: applies only to the Redis store types"}},
    {"store_tls_with_a_missing_file_a_lone_cert_and_an_unknown_key",
     UP "store:\n"
        "  type: redis\n"
        "  username: \"\"\n"
        "  tls:\n"
        "    ca_file: /nonexistent/ca.pem\n"
        "    cert_file: /nonexistent/client.pem\n"
        "    verfy: false\n",
     {"rules.yaml:4: store.username: must not be empty",
      "rules.yaml:6: store.tls.ca_file: cannot read file '/nonexistent/ca.pem': No such file or "
      "directory",
      "rules.yaml:7: store.tls.cert_file: cannot read file '/nonexistent/client.pem': No such "
      "file or directory",
      "rules.yaml:7: store.tls.key_file: cert_file needs key_file (its private key)",
      "rules.yaml:8: store.tls.verfy: unknown key 'verfy'; did you mean 'verify'?"}},
    {"unquoted_ipv6_listen_is_a_yaml_error",
     UP "listen: [::1]:8080\n",
     {"rules.yaml:2: invalid YAML: end of map not found"}},
    {"every_mistake_is_reported_not_only_the_first",
     UP "workers: many\n"
        "routes:\n"
        "  - {name: r, match: {path_prefix: /}, upstream: nowhere, cost: 0}\n",
     {"rules.yaml:2: workers: expected an integer, got 'many'",
      "rules.yaml:4: routes[0].cost: cost must be at least 1, got 0",
      "rules.yaml:4: routes[0].upstream: unknown upstream 'nowhere'; upstreams are api"}},
    // --- identity prefixes, plan directory, route matching (issue 4) ---
    {"ipv6_prefix_above_128",
     UP "identity: {ipv6_prefix: 129}\n",
     {"rules.yaml:2: identity.ipv6_prefix: ipv6_prefix must be at most 128, got 129"}},
    {"ipv4_prefix_zero",
     UP "identity: {ipv4_prefix: 0}\n",
     {"rules.yaml:2: identity.ipv4_prefix: ipv4_prefix must be at least 1, got 0"}},
    {"ipv6_prefix_fractional",
     UP "identity: {ipv6_prefix: 64.5}\n",
     {"rules.yaml:2: identity.ipv6_prefix: ipv6_prefix must be a whole number, got 64.5"}},
    {"directory_unknown_type",
     UP "store: {type: redis}\n"
        "identity: {directory: {type: memcached}}\n",
     {"rules.yaml:3: identity.directory.type: unknown directory type 'memcached'; expected one "
      "of redis"}},
    {"directory_without_type",
     UP "store: {type: redis}\n"
        "identity: {directory: {hash: keys}}\n",
     {"rules.yaml:3: identity.directory: missing required key 'type'"}},
    {"directory_needs_a_redis_store",
     UP "identity: {directory: {type: redis}}\n",
     {"rules.yaml:2: identity.directory: a redis directory is read on the store's connection: it "
      "needs store.type redis or redis-sentinel"}},
    {"directory_unknown_key",
     UP "store: {type: redis}\n"
        "identity: {directory: {type: redis, cache_tll: 60s}}\n",
     {"rules.yaml:3: identity.directory.cache_tll: unknown key 'cache_tll'; did you mean "
      "'cache_ttl'?"}},
    {"directory_zero_cache_size",
     UP "store: {type: redis}\n"
        "identity: {directory: {type: redis, cache_size: 0}}\n",
     {"rules.yaml:3: identity.directory.cache_size: cache_size must be at least 1, got 0"}},
    {"directory_zero_negative_ttl",
     UP "store: {type: redis}\n"
        "identity: {directory: {type: redis, negative_ttl: 0s}}\n",
     {"rules.yaml:3: identity.directory.negative_ttl: negative_ttl 0s is shorter than 1ms"}},
    {"directory_empty_hash",
     UP "store: {type: redis}\n"
        "identity: {directory: {type: redis, hash: \"\"}}\n",
     {"rules.yaml:3: identity.directory.hash: must not be empty"}},
    {"match_with_two_path_kinds",
     UP "routes:\n"
        "  - {name: r, match: {path: /a, path_prefix: /a}, upstream: api}\n",
     {"rules.yaml:3: routes[0].match: use one of path, path_prefix and path_glob, not 2"}},
    {"exact_path_not_canonical",
     UP "routes:\n"
        "  - {name: r, match: {path: /a//b}, upstream: api}\n",
     {"rules.yaml:3: routes[0].match.path: path '/a//b' is not canonical (repeated '/', a '.' or "
      "'..' segment, or a percent escape); requests are matched in canonical form, so it could "
      "never match"}},
    {"glob_without_leading_slash",
     UP "routes:\n"
        "  - {name: r, match: {path_glob: v1/*}, upstream: api}\n",
     {"rules.yaml:3: routes[0].match.path_glob: path_glob 'v1/*' must start with '/'"}},
    {"glob_star_inside_a_segment",
     UP "routes:\n"
        "  - {name: r, match: {path_glob: /v1/it*}, upstream: api}\n",
     {"rules.yaml:3: routes[0].match.path_glob: path_glob '/v1/it*': 'it*' mixes '*' with other "
      "characters; '*' matches one whole segment and '**' any number of segments"}},
    {"glob_two_double_stars",
     UP "routes:\n"
        "  - {name: r, match: {path_glob: /a/**/b/**}, upstream: api}\n",
     {"rules.yaml:3: routes[0].match.path_glob: path_glob '/a/**/b/**' has more than one '**'"}},
    {"host_with_port",
     UP "routes:\n"
        "  - {name: r, match: {host: api.example.com:443}, upstream: api}\n",
     {"rules.yaml:3: routes[0].match.host: host 'api.example.com:443' must not name a port; the "
      "request's port is ignored when matching"}},
    {"host_not_a_name",
     UP "routes:\n"
        "  - {name: r, match: {host: \"api example\"}, upstream: api}\n",
     {"rules.yaml:3: routes[0].match.host: invalid host 'api example': expected a host name such "
      "as api.example.com"}},
    {"unknown_match_key_suggests_glob",
     UP "routes:\n"
        "  - {name: r, match: {path_glb: /a/*}, upstream: api}\n",
     {"rules.yaml:3: routes[0].match.path_glb: unknown key 'path_glb'; did you mean "
      "'path_glob'?"}},
    {"api_keys_file_empty",
     UP "api_keys_file: \"\"\n",
     {"rules.yaml:2: api_keys_file: must not be empty"}},
};

#undef UP

INSTANTIATE_TEST_SUITE_P(config, mistakes, ::testing::ValuesIn(mistake_table),
                         [](const ::testing::TestParamInfo<mistake>& info) {
                           return std::string(info.param.name);
                         });

// ---------------------------------------------------------------------------------------------
// Issue 4: the new identity and routing fields load; the API key file and its diagnostics.

TEST(issue4, identity_directory_and_match_fields_load) {
  auto r = load_ok(R"(store: {type: redis}
upstreams: {api: {url: http://127.0.0.1:8081}}
identity:
  ipv6_prefix: 56
  ipv4_prefix: 24
  directory: {type: redis, hash: "sluice:keys", cache_ttl: 30s, negative_ttl: 5s, cache_size: 1000}
routes:
  - {name: a, match: {path: /healthz}, upstream: api}
  - {name: b, match: {path_glob: /v1/*/items, methods: [get], host: API.Example.com}, upstream: api}
  - {name: c, match: {path_prefix: /v2}, upstream: api}
  - {name: d, match: {}, upstream: api}
)");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->identity.ipv6_prefix, 56);
  EXPECT_EQ(r->identity.ipv4_prefix, 24);
  EXPECT_TRUE(r->identity.directory.enabled);
  EXPECT_EQ(r->identity.directory.hash, "sluice:keys");
  EXPECT_EQ(r->identity.directory.cache_ttl, 30s);
  EXPECT_EQ(r->identity.directory.negative_ttl, 5s);
  EXPECT_EQ(r->identity.directory.cache_size, 1000u);
  EXPECT_EQ(r->routes[0].match.kind, path_kind::exact);
  EXPECT_EQ(r->routes[0].match.path, "/healthz");
  EXPECT_EQ(r->routes[1].match.kind, path_kind::glob);
  EXPECT_EQ(r->routes[1].match.path, "/v1/*/items");
  EXPECT_EQ(r->routes[1].match.host, "api.example.com");
  EXPECT_EQ(r->routes[1].match.methods, std::vector<std::string>{"GET"});
  EXPECT_EQ(r->routes[2].match.kind, path_kind::prefix);
  EXPECT_EQ(r->routes[2].match.path_prefix, "/v2");
  EXPECT_EQ(r->routes[3].match.path_prefix, "/");
  auto d = load_ok("upstreams: {api: {url: http://127.0.0.1:8081}}\n");
  EXPECT_EQ(d->identity.ipv6_prefix, 64);
  EXPECT_EQ(d->identity.ipv4_prefix, 32);
  EXPECT_FALSE(d->identity.directory.enabled);
  EXPECT_EQ(d->api_keys_file, nullptr);
}

TEST(issue4, api_keys_file_loads_relative_to_the_rules_file) {
  const std::string dir = testing::TempDir();
  const std::string keys = dir + "issue4_keys.txt";
  const std::string rules_path = dir + "issue4_rules.yaml";
  std::ofstream(keys) << "# key plan\nk1 free\n\n  k2\tanonymous  \n";
  std::ofstream(rules_path) << "upstreams: {api: {url: http://127.0.0.1:8081}}\n"
                               "plans: {free: {limits: []}}\n"
                               "api_keys_file: issue4_keys.txt\n";
  auto r = load_file(rules_path);
  ASSERT_TRUE(r.ok()) << r.diagnostics.front().to_string();
  ASSERT_NE(r.value->api_keys_file, nullptr);
  EXPECT_EQ(r.value->api_keys_file->size(), 2u);
  EXPECT_EQ(r.value->api_keys_file->find("k1"), "free");
  EXPECT_EQ(r.value->api_keys_file->find("k2"), "anonymous");
  EXPECT_EQ(r.value->api_keys_file->find("k3"), std::nullopt);

  // A bad edit is refused and the last good keys stay; a good edit is picked up by poll().
  std::ofstream(keys) << "k1 fre\nk3\nk4 free extra\nk5 free\nk5 free\n";
  auto problems = r.value->api_keys_file->reload();
  std::vector<std::string> text;
  for (const auto& p : problems) text.push_back(p.to_string());
  EXPECT_EQ(text, (std::vector<std::string>{
                      keys + ":1: api_keys_file: unknown plan 'fre'; did you mean 'free'?",
                      keys + ":2: api_keys_file: expected 'KEY PLAN', got a key without a plan",
                      keys + ":3: api_keys_file: expected 'KEY PLAN', got more than two fields",
                      keys + ":5: api_keys_file: duplicate key (first at line 4)"}));
  EXPECT_EQ(r.value->api_keys_file->find("k1"), "free");
  EXPECT_EQ(r.value->api_keys_file->stats().failures, 1u);
  std::ofstream(keys) << "k9 free\n";
  EXPECT_TRUE(r.value->api_keys_file->poll().empty());
  EXPECT_EQ(r.value->api_keys_file->find("k9"), "free");
  EXPECT_EQ(r.value->api_keys_file->find("k1"), std::nullopt);
  EXPECT_TRUE(r.value->api_keys_file->poll().empty());  // unchanged: nothing to do
  EXPECT_EQ(r.value->api_keys_file->stats().reloads, 1u);

  // At load time a bad key file refuses the whole rules file.
  std::ofstream(keys) << "k1 gold\n";
  auto bad = load_file(rules_path);
  ASSERT_FALSE(bad.ok());
  std::vector<std::string> all;
  for (const auto& d : bad.diagnostics) all.push_back(d.to_string());
  EXPECT_EQ(all, (std::vector<std::string>{
                     rules_path + ":3: api_keys_file: the key file '" + keys + "' is invalid:",
                     keys + ":1: api_keys_file: unknown plan 'gold'; plans are free, anonymous"}));
  std::remove(keys.c_str());
  auto missing = load_file(rules_path);
  ASSERT_EQ(missing.diagnostics.size(), 2u);
  EXPECT_EQ(missing.diagnostics[1].to_string(),
            keys + ": api_keys_file: cannot read file: No such file or directory");
  std::remove(rules_path.c_str());
}

// ---------------------------------------------------------------------------------------------
// Files, rendering and the scalar parsers.

TEST(load_file, unreadable_file_is_one_diagnostic) {
  const load_result r = load_file("/nonexistent/rules.yaml");
  EXPECT_FALSE(r.ok());
  ASSERT_EQ(r.diagnostics.size(), 1u);
  EXPECT_EQ(r.diagnostics[0].to_string(),
            "/nonexistent/rules.yaml: cannot read file: No such file or directory");
}

TEST(load_file, reads_a_file_and_names_it) {
  const std::string path = ::testing::TempDir() + "sluice_loader_test.yaml";
  {
    std::ofstream out(path);
    out << "upstreams: {api: {url: http://127.0.0.1:1}}\nrouts: []\n";
  }
  load_result r = load_file(path);
  ASSERT_EQ(r.diagnostics.size(), 1u);
  EXPECT_EQ(r.diagnostics[0].to_string(),
            path + ":2: routs: unknown key 'routs'; did you mean 'routes'?");
  {
    std::ofstream out(path);
    out << design_example_supported();
  }
  r = load_file(path);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.value->source, path);
  std::remove(path.c_str());
}

// A rules file is read whole, so a device, a pipe or a runaway file is refused before any
// read (`--check-config /dev/zero` used to read forever).
TEST(load_file, refuses_what_is_not_a_regular_file) {
  auto message = [](const std::string& path) {
    const load_result r = load_file(path);
    EXPECT_FALSE(r.ok());
    return r.diagnostics.size() == 1 ? r.diagnostics[0].to_string() : std::string("?");
  };
  EXPECT_EQ(message("/dev/zero"),
            "/dev/zero: cannot read file: not a regular file (a character device)");
  const std::string dir = ::testing::TempDir() + "sluice_loader_test_dir";
  std::filesystem::create_directories(dir);
  EXPECT_EQ(message(dir), dir + ": cannot read file: not a regular file (a directory)");
  std::filesystem::remove(dir);
  // A FIFO with no writer: opening it must not wait for one.
  const std::string fifo = ::testing::TempDir() + "sluice_loader_test.fifo";
  std::filesystem::remove(fifo);
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_EQ(message(fifo), fifo + ": cannot read file: not a regular file (a pipe)");
  std::filesystem::remove(fifo);
}

TEST(load_file, refuses_a_file_above_16_mib_and_reads_one_of_16_mib) {
  static_assert(max_rules_file_bytes == 16 * 1024 * 1024);
  const std::string path = ::testing::TempDir() + "sluice_loader_test_large.yaml";
  {
    // A valid file padded with one long comment to exactly the bound.
    std::string text = design_example_supported() + "# ";
    text.append(max_rules_file_bytes - text.size() - 1, 'x');
    text += '\n';
    std::ofstream(path, std::ios::binary) << text;
  }
  ASSERT_EQ(std::filesystem::file_size(path), max_rules_file_bytes);
  const load_result ok = load_file(path);
  for (const auto& d : ok.diagnostics) ADD_FAILURE() << d.to_string();
  EXPECT_TRUE(ok.ok());
  std::filesystem::resize_file(path, max_rules_file_bytes + 1);
  const load_result r = load_file(path);
  ASSERT_EQ(r.diagnostics.size(), 1u);
  EXPECT_EQ(r.diagnostics[0].to_string(),
            path + ": cannot read file: larger than 16 MiB (16777217 bytes)");
  std::filesystem::remove(path);
}

TEST(api_keys_file, refuses_what_is_not_a_regular_file_and_a_file_above_its_bound) {
  auto messages = [](const std::string& keys) {
    auto [file, problems] = api_key_file::load(keys, {"free"});
    EXPECT_EQ(file, nullptr);
    std::vector<std::string> out;
    for (const auto& d : problems) out.push_back(d.to_string());
    return out;
  };
  EXPECT_EQ(messages("/dev/zero"),
            std::vector<std::string>{
                "/dev/zero: api_keys_file: cannot read file: not a regular file (a character "
                "device)"});
  const std::string big = ::testing::TempDir() + "sluice_loader_test_keys_large";
  std::ofstream(big) << "k1 free\n";
  std::filesystem::resize_file(big, api_key_file::max_file_bytes + 1);  // sparse
  EXPECT_EQ(messages(big),
            std::vector<std::string>{big + ": api_keys_file: cannot read file: larger than 128 MiB "
                                           "(134217729 bytes)"});
  std::filesystem::remove(big);
}

// The command line's --listen, --admin and --workers go through the same parsers as the
// rules file's listen:, admin: and workers:, with the same messages.
TEST(command_line, listen_addresses_are_checked_as_in_the_file) {
  std::string error;
  auto a = parse_listen_address("127.0.0.1:8093", error);
  ASSERT_TRUE(a);
  EXPECT_EQ(a->host, "127.0.0.1");
  EXPECT_EQ(a->port, 8093);
  EXPECT_EQ(a->to_string(), "127.0.0.1:8093");
  a = parse_listen_address("[::1]:0", error);
  ASSERT_TRUE(a);
  EXPECT_EQ(a->host, "::1");
  EXPECT_EQ(a->port, 0);
  EXPECT_EQ(a->to_string(), "[::1]:0");
  EXPECT_EQ(parse_listen_address("0.0.0.0:65535", error)->port, 65535);

  auto refused = [](std::string_view text) {
    std::string why;
    EXPECT_FALSE(parse_listen_address(text, why)) << text;
    return why;
  };
  const std::string expected = " (expected host:port, such as 0.0.0.0:8080 or \"[::1]:8080\")";
  EXPECT_EQ(refused("127.0.0.1:99999"),
            "invalid address '127.0.0.1:99999': port 99999 is out of range 0..65535" + expected);
  EXPECT_EQ(refused("127.0.0.1:70000"),
            "invalid address '127.0.0.1:70000': port 70000 is out of range 0..65535" + expected);
  EXPECT_EQ(refused("127.0.0.1:-1"),
            "invalid address '127.0.0.1:-1': the port '-1' is not a number" + expected);
  EXPECT_EQ(refused("127.0.0.1:abc"),
            "invalid address '127.0.0.1:abc': the port 'abc' is not a number" + expected);
  EXPECT_EQ(refused("127.0.0.1"), "invalid address '127.0.0.1': the port is missing" + expected);
  EXPECT_EQ(refused("localhost:8093"),
            "invalid address 'localhost:8093': a listening address must be an IP address, such "
            "as 127.0.0.1:8080 or \"[::1]:8080\" (host names are not resolved)");
  // The same text the rules file gets.
  EXPECT_EQ(diags("listen: 127.0.0.1:99999\n"),
            std::vector<std::string>{"rules.yaml:1: listen: " + refused("127.0.0.1:99999")});
}

TEST(command_line, workers_are_checked_as_in_the_file) {
  std::string error;
  EXPECT_EQ(parse_workers("0", error), 0u);
  EXPECT_EQ(parse_workers("1024", error), 1024u);
  auto refused = [](std::string_view text) {
    std::string why;
    EXPECT_FALSE(parse_workers(text, why)) << text;
    return why;
  };
  EXPECT_EQ(refused("-1"), "workers must not be negative, got -1");
  EXPECT_EQ(refused("1025"), "workers must be at most 1024, got 1025");
  EXPECT_EQ(refused("4294967295"), "workers must be at most 1024, got 4294967295");
  EXPECT_EQ(refused("99999999999999999999"),
            "workers must be at most 1024, got 99999999999999999999");
  EXPECT_EQ(refused("four"), "expected an integer, got 'four'");
  EXPECT_EQ(refused("1e3"), "expected an integer written in digits, got 1e3");
  EXPECT_EQ(refused("1.5"), "workers must be a whole number, got 1.5");
  EXPECT_EQ(diags("workers: -1\n"),
            std::vector<std::string>{"rules.yaml:1: workers: " + refused("-1")});
}

// docs/operating.md, the operators' guide: its rules file reference follows the loader's
// order (loader::run(), one file per section in src/config/sections/), each section has an
// example, and every ```yaml block of the guide is a complete rules file that loads.
std::string operating_guide() {
  std::ifstream in(SLUICE_SOURCE_DIR "/docs/operating.md");
  EXPECT_TRUE(in) << "cannot read " SLUICE_SOURCE_DIR "/docs/operating.md";
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

TEST(docs, operating_yaml_examples_load) {
  const std::string doc = operating_guide();
  ASSERT_FALSE(doc.empty());
  std::size_t blocks = 0;
  bool example_has_routes = false;
  const auto example = doc.find("\n### A complete example\n");
  ASSERT_NE(example, std::string::npos);
  const auto example_block = doc.find("\n```yaml\n", example);
  // The admin listener's example reads its token from the environment, as operators would.
  ::setenv("SLUICE_ADMIN_TOKEN", "docs-example-token", 1);
  for (auto open = doc.find("\n```yaml\n"); open != std::string::npos;
       open = doc.find("\n```yaml\n", open + 1)) {
    const auto begin = open + 9;
    const auto end = doc.find("\n```\n", begin);
    ASSERT_NE(end, std::string::npos) << "an unclosed yaml block after offset " << open;
    const std::string yaml = doc.substr(begin, end + 1 - begin);
    const auto line = 2 + std::count(doc.begin(), doc.begin() + static_cast<long>(open), '\n');
    const load_result r =
        load_string(yaml, "docs/operating.md, the yaml block at line " + std::to_string(line));
    for (const auto& d : r.diagnostics) ADD_FAILURE() << d.to_string() << "\n" << yaml;
    ++blocks;
    if (open == example_block && r.ok()) example_has_routes = !r.value->routes.empty();
  }
  EXPECT_GE(blocks, 15u);
  EXPECT_TRUE(example_has_routes) << "the complete example has no route";
}

TEST(docs, operating_reference_follows_the_loader_order) {
  const std::string doc = operating_guide();
  const auto reference = doc.find("\n## Rules file reference\n");
  ASSERT_NE(reference, std::string::npos);
  // The order of loader::run(): top-level fields, then one section after another.
  const std::vector<std::string> sections{"Top-level fields",
                                          "headers",
                                          "client",
                                          "access_log",
                                          "status",
                                          "store",
                                          "upstreams",
                                          "identity",
                                          "cors",
                                          "plans",
                                          "api_keys and api_keys_file",
                                          "routes",
                                          "limits",
                                          "rate_limit_service"};
  std::size_t at = reference;
  for (const auto& name : sections) {
    const auto heading = doc.find("\n### " + name + "\n", at);
    ASSERT_NE(heading, std::string::npos) << "no '### " << name << "' after the previous section";
    auto next = doc.find("\n### ", heading + 1);
    if (next == std::string::npos) next = doc.size();
    EXPECT_LT(doc.find("\n```yaml\n", heading), next) << "'### " << name << "' has no example";
    at = heading + 1;
  }
}

TEST(diagnostic, renders_file_line_path_message) {
  EXPECT_EQ((diagnostic{"rules.yaml", 14, "routes[0].limits[0].plans.free.burst",
                        "cost 1 can never be admitted by burst 0"}
                 .to_string()),
            "rules.yaml:14: routes[0].limits[0].plans.free.burst: cost 1 can never be admitted by "
            "burst 0");
  EXPECT_EQ((diagnostic{"rules.yaml", 0, "", "cannot read file: x"}.to_string()),
            "rules.yaml: cannot read file: x");
  EXPECT_EQ((diagnostic{"rules.yaml", 3, "", "invalid YAML: x"}.to_string()),
            "rules.yaml:3: invalid YAML: x");
}

TEST(parse_duration, units) {
  EXPECT_EQ(parse_duration("250ms"), 250ms);
  EXPECT_EQ(parse_duration("5s"), 5s);
  EXPECT_EQ(parse_duration("1m"), 1min);
  EXPECT_EQ(parse_duration("1h"), 1h);
  EXPECT_EQ(parse_duration("1d"), 24h);
  EXPECT_EQ(parse_duration("30d"), std::chrono::hours{24 * 30});
  for (const char* bad : {"", "5", "s", "0s", "-1s", "1.5s", "5 s", "5sec", "1w", "1S", " 5s",
                          "99999999999999999999d"})
    EXPECT_EQ(parse_duration(bad), std::nullopt) << bad;
}

TEST(parse_rate, forms) {
  auto r = parse_rate("100/1m");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->count, 100);
  EXPECT_EQ(r->period, 1min);
  r = parse_rate("10/s");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->count, 10);
  EXPECT_EQ(r->period, 1s);
  r = parse_rate("5000/1d");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->period, 24h);
  r = parse_rate("3/m");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->period, 1min);
  r = parse_rate("0/1m");  // parsed; validation refuses it with a message
  ASSERT_TRUE(r);
  EXPECT_EQ(r->count, 0);
  for (const char* bad : {"", "100", "/1m", "-1/1m", "1.5/1s", "10/", "10/0s", "10/1w", "a/1s",
                          "9007199254740993/1s"})
    EXPECT_EQ(parse_rate(bad), std::nullopt) << bad;
}

// ---------------------------------------------------------------------------------------------
// Window algorithms (issue 5): accepted per limit, with the parameters each can honour.

#define ALGO_UP "upstreams: {api: {url: http://127.0.0.1:8081}}\n"

TEST(algorithms, every_window_algorithm_is_accepted) {
  auto r = load_ok(ALGO_UP
                   "routes:\n"
                   "  - name: r\n"
                   "    match: {path_prefix: /}\n"
                   "    upstream: api\n"
                   "    limits:\n"
                   "      - {name: a, algorithm: fixed_window, rate: 5/1m}\n"
                   "      - {name: b, algorithm: sliding_window, rate: 3/1m}\n"
                   "      - {name: c, algorithm: sliding_log, rate: 10/1s, mode: shadow}\n"
                   "      - {name: d, rate: 5/1m, burst: 5}\n");
  ASSERT_EQ(r->routes.at(0).limits.size(), 4u);
  EXPECT_EQ(r->routes[0].limits[0].algorithm, algorithm::fixed_window);
  EXPECT_EQ(r->routes[0].limits[1].algorithm, algorithm::sliding_window);
  EXPECT_EQ(r->routes[0].limits[2].algorithm, algorithm::sliding_log);
  EXPECT_EQ(r->routes[0].limits[2].mode, limit_mode::shadow);
  EXPECT_EQ(r->routes[0].limits[3].algorithm, algorithm::token_bucket);
}

TEST(algorithms, parameters_an_algorithm_cannot_honour_are_errors_with_their_path) {
  auto one = [](const std::string& limit) {
    return diags(ALGO_UP
                 "routes:\n  - {name: r, match: {path_prefix: /}, upstream: api, limits: [" +
                 limit + "]}\n");
  };
  EXPECT_EQ(
      one("{name: a, algorithm: fixed_window, rate: 5/0ms}"),
      std::vector<std::string>{
          "rules.yaml:3: routes[0].limits[0].rate: rate 5/0ms: the period is shorter than 1ms"});
  EXPECT_EQ(one("{name: a, algorithm: sliding_window, rate: 0/1m}"),
            std::vector<std::string>{
                "rules.yaml:3: routes[0].limits[0].rate: rate 0/1m never refills: the count must "
                "be at least 1"});
  EXPECT_EQ(one("{name: a, rate: 0/1m, burst: 5}"),
            std::vector<std::string>{
                "rules.yaml:3: routes[0].limits[0].rate: rate 0/1m never refills: the count must "
                "be at least 1"});
  EXPECT_EQ(one("{name: a, algorithm: sliding_window, rate: 200000000/1d}"),
            std::vector<std::string>{
                "rules.yaml:3: routes[0].limits[0].rate: rate 200000000/1d cannot be counted "
                "exactly by sliding_window: count × window in ms = 200000000 × 86400000 is above "
                "2^53 = 9007199254740992 (use a shorter window or fixed_window)"});
  EXPECT_EQ(one("{name: a, algorithm: fixed_window, rate: 9007199254740993/1s}"),
            std::vector<std::string>{
                "rules.yaml:3: routes[0].limits[0].rate: rate 9007199254740993/1s: the count is "
                "above 2^53 = 9007199254740992, the largest integer the store arithmetic "
                "represents exactly"});
  EXPECT_EQ(one("{name: a, algorithm: sliding_log, rate: 100001/1h}"),
            std::vector<std::string>{
                "rules.yaml:3: routes[0].limits[0].rate: rate 100001/1h is too large for "
                "sliding_log, which stores one timestamp per unit: the count must be at most "
                "100000 (use sliding_window or token_bucket)"});
  EXPECT_TRUE(one("{name: a, algorithm: sliding_window, rate: 100000/1d}").empty());
  EXPECT_TRUE(one("{name: a, algorithm: fixed_window, rate: 9007199254740992/1d}").empty());
}

TEST(algorithms, plan_overrides_of_a_window_limit_are_checked_too) {
  EXPECT_EQ(
      diags(ALGO_UP "plans: {free: {limits: []}}\n"
                    "routes:\n"
                    "  - {name: r, match: {path_prefix: /}, upstream: api, limits: [{name: a, "
                    "algorithm: sliding_window, rate: 5/1m, plans: {free: {rate: "
                    "200000000/1d}}}]}\n"),
      std::vector<std::string>{
          "rules.yaml:4: routes[0].limits[0].plans.free.rate: rate 200000000/1d cannot be "
          "counted exactly by sliding_window: count × window in ms = 200000000 × 86400000 "
          "is above 2^53 = 9007199254740992 (use a shorter window or fixed_window)"});
}

TEST(shadow_header, is_read_and_validated) {
  auto r = load_ok(ALGO_UP
                   "shadow_header: X-Sluice-Shadow\n"
                   "routes: [{name: r, match: {path_prefix: /}, upstream: api}]\n");
  EXPECT_EQ(r->shadow_header, "X-Sluice-Shadow");
  EXPECT_EQ(load_ok(ALGO_UP "routes: [{name: r, match: {path_prefix: /}, upstream: api}]\n")
                ->shadow_header,
            "");
  EXPECT_EQ(diags(ALGO_UP "shadow_header: \"X Shadow\"\n"
                          "routes: [{name: r, match: {path_prefix: /}, upstream: api}]\n"),
            std::vector<std::string>{"rules.yaml:2: shadow_header: invalid header name 'X "
                                     "Shadow': a header name is an HTTP token"});
  EXPECT_EQ(diags(ALGO_UP "shadow_header: Content-Length\n"
                          "routes: [{name: r, match: {path_prefix: /}, upstream: api}]\n"),
            std::vector<std::string>{"rules.yaml:2: shadow_header: 'Content-Length' is managed by "
                                     "the gateway; choose another name, such as X-Sluice-Shadow"});
}

#undef ALGO_UP

}  // namespace
}  // namespace sluice::config

// ---------------------------------------------------------------------------------------------
// Issue 12: identity.forwarded, cors blocks, a limit's preflight flag.

namespace sluice::config {
namespace {

std::string cors_rules(const std::string& cors) {
  return "upstreams: {api: {url: \"http://127.0.0.1:1\"}}\n"
         "routes:\n"
         "  - name: r\n"
         "    match: {path_prefix: /}\n"
         "    upstream: api\n"
         "    cors: " +
         cors + "\n";
}

TEST(issue12, forwarded_header_setting) {
  EXPECT_EQ(load_ok("identity: {}")->identity.forwarded, forwarded_header::x_forwarded_for);
  EXPECT_EQ(load_ok("identity: {forwarded: rfc7239}")->identity.forwarded,
            forwarded_header::rfc7239);
  EXPECT_EQ(load_ok("identity: {forwarded: x-forwarded-for}")->identity.forwarded,
            forwarded_header::x_forwarded_for);
  EXPECT_EQ(diags("identity: {forwarded: rfc7329}"),
            std::vector<std::string>{
                "rules.yaml:1: identity.forwarded: unknown header 'rfc7329'; did you mean "
                "'rfc7239'?"});
}

TEST(issue12, cors_blocks_load) {
  auto r = load_ok(
      "cors: {origins: ['*']}\n"
      "upstreams: {api: {url: \"http://127.0.0.1:1\"}}\n"
      "routes:\n"
      "  - name: r\n"
      "    match: {path_prefix: /}\n"
      "    upstream: api\n"
      "    cors:\n"
      "      origins: [https://app.example.com, 'https://*.example.org', 'http://127.0.0.1:*',\n"
      "                'http://[::1]:8080']\n"
      "      methods: [get, put]\n"
      "      headers: [X-API-Key]\n"
      "      expose_headers: [X-Request-Id]\n"
      "      max_age: 10m\n"
      "      credentials: true\n"
      "      preflight: forward\n"
      "    limits:\n"
      "      - {name: a, by: ip, rate: 1/1s}\n"
      "      - {name: b, by: api_key, rate: 1/1s}\n"
      "      - {name: c, by: api_key, rate: 1/1s, preflight: true}\n"
      "      - {name: d, by: global, rate: 1/1s, preflight: false}\n");
  ASSERT_TRUE(r);
  ASSERT_TRUE(r->cors);
  EXPECT_TRUE(r->cors->origins.at(0).any);
  EXPECT_EQ(r->cors->preflight, preflight_mode::answer);
  const auto& c = *r->routes.at(0).cors;
  ASSERT_EQ(c.origins.size(), 4u);
  EXPECT_EQ(c.origins[0].host, "app.example.com");
  EXPECT_TRUE(c.origins[1].any_subdomain);
  EXPECT_EQ(c.origins[1].host, ".example.org");
  EXPECT_EQ(c.origins[2].port, "*");
  EXPECT_EQ(c.origins[3].host, "[::1]");
  EXPECT_EQ(c.origins[3].port, "8080");
  EXPECT_EQ(c.methods, (std::vector<std::string>{"GET", "PUT"}));
  EXPECT_EQ(c.headers, (std::vector<std::string>{"X-API-Key"}));
  EXPECT_EQ(c.expose_headers, (std::vector<std::string>{"X-Request-Id"}));
  EXPECT_EQ(c.max_age_seconds, 600);
  EXPECT_TRUE(c.credentials);
  EXPECT_EQ(c.preflight, preflight_mode::forward);
  const auto& l = r->routes.at(0).limits;
  EXPECT_TRUE(l[0].preflight);
  EXPECT_FALSE(l[1].preflight);
  EXPECT_TRUE(l[2].preflight);
  EXPECT_FALSE(l[3].preflight);
}

// A pattern that can never equal an origin a browser sends is an error with its path.
TEST(issue12, cors_origins_that_cannot_match_are_errors) {
  struct bad_case {
    std::string origin, message;
  };
  const bad_case cases[] = {
      {"https://app.example.com/",
       "never matches: an origin has no path, query or fragment; "
       "write 'https://app.example.com'"},
      {"https://App.example.com",
       "never matches: browsers send origins in lower case; write "
       "'https://app.example.com'"},
      {"app.example.com",
       "never matches: an origin is scheme://host[:port], such as https://app.example.com"},
      {"https://app.example.com:443",
       "never matches: browsers leave out the default port; write 'https://app.example.com'"},
      {"http://a.test:80",
       "never matches: browsers leave out the default port; write "
       "'http://a.test'"},
      {"http://a.test:99999", "never matches: the port '99999' is not 1..65535"},
      {"http://a.test:", "never matches: an empty port"},
      {"https://api*.example.com",
       "never matches: '*' stands for the whole origin ('*'), whole labels at the start of the "
       "host (https://*.example.com) or the port (http://localhost:*)"},
      {"https://*",
       "never matches: '*' stands for the whole origin ('*'), whole labels at the "
       "start of the host (https://*.example.com) or the port (http://localhost:*)"},
      {"https://a..b", "never matches: 'a..b' is not a host name or address"},
      {"https://a b", "never matches: 'a b' is not a host name or address"},
      {"null", "is sent by sandboxed and local pages of any site, so it cannot be allowed"},
  };
  for (const auto& c : cases) {
    EXPECT_EQ(diags(cors_rules("{origins: [\"" + c.origin + "\"]}")),
              std::vector<std::string>{"rules.yaml:6: routes[0].cors.origins[0]: origin '" +
                                       c.origin + "' " + c.message});
  }
  EXPECT_EQ(diags(cors_rules("{origins: []}")),
            std::vector<std::string>{
                "rules.yaml:6: routes[0].cors.origins: origins must list at least one origin"});
  EXPECT_EQ(
      diags(cors_rules("{methods: [GET]}")),
      std::vector<std::string>{"rules.yaml:6: routes[0].cors: missing required key 'origins'"});
  EXPECT_EQ(diags(cors_rules("{origins: ['*'], credentials: true}")),
            std::vector<std::string>{
                "rules.yaml:6: routes[0].cors.origins[0]: origin '*' with credentials: true would "
                "let every site make credentialed requests (and browsers refuse '*' with "
                "credentials); list the origins"});
  EXPECT_EQ(diags(cors_rules("{origins: ['https://a.test'], credentials: true, headers: ['*']}")),
            std::vector<std::string>{
                "rules.yaml:6: routes[0].cors.headers: '*' with credentials: true is not a "
                "wildcard to browsers; list the names"});
  EXPECT_EQ(diags(cors_rules("{origins: ['https://a.test'], max_age: 1500ms}")),
            std::vector<std::string>{
                "rules.yaml:6: routes[0].cors.max_age: max_age must be whole seconds"});
  EXPECT_EQ(diags(cors_rules("{origins: ['https://a.test'], preflight: pass}")),
            std::vector<std::string>{
                "rules.yaml:6: routes[0].cors.preflight: unknown preflight mode 'pass'; expected "
                "one of answer, forward"});
  EXPECT_EQ(diags(cors_rules("{origins: ['https://a.test'], origin: x}")),
            std::vector<std::string>{
                "rules.yaml:6: routes[0].cors.origin: unknown key 'origin'; did you mean "
                "'origins'?"});
}

// ---------------------------------------------------------------------------------------------
// Secrets (issue 12, item 6): the store's and the Sentinels' passwords from a file its owner
// alone may read, one trailing newline dropped; every way the file can be wrong is a config
// error naming the file and never echoing the password.

struct secret_dir {
  secret_dir() {
    path = std::filesystem::path(::testing::TempDir()) /
           ("sluice-secret-" + std::to_string(::getpid()) + "-" + std::to_string(next++));
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~secret_dir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  /// Writes `content` to `name` with permission bits `mode`; returns its path.
  std::string write(const std::string& name, const std::string& content, mode_t mode = 0600) {
    const auto p = path / name;
    std::ofstream(p, std::ios::binary | std::ios::trunc) << content;
    ::chmod(p.c_str(), mode);
    return p.string();
  }
  std::filesystem::path path;
  static inline int next = 0;
};

std::string redis_with(const std::string& extra) {
  return "store: {type: redis, address: 127.0.0.1:6379" + extra + "}\n";
}

TEST(password_file, reads_the_password_without_its_trailing_newline) {
  secret_dir d;
  const struct {
    const char* content;
    const char* password;
  } rows[] = {
      {"s3cret\n", "s3cret"},
      {"s3cret\r\n", "s3cret"},
      {"s3cret", "s3cret"},
      {" with blanks \t\n", " with blanks \t"},  // only the newline goes
      {"p\xC3\xA4ss\n", "p\xC3\xA4ss"},
  };
  for (const auto& row : rows) {
    const auto file = d.write("redis.pass", row.content, 0600);
    auto r = load_ok(redis_with(", password_file: \"" + file + "\""));
    ASSERT_TRUE(r) << row.content;
    EXPECT_EQ(r->store.password, row.password);
    EXPECT_EQ(r->store.password_file, file);
    EXPECT_EQ(r->store.password_env, "");
  }
  const auto file = d.write("readonly.pass", "ro\n", 0400);
  auto r = load_ok(redis_with(", password_file: \"" + file + "\""));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->store.password, "ro");
  // A symbolic link is followed (Kubernetes mounts secrets so): the target's mode counts.
  const auto link = (d.path / "link.pass").string();
  std::filesystem::create_symlink(file, link);
  r = load_ok(redis_with(", password_file: \"" + link + "\""));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->store.password, "ro");
}

TEST(password_file, a_file_others_may_read_or_write_is_refused_naming_it) {
  secret_dir d;
  const struct {
    mode_t mode;
    const char* why;
  } rows[] = {
      {0644, "readable by group or others (mode 0644)"},
      {0640, "readable by group or others (mode 0640)"},
      {0604, "readable by group or others (mode 0604)"},
      {0620, "writable by group or others (mode 0620)"},
      {0602, "writable by group or others (mode 0602)"},
      {0601, "writable by group or others (mode 0601)"},
  };
  for (const auto& row : rows) {
    const auto file = d.write("redis.pass", "s3cret\n", row.mode);
    EXPECT_EQ(diags("\n" + redis_with(", password_file: \"" + file + "\"")),
              std::vector<std::string>{"rules.yaml:2: store.password_file: password file '" + file +
                                       "': " + row.why +
                                       "; it holds a secret: make it its owner's alone "
                                       "(chmod 600)"});
  }
}

TEST(password_file, missing_empty_or_odd_files_are_errors_without_the_password) {
  secret_dir d;
  const auto at = [](const std::string& file, const std::string& why) {
    return std::vector<std::string>{"rules.yaml:1: store.password_file: password file '" + file +
                                    "': " + why};
  };
  const auto missing = (d.path / "missing.pass").string();
  EXPECT_EQ(diags(redis_with(", password_file: \"" + missing + "\"")),
            at(missing, "cannot read file: No such file or directory"));
  EXPECT_EQ(diags(redis_with(", password_file: \"" + d.path.string() + "\"")),
            at(d.path.string(), "cannot read file: not a regular file (a directory)"));
  for (const char* empty : {"", "\n", "\r\n"}) {
    const auto file = d.write("empty.pass", empty);
    EXPECT_EQ(diags(redis_with(", password_file: \"" + file + "\"")),
              at(file, "the file is empty"));
  }
  for (const std::string& two : {std::string("hunter2\nhunter3\n"), std::string("hunter2\n\n"),
                                 std::string("hun\0ter2", 8)}) {
    const auto file = d.write("two.pass", two);
    const auto got = diags(redis_with(", password_file: \"" + file + "\""));
    EXPECT_EQ(got, at(file, "more than one line (or a NUL): write the password alone"));
    for (const auto& line : got) EXPECT_EQ(line.find("hunter"), std::string::npos);
  }
  const auto big = d.write("big.pass", std::string(70 * 1024, 'x'));
  EXPECT_EQ(diags(redis_with(", password_file: \"" + big + "\"")),
            at(big, "cannot read file: larger than 65536 bytes (71680 bytes)"));
  EXPECT_EQ(diags(redis_with(", password_file: \"\"")),
            std::vector<std::string>{"rules.yaml:1: store.password_file: must not be empty"});
}

TEST(password_file, one_source_of_each_password) {
  secret_dir d;
  const auto file = d.write("redis.pass", "s3cret\n");
  EXPECT_EQ(
      diags("store:\n  type: redis\n  password_env: REDIS_PW\n  password_file: \"" + file + "\"\n"),
      std::vector<std::string>{"rules.yaml:4: store.password_file: password_env and "
                               "password_file both give the password: keep one"});
  const std::string sentinel =
      "store:\n  type: redis-sentinel\n  sentinels: [\"127.0.0.1:26379\"]\n  master: m\n";
  auto r = load_ok(sentinel + "  sentinel_password_file: \"" + file + "\"\n");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->store.sentinel_password, "s3cret");
  EXPECT_EQ(r->store.sentinel_password_file, file);
  EXPECT_EQ(r->store.password, "");
  EXPECT_EQ(diags(sentinel + "  sentinel_password_env: S_PW\n  sentinel_password_file: \"" + file +
                  "\"\n"),
            std::vector<std::string>{
                "rules.yaml:6: store.sentinel_password_file: sentinel_password_env and "
                "sentinel_password_file both give the Sentinels' password: keep one"});
  EXPECT_EQ(
      diags(redis_with(", sentinel_password_file: \"" + file + "\"")),
      std::vector<std::string>{"rules.yaml:1: store.sentinel_password_file: applies only to type "
                               "redis-sentinel"});
  const auto open = d.write("open.pass", "s3cret\n", 0644);
  EXPECT_EQ(diags(sentinel + "  sentinel_password_file: \"" + open + "\"\n"),
            std::vector<std::string>{"rules.yaml:5: store.sentinel_password_file: password "
                                     "file '" +
                                     open +
                                     "': readable by group or others (mode 0644); it holds a "
                                     "secret: make it its owner's alone (chmod 600)"});
}

// Relative to the rules file's directory (as api_keys_file), and read again on every load:
// a reload sees a file made readable by others since.
TEST(password_file, relative_to_the_rules_file_and_read_at_every_load) {
  secret_dir d;
  d.write("redis.pass", "first\n");
  const auto rules = d.write("rules.yaml", redis_with(", password_file: redis.pass"), 0644);
  auto r = load_file(rules);
  ASSERT_TRUE(r.ok()) << (r.diagnostics.empty() ? "" : r.diagnostics[0].to_string());
  EXPECT_EQ(r.value->store.password, "first");
  EXPECT_EQ(r.value->store.password_file, (d.path / "redis.pass").string());
  d.write("redis.pass", "second\n");
  r = load_file(rules);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.value->store.password, "second");
  ::chmod((d.path / "redis.pass").c_str(), 0644);
  r = load_file(rules);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.diagnostics.at(0).to_string(),
            rules + ":1: store.password_file: password file '" + (d.path / "redis.pass").string() +
                "': readable by group or others (mode 0644); it holds a secret: make it its "
                "owner's alone (chmod 600)");
}

}  // namespace
}  // namespace sluice::config
