// SPDX-License-Identifier: Apache-2.0
// Settling a charged limit after the response (src/app/charge_hook.hpp): the table of what a
// limit with `charge:` is charged or refunded for each way an exchange can end, with the
// metric outcome; and the guarantee each form states.
#include "app/charge_hook.hpp"

#include "sluice/config/loader.hpp"
#include "sluice/http/response_head.hpp"
#include "sluice/limiter/guarantee.hpp"
#include "sluice/store/memory_store.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <optional>
#include <set>
#include <string>

namespace sluice::app {
namespace {

using limiter::usage_failure;
using limiter::usage_reading;

config::charge_rule when_401() {
  config::charge_rule c;
  c.what = config::charge_rule::kind::when_status;
  c.statuses = {401};
  c.classes = 1u << 5;  // 5xx
  return c;
}

config::charge_rule reserved(std::int64_t fallback = -1) {
  config::charge_rule c;
  c.what = config::charge_rule::kind::settle;
  c.reserve_header = "X-Max-Tokens";
  c.reserve_max = 4000;
  c.fallback = fallback;
  return c;
}

struct row {
  const char* what;
  config::charge_rule rule;
  std::int64_t taken;
  unsigned status;
  std::optional<usage_reading> reading;
  std::int64_t units;
  const char* outcome;
};

TEST(charge_hook, settle_for_table) {
  const std::int64_t limit = 10'000;
  const row rows[] = {
      {"401 keeps its unit", when_401(), 1, 401, std::nullopt, 0, "settled"},
      {"503 keeps its unit", when_401(), 1, 503, std::nullopt, 0, "settled"},
      {"200 gets it back", when_401(), 1, 200, std::nullopt, -1, "refunded"},
      {"403 not listed", when_401(), 2, 403, std::nullopt, -2, "refunded"},
      {"no response", when_401(), 1, 0, std::nullopt, -1, "refunded"},
      {"read below", reserved(), 1000, 200, usage_reading{400, std::nullopt}, -600, "refunded"},
      {"read equal", reserved(), 1000, 200, usage_reading{1000, std::nullopt}, 0, "settled"},
      {"read above", reserved(), 1000, 200, usage_reading{1500, std::nullopt}, 500, "charged"},
      {"read zero", reserved(), 1000, 200, usage_reading{0, std::nullopt}, -1000, "refunded"},
      {"above one Limit", reserved(), 1000, 200, usage_reading{50'000, std::nullopt}, limit,
       "charged"},
      {"no head", reserved(), 1000, 0, std::nullopt, 0, "fallback"},
      {"no head, fallback 300", reserved(300), 1000, 0, std::nullopt, -700, "fallback"},
      {"no usage", reserved(), 1000, 200, usage_reading{std::nullopt, usage_failure::path_absent},
       0, "path_absent"},
      {"not a number, fallback 2000", reserved(2000), 1000, 200,
       usage_reading{std::nullopt, usage_failure::not_a_number}, 1000, "not_a_number"},
      {"too large", reserved(), 1000, 200, usage_reading{std::nullopt, usage_failure::too_large}, 0,
       "too_large"},
      {"over scan limit", reserved(), 1000, 200,
       usage_reading{std::nullopt, usage_failure::over_scan_limit}, 0, "over_scan_limit"},
      {"cut, read above", reserved(), 1000, 200, usage_reading{1200, usage_failure::cut}, 200,
       "cut"},
      {"cut, read below", reserved(), 1000, 200, usage_reading{700, usage_failure::cut}, 0, "cut"},
      {"cut, nothing read", reserved(500), 1000, 200,
       usage_reading{std::nullopt, usage_failure::cut}, -500, "cut"},
  };
  for (const row& r : rows) {
    SCOPED_TRACE(r.what);
    const settlement s = settle_for(r.rule, r.taken, limit, r.status, r.reading);
    EXPECT_EQ(s.units, r.units);
    EXPECT_EQ(settle_outcome_label(s.outcome), r.outcome);
  }
}

TEST(charge_hook, outcome_labels_are_bounded_and_distinct) {
  std::set<std::string_view> seen;
  for (std::size_t i = 0; i < settle_outcome_count; ++i) seen.insert(settle_outcome_label(i));
  EXPECT_EQ(seen.size(), settle_outcome_count);
  EXPECT_TRUE(seen.contains("fallback"));
  EXPECT_TRUE(seen.contains("malformed"));
}

std::string route_with(const std::string& limit) {
  return "upstreams: {api: {url: http://127.0.0.1:8081}}\n"
         "routes:\n"
         "  - name: r\n"
         "    match: {path_prefix: /v1}\n"
         "    upstream: api\n"
         "    limits:\n"
         "      - " +
         limit + "\n";
}

TEST(charge_hook, guarantees) {
  const auto logins = config::load_string(
      route_with("{name: failed_logins, by: ip, algorithm: fixed_window, rate: 5/10m, charge: "
                 "{when_status: [401, 403]}}"),
      "rules.yaml");
  ASSERT_TRUE(logins.ok());
  EXPECT_EQ(limiter::guarantee(logins.value->routes.at(0).limits.at(0)),
            "exact per aligned window: at most 5 units in each 10m window aligned to the store "
            "clock; up to 10 (2x) in a rolling 10m across a window boundary (fixed window); "
            "charged only for a matching response status: each admitted request holds its cost "
            "from admission until its response ends, and gets it back (refund on the store's "
            "clock) unless the status matches; never above the limit, but a request may be "
            "refused while others in flight hold units they will get back (a window's refund is "
            "dropped once the window it was taken in has ended)");
  const auto tokens = config::load_string(
      route_with("{name: tokens, rate: 10000/1h, charge: {reserve: {header: X-Max-Tokens, max: "
                 "4000}, settle: {json: usage.total_tokens}}}"),
      "rules.yaml");
  ASSERT_TRUE(tokens.ok());
  EXPECT_EQ(limiter::charge_caveat(tokens.value->routes.at(0).limits.at(0)),
            "; cost settled after the response: the request's X-Max-Tokens (at most 4000) units "
            "reserved at admission (must fit), the difference to the cost read from the response "
            "refunded or charged when it ends (a charge may leave a debt that later requests "
            "wait out); overshoot at most (requests in flight) x (largest cost above its "
            "reservation), none when every cost is at most its reservation; a cost that cannot "
            "be read settles at the reservation");
}

// A cost read from a response header (`settle: {header: ...}`) through the hook, on the memory
// store: one field line is the cost (10 reserved, 3 used: 7 refunded); two lines are two costs
// for one response, which read_usage_header()'s contract reads as not_a_number, so the limit
// settles at the fallback (the reservation: nothing moves).
TEST(charge_hook, a_repeated_cost_header_is_not_a_number) {
  for (const bool repeated : {false, true}) {
    SCOPED_TRACE(repeated ? "two X-Usage-Tokens lines" : "one X-Usage-Tokens line");
    auto mem = std::make_shared<store::memory_store>([] { return std::int64_t{1'000'000'000}; });
    limiter::limit_check l;
    l.key = "sl:{tokens|k|a}";
    l.bucket = limiter::bucket_params::from({{100, std::chrono::hours(1)}, 100});
    l.cost = 10;  // the reservation taken at admission
    limiter::check_request admit;
    admit.limits = {l};
    ASSERT_TRUE(mem->decide(admit).allowed);

    config::charge_rule rule;
    rule.what = config::charge_rule::kind::settle;
    rule.reserve = 10;
    rule.settle_header = "X-Usage-Tokens";
    auto source = std::make_shared<limiter::usage_source>();
    source->header = rule.settle_header;
    auto counters = std::make_shared<settle_counters>();
    charge_hook hook(std::make_shared<config::rules>(), mem, {}, counters,
                     {charged_limit{l, &rule, source}}, 1'000'000'000);

    const std::string wire = std::string("HTTP/1.1 200 OK\r\nX-Usage-Tokens: 3\r\n") +
                             (repeated ? "x-usage-tokens: 4\r\n" : "") +
                             "Content-Length: 0\r\n\r\n";
    http::response_head_parser p;
    boost::system::error_code ec;
    p.put(boost::asio::buffer(wire), ec);
    ASSERT_TRUE(p.is_header_done()) << ec.message();
    hook.on_response_head(p.get());
    hook.on_end(http::exchange_end::complete, 200);

    const std::size_t not_a_number =
        4 + static_cast<std::size_t>(limiter::usage_failure::not_a_number);
    EXPECT_EQ(counters->by_outcome[not_a_number].value(), repeated ? 1u : 0u);
    EXPECT_EQ(counters->by_outcome[outcome_refunded].value(), repeated ? 0u : 1u);
    limiter::check_request look;
    look.limits = {l};
    look.limits[0].cost = 1;
    look.peek = true;
    // Remaining after a request of 1: 100 - 10 (kept at the fallback) or 100 - 3 (settled), - 1.
    EXPECT_EQ(mem->decide(look).limits.at(0).remaining, repeated ? 89 : 96);
  }
}

}  // namespace
}  // namespace sluice::app
