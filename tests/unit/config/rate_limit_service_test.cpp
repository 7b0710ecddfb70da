// SPDX-License-Identifier: Apache-2.0
// The `rate_limit_service:` section: its listener, failure policy, limits and descriptor
// trees, and the exact diagnostics of a bad one (a leaf naming a missing limit first).
#include "sluice/config/loader.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace sluice::config {
namespace {

std::vector<std::string> diags(std::string_view yaml) {
  const load_result r = load_string(yaml, "rules.yaml");
  std::vector<std::string> out;
  for (const auto& d : r.diagnostics) out.push_back(d.to_string());
  EXPECT_EQ(r.ok(), out.empty());
  return out;
}

TEST(rate_limit_service, a_tree_with_exact_values_any_values_and_nesting) {
  const load_result r = load_string(R"(
rate_limit_service:
  listen: 127.0.0.1:8081
  on_store_failure: fail_closed
  limits:
    - {name: per_ip, by: global, rate: 10/1m}
    - {name: logins, by: global, algorithm: fixed_window, rate: 5/10m, block: 15m}
    - {name: watch, by: global, rate: 1/1s, mode: shadow}
  domains:
    - domain: edge
      descriptors:
        - {key: remote_address, limit: per_ip}
        - key: path
          value: /login
          limits: [logins, watch]
          descriptors:
            - {key: remote_address, limit: per_ip}
)",
                                    "rules.yaml");
  for (const auto& d : r.diagnostics) ADD_FAILURE() << d.to_string();
  ASSERT_TRUE(r.ok());
  const auto& s = r.value->rate_limit_service;
  EXPECT_TRUE(s.enabled);
  EXPECT_EQ(s.listen_host, "127.0.0.1");
  EXPECT_EQ(s.listen_port, 8081);
  EXPECT_EQ(s.on_store_failure, failure_policy::fail_closed);
  ASSERT_EQ(s.limits.size(), 3u);
  EXPECT_EQ(s.limits[1].block, std::chrono::minutes(15));
  EXPECT_EQ(s.limits[2].mode, limit_mode::shadow);
  ASSERT_EQ(s.domains.size(), 1u);
  const auto& d = s.domains[0].descriptors;
  ASSERT_EQ(d.size(), 2u);
  EXPECT_EQ(d[0].key, "remote_address");
  EXPECT_TRUE(d[0].any_value);
  EXPECT_EQ(d[0].limits, std::vector<std::string>{"per_ip"});
  EXPECT_FALSE(d[1].any_value);
  EXPECT_EQ(d[1].value, "/login");
  EXPECT_EQ(d[1].limits, (std::vector<std::string>{"logins", "watch"}));
  ASSERT_EQ(d[1].descriptors.size(), 1u);
  EXPECT_EQ(d[1].descriptors[0].limits, std::vector<std::string>{"per_ip"});
}

TEST(rate_limit_service, absent_is_disabled) {
  const load_result r = load_string("listen: 127.0.0.1:0\n", "rules.yaml");
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r.value->rate_limit_service.enabled);
}

TEST(rate_limit_service, a_leaf_naming_a_missing_limit) {
  EXPECT_EQ(diags(R"(rate_limit_service:
  listen: 127.0.0.1:0
  limits:
    - {name: per_ip, by: global, rate: 10/1m}
  domains:
    - domain: edge
      descriptors:
        - key: path
          value: /login
          descriptors:
            - {key: remote_address, limit: per_iq}
        - {key: user, limits: [per_ip, nowhere]}
)"),
            (std::vector<std::string>{
                "rules.yaml:11: rate_limit_service.domains[0].descriptors[0].descriptors[0].limit: "
                "unknown limit 'per_iq'; did you mean 'per_ip'?",
                "rules.yaml:12: rate_limit_service.domains[0].descriptors[1].limits[1]: unknown "
                "limit 'nowhere'; rate_limit_service.limits are per_ip"}));
}

TEST(rate_limit_service, no_limits_at_all) {
  EXPECT_EQ(diags(R"(rate_limit_service:
  listen: 127.0.0.1:0
  domains:
    - {domain: edge, descriptors: [{key: k, limit: a}]}
)"),
            std::vector<std::string>{
                "rules.yaml:4: rate_limit_service.domains[0].descriptors[0].limit: unknown limit "
                "'a'; rate_limit_service.limits defines none"});
}

TEST(rate_limit_service, shape_errors) {
  EXPECT_EQ(diags(R"(rate_limit_service:
  listen: 127.0.0.1:0
  on_store_failure: local
  limits:
    - {name: a, by: global, rate: 10/1m}
    - {name: c, by: ip, algorithm: concurrency, max_in_flight: 2}
  domains:
    - domain: edge
      descriptors:
        - {key: k}
        - {key: k, value: v, limit: a, limits: [a]}
        - {key: k, limit: a}
    - {domain: edge, descriptors: [{key: x, limit: a}]}
)"),
            (std::vector<std::string>{
                "rules.yaml:3: rate_limit_service.on_store_failure: unknown failure policy "
                "'local'; expected one of fail_open, fail_closed",
                "rules.yaml:6: rate_limit_service.limits[1]: algorithm concurrency needs the "
                "request's end, which a rate limit service call does not report",
                "rules.yaml:10: rate_limit_service.domains[0].descriptors[0]: a descriptor needs "
                "limit, limits or nested descriptors",
                "rules.yaml:11: rate_limit_service.domains[0].descriptors[1]: use limit or "
                "limits, not both",
                "rules.yaml:12: rate_limit_service.domains[0].descriptors[2]: descriptor key 'k' "
                "without a value appears twice at this level",
                "rules.yaml:13: rate_limit_service.domains[1].domain: duplicate domain 'edge' "
                "(first at line 8)"}));
}

TEST(rate_limit_service, listen_and_domains_are_required) {
  EXPECT_EQ(diags("rate_limit_service: {limits: []}\n"),
            (std::vector<std::string>{
                "rules.yaml:1: rate_limit_service: missing required key 'listen'",
                "rules.yaml:1: rate_limit_service: missing required key 'domains'"}));
}

TEST(rate_limit_service, one_name_is_one_bucket_with_the_routes) {
  const auto d = diags(R"(upstreams: {api: {url: "http://127.0.0.1:1"}}
routes:
  - name: r
    match: {path_prefix: /}
    upstream: api
    limits: [{name: shared, by: global, rate: 10/1m}]
rate_limit_service:
  listen: 127.0.0.1:0
  limits: [{name: shared, by: global, rate: 20/1m}]
  domains: [{domain: edge, descriptors: [{key: k, limit: shared}]}]
)");
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].rfind("rules.yaml:9: rate_limit_service.limits[0]: limit 'shared' differs in ", 0),
            0u)
      << d[0];
}

}  // namespace
}  // namespace sluice::config
