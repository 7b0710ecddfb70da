// SPDX-License-Identifier: Apache-2.0
#include "sluice/http/router.hpp"

#include "sluice/errc.hpp"

#include <gtest/gtest.h>

#include <string>

namespace sluice::http {
namespace {

struct ok_case {
  const char* target;
  const char* path;
  const char* query;
};

TEST(Canonicalize, Table) {
  const ok_case cases[] = {
      {"/", "/", ""},
      {"/v1/items", "/v1/items", ""},
      {"/v1/items/", "/v1/items/", ""},
      {"/v1/items?x=1&y=%2f", "/v1/items", "x=1&y=%2f"},  // query kept as given
      {"/v1/items?", "/v1/items", ""},
      // unreserved characters are decoded, others kept encoded with upper-case hex
      {"/%7Euser/%41%62c", "/~user/Abc", ""},
      {"/a%2db%5Fc%2E", "/a-b_c.", ""},
      {"/a%20b", "/a%20b", ""},
      {"/a%3ab%3Fc", "/a%3Ab%3Fc", ""},
      {"/caf%c3%a9", "/caf%C3%A9", ""},
      // repeated slashes merged
      {"//v1///items//", "/v1/items/", ""},
      // dot segments (RFC 3986 §5.2.4)
      {"/a/./b", "/a/b", ""},
      {"/a/b/../c", "/a/c", ""},
      {"/a/b/..", "/a/", ""},
      {"/a/b/.", "/a/b/", ""},
      {"/a/..", "/", ""},
      {"/.", "/", ""},
      {"/a/%2E%2E/b", "/b", ""},
      {"/a/.%2e/b", "/b", ""},
      {"/v1/admin/../items", "/v1/items", ""},
      {"/a//../b", "/b", ""},
      {"/a/...", "/a/...", ""},
      {"/a/..b/c", "/a/..b/c", ""},
      // absolute-form
      {"http://api.example.test/v1/items?q=1", "/v1/items", "q=1"},
      {"HTTP://api.example.test:8080", "/", ""},
      {"http://api.example.test?q", "/", "q"},
      {"https://h/a/../b", "/b", ""},
  };
  for (const auto& c : cases) {
    auto r = canonicalize(c.target);
    ASSERT_TRUE(r) << c.target << ": " << r.error().message();
    EXPECT_EQ(r->path, c.path) << c.target;
    EXPECT_EQ(r->query, c.query) << c.target;
  }
}

TEST(Canonicalize, Errors) {
  const char* bad[] = {
      "",
      "*",
      "api.example.test:443",
      "v1/items",
      "/a%2Fb",
      "/a%2fb",
      "/a%00b",
      "/..",
      "/../etc",
      "/a/../..",
      "/a/../../b",
      "/%2E%2E/x",
      "/a%",
      "/a%4",
      "/a%G1",
      "/a#frag",
      "/a\x01",
      "/a b",
      "http:///x",
      "http://user@host/x",
      "ftp://h/x",
      "/a?b c",
  };
  for (const char* t : bad) {
    auto r = canonicalize(t);
    ASSERT_FALSE(r) << "accepted: " << t << " as " << r->path;
    EXPECT_EQ(r.error(), errc::bad_request) << t;
  }
}

config::route make_route(std::string name, std::string prefix,
                         std::vector<std::string> methods = {}) {
  config::route r;
  r.name = std::move(name);
  r.match.path_prefix = std::move(prefix);
  r.match.methods = std::move(methods);
  return r;
}

TEST(Router, FirstMatchWins) {
  config::rules rules;
  rules.routes.push_back(make_route("login", "/login", {"POST"}));
  rules.routes.push_back(make_route("items", "/v1/items"));
  rules.routes.push_back(make_route("v1", "/v1"));
  rules.routes.push_back(make_route("default", "/"));
  const router rt(rules);

  auto name = [&](std::string_view m, std::string_view p) -> std::string {
    const auto* r = rt.match(m, p);
    return r ? r->name : "<none>";
  };
  EXPECT_EQ(name("GET", "/v1/items"), "items");
  EXPECT_EQ(name("GET", "/v1/items/3"), "items");
  EXPECT_EQ(name("GET", "/v1/itemsX"), "items");  // plain prefix (Envoy's semantics)
  EXPECT_EQ(name("GET", "/v1/other"), "v1");
  EXPECT_EQ(name("POST", "/login"), "login");
  EXPECT_EQ(name("GET", "/login"), "default");  // method mismatch falls through
  EXPECT_EQ(name("DELETE", "/anything"), "default");
}

TEST(Router, MethodsAndHead) {
  config::rules rules;
  rules.routes.push_back(make_route("read", "/r", {"GET"}));
  rules.routes.push_back(make_route("write", "/w", std::vector<std::string>{"POST", "PUT"}));
  const router rt(rules);
  EXPECT_NE(rt.match("GET", "/r"), nullptr);
  EXPECT_NE(rt.match("HEAD", "/r"), nullptr);  // RFC 9110: GET implies HEAD
  EXPECT_EQ(rt.match("POST", "/r"), nullptr);
  EXPECT_NE(rt.match("PUT", "/w"), nullptr);
  EXPECT_EQ(rt.match("HEAD", "/w"), nullptr);
  EXPECT_EQ(rt.match("get", "/r"), nullptr);  // methods are case-sensitive (RFC 9110 §9.1)
  EXPECT_EQ(rt.match("GET", "/x"), nullptr);
}

TEST(Router, NoRoutes) {
  config::rules rules;
  const router rt(rules);
  EXPECT_EQ(rt.match("GET", "/"), nullptr);
}

config::route glob_route(std::string name, config::path_kind kind, std::string pattern,
                         std::vector<std::string> methods = {}, std::string host = "") {
  config::route r;
  r.name = std::move(name);
  r.match.kind = kind;
  if (kind == config::path_kind::prefix)
    r.match.path_prefix = std::move(pattern);
  else
    r.match.path = std::move(pattern);
  r.match.methods = std::move(methods);
  r.match.host = std::move(host);
  return r;
}

TEST(Router, ExactGlobPrefixAndHost) {
  using config::path_kind;
  config::rules rules;
  rules.routes.push_back(glob_route("health", path_kind::exact, "/healthz"));
  rules.routes.push_back(glob_route("items", path_kind::glob, "/v1/*/items", {"GET"}));
  rules.routes.push_back(glob_route("deep", path_kind::glob, "/v2/**/raw"));
  rules.routes.push_back(glob_route("tail", path_kind::glob, "/v3/**"));
  rules.routes.push_back(glob_route("admin", path_kind::prefix, "/", {}, "admin.example.com"));
  rules.routes.push_back(glob_route("ext", path_kind::exact, "/x", {"PURGE"}));
  rules.routes.push_back(glob_route("default", path_kind::prefix, "/"));
  const router rt(rules);
  auto name = [&](std::string_view m, std::string_view host, std::string_view p) -> std::string {
    const auto* r = rt.match(m, host, p);
    return r ? r->name : "<none>";
  };
  EXPECT_EQ(name("GET", "", "/healthz"), "health");
  EXPECT_EQ(name("GET", "", "/healthz/"), "default");  // exact means exact
  EXPECT_EQ(name("GET", "", "/healthzz"), "default");
  EXPECT_EQ(name("GET", "", "/v1/acme/items"), "items");
  EXPECT_EQ(name("HEAD", "", "/v1/acme/items"), "items");
  EXPECT_EQ(name("POST", "", "/v1/acme/items"), "default");
  EXPECT_EQ(name("GET", "", "/v1/acme/x/items"), "default");  // '*' is one segment
  EXPECT_EQ(name("GET", "", "/v1/items"), "default");
  EXPECT_EQ(name("GET", "", "/v1/acme/items/3"), "default");
  EXPECT_EQ(name("GET", "", "/v2/raw"), "deep");  // '**' may be empty
  EXPECT_EQ(name("GET", "", "/v2/a/b/c/raw"), "deep");
  EXPECT_EQ(name("GET", "", "/v2/a/b/c/raw/x"), "default");
  EXPECT_EQ(name("GET", "", "/v3"), "tail");
  EXPECT_EQ(name("GET", "", "/v3/a/b"), "tail");
  EXPECT_EQ(name("GET", "", "/v3x"), "default");
  EXPECT_EQ(name("GET", "Admin.Example.COM:8443", "/anything"), "admin");  // case, port ignored
  EXPECT_EQ(name("GET", "admin.example.com.", "/anything"), "admin");
  EXPECT_EQ(name("GET", "admin.example.org", "/anything"), "default");
  EXPECT_EQ(name("GET", "", "/anything"), "default");
  EXPECT_EQ(rt.match("GET", "/anything")->name, "default");  // no Host: host routes skipped
  EXPECT_EQ(name("PURGE", "", "/x"), "ext");                 // extension methods compare as text
  EXPECT_EQ(name("GET", "", "/x"), "default");
}

// The router is compiled from the rules: it matches from its own structures (a copy of the
// patterns), not by reading the route's match fields per request.
TEST(Router, CompiledOnce) {
  config::rules rules;
  rules.routes.push_back(glob_route("g", config::path_kind::glob, "/a/*"));
  const router rt(rules);
  rules.routes[0].match.path = "/b/*";  // later edits of the model do not change the table
  EXPECT_NE(rt.match("GET", "", "/a/1"), nullptr);
  EXPECT_EQ(rt.match("GET", "", "/b/1"), nullptr);
}

}  // namespace
}  // namespace sluice::http
