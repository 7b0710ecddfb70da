// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// Reads and writes of one hop (client or upstream connection) that suspend the coroutine
/// only when the socket has to wait.
///
/// Beast's async_read_header / async_read_some and Asio's async_write are composed
/// operations: each layer copies the completion handler and its executor, and an operation
/// that completes at once (the next head already in the buffer, a body that arrived with its
/// head, a write the kernel takes whole — the usual case on a keep-alive connection) is still
/// completed through a post to the scheduler. Here the parser is fed in place from the
/// connection's buffer and a write goes to the socket at once; only what is left (more bytes
/// to read, a full socket buffer) becomes an asynchronous operation. The parsing rules are
/// Beast's own (Boost 1.81, http/impl/read.hpp, read_some_op): parse what the buffer holds;
/// read when the parser needs more; at end of stream, end a message that has begun with
/// put_eof(), else report end_of_stream.
///
/// Use: `if (!parse_buffered(b, p, ec)) ec = co_await read_more(s, b, p);` for one step of
/// the body, `if (!parse_head_buffered(b, p, ec)) ec = co_await read_head(s, b, p);` for a
/// head, and for a write:
/// `auto w = send_now(s, bufs); if (w.pending) w = co_await send_rest(s, bufs, w, timeout);`

#include "sluice/http/timed_socket.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/buffer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/buffers_suffix.hpp>
#include <boost/beast/core/error.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/read_size.hpp>
#include <boost/beast/http/basic_parser.hpp>
#include <boost/beast/http/error.hpp>

#include <chrono>
#include <cstddef>
#include <stdexcept>

namespace sluice::http {

/// The outcome of a write on one hop.
struct send_result {
  boost::system::error_code ec;  ///< the write's error; a passed deadline is beast::error::timeout
  std::size_t bytes = 0;         ///< bytes written
  bool pending = false;          ///< send_now(): the kernel did not take all; send_rest() next
};

/// Writes what the kernel takes of `buffers` now (timed_socket::write_now). `pending` when
/// bytes are left and no error occurred: then send_rest() writes them.
template <class ConstBuffers>
send_result send_now(timed_socket& s, const ConstBuffers& buffers) {
  send_result r;
  r.bytes = s.write_now(buffers, r.ec);
  r.pending = !r.ec && r.bytes < boost::asio::buffer_size(buffers);
  return r;
}

/// Writes the rest of `buffers` after send_now() wrote `sent.bytes` of them, with
/// async_write under a deadline of `timeout`. The bytes of the result count the whole write.
template <class ConstBuffers>
boost::asio::awaitable<send_result> send_rest(timed_socket& s, const ConstBuffers& buffers,
                                              send_result sent, std::chrono::milliseconds timeout) {
  boost::beast::buffers_suffix<ConstBuffers> rest(buffers);
  rest.consume(sent.bytes);
  s.expires_after(timeout);
  auto [ec, n] =
      co_await boost::asio::async_write(s, rest, boost::asio::as_tuple(boost::asio::use_awaitable));
  co_return send_result{s.timeout_error(ec), sent.bytes + n, false};
}

/// Drops the empty lines (CRLF, or a bare LF) at the start of `buffer`.
inline void skip_empty_lines(boost::beast::flat_buffer& buffer) {
  const auto* p = static_cast<const char*>(buffer.data().data());
  const std::size_t n = buffer.size();
  std::size_t i = 0;
  while (i < n) {
    if (p[i] == '\n') {
      i += 1;
    } else if (p[i] == '\r' && i + 1 < n && p[i + 1] == '\n') {
      i += 2;
    } else {
      break;
    }
  }
  buffer.consume(i);
}

/// Parses what `buffer` holds into `parser` without reading. True when that settled the
/// step: the parser progressed (`ec` clear, or need_buffer when a buffer_body's space is
/// full) or failed (`ec`); false when it needs more bytes first (then read_more()).
/// Before a request's first byte, empty lines are skipped (RFC 9112 §2.2: a server ignores
/// them before the request line; a client may send a CRLF after a body), also a CR whose LF
/// has not arrived yet.
template <bool isRequest>
bool parse_buffered(boost::beast::flat_buffer& buffer,
                    boost::beast::http::basic_parser<isRequest>& parser,
                    boost::system::error_code& ec) {
  ec = {};
  if constexpr (isRequest) {
    if (!parser.got_some()) {
      skip_empty_lines(buffer);
      if (buffer.size() == 1 && *static_cast<const char*>(buffer.data().data()) == '\r')
        return false;
    }
  }
  if (buffer.size() == 0) return false;
  buffer.consume(parser.put(buffer.data(), ec));
  if (ec != boost::beast::http::error::need_more) return true;
  ec = {};
  return false;
}

/// Reads from `s` into `buffer` and parses until the parser progresses (Beast's
/// async_read_some). Errors: the read's (a passed deadline is beast::error::timeout),
/// beast::http::error::end_of_stream (the peer closed before any byte of this message), the
/// parser's (a close-delimited message ends at EOF without one), buffer_overflow.
template <class Stream, bool isRequest>
boost::asio::awaitable<boost::system::error_code> read_more(
    Stream& s, boost::beast::flat_buffer& buffer,
    boost::beast::http::basic_parser<isRequest>& parser) {
  namespace bhttp = boost::beast::http;
  boost::system::error_code ec;
  for (;;) {
    const std::size_t size = boost::beast::read_size(buffer, 65536);
    if (size == 0) co_return bhttp::error::buffer_overflow;
    boost::asio::mutable_buffer space;
    try {
      space = buffer.prepare(size);
    } catch (const std::length_error&) {
      co_return bhttp::error::buffer_overflow;
    }
    auto [rec, n] =
        co_await s.async_read_some(space, boost::asio::as_tuple(boost::asio::use_awaitable));
    buffer.commit(n);
    if (rec == boost::asio::error::eof) {
      if (!parser.got_some()) co_return bhttp::error::end_of_stream;
      parser.put_eof(ec);  // the caller sees EOF on its next read
      co_return ec;
    }
    if (rec) co_return s.timeout_error(rec);
    if (parse_buffered(buffer, parser, ec)) co_return ec;
  }
}

/// Parses the head `buffer` already holds, without reading (Beast's async_read_header
/// before its first read). True when that settled it: the head is complete (`ec` clear) or
/// malformed (`ec`); false when more bytes are needed (then read_head()).
template <bool isRequest>
bool parse_head_buffered(boost::beast::flat_buffer& buffer,
                         boost::beast::http::basic_parser<isRequest>& parser,
                         boost::system::error_code& ec) {
  ec = {};
  while (!parser.is_header_done()) {
    if (!parse_buffered(buffer, parser, ec)) return false;
    if (ec) return true;
  }
  return true;
}

/// Reads and parses until the head is complete (Beast's async_read_header): read_more()'s
/// errors.
template <class Stream, bool isRequest>
boost::asio::awaitable<boost::system::error_code> read_head(
    Stream& s, boost::beast::flat_buffer& buffer,
    boost::beast::http::basic_parser<isRequest>& parser) {
  boost::system::error_code ec;
  while (!parser.is_header_done()) {
    ec = co_await read_more(s, buffer, parser);
    if (ec) co_return ec;
  }
  co_return ec;
}

}  // namespace sluice::http
