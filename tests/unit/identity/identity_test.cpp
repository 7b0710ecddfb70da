#include "sluice/identity/identity.hpp"

#include <boost/beast/http/fields.hpp>
#include <gtest/gtest.h>

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

}  // namespace
}  // namespace sluice::identity
