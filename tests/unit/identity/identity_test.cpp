// SPDX-License-Identifier: Apache-2.0
#include "sluice/identity/identity.hpp"

#include "sluice/config/key_file.hpp"
#include "sluice/limiter/keys.hpp"

#include <gtest/gtest.h>
#include <boost/beast/http/fields.hpp>

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
  auto who =
      std::get<caller>(identify(r, none, "x=1&api_key=key-a", ip::make_address("127.0.0.1")));
  EXPECT_EQ(who.api_key, "key-a");
  // The decoded key is what the directory sees and what buckets are keyed by.
  who = std::get<caller>(identify(r, none, "api_key=key%2Da", ip::make_address("127.0.0.1")));
  EXPECT_FALSE(who.anonymous);
  EXPECT_EQ(who.plan, "free");
  EXPECT_EQ(who.api_key, "key-a");
}

using presented = std::variant<std::string, caller_error>;

std::string show(const presented& p) {
  if (const auto* key = std::get_if<std::string>(&p)) return "key \"" + *key + "\"";
  switch (std::get<caller_error>(p)) {
    case caller_error::conflicting_values:
      return "conflicting_values (400)";
    case caller_error::malformed_value:
      return "malformed_value (400)";
    case caller_error::unknown_key:
      return "unknown_key (401)";
    default:
      break;
  }
  return "?";
}

struct key_row {
  std::vector<std::string> header;  // X-API-Key lines, in order
  std::string query;                // raw query, without '?'
  presented expected;
};

void check_rows(const config::rules& r, const std::vector<key_row>& rows) {
  for (const auto& row : rows) {
    boost::beast::http::fields f;
    for (const auto& line : row.header) f.insert("X-API-Key", line);
    std::string what = "query \"" + row.query + "\", header";
    for (const auto& line : row.header) what += " \"" + line + "\"";
    EXPECT_EQ(show(presented_key(r, f, row.query)), show(row.expected)) << what;
  }
}

const auto conflict = caller_error::conflicting_values;
const auto malformed = caller_error::malformed_value;

// The query parameter alone: percent-decoded (`+` is a space), repeats must agree after
// decoding, and a malformed escape or a decoded NUL in the key parameter is a client error.
TEST(presented_key, query_parameter_table) {
  auto r = rules_with_keys();
  r.identity.api_key_query = "api_key";
  check_rows(
      r, {
             {{}, "", std::string()},
             {{}, "api_key=key-a", std::string("key-a")},
             {{}, "x=1&api_key=key-a&y", std::string("key-a")},
             {{}, "&&api_key=key-a&", std::string("key-a")},
             // Percent-decoding (RFC 3986 §2.1), hex digits of either case, in the name too.
             {{}, "api_key=key%2Da", std::string("key-a")},
             {{}, "api_key=key%2da", std::string("key-a")},
             {{}, "api%5Fkey=key-a", std::string("key-a")},
             {{}, "api_key=key%3Da", std::string("key=a")},
             {{}, "api_key=a=b", std::string("a=b")},  // split at the first '='
             {{}, "api_key=%E2%82%AC", std::string("\xe2\x82\xac")},
             // '+' is a space (WHATWG urlencoded); a literal plus is %2B.
             {{}, "api_key=key+a", std::string("key a")},
             {{}, "api_key=key%20a", std::string("key a")},
             {{}, "api_key=key%2Ba", std::string("key+a")},
             {{}, "api+key=key-a", std::string()},  // "api key" is another name
             // Empty is absent.
             {{}, "api_key=", std::string()},
             {{}, "api_key", std::string()},
             // Repeats: identical (after decoding) is one value; different is ambiguous.
             {{}, "api_key=key-a&api_key=key-a", std::string("key-a")},
             {{}, "api_key=key-a&api_key=key%2Da", std::string("key-a")},
             {{}, "api_key=key-a&api_key=other", conflict},
             {{}, "api_key=other&x=1&api_key=key-a", conflict},
             {{}, "api_key=key-a&api%5Fkey=other", conflict},
             {{}, "api_key=key+a&api_key=key%2Ba", conflict},
             {{}, "api_key=&api_key=key-a", conflict},  // as "" and "key-a" header lines are
             {{}, "api_key=key-a&api_key", conflict},
             // Malformed escapes and NUL in the key parameter.
             {{}, "api_key=%zz", malformed},
             {{}, "api_key=key%", malformed},
             {{}, "api_key=%", malformed},
             {{}, "api_key=key%2", malformed},
             {{}, "api_key=key%2Xa", malformed},
             {{}, "api_key=key%00a", malformed},
             {{}, "api_key=%00", malformed},
             {{}, "api_key=key-a&api_key=%zz", malformed},
             {{}, "api_key%00=other&api_key=key-a", malformed},  // "api_key" to a C-string reader
             {{}, "api_key%00x=other", malformed},
             // Other parameters are not validated, and are not the key parameter.
             {{}, "other=%zz&api_key=key-a", std::string("key-a")},
             {{}, "%zz=1&api_key=key-a", std::string("key-a")},
             {{}, "api_key%zz=x&api_key=key-a", std::string("key-a")},
             {{}, "api_key%=x&api_key=key-a", std::string("key-a")},
             {{}, "other=%00&api_key=key-a", std::string("key-a")},
             {{}, "q=a|b{c}\"\xc3\xa9&api_key=key-a", std::string("key-a")},  // not strict RFC 3986
             {{}, "API_KEY=other&api_key=key-a", std::string("key-a")},  // names are case-sensitive
             {{}, "api_keyx=other&xapi_key=other&api_key=key-a", std::string("key-a")},
             // ';' is not a separator (WHATWG; Python's parse_qs dropped it in 3.9.2).
             {{}, "api_key=key-a;api_key=other", std::string("key-a;api_key=other")},
         });
}

// The header and the query parameter together: each is checked on its own, then two
// non-empty keys must be equal (the query's decoded, the header's trimmed).
TEST(presented_key, header_and_query_table) {
  auto r = rules_with_keys();
  r.identity.api_key_query = "api_key";
  check_rows(
      r, {
             {{"key-a"}, "", std::string("key-a")},
             {{"key-a"}, "x=1", std::string("key-a")},
             {{"key-a"}, "api_key=key-a", std::string("key-a")},
             {{"key-a"}, "api_key=key%2Da", std::string("key-a")},
             {{" key-a "}, "api_key=key-a", std::string("key-a")},
             {{"key a"}, "api_key=key+a", std::string("key a")},
             {{"key-a"}, "api_key=other", conflict},
             {{"other"}, "api_key=key-a", conflict},
             {{"key%2Da"}, "api_key=key-a", conflict},  // a header value is not percent-decoded
             {{"key-a"}, "api_key=", std::string("key-a")},  // empty is absent, in either source
             {{""}, "api_key=key-a", std::string("key-a")},
             {{""}, "", std::string()},
             {{"key-a", "key-a"}, "api_key=key-a", std::string("key-a")},
             {{"key-a", "other"}, "api_key=key-a", conflict},
             {{"key-a", "other"}, "", conflict},
             {{"key-a"}, "api_key=key-a&api_key=other", conflict},
             {{"key-a"}, "api_key=%zz", malformed},
             {{"key-a"}, "api_key=key-a%00", malformed},
         });
}

// A source that is not configured is not read: its values can neither give a key nor conflict.
TEST(presented_key, unconfigured_sources_are_ignored) {
  auto r = rules_with_keys();  // header X-API-Key only (the default)
  check_rows(r, {
                    {{"key-a"}, "api_key=other", std::string("key-a")},
                    {{}, "api_key=%zz&api_key=x", std::string()},
                });
  r.identity.api_key_header.clear();  // `api_key: {query: api_key}`
  r.identity.api_key_query = "api_key";
  check_rows(r, {
                    {{"other"}, "api_key=key-a", std::string("key-a")},
                    {{"key-a", "other"}, "", std::string()},
                });
}

// Decoding errors are 400 even under `unknown_key: reject`: the key is ambiguous, not missing.
TEST(identify, query_errors_come_before_the_directory) {
  auto r = rules_with_keys();
  r.identity.api_key_query = "api_key";
  r.identity.unknown_key = config::unknown_key_policy::reject;
  boost::beast::http::fields none;
  const auto addr = ip::make_address("127.0.0.1");
  EXPECT_EQ(std::get<caller_error>(identify(r, none, "api_key=%zz", addr)), malformed);
  EXPECT_EQ(std::get<caller_error>(identify(r, none, "api_key=key-a&api_key=x", addr)), conflict);
  EXPECT_EQ(std::get<caller_error>(identify(r, none, "api_key=key-z", addr)),
            caller_error::unknown_key);
  EXPECT_EQ(std::get<caller>(identify(r, none, "api_key=key%2Da", addr)).plan, "free");
}

TEST(describe, one_sentence_per_error) {
  std::set<std::string_view> texts;
  for (auto e : {conflict, malformed, caller_error::unknown_key}) {
    EXPECT_FALSE(describe(e).empty());
    EXPECT_TRUE(texts.insert(describe(e)).second);
  }
  EXPECT_EQ(describe(caller_error::unknown_key), "a valid API key is required");
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
  // A peer's scope id (a zone index) names an interface, not a client: never in the key.
  auto scoped = ip::make_address_v6("fe80::1");
  scoped.scope_id(2);
  EXPECT_EQ(client_key(ip::address(scoped), s), "fe80::/64");
  EXPECT_EQ(client_key(ip::address(scoped), s), key("fe80::2"));
  s.ipv6_prefix = 48;
  EXPECT_EQ(key("2001:db8:1:2::1"), "2001:db8:1::/48");
  s.ipv6_prefix = 128;
  EXPECT_EQ(key("2001:db8::1"), "2001:db8::1");
  EXPECT_EQ(client_key(ip::address(scoped), s), "fe80::1");
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

// A directory plan the snapshot does not define is an unknown key, never a crash or a bucket
// of a plan that does not exist.
TEST(make_caller, plan_not_in_snapshot_is_unknown) {
  auto r = rules_with_keys();
  auto who =
      std::get<caller>(make_caller(r, "k", std::string("gold"), ip::make_address("127.0.0.1")));
  EXPECT_TRUE(who.anonymous);
  EXPECT_EQ(who.plan, "anonymous");
  who = std::get<caller>(make_caller(r, "k", std::string("free"), ip::make_address("127.0.0.1")));
  EXPECT_FALSE(who.anonymous);
  EXPECT_EQ(who.api_key, "k");
}

// The key file is consulted after the inline map.
TEST(static_plan, inline_then_file) {
  const std::string path = testing::TempDir() + "identity_keys.txt";
  { std::ofstream(path) << "# keys\nfile-key free\nkey-a anonymous\n"; }
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
  std::vector<std::string> values = {"a:b",
                                     "a_b",
                                     "a b",
                                     "a%3Ab",
                                     "A:B",
                                     "{a}:b",
                                     "a}b{",
                                     "\xd0\xba\xd0\xbb\xd1\x8e\xd1\x87",
                                     "\xef\xbd\x81:b",
                                     std::string(8192, 'x'),
                                     std::string(8192, 'x') + "y",
                                     std::string("nul\0byte", 8),
                                     "tab\tx",
                                     "line\nx",
                                     std::string(48, 'a'),
                                     std::string(49, 'a'),
                                     "-",
                                     ".",
                                     ".."};
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

namespace sluice::identity {
namespace {

using kind = forwarded_node::kind;

// What a parser made of one input: "unreadable", "unknown"... or the address text.
std::string shown(const forwarded_node& n) {
  switch (n.what) {
    case kind::address:
      return n.address.to_string();
    case kind::unknown:
      return "unknown";
    case kind::obfuscated:
      return "obfuscated";
    case kind::unreadable:
      return "unreadable";
    case kind::syntax_error:
      return "syntax_error";
  }
  return "?";
}

struct node_case {
  const char* input;
  const char* expected;
};

// Every form proxies write into X-Forwarded-For, and the ones no proxy writes.
TEST(parse_xff_entry, every_form_a_proxy_writes) {
  const node_case cases[] = {
      {"192.0.2.1", "192.0.2.1"},
      {"  192.0.2.1\t", "192.0.2.1"},
      {"192.0.2.1:51000", "192.0.2.1"},
      {"192.0.2.1:0", "192.0.2.1"},
      {"192.0.2.1:65535", "192.0.2.1"},
      {"2001:db8::6", "2001:db8::6"},
      {"[2001:db8::6]", "2001:db8::6"},
      {"[2001:db8::6]:51000", "2001:db8::6"},
      {" [2001:DB8::6]:443 ", "2001:db8::6"},
      {"::ffff:192.0.2.9", "192.0.2.9"},
      {"[::ffff:192.0.2.9]:80", "192.0.2.9"},
      {"::1", "::1"},
      {"unknown", "unknown"},
      {"UNKNOWN", "unknown"},
      {"", "unreadable"},
      {"garbage", "unreadable"},
      {"example.com", "unreadable"},
      {"192.0.2.1:65536", "unreadable"},
      {"192.0.2.1:", "unreadable"},
      {"192.0.2.1:http", "unreadable"},
      {"192.0.2.1:123456", "unreadable"},
      {"192.0.2", "unreadable"},
      {"192.0.2.256", "unreadable"},
      {"[192.0.2.1]", "unreadable"},
      {"[2001:db8::6", "unreadable"},
      {"[2001:db8::6]51000", "unreadable"},
      {"[2001:db8::6]:", "unreadable"},
      {"2001:db8::6:51000:1:2:3:4", "unreadable"},
      // A zone index (RFC 4007 §11; `%25` in a URI, RFC 6874) names an interface of the host
      // that wrote it: dropped, the address is the client.
      {"fe80::1%eth0", "fe80::1"},
      {"fe80::1%2", "fe80::1"},
      {"[fe80::1%25eth0]", "fe80::1"},
      {"[fe80::1%eth0]:51000", "fe80::1"},
      {"fe80::1%", "unreadable"},
      {"fe80::1%eth0 x", "unreadable"},
      {"fe80::1%eth0/64", "unreadable"},
      {"%eth0", "unreadable"},
      {"192.0.2.1%eth0", "unreadable"},
      {"192.0.2.1 192.0.2.2", "unreadable"},
      {"\"192.0.2.1\"", "unreadable"},
      {"_hidden", "unreadable"},
  };
  for (const auto& c : cases) {
    EXPECT_EQ(shown(parse_xff_entry(c.input)), c.expected) << "input: '" << c.input << "'";
  }
}

// RFC 7239 §6 nodes (the value of for=, unquoted).
TEST(parse_forwarded_node, rfc7239_section_6_nodes) {
  const node_case cases[] = {
      {"192.0.2.60", "192.0.2.60"},
      {"192.0.2.60:4711", "192.0.2.60"},
      {"192.0.2.60:_port-1", "192.0.2.60"},
      {"[2001:db8:cafe::17]", "2001:db8:cafe::17"},
      {"[2001:db8:cafe::17]:4711", "2001:db8:cafe::17"},
      {"[2001:db8:cafe::17]:_x", "2001:db8:cafe::17"},
      {"[::ffff:198.51.100.4]", "198.51.100.4"},
      {"unknown", "unknown"},
      {"Unknown:4711", "unknown"},
      {"_hidden", "obfuscated"},
      {"_SEVKISEK", "obfuscated"},
      {"_a.b-c_d", "obfuscated"},
      {"_hidden:_port", "obfuscated"},
      {"_", "unreadable"},
      {"_bad!", "unreadable"},
      {"2001:db8:cafe::17", "unreadable"},  // an IPv6 node must be bracketed
      {"192.0.2.60:", "unreadable"},
      {"192.0.2.60:99999", "unreadable"},
      {"192.0.2.60:_", "unreadable"},
      {"[192.0.2.60]", "unreadable"},
      {"example.com", "unreadable"},
      {"", "unreadable"},
  };
  for (const auto& c : cases) {
    EXPECT_EQ(shown(parse_forwarded_node(c.input)), c.expected) << "input: '" << c.input << "'";
  }
}

struct line_case {
  const char* line;
  std::vector<std::string> expected;
  bool ok;
};

// RFC 7239 §4's grammar: elements, pairs, quoting; a syntax error spoils its whole line.
TEST(parse_forwarded_line, rfc7239_section_4_grammar) {
  const line_case cases[] = {
      {"for=192.0.2.43", {"192.0.2.43"}, true},
      {"For=192.0.2.43", {"192.0.2.43"}, true},
      {"for=\"192.0.2.43\"", {"192.0.2.43"}, true},
      {"for=\"[2001:db8:cafe::17]:4711\"", {"2001:db8:cafe::17"}, true},
      {"for=192.0.2.60;proto=http;by=203.0.113.43", {"192.0.2.60"}, true},
      {"proto=https; for=192.0.2.60 ;by=_lb", {"192.0.2.60"}, true},
      {"for=192.0.2.43, for=198.51.100.17", {"192.0.2.43", "198.51.100.17"}, true},
      {"for=192.0.2.43,for=\"[2001:db8::1]\",  for=unknown",
       {"192.0.2.43", "2001:db8::1", "unknown"},
       true},
      {"for=_hidden, for=_SEVKISEK", {"obfuscated", "obfuscated"}, true},
      {"proto=http;by=203.0.113.43", {"unknown"}, true},  // an element without for=
      {"for=192.0.2.43;", {"192.0.2.43"}, true},
      {"for=192.0.2.43,, ,for=192.0.2.44", {"192.0.2.43", "192.0.2.44"}, true},
      {"", {}, true},
      {"for=\"\\192.0.2.43\"", {"192.0.2.43"}, true},  // a quoted-pair
      {"for=\"192.0.2.43, for=10.0.0.1\"", {"unreadable"}, true},
      {"for=hostname", {"unreadable"}, true},
      {"for=[2001:db8::1]", {"syntax_error"}, false},  // '[' is not a token character
      {"for=192.0.2.43:80", {"syntax_error"}, false},  // ':' needs quotes
      {"for=\"192.0.2.43", {"syntax_error"}, false},
      {"for=", {"syntax_error"}, false},
      {"for", {"syntax_error"}, false},
      {"=192.0.2.43", {"syntax_error"}, false},
      {"for =192.0.2.43", {"syntax_error"}, false},
      {"for=192.0.2.43;for=192.0.2.44", {"syntax_error"}, false},
      {"for=192.0.2.43 for=192.0.2.44", {"syntax_error"}, false},
      {"for=192.0.2.43, garbage", {"syntax_error"}, false},
      {"for=\"a\x01\"", {"syntax_error"}, false},
  };
  for (const auto& c : cases) {
    std::vector<forwarded_node> out{{kind::unknown, {}}};  // nodes of an earlier line stay
    EXPECT_EQ(parse_forwarded_line(c.line, out), c.ok) << "line: '" << c.line << "'";
    std::vector<std::string> got;
    for (std::size_t i = 1; i < out.size(); ++i) got.push_back(shown(out[i]));
    EXPECT_EQ(got, c.expected) << "line: '" << c.line << "'";
  }
}

struct walk_case {
  const char* peer;
  std::vector<std::string> lines;
  const char* client;
  address_source source;
};

config::identity_settings walk_settings(config::forwarded_header h) {
  config::identity_settings s;
  s.trusted_proxies = {net("10.0.0.0", 8), net("fd00::", 8)};
  s.forwarded = h;
  return s;
}

void run_walk(const walk_case& c, config::forwarded_header h, const char* name) {
  boost::beast::http::fields f;
  for (const auto& line : c.lines) f.insert(name, line);
  const auto got = locate_client(ip::make_address(c.peer), f, walk_settings(h));
  std::string joined;
  for (const auto& l : c.lines) joined += "[" + l + "]";
  EXPECT_EQ(got.address.to_string(), c.client) << c.peer << " " << joined;
  EXPECT_EQ(label(got.source), label(c.source)) << c.peer << " " << joined;
}

// The walk from the right through trusted proxies, on X-Forwarded-For.
TEST(locate_client, x_forwarded_for_walk) {
  using src = address_source;
  const walk_case cases[] = {
      {"203.0.113.9", {"192.0.2.1"}, "203.0.113.9", src::peer},
      {"10.0.0.5", {}, "10.0.0.5", src::no_header},
      {"10.0.0.5", {" , "}, "10.0.0.5", src::no_header},
      {"10.0.0.5", {"192.0.2.1"}, "192.0.2.1", src::forwarded},
      {"10.0.0.5", {"192.0.2.1:51000"}, "192.0.2.1", src::forwarded},
      {"10.0.0.5", {"[2001:db8::6]:51000"}, "2001:db8::6", src::forwarded},
      {"10.0.0.5", {"2001:db8::6"}, "2001:db8::6", src::forwarded},
      {"10.0.0.5", {"198.51.100.1,203.0.113.7:1, 10.0.0.9:2"}, "203.0.113.7", src::forwarded},
      {"10.0.0.5", {"198.51.100.1", "[fd00::1]:8"}, "198.51.100.1", src::forwarded},
      {"10.0.0.5", {"10.0.0.7, 10.0.0.9"}, "10.0.0.7", src::all_trusted},
      {"10.0.0.5", {"garbage, 203.0.113.7"}, "203.0.113.7", src::forwarded},
      {"10.0.0.5", {"203.0.113.7, garbage"}, "10.0.0.5", src::unreadable},
      {"10.0.0.5", {"203.0.113.7, garbage, 10.0.0.8"}, "10.0.0.8", src::unreadable},
      {"10.0.0.5", {"203.0.113.7, unknown"}, "10.0.0.5", src::unknown},
      {"::ffff:10.0.0.5", {"[::ffff:203.0.113.7]:9"}, "203.0.113.7", src::forwarded},
  };
  for (const auto& c : cases)
    run_walk(c, config::forwarded_header::x_forwarded_for, "X-Forwarded-For");
}

// The same walk on RFC 7239 Forwarded (X-Forwarded-For is then not read).
TEST(locate_client, rfc7239_forwarded_walk) {
  using src = address_source;
  const walk_case cases[] = {
      {"203.0.113.9", {"for=192.0.2.1"}, "203.0.113.9", src::peer},
      {"10.0.0.5", {}, "10.0.0.5", src::no_header},
      {"10.0.0.5", {"for=192.0.2.1"}, "192.0.2.1", src::forwarded},
      {"10.0.0.5", {"for=\"192.0.2.1:4711\""}, "192.0.2.1", src::forwarded},
      {"10.0.0.5",
       {"for=\"[2001:db8:cafe::17]:4711\";proto=https"},
       "2001:db8:cafe::17",
       src::forwarded},
      {"10.0.0.5",
       {"for=198.51.100.1, for=203.0.113.7", "for=10.0.0.9;by=_lb"},
       "203.0.113.7",
       src::forwarded},
      {"10.0.0.5", {"for=10.0.0.7, for=\"[fd00::2]\""}, "10.0.0.7", src::all_trusted},
      {"10.0.0.5", {"for=203.0.113.7, for=unknown"}, "10.0.0.5", src::unknown},
      {"10.0.0.5", {"for=203.0.113.7, for=_hidden, for=10.0.0.8"}, "10.0.0.8", src::obfuscated},
      {"10.0.0.5", {"for=203.0.113.7, proto=http"}, "10.0.0.5", src::unknown},
      {"10.0.0.5", {"for=203.0.113.7, for=hostname"}, "10.0.0.5", src::unreadable},
      {"10.0.0.5", {"for=203.0.113.7", "for=[2001:db8::1]"}, "10.0.0.5", src::syntax_error},
      {"10.0.0.5", {"for=\"203.0.113.7", "for=10.0.0.8"}, "10.0.0.8", src::syntax_error},
      {"10.0.0.5", {"for=\"garbage, for=203.0.113.7"}, "10.0.0.5", src::syntax_error},
      {"10.0.0.5", {"for=garbage", "for=203.0.113.7"}, "203.0.113.7", src::forwarded},
  };
  for (const auto& c : cases) run_walk(c, config::forwarded_header::rfc7239, "Forwarded");
  // Under rfc7239, X-Forwarded-For says nothing, and the other way round.
  boost::beast::http::fields f;
  f.insert("X-Forwarded-For", "192.0.2.1");
  f.insert("Forwarded", "for=192.0.2.2");
  const auto peer = ip::make_address("10.0.0.5");
  EXPECT_EQ(
      locate_client(peer, f, walk_settings(config::forwarded_header::rfc7239)).address.to_string(),
      "192.0.2.2");
  EXPECT_EQ(locate_client(peer, f, walk_settings(config::forwarded_header::x_forwarded_for))
                .address.to_string(),
            "192.0.2.1");
}

}  // namespace
}  // namespace sluice::identity
