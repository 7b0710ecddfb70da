// SPDX-License-Identifier: Apache-2.0
// sluice-test-support: gateway_fixture redis_server upstream_server http_client
// The client address through real sockets (issue 12, item 1): every form a proxy writes into
// X-Forwarded-For, and RFC 7239 Forwarded under `identity.forwarded: rfc7239`, land in the
// client's own bucket on both stores; an entry that cannot be read keys the request on the
// trusted proxy and is counted by reason.
//
// Each request is written as raw bytes, so the header lines are exactly the case's. The
// balancer is 127.10.0.5 (trusted through 127.10.0.0/16; on Linux all of 127/8 is
// loopback); the limit admits one request per bucket, so a 200 says "a bucket of its own"
// and a 429 "the same bucket as an earlier row".

#include "harness.hpp"

#include "sluice/identity/identity.hpp"

#include <map>
#include <set>

namespace sluice::test {
namespace {

const std::string lb = "127.10.0.5";

const char* const rules_text = R"(
store: STORE
identity: {trusted_proxies: [127.10.0.0/16, 10.0.0.0/8], FORWARDED}
upstreams: {api: {url: UPSTREAM_URL}}
routes:
  - name: login
    match: {path_prefix: /login}
    upstream: api
    limits:
      - {name: one_ip, by: ip, rate: 1/1h, burst: 1}
)";

std::string rules_for(const std::string& forwarded) {
  return substitute(rules_text, {{"FORWARDED", forwarded}});
}

/// `lines` ("Name: value" each) sent from `peer` in a raw GET /login; the status.
unsigned raw_get(const world& w, const std::string& peer, const std::vector<std::string>& lines) {
  http_connection c(w.port(), peer);
  std::string bytes = "GET /login HTTP/1.1\r\nHost: api.test\r\n";
  for (const auto& l : lines) bytes += l + "\r\n";
  bytes += "\r\n";
  c.send_raw(bytes);
  return c.read_response().status;
}

/// The fallback counters of the gateway, by reason.
std::map<std::string, std::uint64_t> fallbacks(world& w) {
  std::map<std::string, std::uint64_t> out;
  for (const auto& [reason, n] : w.gateway->gateway().sample().client_address_fallbacks)
    out[reason] = n;
  return out;
}

struct row {
  std::vector<std::string> lines;
  unsigned status;
  const char* what;
};

void run_rows(const world& w, const std::vector<row>& rows) {
  for (const auto& r : rows) EXPECT_EQ(raw_get(w, lb, r.lines), r.status) << r.what;
}

std::set<std::string> ip_buckets(const world& w) {
  return w.buckets().buckets("sl:{one_ip|*");
}

std::string ip_key(const std::string& v) {
  return limiter::bucket_key("one_ip", limiter::key_namespace::ip, v);
}

class client_address_http : public testing::TestWithParam<store_kind> {};

TEST_P(client_address_http, x_forwarded_for_forms) {
  world w(GetParam(), rules_for("forwarded: x-forwarded-for"));
  run_rows(w, {
                  {{"X-Forwarded-For: 192.0.2.1"}, 200, "v4"},
                  {{"X-Forwarded-For: 192.0.2.1:51000"}, 429, "v4:port, same bucket"},
                  {{"X-Forwarded-For:   192.0.2.1:1  "}, 429, "blanks around"},
                  {{"X-Forwarded-For: [2001:db8::6]:51000"}, 200, "[v6]:port"},
                  {{"X-Forwarded-For: 2001:db8::6"}, 429, "bare v6, same /64"},
                  {{"X-Forwarded-For: [2001:db8::7]"}, 429, "[v6], same /64"},
                  {{"X-Forwarded-For: [2001:db8:0:1::6]:80"}, 200, "another /64"},
                  {{"X-Forwarded-For: 198.51.100.9:7,10.0.0.9:443"}, 200, "trusted hop skipped"},
                  {{"X-Forwarded-For: 198.51.100.9", "X-Forwarded-For: [::ffff:10.0.0.8]:1"},
                   429,
                   "two lines, v4-mapped trusted hop"},
                  {{"X-Forwarded-For: 203.0.113.7, garbage"}, 200, "unreadable: the balancer"},
                  {{"X-Forwarded-For: 203.0.113.7, unknown"}, 429, "unknown: the balancer again"},
                  {{"X-Forwarded-For: 203.0.113.7, [192.0.2.1]"}, 429, "bracketed v4: unreadable"},
                  {{}, 429, "no header: the balancer"},
                  {{"X-Forwarded-For: 10.0.0.7, 10.0.0.9"}, 200, "all trusted: the left-most"},
                  {{"Forwarded: for=192.0.2.99"}, 429, "Forwarded is not read: no header"},
              });
  EXPECT_EQ(raw_get(w, "127.203.113.9", {"X-Forwarded-For: 192.0.2.50"}), 200u)
      << "an untrusted peer is the client itself";
  EXPECT_EQ(raw_get(w, "127.203.113.9", {"X-Forwarded-For: 192.0.2.51"}), 429u);

  const auto f = fallbacks(w);
  EXPECT_EQ(f.at("unreadable"), 2u);
  EXPECT_EQ(f.at("unknown"), 1u);
  EXPECT_EQ(f.at("no_header"), 2u);
  EXPECT_EQ(f.at("all_trusted"), 1u);
  EXPECT_EQ(f.at("syntax_error"), 0u);
  EXPECT_EQ(f.at("obfuscated"), 0u);
  if (GetParam() == store_kind::redis) {
    EXPECT_EQ(ip_buckets(w),
              (std::set<std::string>{ip_key("192.0.2.1"), ip_key("2001:db8::/64"),
                                     ip_key("2001:db8:0:1::/64"), ip_key("198.51.100.9"),
                                     ip_key(lb), ip_key("10.0.0.7"), ip_key("127.203.113.9")}));
  }
}

TEST_P(client_address_http, rfc7239_forwarded_forms) {
  world w(GetParam(), rules_for("forwarded: rfc7239"));
  run_rows(w,
           {
               {{"Forwarded: for=192.0.2.60;proto=http;by=203.0.113.43"}, 200, "v4"},
               {{"Forwarded: For=\"192.0.2.60:4711\""}, 429, "quoted v4:port, same bucket"},
               {{"Forwarded: for=\"[2001:db8:cafe::17]:4711\""}, 200, "quoted [v6]:port"},
               {{"Forwarded: for=\"[2001:db8:cafe::18]\";proto=https"}, 429, "[v6], same /64"},
               {{"Forwarded: for=198.51.100.1", "Forwarded: for=203.0.113.5, for=10.0.0.9;by=_lb"},
                200,
                "two lines, several elements, trusted hop skipped"},
               {{"Forwarded: for=\"203.0.113.5:_port\""}, 429, "obfuscated port, same address"},
               {{"Forwarded: for=203.0.113.6, for=_hidden"}, 200, "obfuscated: the balancer"},
               {{"Forwarded: for=203.0.113.6, for=unknown"}, 429, "unknown: the balancer"},
               {{"Forwarded: for=[2001:db8::1]"}, 429, "unquoted brackets: a syntax error"},
               {{"Forwarded: for=\"192.0.2.61"}, 429, "unterminated quote: a syntax error"},
               {{"Forwarded: for=203.0.113.6, proto=http"}, 429, "an element without for="},
               {{"X-Forwarded-For: 192.0.2.200"}, 429, "X-Forwarded-For is not read"},
           });
  const auto f = fallbacks(w);
  EXPECT_EQ(f.at("obfuscated"), 1u);
  EXPECT_EQ(f.at("unknown"), 2u);
  EXPECT_EQ(f.at("syntax_error"), 2u);
  EXPECT_EQ(f.at("no_header"), 1u);
  EXPECT_EQ(f.at("unreadable"), 0u);
  if (GetParam() == store_kind::redis) {
    EXPECT_EQ(ip_buckets(w),
              (std::set<std::string>{ip_key("192.0.2.60"), ip_key("2001:db8:cafe::/64"),
                                     ip_key("203.0.113.5"), ip_key(lb)}));
  }
}

INSTANTIATE_TEST_SUITE_P(stores, client_address_http,
                         testing::Values(store_kind::memory, store_kind::redis), store_name);

}  // namespace
}  // namespace sluice::test
