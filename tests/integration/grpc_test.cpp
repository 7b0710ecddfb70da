// SPDX-License-Identifier: Apache-2.0
// sluice-test-support: runtime_fixture redis_server http_client
// gRPC through the gateway (issue 26, item 2): a python3-grpcio echo service (h2c) behind
// sluice on an `http2: true` upstream, a python3-grpcio client through sluice's h2c listener.
// Unary and server-streaming calls pass with their trailing metadata; the third call over a
// 2/1m limit is RESOURCE_EXHAUSTED with the rate-limit fields as metadata and never reaches the
// service (its own log of calls says so); a body over the route's limit is RESOURCE_EXHAUSTED
// too; a fail_closed route with its Redis killed is UNAVAILABLE; an HTTP/1.1 request to the
// route is 505 before any limit (never charged). Skipped when python3 or python3-grpcio is missing
// (scripts/setup installs them).

#include "support/child_process.hpp"
#include "support/grpc_echo.hpp"
#include "support/http_client.hpp"
#include "support/redis_server.hpp"
#include "support/runtime_fixture.hpp"
#include "support/temp_dir.hpp"

#include <gtest/gtest.h>
#include <boost/json.hpp>

#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>

namespace sluice::test {
namespace {

namespace fs = std::filesystem;
namespace json = boost::json;
using namespace std::chrono_literals;

const std::string& python = grpc_python;
const std::string& script = grpc_echo_script;

/// Runs the python client through the gateway on `port` with `steps`: its answers.
json::array call(std::uint16_t port, const json::array& steps) {
  temp_dir dir{"grpc-client"};
  child_process py(
      {python, script, "client", "127.0.0.1:" + std::to_string(port), json::serialize(steps)},
      dir.path / "py.out", dir.path / "py.err");
  EXPECT_EQ(py.wait_exit(60s), 0) << py.err();
  try {
    return json::parse(py.out()).as_array();
  } catch (const std::exception&) {
    ADD_FAILURE() << "client output: " << py.out() << py.err();
    return {};
  }
}

json::object step(const char* method, const char* key, const std::string& payload) {
  return {{"method", method}, {"key", key}, {"payload", payload}};
}

std::string text(const json::value& v) {
  return std::string(v.as_string());
}
std::string meta(const json::value& answer, const char* where, const char* name) {
  const auto& m = answer.at(where).as_object();
  return m.contains(name) ? text(m.at(name)) : std::string("<none>");
}

std::string rules(const std::string& upstream, const std::string& store) {
  return store +
         "http2: true\n"
         "identity: {api_key: {header: X-API-Key}}\n"
         "plans: {free: {limits: []}}\n"
         "api_keys: {k1: free, k2: free}\n"
         "upstreams: {echo: {url: \"" +
         upstream +
         "\", http2: true}}\n"
         "routes:\n"
         "  - name: echo\n"
         "    match: {path_prefix: /echo.Echo/}\n"
         "    upstream: echo\n"
         "    max_request_body: 64\n"
         "    on_store_failure: fail_closed\n"
         "    limits: [{name: per_key, by: api_key, rate: 2/1m, burst: 2}]\n";
}

TEST(grpc, unary_and_streaming_pass_and_the_third_call_is_resource_exhausted) {
  if (!have_grpcio()) GTEST_SKIP() << "python3-grpcio is missing (scripts/setup installs it)";
  echo_service echo;
  runtime_fixture gw(rules(echo.url(), "store: {type: memory}\n"));
  const auto got =
      call(gw.port(), {step("unary", "k1", "hello"), step("stream", "k1", "s"),
                       step("unary", "k1", "third"), step("unary", "k2", std::string(100, 'x'))});
  ASSERT_EQ(got.size(), 4u);
  // Unary: the message and the service's trailer, through the gateway.
  EXPECT_EQ(text(got[0].at("code")), "OK");
  EXPECT_EQ(got[0].at("messages"), (json::array{"hello"}));
  EXPECT_EQ(meta(got[0], "trailing", "x-echo-trailer"), "yes");
  EXPECT_EQ(meta(got[0], "initial", "ratelimit-policy"), "\"per_key\";q=2;w=60");
  // Server streaming: three messages and the trailer.
  EXPECT_EQ(text(got[1].at("code")), "OK");
  EXPECT_EQ(got[1].at("messages"), (json::array{"s-0", "s-1", "s-2"}));
  EXPECT_EQ(meta(got[1], "trailing", "x-echo-trailer"), "stream");
  // The third: refused by the gateway as gRPC, with the rate-limit fields as metadata
  // (a trailers-only answer: grpcio shows its fields as trailing metadata).
  EXPECT_EQ(text(got[2].at("code")), "RESOURCE_EXHAUSTED");
  EXPECT_FALSE(text(got[2].at("details")).empty());
  EXPECT_NE(meta(got[2], "trailing", "retry-after"), "<none>");
  EXPECT_NE(meta(got[2], "trailing", "ratelimit"), "<none>");
  EXPECT_EQ(meta(got[2], "trailing", "ratelimit-policy"), "\"per_key\";q=2;w=60");
  // Over the route's body limit: RESOURCE_EXHAUSTED before the upstream.
  EXPECT_EQ(text(got[3].at("code")), "RESOURCE_EXHAUSTED");
  EXPECT_NE(text(got[3].at("details")).find("body"), std::string::npos)
      << text(got[3].at("details"));
  // The service saw the first two calls only.
  EXPECT_EQ(echo.calls(), 2u) << echo.proc->out();
}

TEST(grpc, a_fail_closed_route_with_its_store_down_is_unavailable) {
  if (!have_grpcio()) GTEST_SKIP() << "python3-grpcio is missing (scripts/setup installs it)";
  echo_service echo;
  redis_server redis;
  runtime_fixture gw(rules(echo.url(), "store: {type: redis, address: \"127.0.0.1:" +
                                           std::to_string(redis.port()) + "\", timeout: 50ms}\n"));
  auto got = call(gw.port(), {step("unary", "k1", "up")});
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(text(got[0].at("code")), "OK");
  redis.kill();
  got = call(gw.port(), {step("unary", "k1", "down")});
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(text(got[0].at("code")), "UNAVAILABLE");
  EXPECT_EQ(echo.calls(), 1u) << echo.proc->out();
}

TEST(grpc, an_http11_request_to_an_http2_upstream_is_505_before_any_limit) {
  if (!have_grpcio()) GTEST_SKIP() << "python3-grpcio is missing (scripts/setup installs it)";
  echo_service echo;
  runtime_fixture gw(rules(echo.url(), "store: {type: memory}\n"));
  // Three over HTTP/1.1 with k1 (its limit is 2/1m): each refused 505, none charged.
  for (int i = 0; i < 3; ++i) {
    http_connection c(gw.port());
    const auto r = c.request("POST", "/echo.Echo/Unary",
                             {{"X-API-Key", "k1"}, {"Content-Type", "application/grpc"}}, "x");
    EXPECT_EQ(r.status, 505u);
    EXPECT_NE(r.body.find("HTTP/2"), std::string::npos) << r.body;
    EXPECT_FALSE(r.has("RateLimit-Policy")) << "refused before any limit";
    EXPECT_FALSE(r.has("Retry-After"));
  }
  EXPECT_EQ(echo.calls(), 0u);
  // k1 still has both of its calls over HTTP/2.
  const auto got = call(gw.port(), {step("unary", "k1", "one"), step("unary", "k1", "two")});
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(text(got[0].at("code")), "OK");
  EXPECT_EQ(text(got[1].at("code")), "OK");
  EXPECT_EQ(echo.calls(), 2u) << echo.proc->out();
  // Counted as refused before a decision, not as a decision.
  const std::string metrics = gw.admin("/metrics").body;
  EXPECT_NE(metrics.find("\nsluice_bad_requests_total 3\n"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("\nsluice_requests_total{route=\"echo\",decision=\"allowed\","
                         "protocol=\"h2\"} 2\n"),
            std::string::npos);
  for (const char* d : {"allowed", "limited"}) {
    EXPECT_NE(metrics.find("\nsluice_requests_total{route=\"echo\",decision=\"" + std::string(d) +
                           "\",protocol=\"http/1.1\"} 0\n"),
              std::string::npos)
        << d;
  }
}

}  // namespace
}  // namespace sluice::test
