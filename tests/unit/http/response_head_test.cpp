// SPDX-License-Identifier: Apache-2.0
// The relay's upstream response parser: Beast's tokenizing into a flat field store whose
// views outlive the bytes they were parsed from, and a body window like buffer_body's.

#include "sluice/http/response_head.hpp"

#include <gtest/gtest.h>
#include <boost/beast/http/error.hpp>

#include <string>
#include <vector>

namespace sluice::http {
namespace {

namespace bhttp = boost::beast::http;

/// Feeds `pieces` one after the other from a scratch buffer that is overwritten after each
/// put (as a flat_buffer is, when the next read moves its bytes); returns the bytes consumed
/// in all. The parser must not keep views into the scratch.
std::size_t feed(response_head_parser& p, const std::vector<std::string>& pieces,
                 boost::system::error_code& ec) {
  std::string pending;
  std::size_t total = 0;
  for (const auto& piece : pieces) {
    pending += piece;
    std::string scratch = pending;
    const auto used = p.put(boost::asio::buffer(scratch), ec);
    scratch.assign(scratch.size(), 'X');  // the source is gone
    pending.erase(0, used);
    total += used;
    if (ec == bhttp::error::need_more) ec = {};
    if (ec) break;
  }
  return total;
}

TEST(response_head, lines_survive_their_source_and_keep_arrival_order) {
  response_head_parser p;
  boost::system::error_code ec;
  feed(
      p,
      {"HTTP/1.1 201 Created\r\nX-One: a\r\n", "Set-Cookie: s=1\r\nX-Folded: first\r\n  second\r\n",
       "Set-Cookie: t=2\r\nContent-Length: 4\r\n\r\n"},
      ec);
  ASSERT_FALSE(ec) << ec.message();
  ASSERT_TRUE(p.is_header_done());
  const auto& h = p.get();
  EXPECT_EQ(h.result_int(), 201u);
  EXPECT_EQ(h.reason(), "Created");
  EXPECT_EQ(h.version(), 11u);
  ASSERT_EQ(h.size(), 5u);
  std::vector<std::string> seen;
  for (const auto& line : h)
    seen.push_back(std::string(line.name_string()) + "=" + std::string(line.value()));
  EXPECT_EQ(seen, (std::vector<std::string>{"X-One=a", "Set-Cookie=s=1", "X-Folded=first second",
                                            "Set-Cookie=t=2", "Content-Length=4"}));
  EXPECT_EQ(h[bhttp::field::set_cookie], "s=1");  // the first line of a field
  EXPECT_EQ(h[bhttp::field::content_length], "4");
  EXPECT_EQ(h[bhttp::field::keep_alive], "");
  EXPECT_EQ(h.begin()->name(), bhttp::field::unknown);
  EXPECT_EQ(p.content_length().value_or(0), 4u);
}

TEST(response_head, an_empty_reason_reads_as_the_registered_one) {
  response_head_parser p;
  boost::system::error_code ec;
  feed(p, {"HTTP/1.0 404 \r\n\r\n"}, ec);
  ASSERT_FALSE(ec) << ec.message();
  EXPECT_EQ(p.get().reason(), "Not Found");
  EXPECT_EQ(p.get().version(), 10u);
}

TEST(response_head, the_body_fills_the_window_and_asks_for_another) {
  response_head_parser p;
  boost::system::error_code ec;
  std::string wire = "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n0123456789";
  auto used = p.put(boost::asio::buffer(wire), ec);
  ASSERT_FALSE(ec);
  ASSERT_TRUE(p.is_header_done());
  wire.erase(0, used);

  // No window yet: nothing is taken.
  used = p.put(boost::asio::buffer(wire), ec);
  EXPECT_EQ(ec, bhttp::error::need_buffer);
  EXPECT_EQ(used, 0u);

  char a[4];
  p.window(a, sizeof a);
  ec = {};
  used = p.put(boost::asio::buffer(wire), ec);
  EXPECT_EQ(ec, bhttp::error::need_buffer);
  EXPECT_EQ(used, 4u);
  EXPECT_EQ(p.window_left(), 0u);
  EXPECT_EQ(std::string(a, 4), "0123");
  wire.erase(0, used);

  char b[16];
  p.window(b, sizeof b);
  ec = {};
  used = p.put(boost::asio::buffer(wire), ec);
  EXPECT_FALSE(ec) << ec.message();
  EXPECT_EQ(used, 6u);
  EXPECT_EQ(sizeof b - p.window_left(), 6u);
  EXPECT_EQ(std::string(b, 6), "456789");
  EXPECT_TRUE(p.is_done());
}

TEST(response_head, a_head_over_the_limit_is_refused) {
  response_head_parser p;
  p.header_limit(64);
  boost::system::error_code ec;
  feed(p, {"HTTP/1.1 200 OK\r\nX-Long: " + std::string(100, 'v') + "\r\n\r\n"}, ec);
  EXPECT_EQ(ec, bhttp::error::header_limit);
}

TEST(response_head, a_garbage_status_line_is_refused) {
  response_head_parser p;
  boost::system::error_code ec;
  feed(p, {"SSH-2.0-OpenSSH_9.2\r\n\r\n"}, ec);
  EXPECT_TRUE(ec);
  EXPECT_NE(ec, bhttp::error::need_more);
}

}  // namespace
}  // namespace sluice::http
