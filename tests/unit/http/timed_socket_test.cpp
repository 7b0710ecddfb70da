// SPDX-License-Identifier: Apache-2.0
#include "sluice/http/timed_socket.hpp"

// A read past its deadline is cancelled and reported as a timeout; moving the deadline on
// keeps the read alive; a move keeps pending operations valid.

#include <gtest/gtest.h>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/error.hpp>
#include "support/eventually.hpp"

#include <array>
#include <chrono>

namespace sluice::http {
namespace {

using test::scaled;

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using namespace std::chrono_literals;
constexpr auto use_tuple = asio::as_tuple(asio::use_awaitable);

/// A connected pair of loopback sockets on `ioc`.
std::pair<tcp::socket, tcp::socket> connected_pair(asio::io_context& ioc) {
  tcp::acceptor acc(ioc, {asio::ip::make_address("127.0.0.1"), 0});
  tcp::socket a(ioc), b(ioc);
  a.connect(acc.local_endpoint());
  acc.accept(b);
  return {std::move(a), std::move(b)};
}

TEST(timed_socket, a_read_past_its_deadline_times_out) {
  asio::io_context ioc;
  auto [a, b] = connected_pair(ioc);
  timed_socket s(std::move(a));
  boost::system::error_code got;
  auto began = std::chrono::steady_clock::now();
  std::chrono::steady_clock::duration took{};
  asio::co_spawn(
      ioc,
      [&]() -> asio::awaitable<void> {
        std::array<char, 8> buf{};
        s.expires_after(100ms);
        auto [ec, n] = co_await s.async_read_some(asio::buffer(buf), use_tuple);
        (void)n;
        got = s.timeout_error(ec);
        took = std::chrono::steady_clock::now() - began;
      },
      asio::detached);
  ioc.run_for(3s);
  EXPECT_EQ(got, boost::beast::error::timeout);
  EXPECT_GE(took, 90ms);
  EXPECT_LT(took, scaled(1s));
}

TEST(timed_socket, a_deadline_moved_on_keeps_the_read_alive) {
  asio::io_context ioc;
  auto [a, b] = connected_pair(ioc);
  timed_socket s(std::move(a));
  boost::system::error_code got = asio::error::would_block;
  std::size_t bytes = 0;
  asio::co_spawn(
      ioc,
      [&]() -> asio::awaitable<void> {
        std::array<char, 8> buf{};
        s.expires_after(100ms);
        s.expires_after(600ms);  // later: the armed timer fires at 100 ms and waits on
        auto [ec, n] = co_await s.async_read_some(asio::buffer(buf), use_tuple);
        got = s.timeout_error(ec);
        bytes = n;
      },
      asio::detached);
  asio::steady_timer later(ioc, 300ms);
  later.async_wait([&](auto) { b.send(asio::buffer("hi", 2)); });
  ioc.run_for(3s);
  EXPECT_FALSE(got) << got.message();
  EXPECT_EQ(bytes, 2u);
}

TEST(timed_socket, an_earlier_deadline_rearms_the_timer) {
  asio::io_context ioc;
  auto [a, b] = connected_pair(ioc);
  timed_socket s(std::move(a));
  boost::system::error_code got;
  auto began = std::chrono::steady_clock::now();
  std::chrono::steady_clock::duration took{};
  asio::co_spawn(
      ioc,
      [&]() -> asio::awaitable<void> {
        std::array<char, 8> buf{};
        s.expires_after(10s);
        s.expires_after(100ms);
        auto [ec, n] = co_await s.async_read_some(asio::buffer(buf), use_tuple);
        (void)n;
        got = s.timeout_error(ec);
        took = std::chrono::steady_clock::now() - began;
      },
      asio::detached);
  ioc.run_for(3s);
  EXPECT_EQ(got, boost::beast::error::timeout);
  EXPECT_LT(took, scaled(1s));
}

TEST(timed_socket, expires_never_lets_a_read_wait) {
  asio::io_context ioc;
  auto [a, b] = connected_pair(ioc);
  timed_socket s(std::move(a));
  bool done = false;
  asio::co_spawn(
      ioc,
      [&]() -> asio::awaitable<void> {
        std::array<char, 8> buf{};
        s.expires_after(50ms);
        s.expires_never();
        auto [ec, n] = co_await s.async_read_some(asio::buffer(buf), use_tuple);
        (void)ec;
        (void)n;
        done = true;
      },
      asio::detached);
  ioc.run_for(300ms);
  EXPECT_FALSE(done) << "the read ended without a deadline";
  s.close();
  ioc.run_for(300ms);
  EXPECT_TRUE(done);
}

}  // namespace
}  // namespace sluice::http
