// SPDX-License-Identifier: Apache-2.0
// sluice-test-support: openai_upstream scripted_upstream http_client
// The OpenAI-compatible test upstream (tests/support/openai_upstream.py) that the settled-cost
// tests run against: its JSON and SSE answers have the shape OpenAI sends, total_tokens varies
// per request as documented, its record says what it charged, and the usage scanner reads from
// its answers exactly what it recorded.

#include "support/openai_upstream.hpp"

#include "sluice/limiter/usage_scanner.hpp"
#include "support/http_client.hpp"
#include "support/scripted_upstream.hpp"
#include "support/temp_dir.hpp"

#include <gtest/gtest.h>
#include <boost/json.hpp>

#include <string>
#include <vector>

namespace sluice::test {
namespace {

using namespace std::chrono_literals;

std::string request_text(const std::string& body, const std::vector<std::string>& extra = {}) {
  std::string r =
      "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
      "Content-Type: application/json\r\nContent-Length: " +
      std::to_string(body.size()) + "\r\n";
  for (const auto& h : extra) r += h + "\r\n";
  return r + "\r\n" + body;
}

limiter::usage_reading scan(std::string_view type, std::string_view body) {
  limiter::usage_source src;
  std::string why;
  src.path = *limiter::parse_usage_path("usage.total_tokens", why);
  limiter::usage_scanner s(src);
  s.start(type);
  s.feed(body);
  return s.finish(true);
}

/// The `data:` values of an event stream's events, in order.
std::vector<std::string> event_data(const std::string& body) {
  std::vector<std::string> out;
  std::size_t at = 0;
  while ((at = body.find("data: ", at)) != std::string::npos) {
    const auto end = body.find("\n\n", at);
    out.push_back(body.substr(at + 6, end - at - 6));
    at = end;
  }
  return out;
}

TEST(openai_upstream, answers_json_with_the_usage_it_records) {
  temp_dir dir("openai");
  openai_upstream up(dir.path);
  http_connection c(up.port());
  const auto r = c.request("POST", "/v1/chat/completions",
                           {{"Content-Type", "application/json"}, {"X-Test-Total-Tokens", "100"}},
                           chat_request("hello", false));
  ASSERT_EQ(r.status, 200u) << r.body;
  EXPECT_EQ(r.header("Content-Type"), "application/json");
  const auto v = boost::json::parse(r.body).as_object();
  EXPECT_EQ(v.at("object"), "chat.completion");
  EXPECT_EQ(v.at("id"), "chatcmpl-0");
  EXPECT_EQ(v.at("choices").as_array().at(0).at("message").at("role"), "assistant");
  EXPECT_EQ(v.at("usage"),
            (boost::json::value{
                {"prompt_tokens", 25}, {"completion_tokens", 75}, {"total_tokens", 100}}));
  EXPECT_EQ(scan(r.header("Content-Type"), r.body), (limiter::usage_reading{100, std::nullopt}));

  const auto charged = up.wait_charges(1);
  ASSERT_EQ(charged.size(), 1u);
  EXPECT_EQ(charged[0].id, "chatcmpl-0");
  EXPECT_FALSE(charged[0].stream);
  EXPECT_EQ(charged[0].prompt_tokens, 25u);
  EXPECT_EQ(charged[0].completion_tokens, 75u);
  EXPECT_EQ(charged[0].total_tokens, 100u);
  EXPECT_TRUE(charged[0].usage_sent);
  EXPECT_EQ(charged[0].in_flight, 1u);
}

TEST(openai_upstream, total_tokens_follow_a_deterministic_sequence) {
  temp_dir dir("openai");
  openai_upstream up(dir.path);
  http_connection c(up.port());
  // prompt: 1 + 17 characters // 4 = 5; completion: 1 + (n * 7919 + 13) % 50.
  const std::uint64_t completion[] = {14, 33, 2, 21};
  std::uint64_t sum = 0;
  for (std::uint64_t n = 0; n < 4; ++n) {
    const auto r = c.request("POST", "/v1/chat/completions", {{"Content-Type", "application/json"}},
                             chat_request("seventeen letters", false, true, 50));
    ASSERT_EQ(r.status, 200u) << r.body;
    const auto usage = boost::json::parse(r.body).at("usage");
    EXPECT_EQ(usage.at("prompt_tokens"), 5);
    EXPECT_EQ(usage.at("completion_tokens").as_int64(), static_cast<std::int64_t>(completion[n]));
    EXPECT_EQ(scan("application/json", r.body).cost, 5 + completion[n]);
    sum += 5 + completion[n];
  }
  const auto charged = up.wait_charges(4);
  ASSERT_EQ(charged.size(), 4u);
  for (std::uint64_t n = 0; n < 4; ++n) EXPECT_EQ(charged[n].total_tokens, 5 + completion[n]);
  EXPECT_EQ(up.total_charged(), sum);
}

TEST(openai_upstream, streams_events_as_it_sends_them_with_the_usage_last) {
  temp_dir dir("openai");
  openai_upstream up(dir.path);
  auto s = raw_socket::connect(up.port());
  ASSERT_TRUE(s.write(request_text(chat_request("hi", true),
                                   {"X-Test-Total-Tokens: 321", "X-Test-Delay-Ms: 150"})));
  const auto head = read_head(s, 5s);
  ASSERT_TRUE(head);
  EXPECT_EQ(head->status(), 200u);
  EXPECT_EQ(head->header("Content-Type"), "text/event-stream; charset=utf-8");
  ASSERT_TRUE(head->chunked());
  // The first event arrives while the rest are still to be sent (six pauses of 150 ms).
  std::string first;
  ASSERT_EQ(s.read_some(first, 5s), raw_socket::status::ok);
  EXPECT_NE(first.find("chat.completion.chunk"), std::string::npos) << first;
  EXPECT_EQ(first.find("[DONE]"), std::string::npos) << first;
  EXPECT_TRUE(up.charges().empty());  // recorded once the usage has gone out
  EXPECT_EQ(up.wait_charges(1).size(), 1u);
}

TEST(openai_upstream, a_stream_has_one_event_per_chunk_and_usage_before_done) {
  temp_dir dir("openai");
  openai_upstream up(dir.path, {.delay_ms = 5, .chunks = 3});
  auto s = raw_socket::connect(up.port());
  ASSERT_TRUE(s.write(request_text(chat_request("hi", true), {"X-Test-Total-Tokens: 321"})));
  const auto head = read_head(s, 5s);
  ASSERT_TRUE(head && head->chunked());
  std::vector<std::size_t> sizes;
  const auto body = read_chunked_body(s, 5s, &sizes);
  ASSERT_TRUE(body);
  const auto events = event_data(*body);
  // role, 3 deltas, finish, usage, [DONE]: one HTTP chunk each.
  ASSERT_EQ(events.size(), 7u) << *body;
  EXPECT_EQ(sizes.size(), 7u);
  EXPECT_EQ(events.back(), "[DONE]");
  for (std::size_t i = 0; i + 2 < events.size(); ++i) {
    const auto e = boost::json::parse(events[i]).as_object();
    EXPECT_EQ(e.at("object"), "chat.completion.chunk");
    EXPECT_TRUE(e.at("usage").is_null()) << events[i];
    if (i >= 1 && i <= 3) {
      EXPECT_EQ(e.at("choices").at(0).at("delta").at("content").as_string(),
                "word" + std::to_string(i - 1) + " ");
    }
  }
  const auto last = boost::json::parse(events[events.size() - 2]).as_object();
  EXPECT_TRUE(last.at("choices").as_array().empty());
  EXPECT_EQ(last.at("usage").at("total_tokens"), 321);
  EXPECT_EQ(scan(head->header("Content-Type"), *body), (limiter::usage_reading{321, std::nullopt}));
  const auto charged = up.wait_charges(1);
  ASSERT_EQ(charged.size(), 1u);
  EXPECT_TRUE(charged[0].stream);
  EXPECT_TRUE(charged[0].usage_sent);
  EXPECT_EQ(charged[0].total_tokens, 321u);
}

TEST(openai_upstream, a_stream_without_include_usage_has_no_usage_but_is_charged) {
  temp_dir dir("openai");
  openai_upstream up(dir.path, {.delay_ms = 0, .chunks = 2});
  auto s = raw_socket::connect(up.port());
  ASSERT_TRUE(s.write(request_text(chat_request("hi", true, false), {"X-Test-Total-Tokens: 9"})));
  const auto head = read_head(s, 5s);
  ASSERT_TRUE(head);
  const auto body = read_chunked_body(s, 5s);
  ASSERT_TRUE(body);
  EXPECT_EQ(body->find("usage"), std::string::npos) << *body;
  EXPECT_EQ(scan("text/event-stream", *body),
            (limiter::usage_reading{std::nullopt, limiter::usage_failure::path_absent}));
  const auto charged = up.wait_charges(1);
  ASSERT_EQ(charged.size(), 1u);
  EXPECT_FALSE(charged[0].usage_sent);
  EXPECT_EQ(charged[0].total_tokens, 9u);
}

TEST(openai_upstream, a_cut_stream_closes_without_the_usage) {
  temp_dir dir("openai");
  openai_upstream up(dir.path, {.delay_ms = 0, .chunks = 4});
  auto s = raw_socket::connect(up.port());
  ASSERT_TRUE(s.write(
      request_text(chat_request("hi", true), {"X-Test-Total-Tokens: 50", "X-Test-Cut-After: 3"})));
  const auto head = read_head(s, 5s);
  ASSERT_TRUE(head);
  const std::string rest = s.read_to_end(5s);
  EXPECT_EQ(s.last_status(), raw_socket::status::eof);
  EXPECT_EQ(rest.find("0\r\n\r\n"), std::string::npos);  // no last chunk
  EXPECT_EQ(rest.find("usage\":{"), std::string::npos);
  const auto charged = up.wait_charges(1);
  ASSERT_EQ(charged.size(), 1u);
  EXPECT_FALSE(charged[0].usage_sent);
  EXPECT_EQ(charged[0].total_tokens, 50u);
}

TEST(openai_upstream, a_scripted_failure_charges_nothing) {
  temp_dir dir("openai");
  openai_upstream up(dir.path);
  http_connection c(up.port());
  const auto r = c.request("POST", "/v1/chat/completions",
                           {{"Content-Type", "application/json"}, {"X-Test-Status", "500"}},
                           chat_request("hi", true));
  EXPECT_EQ(r.status, 500u);
  EXPECT_EQ(boost::json::parse(r.body).at("error").at("type"), "server_error");
  const auto bad = c.request("POST", "/v1/chat/completions", {}, "not json");
  EXPECT_EQ(bad.status, 400u);
  EXPECT_EQ(c.request("POST", "/v1/embeddings", {}, "{}").status, 404u);
  const auto charged = up.wait_charges(1);
  ASSERT_EQ(charged.size(), 1u);
  EXPECT_EQ(charged[0].status, 500u);
  EXPECT_EQ(charged[0].total_tokens, 0u);
}

TEST(openai_upstream, stops_by_its_pid) {
  temp_dir dir("openai");
  openai_upstream up(dir.path);
  const auto port = up.port();
  EXPECT_GT(up.pid(), 0);
  EXPECT_TRUE(up.stop().has_value());
  EXPECT_THROW(http_connection(port, 1s), std::runtime_error);
}

}  // namespace
}  // namespace sluice::test
