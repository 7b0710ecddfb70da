// SPDX-License-Identifier: Apache-2.0
// ShouldRateLimit requests mapped to one check and answered (rls/plan.hpp), decided by the
// memory store on one clock: a table of domains and descriptors (exact values, any value,
// nesting, unknown descriptors, hits_addend) with the exact statuses and header fields, and
// every bad request refused before a check exists.
#include "sluice/rls/plan.hpp"

#include "sluice/config/loader.hpp"
#include "sluice/store/memory_store.hpp"

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

namespace sluice::rls {
namespace {

constexpr std::string_view yaml = R"(
rate_limit_service:
  listen: 127.0.0.1:0
  limits:
    - {name: per_ip, by: global, algorithm: fixed_window, rate: 3/1m}
    - {name: logins, by: global, algorithm: fixed_window, rate: 2/1h}
    - {name: bucket, by: global, rate: 10/10s}
    - {name: watch, by: global, algorithm: fixed_window, rate: 5/1m, mode: shadow}
  domains:
    - domain: edge
      descriptors:
        - {key: remote_address, limit: per_ip}
        - key: path
          value: /login
          limit: logins
          descriptors:
            - {key: remote_address, limits: [per_ip, watch]}
        - {key: path, limit: bucket}
    - domain: other
      descriptors:
        - {key: remote_address, limit: per_ip}
)";

using entries = std::vector<std::pair<std::string, std::string>>;

pb::RateLimitRequest request(std::string domain, std::vector<entries> descriptors,
                             std::uint32_t hits = 0) {
  pb::RateLimitRequest r;
  r.set_domain(std::move(domain));
  for (const auto& d : descriptors) {
    auto* pd = r.add_descriptors();
    for (const auto& [k, v] : d) {
      auto* e = pd->add_entries();
      e->set_key(k);
      e->set_value(v);
    }
  }
  r.set_hits_addend(hits);
  return r;
}

struct fixture {
  std::shared_ptr<const config::rules> rules;
  store::memory_store store;

  fixture() {
    auto r = config::load_string(yaml, "rules.yaml");
    for (const auto& d : r.diagnostics) ADD_FAILURE() << d.to_string();
    rules = r.value;
  }

  /// Maps and decides `req` at store time `now`; the answer, or the INVALID_ARGUMENT text.
  std::variant<pb::RateLimitResponse, std::string> call(const pb::RateLimitRequest& req,
                                                        std::int64_t now) {
    auto mapped = map_request(rules->rate_limit_service, req);
    if (auto* bad = std::get_if<invalid>(&mapped)) return bad->message;
    auto& p = std::get<plan>(mapped);
    if (p.check.limits.empty()) return allow_all(p.per_descriptor.size());
    p.check.now_ms_override = now;
    limiter::check_outcome out;
    EXPECT_TRUE(store.decide_now(p.check, out));
    return render(p, out, rules->headers);
  }
};

std::string header(const pb::RateLimitResponse& r, std::string_view name) {
  for (const auto& h : r.response_headers_to_add())
    if (h.key() == name) return h.value();
  return "";
}

std::string codes(const pb::RateLimitResponse& r) {
  std::string out = pb::RateLimitResponse::Code_Name(r.overall_code()) + ":";
  for (const auto& s : r.statuses()) {
    out += " " + pb::RateLimitResponse::Code_Name(s.code());
    if (s.has_current_limit())
      out += "(" + s.current_limit().name() + " " +
             std::to_string(s.current_limit().requests_per_unit()) + "/" +
             pb::RateLimitResponse::RateLimit::Unit_Name(s.current_limit().unit()) + " r" +
             std::to_string(s.limit_remaining()) + " " +
             std::to_string(s.duration_until_reset().seconds() * 1000 +
                            s.duration_until_reset().nanos() / 1'000'000) +
             "ms)";
  }
  return out;
}

// One hour boundary + 20 s: fixed windows of 1m are 40 s from their end, of 1h 3,580 s.
constexpr std::int64_t hour = 3'600'000;
constexpr std::int64_t t0 = 472'222 * hour + 20'000;

TEST(rls_plan, a_table_of_domains_and_descriptors) {
  fixture f;
  struct row {
    pb::RateLimitRequest req;
    std::int64_t at;
    std::string want;
    std::string ratelimit;  // the RateLimit field ("" when none)
  };
  const std::vector<row> table = {
      // Any value of remote_address: per IP.
      {request("edge", {{{"remote_address", "10.0.0.1"}}}), t0,
       "OK: OK(per_ip 3/MINUTE r2 40000ms)", "\"per_ip\";r=2;t=40"},
      {request("edge", {{{"remote_address", "10.0.0.1"}}}, 2), t0,
       "OK: OK(per_ip 3/MINUTE r0 40000ms)", "\"per_ip\";r=0;t=40"},
      // Refused: nothing is charged (the next one of cost 1 is still refused, same Remaining).
      {request("edge", {{{"remote_address", "10.0.0.1"}}}), t0,
       "OVER_LIMIT: OVER_LIMIT(per_ip 3/MINUTE r0 40000ms)", "\"per_ip\";r=0;t=40"},
      // Another value is another bucket.
      {request("edge", {{{"remote_address", "10.0.0.2"}}}), t0,
       "OK: OK(per_ip 3/MINUTE r2 40000ms)", "\"per_ip\";r=2;t=40"},
      // The same entries in another domain: another bucket.
      {request("other", {{{"remote_address", "10.0.0.1"}}}), t0,
       "OK: OK(per_ip 3/MINUTE r2 40000ms)", "\"per_ip\";r=2;t=40"},
      // Exact value before any value; nesting; a shadow limit never shows.
      {request("edge",
               {{{"path", "/login"}}, {{"path", "/login"}, {"remote_address", "10.0.0.3"}}}),
       t0, "OK: OK(logins 2/HOUR r1 3580000ms) OK(per_ip 3/MINUTE r2 40000ms)",
       "\"logins\";r=1;t=3580, \"per_ip\";r=2;t=40"},
      // A key without that exact value falls to the node without a value (a token bucket).
      {request("edge", {{{"path", "/other"}}}, 4), t0, "OK: OK(bucket 10/UNKNOWN r6 4000ms)",
       "\"bucket\";r=6;t=1"},
      // Unknown descriptors are allowed, without limits, beside known ones.
      {request("edge", {{{"user", "u1"}},
                        {{"remote_address", "10.0.0.4"}, {"x", "y"}},
                        {{"remote_address", "10.0.0.4"}}}),
       t0, "OK: OK OK OK(per_ip 3/MINUTE r2 40000ms)", "\"per_ip\";r=2;t=40"},
      // All or nothing: logins has 1 left, per_ip of 10.0.0.3 has 2; cost 2 refuses the
      // whole call and charges neither.
      {request("edge", {{{"path", "/login"}}, {{"path", "/login"}, {"remote_address", "10.0.0.3"}}},
               2),
       t0, "OVER_LIMIT: OVER_LIMIT(logins 2/HOUR r1 3580000ms) OK(per_ip 3/MINUTE r2 40000ms)",
       "\"logins\";r=1;t=3580, \"per_ip\";r=2;t=40"},
      {request("edge", {{{"path", "/login"}, {"remote_address", "10.0.0.3"}}}), t0,
       "OK: OK(per_ip 3/MINUTE r1 40000ms)", "\"per_ip\";r=1;t=40"},
      // A new minute: per_ip is full again.
      {request("edge", {{{"remote_address", "10.0.0.1"}}}), t0 + 40'000,
       "OK: OK(per_ip 3/MINUTE r2 60000ms)", "\"per_ip\";r=2;t=60"},
  };
  int i = 0;
  for (const auto& r : table) {
    SCOPED_TRACE("row " + std::to_string(i++));
    auto got = f.call(r.req, r.at);
    ASSERT_TRUE(std::holds_alternative<pb::RateLimitResponse>(got)) << std::get<std::string>(got);
    const auto& resp = std::get<pb::RateLimitResponse>(got);
    EXPECT_EQ(codes(resp), r.want);
    EXPECT_EQ(header(resp, "RateLimit"), r.ratelimit);
    if (resp.overall_code() == pb::RateLimitResponse::OVER_LIMIT) {
      EXPECT_NE(header(resp, "Retry-After"), "");
    }
  }
}

TEST(rls_plan, bad_requests_touch_nothing) {
  fixture f;
  const auto hits = [](std::uint64_t n) {
    auto r = request("edge", {{{"remote_address", "10.0.0.1"}}});
    r.mutable_descriptors(0)->mutable_hits_addend()->set_value(n);
    return r;
  };
  const std::vector<std::pair<pb::RateLimitRequest, std::string>> table = {
      {request("nowhere", {{{"remote_address", "1"}}}), "unknown domain 'nowhere'"},
      {request("edge", {}), "a request needs at least one descriptor"},
      {request("edge", {{}}), "descriptor 0 has no entries"},
      {request("edge", {{{"remote_address", "1"}}, {{"", "x"}}}),
       "descriptor 1 has an entry with an empty key or value"},
      {request("edge", {{{"remote_address", "1"}}}, 0xFFFFFFFFu),
       "hits_addend 4294967295 is negative or above 2^31 - 1"},
      {request("edge", {{{"remote_address", "1"}}}, 4),
       "descriptor 0: hits 4 exceed limit 'per_ip' (3): they could never be admitted"},
      {hits((1ull << 53) + 1), "descriptor 0: hits_addend 9007199254740993 is above 2^53"},
  };
  for (const auto& [req, want] : table) {
    auto got = f.call(req, t0);
    ASSERT_TRUE(std::holds_alternative<std::string>(got)) << want;
    EXPECT_EQ(std::get<std::string>(got), want);
  }
  // Nothing was charged by any of them.
  auto ok = f.call(request("edge", {{{"remote_address", "1"}}}), t0);
  EXPECT_EQ(codes(std::get<pb::RateLimitResponse>(ok)), "OK: OK(per_ip 3/MINUTE r2 40000ms)");
}

TEST(rls_plan, per_descriptor_hits_and_one_bucket_met_twice) {
  fixture f;
  auto r = request("edge", {{{"remote_address", "9"}}, {{"remote_address", "9"}}});
  r.mutable_descriptors(0)->mutable_hits_addend()->set_value(2);
  // Both descriptors are one bucket: checked once at 2 + 1.
  auto got = f.call(r, t0);
  EXPECT_EQ(codes(std::get<pb::RateLimitResponse>(got)),
            "OK: OK(per_ip 3/MINUTE r0 40000ms) OK(per_ip 3/MINUTE r0 40000ms)");
}

}  // namespace
}  // namespace sluice::rls
