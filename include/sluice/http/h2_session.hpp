// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// HTTP/2 from clients (RFC 9113): one connection served with nghttp2's server session on the
/// worker's io_context. Each stream is decided by the same request_handler calls as an
/// HTTP/1.1 request (decide_now / decide / respond / record); a forwarded stream goes to its
/// upstream through relay(), as an HTTP/1.1 request does, with the stream as its client side.

#include "sluice/http/relay.hpp"
#include "sluice/http/timed_socket.hpp"
#include "sluice/http/types.hpp"
#include "sluice/http/upstream_pool.hpp"

#include <boost/asio/awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <string_view>

namespace sluice::http {

struct session_limits;  // sluice/http/server.hpp

/// The client connection preface of HTTP/2 (RFC 9113 §3.4), 24 bytes.
inline constexpr std::string_view h2_preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Streams one HTTP/2 connection may have open at once (SETTINGS_MAX_CONCURRENT_STREAMS).
inline constexpr std::uint32_t h2_max_concurrent_streams = 100;
/// Streams of one connection that may end at once within one second: reset by the client
/// (RST_STREAM), or by the gateway for the client's fault (a malformed request, a stream
/// refused past the cap before the client acknowledged it). One more is the rapid-reset attack
/// (CVE-2023-44487) or its like: GOAWAY ENHANCE_YOUR_CALM, and the connection closes.
inline constexpr std::uint32_t h2_max_resets_per_second = 100;
/// CONTINUATION frames one header block may take after its HEADERS (nghttp2's own default);
/// one more is the CONTINUATION flood (2024, CVE-2024-28182 and its kin): GOAWAY
/// ENHANCE_YOUR_CALM.
inline constexpr std::uint32_t h2_max_continuations = 8;
/// PING and SETTINGS frames (ACKs not counted) a client may send on one connection within
/// one second; one more is a control-frame flood: GOAWAY ENHANCE_YOUR_CALM.
inline constexpr std::uint32_t h2_max_control_frames_per_second = 1000;
/// A request's decoded header list (RFC 9113 §6.5.2's size: name + value + 32 per field) over
/// the limits' header_limit is answered 431 (RFC 9113 §10.5.1); over this many times
/// header_limit (an HPACK bomb), its decoding stops: GOAWAY ENHANCE_YOUR_CALM.
inline constexpr std::uint32_t h2_header_list_calm_factor = 4;

/// Counters of the HTTP/2 connections of one listener (one writer, the worker).
struct h2_stats {
  std::uint64_t connections = 0;   ///< HTTP/2 connections served
  std::uint64_t streams = 0;       ///< requests (streams) decided
  std::uint64_t calm_goaways = 0;  ///< connections closed with ENHANCE_YOUR_CALM
};

/// What an HTTP/2 connection needs from its listener. The references must outlive
/// serve_h2()'s return; `keep` is held by streams still deciding after it returns (it keeps
/// the handler and the pool alive).
struct h2_peer {
  timed_socket& stream;               ///< handshaken (TLS with ALPN h2) or plain (h2c)
  boost::beast::flat_buffer& buffer;  ///< bytes already read (the preface, maybe more)
  std::shared_ptr<request_handler> handler;
  request_context ctx;
  const session_limits& limits;
  upstream_pool& pool;
  h2_stats& stats;
  std::shared_ptr<void> keep;  ///< the listener's state (holds `buffers` and `relays` too)
  buffer_pool& buffers;        ///< the worker's body blocks, for relay()
  relay_stats& relays;         ///< the worker's relay counters
  /// Set by serve_h2 while it runs: starts a graceful close (GOAWAY with the last stream
  /// taken, in-flight streams finish). The listener calls it from drain().
  std::function<void()>& on_drain;
};

/// Whether `bytes` (the first bytes of a connection) begin with, or are a proper start of,
/// the HTTP/2 preface: `complete` is set when all 24 bytes are there.
bool starts_h2_preface(std::string_view bytes, bool& complete);

/// Serves one HTTP/2 connection until the client closes it, an error, idle_timeout with no
/// stream open (GOAWAY NO_ERROR), a drain (GOAWAY, streams in flight finish) or the listener
/// stops. Settings sent: MAX_CONCURRENT_STREAMS h2_max_concurrent_streams,
/// MAX_HEADER_LIST_SIZE the limits' header_limit (a larger header list is answered 431). The
/// attacks above the h2_max_* bounds, and nghttp2's own outbound-queue flood check, end the
/// connection with GOAWAY ENHANCE_YOUR_CALM; other connection errors with nghttp2's RFC 9113
/// code (a malformed request is a stream error: RST_STREAM PROTOCOL_ERROR).
/// Does not close the socket; the caller does. `peer` must outlive the call (a named object:
/// GCC 12 destroys a by-value aggregate coroutine argument twice).
boost::asio::awaitable<void> serve_h2(h2_peer& peer);

}  // namespace sluice::http
