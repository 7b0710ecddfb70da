// SPDX-License-Identifier: Apache-2.0
// A synchronous test client built from asynchronous operations on a private io_context: each
// call starts one operation and runs the context for at most the deadline, then cancels.
// Plain blocking sockets cannot do that (SO_RCVTIMEO does not bound Asio's blocking reads).

#include "support/http_client.hpp"

#include "support/eventually.hpp"

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/string.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/write.hpp>

#include <array>
#include <stdexcept>

namespace sluice::test {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = beast::http;
using tcp = asio::ip::tcp;
using error_code = boost::system::error_code;

}  // namespace

std::string client_response::header(std::string_view name) const {
  for (const auto& [n, v] : headers) {
    if (beast::iequals(n, name)) return v;
  }
  return {};
}

std::size_t client_response::count(std::string_view name) const {
  std::size_t n = 0;
  for (const auto& h : headers) {
    if (beast::iequals(h.first, name)) ++n;
  }
  return n;
}

struct http_connection::impl {
  asio::io_context ioc;
  tcp::socket socket{ioc};
  beast::flat_buffer buffer;
  std::chrono::milliseconds timeout;

  /// Runs the operation started by `start(handler)` to completion or the deadline. Returns
  /// the operation's error; throws on timeout.
  template <class Start>
  error_code run(Start&& start, const char* what) {
    bool done = false;
    error_code result;
    start([&](error_code ec, std::size_t) {
      done = true;
      result = ec;
    });
    ioc.restart();
    ioc.run_for(timeout);
    if (!done) {
      error_code ignored;
      socket.cancel(ignored);
      ioc.restart();
      ioc.run();
      throw std::runtime_error(std::string("http_client: timeout in ") + what);
    }
    return result;
  }
};

http_connection::http_connection(std::uint16_t port, const std::string& source,
                                 std::chrono::milliseconds timeout)
    : impl_(std::make_unique<impl>()) {
  impl_->timeout = scaled(timeout);  // (SLUICE_TEST_TIME_FACTOR)
  const auto src = asio::ip::make_address(source);
  impl_->socket.open(src.is_v4() ? tcp::v4() : tcp::v6());
  impl_->socket.bind(tcp::endpoint{src, 0});
  const tcp::endpoint ep{asio::ip::make_address(src.is_v4() ? "127.0.0.1" : "::1"), port};
  auto ec = impl_->run(
      [&](auto handler) {
        impl_->socket.async_connect(ep, [handler](error_code e) mutable { handler(e, 0); });
      },
      "connect");
  if (ec) throw std::runtime_error("http_client: connect from " + source + ": " + ec.message());
  error_code ignored;
  impl_->socket.set_option(tcp::no_delay(true), ignored);
}

http_connection::http_connection(std::uint16_t port, std::chrono::milliseconds timeout)
    : impl_(std::make_unique<impl>()) {
  impl_->timeout = scaled(timeout);  // (SLUICE_TEST_TIME_FACTOR)
  const tcp::endpoint ep{asio::ip::make_address("127.0.0.1"), port};
  auto ec = impl_->run(
      [&](auto handler) {
        impl_->socket.async_connect(ep, [handler](error_code e) mutable { handler(e, 0); });
      },
      "connect");
  if (ec) throw std::runtime_error("http_client: connect: " + ec.message());
  error_code ignored;
  impl_->socket.set_option(tcp::no_delay(true), ignored);
}

http_connection::~http_connection() = default;

void http_connection::send_raw(std::string_view bytes) {
  auto ec = impl_->run(
      [&](auto handler) { asio::async_write(impl_->socket, asio::buffer(bytes), handler); },
      "write");
  if (ec) throw std::runtime_error("http_client: write: " + ec.message());
}

void http_connection::send(const bhttp::request<bhttp::string_body>& req) {
  auto ec =
      impl_->run([&](auto handler) { bhttp::async_write(impl_->socket, req, handler); }, "write");
  if (ec) throw std::runtime_error("http_client: write: " + ec.message());
}

client_response http_connection::read_response(bool head_request) {
  bhttp::response_parser<bhttp::string_body> parser;
  parser.body_limit(64 * 1024 * 1024);
  parser.skip(head_request);
  auto ec = impl_->run(
      [&](auto handler) { bhttp::async_read(impl_->socket, impl_->buffer, parser, handler); },
      "read");
  if (ec) throw std::runtime_error("http_client: read: " + ec.message());
  auto res = parser.release();
  client_response out;
  out.status = res.result_int();
  out.version = res.version();
  for (const auto& f : res) out.headers.emplace_back(f.name_string(), f.value());
  out.body = std::move(res.body());
  return out;
}

client_response http_connection::request(std::string_view method, std::string_view target,
                                         const header_list& headers, std::string_view body) {
  std::string raw;
  raw.append(method).append(" ").append(target).append(" HTTP/1.1\r\n");
  bool has_host = false;
  bool has_length = false;
  for (const auto& [n, v] : headers) {
    has_host = has_host || beast::iequals(n, "host");
    has_length =
        has_length || beast::iequals(n, "content-length") || beast::iequals(n, "transfer-encoding");
    raw.append(n).append(": ").append(v).append("\r\n");
  }
  if (!has_host) raw.append("Host: 127.0.0.1\r\n");
  if (!has_length && !body.empty()) {
    raw.append("Content-Length: ").append(std::to_string(body.size())).append("\r\n");
  }
  raw.append("\r\n").append(body);
  send_raw(raw);
  return read_response(method == "HEAD");
}

bool http_connection::closed_by_peer(std::chrono::milliseconds wait) {
  if (!impl_->socket.is_open()) return true;
  const auto saved = impl_->timeout;
  const auto deadline = std::chrono::steady_clock::now() + scaled(wait);
  std::array<char, 4096> scratch{};
  bool closed = false;
  impl_->buffer.consume(impl_->buffer.size());
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    impl_->timeout = left;
    try {
      auto ec = impl_->run(
          [&](auto handler) { impl_->socket.async_read_some(asio::buffer(scratch), handler); },
          "read");
      if (ec) {
        closed = true;
        break;
      }
    } catch (const std::runtime_error&) {
      break;  // still open when the wait ended
    }
  }
  impl_->timeout = saved;
  return closed;
}

void http_connection::close() {
  error_code ignored;
  impl_->socket.shutdown(tcp::socket::shutdown_both, ignored);
  impl_->socket.close(ignored);
}

client_response get(std::uint16_t port, std::string_view target, const header_list& headers) {
  http_connection c(port);
  return c.request("GET", target, headers);
}

}  // namespace sluice::test
