// SPDX-License-Identifier: Apache-2.0
#include "sluice/http/cors.hpp"

#include <gtest/gtest.h>

#include <boost/beast/http/field.hpp>

namespace sluice::http {
namespace {

// The `*` origin pattern (every origin).
config::origin_pattern any_origin() {
  config::origin_pattern p;
  p.text = "*";
  p.any = true;
  return p;
}

config::origin_pattern pattern(std::string scheme, std::string host, std::string port = "",
                               bool sub = false) {
  config::origin_pattern p;
  p.scheme = std::move(scheme);
  p.host = std::move(host);
  p.port = std::move(port);
  p.any_subdomain = sub;
  return p;
}

config::cors_policy policy() {
  config::cors_policy c;
  c.origins = {pattern("https", "app.example.com"), pattern("https", ".example.org", "", true),
               pattern("http", "127.0.0.1", "*"), pattern("http", "[::1]", "8080")};
  return c;
}

// Fetch §3.2.5 origins against each pattern form.
TEST(origin_allowed, pattern_table) {
  const auto c = policy();
  const std::pair<const char*, bool> cases[] = {
      {"https://app.example.com", true},
      {"http://app.example.com", false},
      {"https://app.example.com:8443", false},
      {"https://evil-app.example.com", false},
      {"https://app.example.com.evil.test", false},
      {"https://a.example.org", true},
      {"https://a.b.example.org", true},
      {"https://example.org", false},
      {"https://.example.org", false},
      {"https://aexample.org", false},
      {"http://127.0.0.1", true},
      {"http://127.0.0.1:5173", true},
      {"https://127.0.0.1:5173", false},
      {"http://[::1]:8080", true},
      {"http://[::1]", false},
      {"null", false},
      {"", false},
  };
  for (const auto& [origin, allowed] : cases)
    EXPECT_EQ(origin_allowed(c, origin), allowed) << origin;
  config::cors_policy any;
  any.origins = {any_origin()};
  EXPECT_TRUE(origin_allowed(any, "https://whatever.test"));
}

request_head head(std::string_view method, std::string_view origin) {
  request_head h;
  h.method_string(method);
  h.target("/");
  if (!origin.empty()) h.set(beast_http::field::origin, origin);
  return h;
}

std::string value(const field_list& f, std::string_view name) {
  for (const auto& [n, v] : f)
    if (n == name) return v;
  return "<absent>";
}

TEST(append_cors_fields, allowed_refused_and_wildcard) {
  auto c = policy();
  c.expose_headers = {"X-Request-Id"};
  field_list f;
  append_cors_fields(c, head("GET", "https://app.example.com"), f);
  EXPECT_EQ(value(f, "Access-Control-Allow-Origin"), "https://app.example.com");
  EXPECT_EQ(value(f, "Vary"), "Origin");
  EXPECT_EQ(value(f, "Access-Control-Allow-Credentials"), "<absent>");
  EXPECT_EQ(value(f, "Access-Control-Expose-Headers"),
            std::string(rate_limit_exposed) + ", X-Request-Id");

  f.clear();
  append_cors_fields(c, head("GET", "https://evil.test"), f);
  EXPECT_EQ(f, (field_list{{"Vary", "Origin"}}));  // refused: no CORS field, still Vary
  f.clear();
  append_cors_fields(c, head("GET", ""), f);
  EXPECT_EQ(f, (field_list{{"Vary", "Origin"}}));

  c.credentials = true;
  f.clear();
  append_cors_fields(c, head("GET", "https://a.example.org"), f);
  EXPECT_EQ(value(f, "Access-Control-Allow-Origin"), "https://a.example.org");
  EXPECT_EQ(value(f, "Access-Control-Allow-Credentials"), "true");

  config::cors_policy any;
  any.origins = {any_origin()};
  f.clear();
  append_cors_fields(any, head("GET", "https://x.test"), f);
  EXPECT_EQ(value(f, "Access-Control-Allow-Origin"), "*");
  EXPECT_EQ(value(f, "Vary"), "<absent>");
}

TEST(is_preflight, needs_options_origin_and_request_method) {
  auto h = head("OPTIONS", "https://app.example.com");
  EXPECT_FALSE(is_preflight(h));
  h.set(beast_http::field::access_control_request_method, "PUT");
  EXPECT_TRUE(is_preflight(h));
  auto g = head("GET", "https://app.example.com");
  g.set(beast_http::field::access_control_request_method, "PUT");
  EXPECT_FALSE(is_preflight(g));
  auto n = head("OPTIONS", "");
  n.set(beast_http::field::access_control_request_method, "PUT");
  EXPECT_FALSE(is_preflight(n));
}

TEST(preflight_answer, fields_for_allowed_and_refused_origins) {
  auto c = policy();
  c.methods = {"GET", "PUT"};
  c.headers = {"X-API-Key"};
  c.max_age_seconds = 600;
  auto h = head("OPTIONS", "https://app.example.com");
  h.set(beast_http::field::access_control_request_method, "PUT");
  h.set(beast_http::field::access_control_request_headers, "x-api-key");
  auto res = preflight_answer(c, h, {{"RateLimit", "\"a\";r=1;t=1"}});
  EXPECT_EQ(res.result_int(), 204u);
  EXPECT_EQ(res["Access-Control-Allow-Methods"], "GET, PUT");
  EXPECT_EQ(res["Access-Control-Allow-Headers"], "X-API-Key");
  EXPECT_EQ(res["Access-Control-Max-Age"], "600");
  EXPECT_EQ(res["RateLimit"], "\"a\";r=1;t=1");
  EXPECT_EQ(res["Vary"], "Access-Control-Request-Method, Access-Control-Request-Headers");

  c.methods = {"*"};
  c.headers = {"*"};
  res = preflight_answer(c, h, {});
  EXPECT_EQ(res["Access-Control-Allow-Methods"], "PUT");
  EXPECT_EQ(res["Access-Control-Allow-Headers"], "*");
  c.credentials = true;
  res = preflight_answer(c, h, {});
  EXPECT_EQ(res["Access-Control-Allow-Headers"], "x-api-key");

  auto evil = head("OPTIONS", "https://evil.test");
  evil.set(beast_http::field::access_control_request_method, "PUT");
  res = preflight_answer(c, evil, {});
  EXPECT_EQ(res.result_int(), 204u);
  EXPECT_EQ(res.count("Access-Control-Allow-Methods"), 0u);
  EXPECT_EQ(res.count("Access-Control-Max-Age"), 0u);
}

}  // namespace
}  // namespace sluice::http
