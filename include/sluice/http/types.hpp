#pragma once
/// @file
/// HTTP message types used across the gateway (Boost.Beast, HTTP/1.1).

#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/string_body.hpp>

namespace sluice::http {

namespace beast_http = boost::beast::http;

/// A fully read client request (body buffered up to the session's body limit).
using request = beast_http::request<beast_http::string_body>;
/// A response to send to a client, or one read from an upstream.
using response = beast_http::response<beast_http::string_body>;

/// What a handler knows about the connection a request came on.
struct request_context {
  boost::asio::ip::tcp::endpoint peer;   ///< the TCP peer (before any X-Forwarded-For)
  boost::asio::ip::tcp::endpoint local;  ///< the local address the client connected to
  unsigned worker = 0;                   ///< index of the worker serving the connection
};

/// The application's request handler, called by sessions once per request, in arrival
/// order on a connection. Runs on the worker's executor. Must not throw.
class request_handler {
 public:
  virtual ~request_handler() = default;
  /// Returns the response to send. The session sets keep-alive and framing on it; a
  /// response carrying a `Connection: close` line closes the client connection once written.
  virtual boost::asio::awaitable<response> handle(request req, request_context ctx) = 0;
};

}  // namespace sluice::http
