// SPDX-License-Identifier: Apache-2.0
// sluice-test-support: gateway_fixture redis_server upstream_server http_client runtime_fixture
// The Envoy rate limit service over real gRPC: two sluice runtimes on one real redis-server,
// a grpc++ client of the project's own rls.proto driving ShouldRateLimit with a table of
// domains and descriptors (nested, unknown, hits_addend) exact across the two instances; the
// answers' limit_remaining and duration_until_reset against the header fields the same limit
// gives over HTTP; bad requests refused with INVALID_ARGUMENT and no key written; the failure
// policy when the store is down; the same table from Debian's python3-grpcio (message classes
// made by protoc from proto/ at test time); the service's counters on the admin listener's
// /metrics.

#include "harness.hpp"
#include "support/child_process.hpp"
#include "support/runtime_fixture.hpp"
#include "support/temp_dir.hpp"

#include "envoy/service/ratelimit/v3/rls.grpc.pb.h"
#include "grpc/health/v1/health.grpc.pb.h"

#include <grpcpp/grpcpp.h>
#include <boost/json.hpp>

#include <filesystem>

#include <string>
#include <utility>
#include <vector>

namespace sluice::test {
namespace {

namespace pb = envoy::service::ratelimit::v3;
using entries = std::vector<std::pair<std::string, std::string>>;

constexpr const char* rules_yaml = R"(
listen: 127.0.0.1:0
store: {type: redis, address: "127.0.0.1:REDIS_PORT", timeout: 500ms}
upstreams: {api: {url: UPSTREAM_URL}}
routes:
  - name: api
    match: {path_prefix: /api}
    upstream: api
    limits:
      - {name: web, by: global, rate: 5/1h}
rate_limit_service:
  listen: 127.0.0.1:0
  on_store_failure: POLICY
  limits:
    - {name: per_ip, by: global, rate: 5/1h}
    - {name: logins, by: global, algorithm: fixed_window, rate: 3/1d}
    - {name: same_as_web, by: global, rate: 5/1h}
    - {name: watch_only, by: global, rate: 1/1h, mode: shadow}
  domains:
    - domain: edge
      descriptors:
        - {key: remote_address, limit: per_ip}
        - key: path
          value: /login
          limit: logins
          descriptors:
            - {key: remote_address, limit: per_ip}
        - {key: mirror, limit: same_as_web}
        - {key: watched, limit: watch_only}
)";

std::string yaml_for(const redis_server& redis, const upstream_server& up,
                     const std::string& policy = "fail_open") {
  return substitute(rules_yaml, {{"UPSTREAM_URL", up.url()},
                                 {"REDIS_PORT", std::to_string(redis.port())},
                                 {"POLICY", policy}});
}

struct client {
  std::unique_ptr<pb::RateLimitService::Stub> stub;
  explicit client(std::uint16_t port)
      : stub(pb::RateLimitService::NewStub(grpc::CreateChannel(
            "127.0.0.1:" + std::to_string(port), grpc::InsecureChannelCredentials()))) {}

  grpc::Status call(const std::string& domain, const std::vector<entries>& descriptors,
                    std::uint32_t hits, pb::RateLimitResponse& out) {
    pb::RateLimitRequest req;
    req.set_domain(domain);
    for (const auto& d : descriptors) {
      auto* pd = req.add_descriptors();
      for (const auto& [k, v] : d) {
        auto* e = pd->add_entries();
        e->set_key(k);
        e->set_value(v);
      }
    }
    req.set_hits_addend(hits);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    return stub->ShouldRateLimit(&ctx, req, &out);
  }
};

std::string header(const pb::RateLimitResponse& r, std::string_view name) {
  for (const auto& h : r.response_headers_to_add())
    if (h.key() == name) return h.value();
  return "";
}

/// "OK: OK(name rN) ..." of an answer: codes, limits and Remaining.
std::string summary(const pb::RateLimitResponse& r) {
  std::string out = pb::RateLimitResponse::Code_Name(r.overall_code()) + ":";
  for (const auto& s : r.statuses()) {
    out += " " + pb::RateLimitResponse::Code_Name(s.code());
    if (s.has_current_limit())
      out += "(" + s.current_limit().name() + " r" + std::to_string(s.limit_remaining()) + ")";
  }
  return out;
}

std::size_t dbsize(const redis_server& redis) {
  return static_cast<std::size_t>(redis.command({"DBSIZE"}).integer);
}

/// The value of series `name` (with its labels, as exposed) in a scrape, or -1 if absent.
double series(const std::string& body, const std::string& name) {
  const auto at = body.find("\n" + name + " ");
  if (at == std::string::npos) return -1;
  return std::stod(body.substr(at + name.size() + 2));
}

TEST(rls, a_table_of_descriptors_exact_across_two_instances) {
  redis_server redis;
  upstream_server upstream;
  const std::string yaml = yaml_for(redis, upstream);
  runtime_fixture a(yaml);
  runtime_fixture b(yaml);
  client ca(*a.runtime().rate_limit_service_port());
  client cb(*b.runtime().rate_limit_service_port());

  struct row {
    client* via;
    std::string domain;
    std::vector<entries> descriptors;
    std::uint32_t hits;
    std::string want;
  };
  const std::vector<row> table = {
      {&ca, "edge", {{{"remote_address", "10.0.0.1"}}}, 0, "OK: OK(per_ip r4)"},
      {&cb, "edge", {{{"remote_address", "10.0.0.1"}}}, 0, "OK: OK(per_ip r3)"},
      {&ca, "edge", {{{"remote_address", "10.0.0.1"}}}, 3, "OK: OK(per_ip r0)"},
      {&cb, "edge", {{{"remote_address", "10.0.0.1"}}}, 0, "OVER_LIMIT: OVER_LIMIT(per_ip r0)"},
      {&ca, "edge", {{{"remote_address", "10.0.0.2"}}}, 0, "OK: OK(per_ip r4)"},
      // Nested, with an unknown descriptor beside it; a descriptor's bucket is its whole
      // entry list, so (path, address) is not the address's own bucket.
      {&cb,
       "edge",
       {{{"path", "/login"}}, {{"path", "/login"}, {"remote_address", "10.0.0.2"}}, {{"u", "1"}}},
       0,
       "OK: OK(logins r2) OK(per_ip r4) OK"},
      // All or nothing: logins has 2 left, so 3 hits are refused and per_ip is not charged.
      {&ca,
       "edge",
       {{{"path", "/login"}}, {{"path", "/login"}, {"remote_address", "10.0.0.2"}}},
       3,
       "OVER_LIMIT: OVER_LIMIT(logins r2) OK(per_ip r4)"},
      {&cb, "edge", {{{"path", "/login"}, {"remote_address", "10.0.0.2"}}}, 0, "OK: OK(per_ip r3)"},
      {&cb, "edge", {{{"path", "/login"}}}, 2, "OK: OK(logins r0)"},
      {&ca, "edge", {{{"path", "/nothing"}}}, 0, "OK: OK"},
  };
  int i = 0;
  for (const auto& r : table) {
    SCOPED_TRACE("row " + std::to_string(i++));
    pb::RateLimitResponse resp;
    const auto st = r.via->call(r.domain, r.descriptors, r.hits, resp);
    ASSERT_TRUE(st.ok()) << st.error_message();
    EXPECT_EQ(summary(resp), r.want);
  }
}

TEST(rls, remaining_and_reset_equal_the_http_headers_of_the_same_limit) {
  redis_server redis;
  upstream_server upstream;
  runtime_fixture a(yaml_for(redis, upstream));
  client c(*a.runtime().rate_limit_service_port());
  for (int n = 1; n <= 3; ++n) {
    SCOPED_TRACE("request " + std::to_string(n));
    const auto http = get(a.port(), "/api/x");
    ASSERT_EQ(http.status, 200u);
    pb::RateLimitResponse resp;
    ASSERT_TRUE(c.call("edge", {{{"mirror", "m"}}}, 0, resp).ok());
    ASSERT_EQ(resp.statuses_size(), 1);
    const auto& s = resp.statuses(0);
    // Remaining is exact; Reset is whole seconds rounded up, from a check a few ms later.
    EXPECT_EQ(std::to_string(s.limit_remaining()), http.header("X-RateLimit-Remaining"));
    EXPECT_EQ(header(resp, "X-RateLimit-Remaining"), http.header("X-RateLimit-Remaining"));
    EXPECT_EQ(header(resp, "X-RateLimit-Limit"), http.header("X-RateLimit-Limit"));
    const long long reset_ms =
        s.duration_until_reset().seconds() * 1000 + s.duration_until_reset().nanos() / 1'000'000;
    EXPECT_EQ(header(resp, "X-RateLimit-Reset"), std::to_string((reset_ms + 999) / 1000));
    const long long http_reset = std::stoll(http.header("X-RateLimit-Reset"));
    EXPECT_LE(std::llabs((reset_ms + 999) / 1000 - http_reset), 1) << reset_ms;
    EXPECT_EQ(header(resp, "RateLimit-Policy"), "\"same_as_web\";q=5;w=3600");
    EXPECT_EQ(http.header("RateLimit-Policy"), "\"web\";q=5;w=3600");
  }
}

TEST(rls, bad_requests_are_invalid_argument_and_touch_no_counter) {
  redis_server redis;
  upstream_server upstream;
  runtime_fixture a(yaml_for(redis, upstream));
  client c(*a.runtime().rate_limit_service_port());
  const std::size_t before = dbsize(redis);
  struct row {
    std::string domain;
    std::vector<entries> descriptors;
    std::uint32_t hits;
    std::string message;
  };
  const std::vector<row> table = {
      {"nowhere", {{{"remote_address", "1"}}}, 0, "unknown domain 'nowhere'"},
      {"edge", {{}}, 0, "descriptor 0 has no entries"},
      {"edge", {}, 0, "a request needs at least one descriptor"},
      // A negative int32 read as the field's uint32.
      {"edge",
       {{{"remote_address", "1"}}},
       static_cast<std::uint32_t>(-1),
       "hits_addend 4294967295 is negative or above 2^31 - 1"},
  };
  for (const auto& r : table) {
    pb::RateLimitResponse resp;
    const auto st = c.call(r.domain, r.descriptors, r.hits, resp);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << r.message;
    EXPECT_EQ(st.error_message(), r.message);
  }
  EXPECT_EQ(dbsize(redis), before);
}

TEST(rls, the_store_down_follows_the_failure_policy) {
  redis_server redis;
  upstream_server upstream;
  runtime_fixture open(yaml_for(redis, upstream, "fail_open"));
  runtime_fixture closed(yaml_for(redis, upstream, "fail_closed"));
  client co(*open.runtime().rate_limit_service_port());
  client cc(*closed.runtime().rate_limit_service_port());
  redis.kill();
  pb::RateLimitResponse resp;
  const auto so = co.call("edge", {{{"remote_address", "1"}}}, 0, resp);
  ASSERT_TRUE(so.ok()) << so.error_message();
  EXPECT_EQ(summary(resp), "OK: OK");
  const auto sc = cc.call("edge", {{{"remote_address", "1"}}}, 0, resp);
  EXPECT_EQ(sc.error_code(), grpc::StatusCode::UNAVAILABLE);
  const auto m = closed.admin("/metrics");
  EXPECT_EQ(series(m.body, R"(sluice_rls_calls_total{result="unavailable"})"), 1);
  EXPECT_EQ(series(m.body, R"(sluice_rls_failure_policy_applied_total{policy="fail_closed"})"), 1);
  EXPECT_EQ(series(m.body, R"(sluice_rls_calls_total{result="ok"})"), 0);
}

TEST(rls, metrics_count_every_call_by_result) {
  redis_server redis;
  upstream_server upstream;
  runtime_fixture a(yaml_for(redis, upstream));
  client c(*a.runtime().rate_limit_service_port());
  struct row {
    std::string domain;
    std::vector<entries> descriptors;
    std::uint32_t hits;
    std::string want;  // summary, or the gRPC error code's number
  };
  const std::vector<row> table = {
      {"edge", {{{"remote_address", "10.0.0.9"}}}, 0, "OK: OK(per_ip r4)"},
      {"edge", {{{"path", "/login"}}, {{"u", "1"}}}, 0, "OK: OK(logins r2) OK"},
      {"edge", {{{"u", "2"}}}, 0, "OK: OK"},
      {"nowhere", {{{"u", "2"}}}, 0, "3"},
      {"edge", {{}}, 0, "3"},
      {"edge", {{{"remote_address", "10.0.0.9"}}}, 5, "OVER_LIMIT: OVER_LIMIT(per_ip r4)"},
      {"edge", {{{"watched", "w"}}}, 0, "OK: OK(watch_only r0)"},
      // The shadow limit would refuse: counted, the answer unchanged.
      {"edge", {{{"watched", "w"}}}, 0, "OK: OK(watch_only r0)"},
  };
  int i = 0;
  for (const auto& r : table) {
    SCOPED_TRACE("row " + std::to_string(i++));
    pb::RateLimitResponse resp;
    const auto st = c.call(r.domain, r.descriptors, r.hits, resp);
    EXPECT_EQ(st.ok() ? summary(resp) : std::to_string(st.error_code()), r.want);
  }
  // The store down: fail_open answers OK.
  redis.kill();
  pb::RateLimitResponse resp;
  ASSERT_TRUE(c.call("edge", {{{"remote_address", "10.0.0.9"}}}, 0, resp).ok());
  EXPECT_EQ(summary(resp), "OK: OK");

  const auto m = a.admin("/metrics");
  ASSERT_EQ(m.status, 200u);
  const std::vector<std::pair<std::string, double>> want = {
      {R"(sluice_rls_calls_total{result="ok"})", 6},
      {R"(sluice_rls_calls_total{result="over_limit"})", 1},
      {R"(sluice_rls_calls_total{result="invalid_argument"})", 2},
      {R"(sluice_rls_calls_total{result="unavailable"})", 0},
      {R"(sluice_rls_descriptors_total{kind="decided"})", 5},
      {R"(sluice_rls_descriptors_total{kind="unknown"})", 2},
      {R"(sluice_rls_failure_policy_applied_total{policy="fail_open"})", 1},
      {R"(sluice_rls_failure_policy_applied_total{policy="fail_closed"})", 0},
      {"sluice_rls_shadow_limited_total", 1},
      {"sluice_rls_request_duration_seconds_count", 9},
      {R"(sluice_rls_request_duration_seconds_bucket{le="+Inf"})", 9},
  };
  for (const auto& [name, value] : want) EXPECT_EQ(series(m.body, name), value) << name;
  // The status page has the same counts, rows at zero left out.
  const auto page = a.admin("/");
  ASSERT_EQ(page.status, 200u);
  const std::string& b = page.body;
  EXPECT_NE(b.find("<h2>Rate limit service</h2>"), std::string::npos);
  EXPECT_NE(b.find("<tr><td>OK</td><td class=\"num\">6</td></tr>"), std::string::npos) << b;
  EXPECT_NE(b.find("<tr><td>OVER_LIMIT</td><td class=\"num\">1</td></tr>"), std::string::npos);
  EXPECT_NE(b.find("<tr><td class=\"bad\">INVALID_ARGUMENT (no counter touched)</td>"
                   "<td class=\"num\">2</td></tr>"),
            std::string::npos);
  EXPECT_NE(b.find("<tr><td>descriptors unknown (allowed)</td><td class=\"num\">2</td></tr>"),
            std::string::npos);
  EXPECT_EQ(b.find("UNAVAILABLE (store failed"), std::string::npos);  // zero: left out
}

/// Runs tests/support/rls_client.py (python3-grpcio) over `steps` (its JSON step list) with
/// message classes protoc makes from the project's proto/ into `dir`: its answers.
boost::json::array python_client(const temp_dir& dir, const boost::json::array& steps) {
  const std::string src = SLUICE_SOURCE_DIR;
  child_process protoc({SLUICE_PROTOC, "-I", src + "/proto", "--python_out=" + dir.path.string(),
                        src + "/proto/envoy/service/ratelimit/v3/rls.proto",
                        src + "/proto/envoy/config/core/v3/base.proto",
                        src + "/proto/envoy/extensions/common/ratelimit/v3/ratelimit.proto"},
                       dir.path / "protoc.out", dir.path / "protoc.err");
  EXPECT_EQ(protoc.wait_exit(std::chrono::seconds(30)), 0) << protoc.err();
  child_process py({"/usr/bin/python3", src + "/tests/support/rls_client.py", dir.path.string(),
                    boost::json::serialize(steps)},
                   dir.path / "py.out", dir.path / "py.err");
  EXPECT_EQ(py.wait_exit(std::chrono::seconds(60)), 0) << py.err();
  return boost::json::parse(py.out()).as_array();
}

/// summary() of a python answer: "OK: OK(name rN) ...", or the gRPC error code's name.
std::string summary(const boost::json::value& answer) {
  const auto& a = answer.as_object();
  const std::string grpc(a.at("grpc").as_string());
  if (grpc != "OK") return grpc;
  std::string out = std::string(a.at("overall").as_string()) + ":";
  for (const auto& v : a.at("statuses").as_array()) {
    const auto& st = v.as_object();
    out += " " + std::string(st.at("code").as_string());
    if (st.contains("limit"))
      out += "(" + std::string(st.at("limit").as_string()) + " r" +
             std::to_string(st.at("remaining").to_number<std::int64_t>()) + ")";
  }
  return out;
}

TEST(rls, a_python_grpcio_client_exact_across_two_instances) {
  if (!std::filesystem::exists("/usr/bin/python3"))
    GTEST_SKIP() << "Debian's python3 is missing (scripts/setup installs python3-grpcio)";
  redis_server redis;
  upstream_server upstream;
  const std::string yaml = yaml_for(redis, upstream);
  runtime_fixture a(yaml);
  runtime_fixture b(yaml);
  const auto pa = *a.runtime().rate_limit_service_port();
  const auto pb = *b.runtime().rate_limit_service_port();
  namespace json = boost::json;
  // A descriptor is a list of [key, value] entries; [key, value, hits] sets its own
  // hits_addend.
  struct row {
    std::uint16_t port;
    std::string domain;
    std::string descriptors;  // JSON
    int hits;
    std::string want;
  };
  const std::vector<row> table = {
      {pa, "edge", R"([[["remote_address", "10.0.0.1"]]])", 0, "OK: OK(per_ip r4)"},
      {pb, "edge", R"([[["remote_address", "10.0.0.1"]]])", 3, "OK: OK(per_ip r1)"},
      // Nested (its own bucket), with an unknown descriptor beside it.
      {pa, "edge", R"([[["path", "/login"], ["remote_address", "10.0.0.1"]], [["u", "1"]]])", 0,
       "OK: OK(per_ip r4) OK"},
      // The descriptor's own hits_addend wins over the request's.
      {pb, "edge", R"([[["path", "/login", 2]]])", 0, "OK: OK(logins r1)"},
      {pa, "edge", R"([[["path", "/login"]]])", 2, "OVER_LIMIT: OVER_LIMIT(logins r1)"},
      {pb, "edge", R"([[["remote_address", "10.0.0.1"]]])", 0, "OK: OK(per_ip r0)"},
      {pa, "edge", R"([[["remote_address", "10.0.0.1"]]])", 0, "OVER_LIMIT: OVER_LIMIT(per_ip r0)"},
      {pb, "nowhere", R"([[["u", "1"]]])", 0, "INVALID_ARGUMENT"},
      {pa, "edge", R"([[]])", 0, "INVALID_ARGUMENT"},
  };
  json::array steps;
  for (const auto& r : table)
    steps.push_back(json::object{{"rls", r.port},
                                 {"domain", r.domain},
                                 {"descriptors", json::parse(r.descriptors)},
                                 {"hits", r.hits}});
  // The same limit over HTTP (instance a's proxy) and over the RLS (instance b), in turns.
  for (int n = 0; n < 3; ++n) {
    steps.push_back(json::object{{"http", a.port()}, {"path", "/api/x"}});
    steps.push_back(json::object{
        {"rls", pb}, {"domain", "edge"}, {"descriptors", json::parse(R"([[["mirror", "m"]]])")}});
  }
  temp_dir dir;
  const auto answers = python_client(dir, steps);
  ASSERT_EQ(answers.size(), steps.size());
  for (std::size_t i = 0; i < table.size(); ++i)
    EXPECT_EQ(summary(answers[i]), table[i].want) << "row " << i;
  for (std::size_t i = table.size(); i < steps.size(); i += 2) {
    SCOPED_TRACE("turn " + std::to_string(i));
    const auto& http = answers[i].as_object();
    const auto& rls = answers[i + 1].as_object();
    ASSERT_EQ(http.at("status").to_number<int>(), 200);
    const auto& hh = http.at("headers").as_object();
    const auto& rh = rls.at("headers").as_object();
    const auto& st = rls.at("statuses").as_array().at(0).as_object();
    EXPECT_EQ(std::to_string(st.at("remaining").to_number<std::int64_t>()),
              hh.at("X-RateLimit-Remaining").as_string());
    EXPECT_EQ(rh.at("X-RateLimit-Remaining"), hh.at("X-RateLimit-Remaining"));
    EXPECT_EQ(rh.at("X-RateLimit-Limit"), hh.at("X-RateLimit-Limit"));
    const auto reset_ms = st.at("reset_ms").to_number<std::int64_t>();
    EXPECT_EQ(rh.at("X-RateLimit-Reset").as_string(), std::to_string((reset_ms + 999) / 1000));
    // Two checks a few ms apart: whole seconds rounded up may differ by one.
    const auto http_reset = std::stoll(std::string(hh.at("X-RateLimit-Reset").as_string()));
    EXPECT_LE(std::llabs((reset_ms + 999) / 1000 - http_reset), 1) << reset_ms;
  }
}

TEST(rls, the_listener_answers_grpc_health_checks) {
  redis_server redis;
  upstream_server upstream;
  runtime_fixture a(yaml_for(redis, upstream));
  auto stub = grpc::health::v1::Health::NewStub(
      grpc::CreateChannel("127.0.0.1:" + std::to_string(*a.runtime().rate_limit_service_port()),
                          grpc::InsecureChannelCredentials()));
  for (const std::string service : {"", "envoy.service.ratelimit.v3.RateLimitService"}) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    grpc::health::v1::HealthCheckRequest req;
    req.set_service(service);
    grpc::health::v1::HealthCheckResponse resp;
    const auto st = stub->Check(&ctx, req, &resp);
    ASSERT_TRUE(st.ok()) << service << ": " << st.error_message();
    EXPECT_EQ(resp.status(), grpc::health::v1::HealthCheckResponse::SERVING) << service;
  }
}

}  // namespace
}  // namespace sluice::test
