#include "sluice/identity/identity.hpp"

#include "sluice/config/key_file.hpp"
#include "sluice/limiter/keys.hpp"

#include <boost/beast/http/fields.hpp>
#include <gtest/gtest.h>

#include <cctype>
#include <cstdio>
#include <fstream>
#include <set>

namespace sluice::identity {
namespace {

namespace ip = boost::asio::ip;

config::cidr net(const std::string& a, int prefix) {
  config::cidr c;
  auto addr = ip::make_address(a);
  c.text = a + "/" + std::to_string(prefix);
  c.prefix = prefix;
  if (addr.is_v4()) {
    auto b = addr.to_v4().to_bytes();
    std::copy(b.begin(), b.end(), c.bytes.begin());
  } else {
    c.v6 = true;
    auto b = addr.to_v6().to_bytes();
    std::copy(b.begin(), b.end(), c.bytes.begin());
  }
  return c;
}

std::string client(const std::string& peer, std::vector<std::string> xff) {
  boost::beast::http::fields f;
  for (auto& line : xff) f.insert("X-Forwarded-For", line);
  return client_address(ip::make_address(peer), f, {net("10.0.0.0", 8)}).to_string();
}

// Case c12: only addresses appended by trusted proxies are believed, walking from the right.
TEST(client_address, c12_xff_from_trusted_proxies_only) {
  EXPECT_EQ(client("10.0.0.5", {"198.51.100.1, 203.0.113.7"}), "203.0.113.7");
  EXPECT_EQ(client("10.0.0.5", {"192.0.2.50, 203.0.113.7"}), "203.0.113.7");
  EXPECT_EQ(client("10.0.0.5", {"192.0.2.50"}), "192.0.2.50");
  EXPECT_EQ(client("203.0.113.9", {"192.0.2.50"}), "203.0.113.9");
  EXPECT_EQ(client("10.0.0.5", {"198.51.100.77", "203.0.113.8"}), "203.0.113.8");
  EXPECT_EQ(client("10.0.0.5", {"198.51.100.1, 203.0.113.12, 10.0.0.9"}), "203.0.113.12");
  EXPECT_EQ(client("10.0.0.5", {}), "10.0.0.5");
  EXPECT_EQ(client("10.0.0.5", {""}), "10.0.0.5");
  EXPECT_EQ(client("10.0.0.5", {"10.0.0.7, 10.0.0.9"}), "10.0.0.7");  // all trusted: left-most
  EXPECT_EQ(client("10.0.0.5", {"garbage, 203.0.113.7"}), "203.0.113.7");
  EXPECT_EQ(client("10.0.0.5", {"203.0.113.7, garbage"}), "10.0.0.5");
  EXPECT_EQ(client("::ffff:10.0.0.5", {"203.0.113.7"}), "203.0.113.7");  // v4-mapped peer
}

config::rules rules_with_keys() {
  config::rules r;
  r.api_keys = {{"key-a", "free"}, {"203.0.113.20", "free"}};
  r.plans["free"].name = "free";
  r.plans["anonymous"].name = "anonymous";
  return r;
}

TEST(identify, c13_absent_empty_and_unknown_keys_are_anonymous) {
  auto r = rules_with_keys();
  auto addr = ip::make_address("203.0.113.20");
  boost::beast::http::fields none, empty, unknown, known, twice;
  empty.set("X-API-Key", "");
  unknown.set("X-API-Key", "key-z");
  known.set("X-API-Key", "key-a");
  twice.insert("X-API-Key", "key-a");
  twice.insert("X-API-Key", "key-b");
  for (auto* f : {&none, &empty, &unknown}) {
    auto who = std::get<caller>(identify(r, *f, "", addr));
    EXPECT_TRUE(who.anonymous);
    EXPECT_EQ(who.plan, "anonymous");
    EXPECT_EQ(who.client_ip, "203.0.113.20");
  }
  auto who = std::get<caller>(identify(r, known, "", addr));
  EXPECT_FALSE(who.anonymous);
  EXPECT_EQ(who.plan, "free");
  EXPECT_EQ(std::get<caller_error>(identify(r, twice, "", addr)), caller_error::conflicting_values);
  r.identity.unknown_key = config::unknown_key_policy::reject;
  EXPECT_EQ(std::get<caller_error>(identify(r, unknown, "", addr)), caller_error::unknown_key);
  EXPECT_EQ(std::get<caller_error>(identify(r, none, "", addr)), caller_error::unknown_key);
}

TEST(identify, api_key_from_query_parameter) {
  auto r = rules_with_keys();
  r.identity.api_key_query = "api_key";
  boost::beast::http::fields none;
  auto who = std::get<caller>(identify(r, none, "x=1&api_key=key-a", ip::make_address("127.0.0.1")));
  EXPECT_EQ(who.api_key, "key-a");
}

TEST(limit_identity, each_kind_has_its_own_namespace_and_never_an_empty_value) {
  auto r = rules_with_keys();
  r.identity.user_header = "X-User-Id";
  caller anon{"203.0.113.20", "anonymous", "", true};
  caller keyed{"203.0.113.20", "free", "203.0.113.20", false};
  boost::beast::http::fields none;
  config::limit l;
  l.by = config::identity_kind::api_key;
  EXPECT_EQ(limit_identity(l, anon, r, none)->first, limiter::key_namespace::anonymous_ip);
  EXPECT_EQ(limit_identity(l, keyed, r, none)->first, limiter::key_namespace::api_key);
  l.by = config::identity_kind::user;
  auto fallback = limit_identity(l, keyed, r, none);
  EXPECT_EQ(fallback->first, limiter::key_namespace::fallback_ip);
  EXPECT_EQ(fallback->second, "203.0.113.20");
  l.by = config::identity_kind::header;
  l.header_name = "X-Tenant";
  boost::beast::http::fields tenant;
  tenant.set("x-tenant", "a:b");  // header names match case-insensitively
  EXPECT_EQ(limit_identity(l, keyed, r, tenant)->second, "a:b");
  l.by = config::identity_kind::global;
  EXPECT_EQ(limit_identity(l, anon, r, none)->first, limiter::key_namespace::global);
}


// IPv6 clients are keyed by their /64 (configurable), IPv4 by the whole address unless an
// ipv4_prefix is set; IPv4-mapped IPv6 is IPv4.
TEST(client_key, prefixes) {
  config::identity_settings s;
  auto key = [&](const char* a) { return client_key(ip::make_address(a), s); };
  EXPECT_EQ(key("203.0.113.7"), "203.0.113.7");
  EXPECT_EQ(key("::ffff:203.0.113.7"), "203.0.113.7");
  EXPECT_EQ(key("2001:db8:1:2:aaaa:bbbb:cccc:dddd"), "2001:db8:1:2::/64");
  EXPECT_EQ(key("2001:db8:1:2::1"), key("2001:db8:1:2:ffff::9"));  // one host, one bucket
  EXPECT_NE(key("2001:db8:1:2::1"), key("2001:db8:1:3::1"));
  s.ipv6_prefix = 48;
  EXPECT_EQ(key("2001:db8:1:2::1"), "2001:db8:1::/48");
  s.ipv6_prefix = 128;
  EXPECT_EQ(key("2001:db8::1"), "2001:db8::1");
  s.ipv6_prefix = 61;  // not a multiple of 8
  EXPECT_EQ(key("2001:db8:1:2f::1"), "2001:db8:1:28::/61");
  s.ipv4_prefix = 24;
  EXPECT_EQ(key("203.0.113.7"), "203.0.113.0/24");
  EXPECT_EQ(key("::ffff:203.0.113.99"), "203.0.113.0/24");
  s.ipv4_prefix = 20;
  EXPECT_EQ(key("203.0.127.7"), "203.0.112.0/20");
}

TEST(identify, client_ip_uses_the_prefix) {
  auto r = rules_with_keys();
  boost::beast::http::fields none;
  auto who = std::get<caller>(identify(r, none, "", ip::make_address("2001:db8:1:2::77")));
  EXPECT_EQ(who.client_ip, "2001:db8:1:2::/64");
}

// Identity headers: names case-insensitive; two different values are a client error for the
// API key, the user and header:NAME alike; the same value twice is one value.
TEST(identify, repeated_identity_headers) {
  auto r = rules_with_keys();
  r.identity.user_header = "X-User-Id";
  const auto addr = ip::make_address("203.0.113.20");
  boost::beast::http::fields same, lower;
  same.insert("X-API-Key", "key-a");
  same.insert("x-api-key", "key-a");
  lower.set("x-API-key", "key-a");
  EXPECT_EQ(std::get<caller>(identify(r, same, "", addr)).plan, "free");
  EXPECT_EQ(std::get<caller>(identify(r, lower, "", addr)).plan, "free");

  caller keyed{"203.0.113.20", "free", "key-a", false};
  config::limit user;
  user.by = config::identity_kind::user;
  boost::beast::http::fields u1, u2, u3;
  u1.set("x-user-id", "alice");
  u2.insert("X-User-Id", "alice");
  u2.insert("X-USER-ID", "bob");
  u3.insert("X-User-Id", "alice");
  u3.insert("X-User-Id", " alice ");
  auto id = limit_identity(user, keyed, r, u1);
  ASSERT_TRUE(id);
  EXPECT_EQ(id->first, limiter::key_namespace::user);
  EXPECT_EQ(id->second, "alice");
  EXPECT_FALSE(limit_identity(user, keyed, r, u2));  // 400
  EXPECT_EQ(limit_identity(user, keyed, r, u3)->second, "alice");

  config::limit tenant;
  tenant.by = config::identity_kind::header;
  tenant.header_name = "X-Tenant";
  boost::beast::http::fields t2;
  t2.insert("x-tenant", "a");
  t2.insert("X-Tenant", "b");
  EXPECT_FALSE(limit_identity(tenant, keyed, r, t2));
}

TEST(identify, api_key_query_is_used_only_without_a_header_value) {
  auto r = rules_with_keys();
  r.identity.api_key_query = "key";
  boost::beast::http::fields h;
  h.set("X-API-Key", "203.0.113.20");
  EXPECT_EQ(std::get<std::string>(presented_key(r, h, "key=key-a")), "203.0.113.20");
  boost::beast::http::fields none;
  EXPECT_EQ(std::get<std::string>(presented_key(r, none, "a=1&key=key-a&b")), "key-a");
  EXPECT_EQ(std::get<std::string>(presented_key(r, none, "keys=key-a")), "");
}

// A directory plan the snapshot does not define is an unknown key, never a crash or a bucket
// of a plan that does not exist.
TEST(make_caller, plan_not_in_snapshot_is_unknown) {
  auto r = rules_with_keys();
  auto who = std::get<caller>(make_caller(r, "k", std::string("gold"), ip::make_address("127.0.0.1")));
  EXPECT_TRUE(who.anonymous);
  EXPECT_EQ(who.plan, "anonymous");
  who = std::get<caller>(make_caller(r, "k", std::string("free"), ip::make_address("127.0.0.1")));
  EXPECT_FALSE(who.anonymous);
  EXPECT_EQ(who.api_key, "k");
}

// The key file is consulted after the inline map.
TEST(static_plan, inline_then_file) {
  const std::string path = testing::TempDir() + "identity_keys.txt";
  {
    std::ofstream(path) << "# keys\nfile-key free\nkey-a anonymous\n";
  }
  auto [file, problems] = config::api_key_file::load(path, {"free", "anonymous"});
  ASSERT_TRUE(file) << problems.front().to_string();
  auto r = rules_with_keys();
  r.api_keys_file = file;
  EXPECT_EQ(static_plan(r, "key-a"), "free");  // inline wins
  EXPECT_EQ(static_plan(r, "file-key"), "free");
  EXPECT_EQ(static_plan(r, "nope"), std::nullopt);
  EXPECT_EQ(static_plan(r, ""), std::nullopt);
  std::remove(path.c_str());
}

// Identity values of any bytes and length map to distinct, bounded, injection-proof keys.
TEST(bucket_key, any_identity_value_is_bounded_and_distinct) {
  std::vector<std::string> values = {"a:b", "a_b", "a b", "a%3Ab", "A:B", "{a}:b", "a}b{",
                                     "\xd0\xba\xd0\xbb\xd1\x8e\xd1\x87", "\xef\xbd\x81:b",
                                     std::string(8192, 'x'), std::string(8192, 'x') + "y",
                                     std::string("nul\0byte", 8), "tab\tx", "line\nx",
                                     std::string(48, 'a'), std::string(49, 'a'), "-", ".", ".."};
  std::set<std::string> keys;
  for (const auto& v : values) {
    for (auto ns : {limiter::key_namespace::header, limiter::key_namespace::user}) {
      const auto k = limiter::bucket_key("docs", ns, v);
      EXPECT_LE(k.size(), 128u);
      EXPECT_TRUE(keys.insert(k).second) << "collision for " << v;
      const auto inner = k.substr(4, k.size() - 5);  // between "sl:{" and "}"
      for (unsigned char c : inner) {
        EXPECT_TRUE(std::isalnum(c) || c == '|' || c == '_' || c == '-' || c == '.') << k;
      }
    }
  }
}

}  // namespace
}  // namespace sluice::identity
