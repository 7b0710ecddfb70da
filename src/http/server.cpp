// SPDX-License-Identifier: Apache-2.0
// The listener and client sessions of one worker.
//
// One coroutine per connection owns the connection's state (stream, read buffer); requests on
// a connection are read, handled and answered strictly one after the other, so pipelined
// requests are decided and answered in arrival order (RFC 9112 §9.3.2) — the read buffer keeps
// the bytes of the next request while the current one is handled.
//
// Reading a request is split in two: the head first, checked here for what Beast lets through
// (request smuggling defences, Host), then decided by the handler on the head alone; only an
// admitted request's body is read, by the relay, streamed to the upstream. `100 Continue` is
// sent by the relay after admission (RFC 9110 §10.1.1), so a refused client never uploads.
//
// What Beast 1.81's parser does on its own (basic_parser.ipp), and what this file adds:
// - `Content-Length` after `Transfer-Encoding: chunked` -> bad_content_length; any
//   `Transfer-Encoding` after `Content-Length` -> bad_transfer_encoding. But
//   `Transfer-Encoding: gzip` (chunked not final) followed by `Content-Length` is accepted, and a
//   request whose final coding is not chunked is read as having no body. Both are smuggling
//   vectors (RFC 9112 §6.3), so any request with both fields, or with a final coding other than
//   chunked, gets 400 here; a coding we would have to forward undecoded (`gzip, chunked`) gets
//   501 (RFC 9112 §6.1).
// - A bare LF or any other control byte in a field value -> bad_value; a CR not followed by LF
//   -> bad_line_ending; obs-fold is replaced by a space (allowed by RFC 9112 §5.2).
// - Host is not checked at all: a missing (HTTP/1.1), repeated or malformed Host is a 400 here
//   (RFC 9112 §3.2).
// - header_limit errors (431). Body limits are per route: the handler refuses a declared
//   Content-Length over the route's limit (413) before any body byte is read, and the relay
//   stops a chunked body that grows past it.
//
// Slow and greedy clients (DESIGN.md, "Parser limits... deadlines for slow clients"):
// - a connection's first head must arrive within header_timeout of the accept; a later one
//   may be awaited for idle_timeout (keep-alive), then must complete within header_timeout of
//   its first byte. The idle wait is one read_some into the session's buffer (the read Beast
//   would make first anyway), so splitting the two deadlines costs no system call. A partial
//   head that runs out of time gets 408 (RFC 9110 §15.5.9); a connection that sent nothing is
//   closed without an answer (an unsolicited 408 on an idle keep-alive connection would be
//   read as the answer to the client's next request).
// - the deadlines all go through the connection's one lazily re-armed timer (timed_socket):
//   a shorter deadline after a longer one re-arms it at most once per firing, not per request.
// - the head is capped in bytes (Beast's header_limit: 431), in fields (counted once parsed,
//   which the byte cap keeps bounded: 431) and in target length (414, RFC 9110 §15.5.15; a
//   request line that alone overflows the byte cap is 414 too).
// - connections per worker are capped: one accepted over the cap is reset at once (so the
//   backlog never fills and the clients already in keep being served), counted, and logged
//   at most once a second.
//
// After a 400, 408, 413, 414, 431 or 501 the connection is closed: the request's framing can no
// longer be trusted. Closing is "lingering" (as nginx's lingering_close): shut down our sending
// side, then read and discard for a short while, so that the client receives the error response
// instead of a reset caused by its own unread bytes.
//
// TLS (`tls:` in the rules): the accepted socket gets the listener's context in force at the
// accept (a reload changes it for later connections only), and the session begins with the
// handshake, under the first head's deadline: header_timeout from the accept covers the
// handshake and the first head together, so a client that stalls in either is cut alike.
// A failed handshake is counted by reason (tls_failure) and closed; OpenSSL has already
// queued the alert that tells the client why. Everything after the handshake is the same code
// on the same timed_socket, whose reads and writes go through TLS. Closing sends close_notify
// (RFC 8446 §6.1) and waits up to the linger time for the client's: the lingering close of a
// TLS connection, as OpenSSL discards application data that arrives after our close_notify.

#include "sluice/http/server.hpp"

#include "http/request_checks.hpp"

#include "sluice/http/h2_session.hpp"
#include "sluice/http/headers.hpp"
#include "sluice/http/hop_io.hpp"
#include "sluice/http/problem.hpp"
#include "sluice/http/router.hpp"
#include "sluice/http/tls_context.hpp"
#include "sluice/log_throttle.hpp"

#include <openssl/ssl.h>
#include <spdlog/spdlog.h>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/error.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/read_size.hpp>
#include <boost/beast/core/string.hpp>
#include <boost/beast/http/buffer_body.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/rfc7230.hpp>
#include <boost/beast/http/write.hpp>

#include <sys/socket.h>

#include <array>
#include <atomic>
#include <cstring>
#include <functional>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace sluice::http {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = beast::http;
using tcp = asio::ip::tcp;
using error_code = boost::system::error_code;

constexpr auto use_tuple = asio::as_tuple(asio::use_awaitable);

/// How long a closing connection keeps draining the client's unread bytes, and how many.
constexpr std::chrono::milliseconds linger_time{1000};
constexpr std::size_t linger_bytes = 64 * 1024;

using namespace head_checks;

}  // namespace

namespace {

/// One client connection, shared by its session coroutine and the listener's registry.
struct session {
  explicit session(tcp::socket s) : stream(std::move(s)) {}
  timed_socket stream;
  bool idle = true;  ///< waiting for a request head (drain() closes idle sessions)
  /// An HTTP/2 connection's graceful close (GOAWAY); empty for HTTP/1.1.
  std::function<void()> on_drain;
};

/// Adds 1 to a counter written by the worker alone (no locked instruction).
void bump(std::atomic<std::uint64_t>& counter) {
  counter.store(counter.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
}

/// The state of a listener and its sessions, shared by the accept loop and every session
/// coroutine (they hold it by shared_ptr, so it outlives the server object if it must).
struct listener_state {
  listener_state(asio::io_context& io, std::shared_ptr<request_handler> h, session_limits l,
                 unsigned w)
      : ioc(io),
        acceptor(io),
        handler(std::move(h)),
        limits(l),
        worker(w),
        pool(io.get_executor()) {}

  asio::io_context& ioc;
  tcp::acceptor acceptor;
  std::shared_ptr<request_handler> handler;
  session_limits limits;
  unsigned worker;
  tcp::endpoint local;
  upstream_pool pool;
  buffer_pool buffers;
  relay_stats relays;
  connection_stats connections;
  tls_counters tls_stats;
  h2_stats h2;
  /// The TLS contexts new connections get (null: plain TCP); swapped by a reload.
  std::atomic<std::shared_ptr<const server_tls>> tls;
  bool started = false;
  bool stopping = false;  // touched on the io_context's thread only
  std::uint64_t next_session = 0;
  std::unordered_map<std::uint64_t, std::shared_ptr<session>> sessions;

  void count_open() {
    connections.open.store(static_cast<std::int64_t>(sessions.size()), std::memory_order_relaxed);
  }

  void close_all() {
    stopping = true;
    error_code ec;
    acceptor.close(ec);
    for (auto& [id, s] : sessions) s->stream.socket().close(ec);
  }

  void drain() {
    stopping = true;
    error_code ec;
    acceptor.close(ec);
    for (auto& [id, s] : sessions) {
      if (s->on_drain) {  // HTTP/2: GOAWAY, the streams in flight finish
        s->on_drain();
        continue;
      }
      // Idle: waiting for a request with none of it read. One already in the kernel's
      // buffer (or decrypted and waiting in OpenSSL's) is served (with Connection: close)
      // rather than reset by the close.
      if (!s->idle || s->stream.socket().available(ec) != 0) continue;
      if (s->stream.tls()) {
        // The session wakes up and closes with close_notify (run_session).
        if (SSL_pending(s->stream.native_tls()) == 0) s->stream.socket().cancel(ec);
      } else {
        s->stream.socket().close(ec);
      }
    }
  }
};

using impl_ptr = std::shared_ptr<listener_state>;

/// TLS: sends close_notify and waits (at most the linger time) for the client's, then closes.
asio::awaitable<void> close_tls(timed_socket& stream) {
  stream.expires_after(linger_time);
  auto [ec] = co_await stream.async_shutdown(use_tuple);
  (void)ec;  // the client's close_notify, its end of stream, or nothing in time: closed anyway
  stream.close();
}

/// Shuts down our side, drains what the client still sends for a moment, then closes.
asio::awaitable<void> lingering_close(timed_socket& stream) {
  if (stream.tls()) {
    co_await close_tls(stream);
    co_return;
  }
  error_code ec;
  stream.socket().shutdown(tcp::socket::shutdown_send, ec);
  if (ec) {
    stream.close();
    co_return;
  }
  std::array<char, 4096> scratch{};
  std::size_t drained = 0;
  stream.expires_after(linger_time);
  while (drained < linger_bytes) {
    auto [rec, n] = co_await stream.async_read_some(asio::buffer(scratch), use_tuple);
    if (rec) break;
    drained += n;
  }
  stream.close();
}

asio::awaitable<void> write_error(timed_socket& stream, std::chrono::milliseconds timeout,
                                  bhttp::status status) {
  response res = error_response(status);
  stream.expires_after(timeout);
  auto [ec, n] = co_await bhttp::async_write(stream, res, use_tuple);
  (void)n;
  if (!ec) co_await lingering_close(stream);
}

/// Reads the rest of a request body, at most `limit` bytes, into `body` (verdict::kind::
/// buffer), or drops it when `body` is null (after a refusal). The error of the read that
/// failed, or none when the whole body was read (the connection is still in step).
asio::awaitable<error_code> read_body(timed_socket& stream, beast::flat_buffer& buffer,
                                      request_parser& parser, std::chrono::milliseconds timeout,
                                      std::uint64_t limit, std::string* body) {
  std::array<char, 4096> scratch{};
  parser.body_limit(limit);
  while (!parser.is_done()) {
    parser.get().body().data = scratch.data();
    parser.get().body().size = scratch.size();
    error_code ec;
    if (!parse_buffered(buffer, parser, ec)) {
      stream.expires_after(timeout);
      ec = co_await read_more(stream, buffer, parser);
    }
    if (ec && ec != bhttp::error::need_buffer) co_return ec;
    if (body) body->append(scratch.data(), scratch.size() - parser.get().body().size);
  }
  co_return error_code{};
}

/// Whether an answer with an unread request body can keep the connection: discards a short
/// declared body (never after an unanswered `Expect: 100-continue`).
asio::awaitable<bool> settle_unread_body(timed_socket& stream, beast::flat_buffer& buffer,
                                         request_parser& parser, bool expect_continue,
                                         std::chrono::milliseconds timeout) {
  if (parser.is_done()) co_return true;
  if (expect_continue || parser.chunked()) co_return false;
  const auto declared = parser.content_length();
  if (!declared || *declared > discard_limit) co_return false;
  const auto ec = co_await read_body(stream, buffer, parser, timeout, discard_limit, nullptr);
  co_return !ec;
}

/// Frames and writes a response the session answers with; false when the write failed.
asio::awaitable<bool> write_answer(timed_socket& stream, response& res, unsigned version,
                                   bool head_request, bool keep, std::chrono::milliseconds timeout,
                                   std::uint64_t& written) {
  res.version(version);
  frame_response(res, head_request);
  res.keep_alive(keep);
  stream.expires_after(timeout);
  auto [ec, n] = co_await bhttp::async_write(stream, res, use_tuple);
  written = n;
  co_return !ec;
}

/// Serves an HTTP/2 connection (after ALPN h2, or the h2c preface) until it ends.
asio::awaitable<void> serve_h2_session(impl_ptr self, std::shared_ptr<session> s,
                                       const request_context& ctx, beast::flat_buffer& buffer) {
  s->idle = false;
  request_context h2_ctx = ctx;
  h2_ctx.proto = protocol::h2;
  h2_peer peer{s->stream, buffer, self->handler, h2_ctx,       self->limits, self->pool,
               self->h2,  self,   self->buffers, self->relays, s->on_drain};
  co_await serve_h2(peer);
}

/// Serves one client connection until it closes, fails, or the server stops.
asio::awaitable<void> serve(impl_ptr self, std::shared_ptr<session> s, request_context ctx) {
  const session_limits limits = self->limits;
  timed_socket& stream = s->stream;
  beast::flat_buffer buffer;
  std::optional<request_parser> parser;
  std::string head_buffer;  // the relay's rendered heads
  head_buffer.reserve(1024);
  connection_stats& counts = self->connections;
  const bool records = self->handler->records();  // the access log
  if (stream.tls()) {
    // header_timeout from the accept covers the handshake and the first head. Not idle
    // meanwhile: a drain lets the handshake end, then closes the connection with close_notify.
    s->idle = false;
    stream.expires_after(limits.header_timeout);
    auto [ec] = co_await stream.async_handshake(asio::ssl::stream_base::server, use_tuple);
    if (ec) {
      const auto why = classify_tls_failure(stream.timeout_error(ec),
                                            SSL_get_verify_result(stream.native_tls()));
      self->tls_stats.fail(why);
      static sluice::log_throttle throttle;
      std::uint64_t suppressed = 0;
      if (throttle.admit(suppressed)) {
        spdlog::info("TLS handshake from {} failed: {} ({}) ({} similar lines suppressed)",
                     ctx.peer_text, label(why), ec.message(), suppressed);
      }
      stream.close();  // the alert saying why is already sent
      co_return;
    }
    self->tls_stats.succeed();
    const unsigned char* alpn = nullptr;
    unsigned alpn_size = 0;
    SSL_get0_alpn_selected(stream.native_tls(), &alpn, &alpn_size);
    if (alpn_size == 2 && std::memcmp(alpn, "h2", 2) == 0) {
      co_await serve_h2_session(self, s, ctx, buffer);
      co_return;
    }
  } else if (limits.http2) {
    // h2c with prior knowledge (RFC 9113 §3.3): the connection's first bytes are the
    // preface; anything else is HTTP/1.1 on the same port.
    stream.expires_after(limits.header_timeout);
    for (;;) {
      const auto d = buffer.data();
      bool complete = false;
      if (!starts_h2_preface({static_cast<const char*>(d.data()), d.size()}, complete)) break;
      if (complete) {
        co_await serve_h2_session(self, s, ctx, buffer);
        co_return;
      }
      auto [ec, n] = co_await stream.async_read_some(buffer.prepare(4096), use_tuple);
      buffer.commit(n);
      if (ec) co_return;
    }
  }
  for (bool first = true;; first = false) {
    if (self->stopping) co_return;  // run_session closes it
    parser.emplace();
    parser->header_limit(limits.header_limit);
    parser->body_limit(boost::none);  // per route: decided on the head

    s->idle = buffer.size() == 0;
    if (s->idle && !first) {
      // Keep-alive: wait up to idle_timeout for the next request's first bytes (the read
      // async_read_header would start with), then give its head header_timeout.
      stream.expires_after(limits.idle_timeout);
      auto [iec, in] = co_await stream.async_read_some(
          buffer.prepare(beast::read_size(buffer, 64 * 1024)), use_tuple);
      buffer.commit(in);
      if (iec) {
        if (stream.timeout_error(iec) == beast::error::timeout) bump(counts.idle_closed);
        co_return;  // run_session closes it
      }
    }
    // A TLS connection's first head shares the handshake's deadline.
    if (!first || !stream.tls()) stream.expires_after(limits.header_timeout);
    // (Empty lines before the request line are skipped by the parse: hop_io.hpp.)
    error_code hec;
    if (!parse_head_buffered(buffer, *parser, hec))
      hec = co_await read_head(stream, buffer, *parser);
    s->idle = false;
    if (hec) {
      const auto ec = stream.timeout_error(hec);
      const bool partial = parser->got_some() || buffer.size() > 0;
      const auto status = status_for_head_error(ec, partial, *parser, buffer, limits);
      if (status == bhttp::status::request_timeout) bump(counts.header_timeouts);
      if (!status && ec == beast::error::timeout) bump(counts.idle_closed);
      if (status == bhttp::status::request_header_fields_too_large) bump(counts.too_large_heads);
      if (status == bhttp::status::uri_too_long) bump(counts.too_long_uris);
      if (status) co_await write_error(stream, limits.send_timeout, *status);
      co_return;
    }
    if (auto status = check_caps(parser->get(), limits)) {
      bump(*status == bhttp::status::uri_too_long ? counts.too_long_uris : counts.too_large_heads);
      co_await write_error(stream, limits.send_timeout, *status);
      co_return;
    }
    if (auto status = check_head(*parser)) {
      co_await write_error(stream, limits.send_timeout, *status);
      co_return;
    }

    auto& head = parser->get();
    // RFC 9112 §9.3 (1.0 needs keep-alive), from the flags the parser set on the way (the
    // message's own keep_alive() would walk the Connection tokens again).
    const bool client_keep_alive = parser->keep_alive();
    const bool head_request = head.method() == bhttp::verb::head;
    const unsigned version = head.version() == 10 ? 10 : 11;
    const bool expect_continue =
        version >= 11 && beast::iequals(head[bhttp::field::expect], "100-continue");

    exchange_result ex;
    std::chrono::steady_clock::time_point began{};
    if (records) {
      ex.unix_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                       std::chrono::system_clock::now().time_since_epoch())
                       .count();
      began = std::chrono::steady_clock::now();
    }
    // Tells the handler how the exchange ended (after the last byte, or the connection's end).
    auto record = [&](const verdict& decided) {
      if (!records) return;
      ex.total_ms =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - began)
              .count();
      self->handler->record(head, ctx, decided, ex);
    };

    verdict v;
    bool handler_failed = false;
    try {
      if (!self->handler->decide_now(head, ctx, v)) v = co_await self->handler->decide(head, ctx);
    } catch (const std::exception& e) {
      spdlog::error("request handler threw: {}", e.what());
      handler_failed = true;
    }
    if (handler_failed) {
      co_await write_error(stream, limits.send_timeout, bhttp::status::internal_server_error);
      co_return;
    }

    std::optional<response> answer;
    bool body_settled = false;
    switch (v.what) {
      case verdict::kind::forward: {
        if (v.forward.upstream->http2) {
          // An HTTP/2 upstream (a gRPC service) is reached from HTTP/2 clients only.
          v.forward.watch.end(exchange_end::not_forwarded);
          answer = problem(head.version(), bhttp::status::http_version_not_supported,
                           "HTTP Version Not Supported",
                           "this route's upstream speaks HTTP/2; send the request over HTTP/2");
          set_lines(answer->base(), v.forward.added_lines);
          break;
        }
        http1_client client(stream, buffer, *parser, limits.body_timeout, limits.send_timeout,
                            limits.body_min_rate, client_keep_alive, self->stopping,
                            expect_continue, head_buffer);
        auto r = co_await relay(client, v.forward, self->pool, self->buffers, self->relays);
        v.forward.watch.end(r.end);  // (a session destroyed before this: the watch's own end)
        ex.status = r.status;
        ex.upstream_status = r.upstream_status;
        ex.upstream_ms = r.upstream_ms;
        ex.bytes_in = r.bytes_in;
        ex.bytes_out = r.bytes_out;
        if (!r.answer) {
          record(v);
          if (r.keep_alive && !self->stopping) continue;
          if (stream.socket().is_open()) co_await lingering_close(stream);
          co_return;
        }
        answer = std::move(r.answer);
        body_settled = r.body_read;
        break;
      }
      case verdict::kind::buffer: {
        std::string body;
        if (const auto declared = parser->content_length();
            declared && *declared > limits.body_limit) {
          co_await write_error(stream, limits.send_timeout, bhttp::status::payload_too_large);
          co_return;
        }
        if (expect_continue && !parser->is_done()) {
          if (co_await send_continue(stream, limits.send_timeout)) co_return;
        }
        if (auto ec = co_await read_body(stream, buffer, *parser, limits.body_timeout,
                                         limits.body_limit, &body)) {
          if (ec == beast::error::timeout)
            self->relays.body_timeouts.fetch_add(1, std::memory_order_relaxed);
          if (auto status = status_for_read_error(ec)) {
            co_await write_error(stream, limits.send_timeout, *status);
          }
          co_return;
        }
        request whole{head.method(), head.target(), head.version()};
        whole.base() = head.base();
        whole.body() = std::move(body);
        bool failed = false;
        try {
          answer = co_await self->handler->respond(std::move(whole), ctx);
        } catch (const std::exception& e) {
          spdlog::error("request handler threw: {}", e.what());
          failed = true;
        }
        if (failed) {
          co_await write_error(stream, limits.send_timeout, bhttp::status::internal_server_error);
          co_return;
        }
        body_settled = true;
        break;
      }
      case verdict::kind::answer:
        answer = std::move(v.answer);
        body_settled = co_await settle_unread_body(stream, buffer, *parser, expect_continue,
                                                   limits.body_timeout);
        break;
    }

    // A handler asks to close the client connection with `Connection: close`.
    const bool keep = client_keep_alive && body_settled && !self->stopping &&
                      !has_token(answer->base(), bhttp::field::connection, "close");
    std::uint64_t written = 0;
    const bool sent = co_await write_answer(stream, *answer, version, head_request, keep,
                                            limits.send_timeout, written);
    ex.bytes_out += written;
    if (sent) ex.status = answer->result_int();
    record(v);
    if (!sent) co_return;
    if (!keep) {
      co_await lingering_close(stream);
      co_return;
    }
  }
}

/// Owns one connection, registered with the server by the accept loop (so stop() and drain()
/// can close it, and the connection cap counts it): serves it, unregisters it.
asio::awaitable<void> run_session(impl_ptr self, std::shared_ptr<session> s, std::uint64_t id) {
  struct unregister {
    impl_ptr& self;
    std::uint64_t id;
    ~unregister() {
      self->sessions.erase(id);
      self->count_open();
    }
  } guard{self, id};

  request_context ctx;
  error_code ec;
  ctx.peer = s->stream.socket().remote_endpoint(ec);
  ctx.local = s->stream.socket().local_endpoint(ec);
  auto peer = ctx.peer.address();
  if (peer.is_v6() && peer.to_v6().is_v4_mapped()) {
    peer = asio::ip::make_address_v4(asio::ip::v4_mapped, peer.to_v6());
  }
  ctx.peer_text = peer.to_string();
  ctx.worker = self->worker;
  co_await serve(self, s, ctx);
  // Ended without closing (the client left, an idle timeout, a drain): TLS says goodbye.
  if (s->stream.socket().is_open()) {
    if (s->stream.tls()) {
      co_await close_tls(s->stream);
    } else {
      s->stream.close();
    }
  }
}

void log_exception(std::exception_ptr e) {
  if (!e) return;
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& x) {
    spdlog::error("http session ended by an exception: {}", x.what());
  } catch (...) {
    spdlog::error("http session ended by an unknown exception");
  }
}

asio::awaitable<void> accept_loop(impl_ptr self) {
  for (;;) {
    auto [ec, socket] = co_await self->acceptor.async_accept(use_tuple);
    if (self->stopping || !self->acceptor.is_open()) co_return;
    if (ec) {
      // EMFILE, ENOBUFS...: back off a little instead of spinning.
      // Throttled: running out of descriptors fails every accept, and one line per failure
      // would flood the log exactly when the host is under pressure.
      static sluice::log_throttle throttle;
      std::uint64_t suppressed = 0;
      if (throttle.admit(suppressed)) {
        spdlog::warn("accept failed: {} ({} similar lines suppressed)", ec.message(), suppressed);
      }
      asio::steady_timer pause(self->ioc);
      pause.expires_after(std::chrono::milliseconds(50));
      co_await pause.async_wait(use_tuple);
      continue;
    }
    error_code ignored;
    if (self->limits.max_connections > 0 && self->sessions.size() >= self->limits.max_connections) {
      // Over the cap: reset at once (SO_LINGER 0: no FIN handshake, no TIME_WAIT), so the
      // backlog keeps draining and the connections already open keep their worker.
      socket.set_option(asio::socket_base::linger(true, 0), ignored);
      socket.close(ignored);
      bump(self->connections.rejected);
      static sluice::log_throttle throttle;
      std::uint64_t suppressed = 0;
      if (throttle.admit(suppressed)) {
        spdlog::warn(
            "worker {}: {} client connections open, the cap (client.max_connections): new "
            "connections are reset ({} similar lines suppressed)",
            self->worker, self->sessions.size(), suppressed);
      }
      continue;
    }
    socket.set_option(tcp::no_delay(true), ignored);
    const auto id = ++self->next_session;
    auto s = std::make_shared<session>(std::move(socket));
    if (auto tls = self->tls.load(std::memory_order_acquire)) {
      try {
        auto& context = tls->context();
        s->stream.start_tls(context, std::move(tls));
      } catch (const std::exception& e) {  // SSL_new failed: out of memory
        spdlog::error("TLS session setup failed: {}", e.what());
        continue;
      }
    }
    self->sessions.emplace(id, s);
    self->count_open();
    asio::co_spawn(self->ioc, run_session(self, std::move(s), id), log_exception);
  }
}

}  // namespace

asio::awaitable<response> request_handler::respond(request req, const request_context&) {
  co_return problem(req.version(), bhttp::status::internal_server_error, "Internal Server Error",
                    "this handler does not read request bodies");
}

asio::awaitable<verdict> buffered_handler::decide(request_head&, const request_context&) {
  verdict v;
  v.what = verdict::kind::buffer;
  co_return v;
}

struct server::impl : listener_state {
  using listener_state::listener_state;
};

server::server(asio::io_context& ioc, tcp::endpoint endpoint,
               std::shared_ptr<request_handler> handler, session_limits limits, unsigned worker,
               bool share_port)
    : impl_(std::make_shared<impl>(ioc, std::move(handler), limits, worker)) {
  auto& acc = impl_->acceptor;
  acc.open(endpoint.protocol());
  acc.set_option(tcp::acceptor::reuse_address(true));
  // Several workers (one io_context each) bind the same port; the kernel spreads connections.
  const int one = 1;
  if (share_port &&
      ::setsockopt(acc.native_handle(), SOL_SOCKET, SO_REUSEPORT, &one, sizeof one) != 0) {
    throw boost::system::system_error(error_code(errno, boost::system::system_category()),
                                      "setsockopt(SO_REUSEPORT)");
  }
  acc.bind(endpoint);
  acc.listen(asio::socket_base::max_listen_connections);
  impl_->local = acc.local_endpoint();
}

server::~server() {
  stop();
}

tcp::endpoint server::local_endpoint() const {
  return impl_->local;
}

void server::start() {
  if (impl_->started) return;
  impl_->started = true;
  asio::co_spawn(impl_->ioc, accept_loop(impl_), log_exception);
}

void server::stop() {
  // Runs at once on the worker's thread, else is posted to it (sessions are touched there only).
  asio::dispatch(impl_->ioc, [self = impl_] { self->close_all(); });
}

void server::drain() {
  asio::dispatch(impl_->ioc, [self = impl_] { self->drain(); });
}

std::size_t server::open_sessions() const {
  return impl_->sessions.size();
}

std::size_t server::busy_sessions() const {
  std::size_t n = 0;
  for (const auto& [id, s] : impl_->sessions) n += s->idle ? 0 : 1;
  return n;
}

upstream_pool& server::pool() {
  return impl_->pool;
}

const relay_stats& server::relays() const {
  return impl_->relays;
}

const connection_stats& server::connections() const {
  return impl_->connections;
}

std::size_t server::max_connections() const {
  return impl_->limits.max_connections;
}

void server::set_tls(std::shared_ptr<const server_tls> tls) {
  impl_->tls.store(std::move(tls), std::memory_order_release);
}

bool server::tls() const {
  return impl_->tls.load(std::memory_order_acquire) != nullptr;
}

const tls_counters& server::tls_stats() const {
  return impl_->tls_stats;
}

}  // namespace sluice::http
