// SPDX-License-Identifier: Apache-2.0
// `/admin/config`'s view of a limit (observability::limit_json): what docs/operating.md says it
// shows — rate and burst, a concurrency limit's max_in_flight and slot_ttl_ms instead, and
// block_ms, utc_offset, warn_at_percent and charge as the rules file wrote them.
#include "sluice/config/loader.hpp"
#include "sluice/observability/admin.hpp"

#include <gtest/gtest.h>

#include <boost/json.hpp>

#include <string>

namespace sluice::observability {
namespace {

namespace json = boost::json;

/// The JSON of limit `i` of the one route of a rules file whose limits are `limits`.
json::object limit_of(const std::string& limits, std::size_t i) {
  const auto r = config::load_string(
      "upstreams: {api: {url: http://127.0.0.1:8081}}\n"
      "routes:\n"
      "  - name: r\n"
      "    match: {path_prefix: /}\n"
      "    upstream: api\n"
      "    limits:\n" +
          limits,
      "rules.yaml");
  EXPECT_TRUE(r.ok());
  if (!r.ok()) return {};
  return limit_json(r.value->routes.at(0).limits.at(i));
}

TEST(limit_json, every_new_field_as_written) {
  const std::string limits =
      "      - {name: logins, by: ip, algorithm: fixed_window, rate: 5/10m, block: 15m, "
      "charge: {when_status: [401, 5xx]}}\n"
      "      - {name: monthly, algorithm: calendar, rate: 1000/month, utc_offset: \"+05:30\", "
      "warn_at: 80%}\n"
      "      - {name: inflight, algorithm: concurrency, max_in_flight: 4, slot_ttl: 30s}\n"
      "      - {name: tokens, rate: 10000/1h, charge: {reserve: {header: X-Max-Tokens, max: "
      "4000}, settle: {json: usage.total_tokens}, fallback: 100}}\n";
  const auto logins = limit_of(limits, 0);
  EXPECT_EQ(logins.at("rate"), "5/10m");
  EXPECT_EQ(logins.at("block_ms"), 900'000);
  EXPECT_EQ(json::serialize(logins.at("charge")), R"({"when_status":["5xx",401]})");

  const auto monthly = limit_of(limits, 1);
  EXPECT_EQ(monthly.at("algorithm"), "calendar");
  EXPECT_EQ(monthly.at("rate"), "1000/month");
  EXPECT_EQ(monthly.at("utc_offset"), "+05:30");
  EXPECT_EQ(monthly.at("warn_at_percent"), 80.0);

  const auto inflight = limit_of(limits, 2);
  EXPECT_EQ(inflight.at("algorithm"), "concurrency");
  EXPECT_EQ(inflight.at("max_in_flight"), 4);
  EXPECT_EQ(inflight.at("slot_ttl_ms"), 30'000);
  EXPECT_FALSE(inflight.contains("rate"));
  EXPECT_FALSE(inflight.contains("burst"));

  const auto tokens = limit_of(limits, 3);
  EXPECT_EQ(json::serialize(tokens.at("charge")),
            R"({"reserve":{"header":"X-Max-Tokens","max":4000},)"
            R"("settle":{"json":"usage.total_tokens"},"fallback":100})");
}

}  // namespace
}  // namespace sluice::observability
