// SPDX-License-Identifier: Apache-2.0
#include "sluice/http/problem.hpp"

#include <gtest/gtest.h>

namespace sluice::http {
namespace {

namespace bhttp = boost::beast::http;

TEST(problem, body_has_type_title_status_and_detail) {
  EXPECT_EQ(
      problem_body(404, "Not Found", "no route matches"),
      R"({"type":"about:blank","title":"Not Found","status":404,"detail":"no route matches"})");
  EXPECT_EQ(problem_body(400, "Bad Request", ""),
            R"({"type":"about:blank","title":"Bad Request","status":400})");
  EXPECT_EQ(problem_body(429, "T", "d", "https://example.test/t"),
            R"({"type":"https://example.test/t","title":"T","status":429,"detail":"d"})");
}

TEST(problem, strings_are_json_escaped) {
  EXPECT_EQ(problem_body(400, "a\"b", "c\\d\te\x01"),
            R"({"type":"about:blank","title":"a\"b","status":400,"detail":"c\\d\te\u0001"})");
}

TEST(problem, response_is_problem_json_from_sluice) {
  auto res = problem(11, bhttp::status::gateway_timeout, "Gateway Timeout", "late");
  EXPECT_EQ(res.result_int(), 504u);
  EXPECT_EQ(res[bhttp::field::content_type], "application/problem+json");
  EXPECT_EQ(res[bhttp::field::server], "sluice");
  EXPECT_NE(res.body().find("\"status\":504"), std::string::npos);
}

TEST(problem, every_upstream_failure_names_its_cause) {
  EXPECT_EQ(describe(upstream_failure::unreachable).status, bhttp::status::bad_gateway);
  EXPECT_EQ(describe(upstream_failure::timeout).status, bhttp::status::gateway_timeout);
  EXPECT_NE(describe(upstream_failure::closed).detail.find("closed"), std::string_view::npos);
  EXPECT_NE(describe(upstream_failure::malformed).detail.find("malformed"), std::string_view::npos);
  EXPECT_NE(describe(upstream_failure::too_large).detail.find("max_response_body"),
            std::string_view::npos);
  EXPECT_NE(describe(upstream_failure::unreachable).detail.find("could not be reached"),
            std::string_view::npos);
}

}  // namespace
}  // namespace sluice::http
