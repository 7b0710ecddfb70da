// SPDX-License-Identifier: Apache-2.0
// sluice-test-support: gateway_fixture upstream_server http_client
// Absolute-form request targets (RFC 9112 §3.2.2): a request whose target carries an
// authority (`GET http://example.test/v1/a HTTP/1.1`) is routed by that authority, whatever
// its Host field says (a server MUST ignore Host then), and the upstream receives the
// origin-form target with `Host` set to the target's authority. Two routes that differ only
// by host, each to its own upstream, tell which one a request reached.

#include "support/gateway_fixture.hpp"
#include "support/http_client.hpp"
#include "support/upstream_server.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace sluice::test {
namespace {

const char* const rules = R"(
store: {type: memory}
upstreams: {a: {url: A_URL}, b: {url: B_URL}}
routes:
  - {name: example, match: {host: example.test, path_prefix: /v1}, upstream: a}
  - {name: other, match: {host: other.test, path_prefix: /v1}, upstream: b}
)";

struct target_world {
  target_world() : gateway(substitute(rules, {{"A_URL", a.url()}, {"B_URL", b.url()}}), 1) {}

  /// Sends `GET <target> HTTP/1.1` with `Host: <host>` on a fresh connection.
  client_response send(const std::string& target, const std::string& host) {
    http_connection c(gateway.port());
    c.send_raw("GET " + target + " HTTP/1.1\r\nHost: " + host + "\r\n\r\n");
    return c.read_response();
  }

  upstream_server a;
  upstream_server b;
  gateway_fixture gateway;
};

// The target's authority decides the route; Host is ignored; the upstream gets origin-form
// and Host: example.test (one Host line).
TEST(target, absolute_form_is_routed_by_its_authority) {
  target_world w;
  auto r = w.send("http://example.test/v1/a", "other.test");
  EXPECT_EQ(r.status, 200u) << r.body;
  ASSERT_EQ(w.a.request_count(), 1u) << "upstream b got " << w.b.request_count();
  EXPECT_EQ(w.b.request_count(), 0u);
  const auto seen = w.a.requests().front();
  EXPECT_EQ(seen.target, "/v1/a");
  EXPECT_EQ(seen.count("Host"), 1u);
  EXPECT_EQ(seen.header("Host"), "example.test");
}

// The control: origin-form targets are routed by Host.
TEST(target, origin_form_is_routed_by_host) {
  target_world w;
  EXPECT_EQ(w.send("/v1/a", "example.test").status, 200u);
  EXPECT_EQ(w.a.request_count(), 1u);
  EXPECT_EQ(w.b.request_count(), 0u);
  EXPECT_EQ(w.send("/v1/a", "other.test").status, 200u);
  EXPECT_EQ(w.b.request_count(), 1u);
  EXPECT_EQ(w.a.requests().front().header("Host"), "example.test");
}

// An authority with a port routes by its host (as `Host: example.test:8080` would); the
// upstream's Host is the authority as written, port included (RFC 9112 §3.2: Host is the
// target URI's authority).
TEST(target, an_authority_with_a_port_routes_by_its_host) {
  target_world w;
  auto r = w.send("http://example.test:8080/v1/a", "other.test");
  EXPECT_EQ(r.status, 200u) << r.body;
  ASSERT_EQ(w.a.request_count(), 1u);
  EXPECT_EQ(w.b.request_count(), 0u);
  const auto seen = w.a.requests().front();
  EXPECT_EQ(seen.target, "/v1/a");
  EXPECT_EQ(seen.header("Host"), "example.test:8080");
}

// The query travels in the origin-form target; scheme and host are case-insensitive
// (RFC 3986 §6.2.2.1).
TEST(target, query_and_case_of_scheme_and_host) {
  target_world w;
  EXPECT_EQ(w.send("http://example.test/v1/a?x=1&y=2", "other.test").status, 200u);
  ASSERT_EQ(w.a.request_count(), 1u);
  EXPECT_EQ(w.a.requests().front().target, "/v1/a?x=1&y=2");
  EXPECT_EQ(w.send("HTTP://Example.TEST/v1/b", "other.test").status, 200u);
  EXPECT_EQ(w.a.request_count(), 2u);
  EXPECT_EQ(w.b.request_count(), 0u);
}

// `https://` absolute form: routed by its authority the same way. The scheme only names how
// the client reached us; the upstream connection is the route's upstream as configured
// (plain HTTP here), with origin-form and Host: example.test.
TEST(target, https_absolute_form_is_routed_by_its_authority_too) {
  target_world w;
  auto r = w.send("https://example.test/v1/a", "other.test");
  EXPECT_EQ(r.status, 200u) << r.body;
  ASSERT_EQ(w.a.request_count(), 1u);
  EXPECT_EQ(w.b.request_count(), 0u);
  const auto seen = w.a.requests().front();
  EXPECT_EQ(seen.target, "/v1/a");
  EXPECT_EQ(seen.header("Host"), "example.test");
}

// An authority that no route's host matches is 404, even when Host would match one.
TEST(target, an_authority_no_route_matches_is_404) {
  target_world w;
  EXPECT_EQ(w.send("http://nowhere.test/v1/a", "example.test").status, 404u);
  EXPECT_EQ(w.a.request_count() + w.b.request_count(), 0u);
}

// A malformed absolute URI is 400 and reaches no upstream: an empty host (RFC 9110 §4.2.1
// says a recipient MUST reject it), userinfo (§4.2.4), an unclosed IP literal, a port that is
// not digits, a malformed escape in the host, another scheme, a scheme without "//".
TEST(target, a_malformed_absolute_uri_is_400) {
  target_world w;
  const std::vector<std::string> bad = {
      "http:///v1/a",
      "http://user@example.test/v1/a",
      "http://[::1/v1/a",
      "http://example.test:8x/v1/a",
      "http://ex%ZZ.test/v1/a",
      "ftp://example.test/v1/a",
      "http:/v1/a",
  };
  for (const auto& target : bad) {
    auto r = w.send(target, "example.test");
    EXPECT_EQ(r.status, 400u) << target << ": " << r.body;
  }
  EXPECT_EQ(w.a.request_count() + w.b.request_count(), 0u);
}

}  // namespace
}  // namespace sluice::test
