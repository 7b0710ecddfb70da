// SPDX-License-Identifier: Apache-2.0
// Relaying one admitted request: connect (or reuse), `100 Continue`, the request body up,
// the response head and body down, or a tunnel after `101`.
//
// Bodies go through one 64 KiB block from the worker's buffer_pool, one piece at a time: a
// piece read from one side is written to the other before the next read, so a slow reader
// slows the writer down and memory stays bounded (Beast's buffer_body, as in its relay
// example). Reads are read_some: whatever has arrived is relayed at once (SSE, long polls).
//
// What can go wrong, and who hears about it:
// - before any response byte reached the client: the session answers (400/408/413 for the
//   client's body, 502/504 naming the upstream's fault);
// - after: the client connection is closed, which is the only honest signal left (RFC 9112
//   §9.6 / nginx and Envoy behave alike); the upstream connection is never pooled then.

#include "sluice/http/relay.hpp"

#include "sluice/errc.hpp"
#include "sluice/http/headers.hpp"
#include "sluice/http/hop_io.hpp"
#include "sluice/http/problem.hpp"
#include "sluice/log_throttle.hpp"

#include <spdlog/spdlog.h>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/string.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/write.hpp>

#include <array>
#include <charconv>

namespace sluice::http {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = beast::http;
using tcp = asio::ip::tcp;
using error_code = boost::system::error_code;
using steady = std::chrono::steady_clock;

constexpr auto use_tuple = asio::as_tuple(asio::use_awaitable);

/// The tunnel's buffer per direction.
constexpr std::size_t tunnel_buffer = 16 * 1024;

/// Read-buffer capacity while a body streams: Beast reads at most the buffer's free capacity
/// (at least 512 bytes) at a time, and a drained flat_buffer never grows on its own.
constexpr std::size_t read_reserve = 64 * 1024;

boost::optional<std::uint64_t> limit_of(std::uint64_t bytes) {
  if (bytes == config::unlimited_size) return boost::none;
  return bytes;
}

/// Logs an upstream fault with its cause, at most once a second per kind.
void log_failure(upstream_failure f, const config::upstream& up, const error_code& ec,
                 const std::string& detail = {}) {
  static std::array<sluice::log_throttle, 7> throttles;
  std::uint64_t suppressed = 0;
  if (!throttles[static_cast<std::size_t>(f)].admit(suppressed)) return;
  spdlog::warn("upstream {} ({}:{}): {} ({}) ({} similar lines suppressed)", up.name, up.host,
               up.port, describe(f).detail,
               !detail.empty() ? detail
               : ec            ? ec.message()
                               : std::string("-"),
               suppressed);
}

/// The kind of fault a failed read of the response head is.
upstream_failure head_failure(const error_code& ec) {
  if (ec == beast::error::timeout) return upstream_failure::timeout;
  if (ec == bhttp::error::body_limit) return upstream_failure::too_large;
  if (ec == bhttp::error::end_of_stream || ec == bhttp::error::partial_message ||
      ec == asio::error::eof || ec == asio::error::connection_reset ||
      ec == asio::error::broken_pipe || ec == asio::error::operation_aborted ||
      ec == asio::error::connection_aborted) {
    return upstream_failure::closed;
  }
  if (ec.category() == bhttp::make_error_code(bhttp::error::bad_method).category()) {
    return upstream_failure::malformed;
  }
  return upstream_failure::closed;
}

/// The answer to a client request body that could not be read whole.
std::optional<response> body_error_answer(const error_code& ec, unsigned version) {
  if (ec == bhttp::error::body_limit) {
    return problem(version, bhttp::status::payload_too_large, "Content Too Large",
                   "the request body is larger than the route's max_request_body");
  }
  if (ec == beast::error::timeout) {
    return problem(version, bhttp::status::request_timeout, "Request Timeout",
                   "the request body did not arrive in time");
  }
  if (ec.category() == bhttp::make_error_code(bhttp::error::bad_method).category() &&
      ec != bhttp::error::end_of_stream && ec != bhttp::error::partial_message) {
    return problem(version, bhttp::status::bad_request, "Bad Request",
                   "the request body is malformed (" + ec.message() + ")");
  }
  // The client closed mid-body: try a 400 (it may still read), then close.
  return problem(version, bhttp::status::bad_request, "Bad Request",
                 "the request body ended before its announced end");
}

/// Copies bytes one way until EOF or an error; `last` records activity for the idle timer.
/// `ending` is shared by both directions: once set, neither reads again.
asio::awaitable<void> pump(timed_socket& from, timed_socket& to, steady::time_point& last,
                           bool& ending) {
  std::vector<char> buf(tunnel_buffer);
  while (!ending) {
    auto [rec, n] = co_await from.async_read_some(asio::buffer(buf), use_tuple);
    if (n > 0) {
      last = steady::now();
      auto [wec, wn] = co_await asio::async_write(to, asio::buffer(buf.data(), n), use_tuple);
      (void)wn;
      if (wec) co_return;
      last = steady::now();
    }
    if (rec) {
      error_code ignored;
      if (!to.tls()) {
        // Pass a half-close on (a WebSocket close handshake may still need the other way).
        to.socket().shutdown(tcp::socket::shutdown_send, ignored);
        co_return;
      }
      // TLS has no half-close that leaves the other way reading (close_notify is sent by a
      // shutdown that also reads): the tunnel ends, and its connections close.
      ending = true;
      to.socket().cancel(ignored);  // the other direction's read
      co_return;
    }
  }
}

/// Ends when nothing moved either way for `idle`, cancelling both sockets' operations (the
/// pumps' reads end with them, TLS ones included).
asio::awaitable<void> idle_watch(steady::time_point& last, std::chrono::milliseconds idle,
                                 timed_socket& a, timed_socket& b) {
  asio::steady_timer timer(co_await asio::this_coro::executor);
  for (;;) {
    timer.expires_at(last + idle);
    auto [ec] = co_await timer.async_wait(use_tuple);
    if (ec) co_return;
    if (steady::now() >= last + idle) break;
  }
  error_code ignored;
  a.socket().cancel(ignored);
  b.socket().cancel(ignored);
}

/// Tunnels bytes both ways until both directions ended, either side failed, or nothing
/// moved for `idle`. Bytes already buffered on either side go first. An end of stream is
/// passed on as a half-close to a plain TCP side; towards a TLS side it ends the tunnel.
asio::awaitable<void> tunnel(timed_socket& client, beast::flat_buffer& client_buffer,
                             timed_socket& upstream, beast::flat_buffer& upstream_buffer,
                             std::chrono::milliseconds idle) {
  using namespace asio::experimental::awaitable_operators;
  client.expires_never();
  upstream.expires_never();
  if (client_buffer.size() > 0) {
    auto [ec, n] = co_await asio::async_write(upstream, client_buffer.data(), use_tuple);
    (void)n;
    if (ec) co_return;
    client_buffer.clear();
  }
  if (upstream_buffer.size() > 0) {
    auto [ec, n] = co_await asio::async_write(client, upstream_buffer.data(), use_tuple);
    (void)n;
    if (ec) co_return;
    upstream_buffer.clear();
  }
  steady::time_point last = steady::now();
  bool ending = false;
  co_await ((pump(client, upstream, last, ending) && pump(upstream, client, last, ending)) ||
            idle_watch(last, idle, client, upstream));
}

using piece_buffers = std::array<asio::const_buffer, 5>;

/// The buffers of one piece of a message on one hop: `head` first when not null, then `n`
/// bytes at `data` framed for the hop (chunked: its size line, written into `size_line`, and
/// CRLF, and the last chunk after the final piece; RFC 9112 §7.1); `last` ends the body.
/// Unused entries are empty.
piece_buffers frame_piece(const std::string* head, bool chunked, char (&size_line)[20],
                          const char* data, std::size_t n, bool last) {
  piece_buffers b{};
  std::size_t k = 0;
  if (head) b[k++] = asio::buffer(*head);
  if (!chunked) {
    if (n > 0) b[k++] = asio::buffer(data, n);
    return b;
  }
  static constexpr std::string_view crlf = "\r\n";
  static constexpr std::string_view last_chunk = "0\r\n\r\n";
  if (n > 0) {
    const auto r = std::to_chars(size_line, size_line + sizeof size_line - 2, n, 16);
    r.ptr[0] = '\r';
    r.ptr[1] = '\n';
    b[k++] = asio::buffer(size_line, static_cast<std::size_t>(r.ptr + 2 - size_line));
    b[k++] = asio::buffer(data, n);
    b[k++] = asio::buffer(crlf.data(), crlf.size());
  }
  if (last) b[k++] = asio::buffer(last_chunk.data(), last_chunk.size());
  return b;
}

/// One message on one hop, written piece by piece: the rendered head goes with the first
/// write, each body piece is framed for the hop, one gathered write per piece.
class hop_writer {
 public:
  hop_writer(const std::string& head, bool chunked) : head_(head), chunked_(chunked) {}

  /// The buffers to write next: the head if not sent yet, then `n` bytes at `data`; `last`
  /// ends the body.
  piece_buffers next(const char* data, std::size_t n, bool last) {
    const std::string* head = head_sent_ ? nullptr : &head_;
    head_sent_ = true;
    return frame_piece(head, chunked_, size_line_, data, n, last);
  }

 private:
  const std::string& head_;
  bool chunked_;
  bool head_sent_ = false;
  char size_line_[20] = {};
};

}  // namespace

asio::awaitable<error_code> send_continue(timed_socket& client, std::chrono::milliseconds timeout) {
  static constexpr std::string_view line = "HTTP/1.1 100 Continue\r\n\r\n";
  client.expires_after(timeout);
  auto [ec, n] =
      co_await asio::async_write(client, asio::buffer(line.data(), line.size()), use_tuple);
  (void)n;
  co_return client.timeout_error(ec);
}

std::unique_ptr<char[]> buffer_pool::take() {
  if (free_.empty()) return std::make_unique_for_overwrite<char[]>(block_size);
  auto b = std::move(free_.back());
  free_.pop_back();
  return b;
}

void buffer_pool::give(std::unique_ptr<char[]> block) {
  if (block && free_.size() < 64) free_.push_back(std::move(block));
}

// --- the HTTP/1.1 client side --------------------------------------------------------------

body_framing http1_client::framing() const {
  if (parser.is_done()) return body_framing::none;
  return parser.chunked() ? body_framing::chunked : body_framing::content_length;
}

void http1_client::limit_body(std::uint64_t max) {
  parser.body_limit(limit_of(max));
}

asio::awaitable<error_code> http1_client::read_body(char* data, std::size_t size,
                                                    std::chrono::milliseconds wait,
                                                    std::size_t& got) {
  buffer.reserve(read_reserve);  // else Beast reads 512 bytes at a time
  auto& body = parser.get().body();
  body.data = data;
  body.size = size;
  error_code ec;
  if (parse_buffered(buffer, parser, ec)) {
    // the body's next piece was already in the buffer
  } else if (wait.count() > 0) {
    stream.expires_after(wait);
    ec = co_await read_more(stream, buffer, parser);
  } else {
    ec = beast::error::timeout;
  }
  if (ec == bhttp::error::need_buffer) ec = {};
  got = size - body.size;
  co_return ec;
}

asio::awaitable<error_code> http1_client::send_continue() {
  co_return co_await http::send_continue(stream, write_timeout);
}

// A `1xx` interim response (not 100 or 101) goes to the client as received, less its
// hop-by-hop fields (RFC 9110 §15.2: a proxy forwards 1xx responses); not to HTTP/1.0.
asio::awaitable<error_code> http1_client::send_interim(const response_head& head) {
  if (version() < 11) co_return error_code{};
  bhttp::response<bhttp::empty_body> interim;
  interim.version(11);
  interim.result(head.result_int());  // (103 has no enum value in Beast 1.81)
  interim.reason(head.reason());
  for (const auto& f : head) interim.insert(f.name_string(), f.value());
  strip_hop_by_hop(interim.base());
  stream.expires_after(write_timeout);
  auto [ec, n] = co_await bhttp::async_write(stream, interim, use_tuple);
  (void)n;
  co_return ec;
}

bool http1_client::begin_response(const response_head& res, const response_shape& shape,
                                  const forward_plan& plan) {
  const unsigned v = version();
  bool keep = keep_alive && !closing && shape.may_keep;
  client_hop hop;
  hop.version = v;
  hop.limited = plan.limited;
  hop.added_lines = plan.added_lines;
  hop.fields = plan.response_fields;
  if (shape.status == 204 || shape.status / 100 == 1) {
    hop.framing = response_framing::none;
  } else if (shape.length) {
    hop.framing = response_framing::content_length;  // one line, whatever repeats it had
    hop.length = *shape.length;
  }
  if (!shape.no_body && shape.streamed) {
    if (v >= 11) {
      hop.framing = response_framing::chunked;  // re-framed for this hop
    } else {
      keep = false;  // an HTTP/1.0 client reads to EOF
    }
  }
  hop.keep_alive = keep;
  render_client_response(heads, res, hop);
  chunked_ = hop.framing == response_framing::chunked;
  head_sent_ = false;
  return keep;
}

asio::awaitable<send_result> http1_client::write(const char* data, std::size_t n, bool last) {
  const std::string* head = head_sent_ ? nullptr : &heads;
  head_sent_ = true;
  const auto piece = frame_piece(head, chunked_, size_line_, data, n, last);
  auto w = send_now(stream, piece);
  if (w.pending) w = co_await send_rest(stream, piece, w, write_timeout);
  co_return w;
}

namespace {

/// One relay in named steps — upload, read_response_head, upgrade, body — sharing its
/// state; relay() drives them. Every upstream failure goes through fail().
class relay_run {
 public:
  relay_run(client_port& c, forward_plan& plan, upstream_pool& pool, buffer_pool& buffers,
            relay_stats& stats)
      : c_(c),
        plan_(plan),
        pool_(pool),
        buffers_(buffers),
        stats_(stats),
        up_(*plan.upstream),
        version_(c.version()),
        head_request_(c.head().method() == bhttp::verb::head),
        has_body_(!c.body_done()),
        replayable_(!has_body_ && is_idempotent(c.head().method())),
        head_text_(c.head_buffer()) {}

  relay_run(const relay_run&) = delete;
  relay_run& operator=(const relay_run&) = delete;
  ~relay_run() { buffers_.give(std::move(block_)); }

  asio::awaitable<relay_result> run() {
    c_.limit_body(plan_.max_request_body);
    plan_.watch.relaying();
    framing_ = has_body_ ? c_.framing() : body_framing::none;
    // The upstream head, rendered once (a retry on a fresh connection sends it again); the
    // response head is rendered into the same buffer once the request is done with.
    render_upstream_request(head_text_, c_.head(),
                            upstream_hop{plan_.target, plan_.client_address, framing_, c_.length(),
                                         plan_.upgrade, &up_});
    const auto deadline = steady::now() + up_.timeout;
    for (int attempt = 0;; ++attempt) {
      // A pooled connection without a coroutine frame when one is idle; else a new one
      // (also for a retry after a stale pooled connection).
      upstream_lease lease;
      if (attempt > 0 || !pool_.try_reuse(up_, lease, plan_.upstream_tls.get())) {
        lease = co_await pool_.acquire(up_, deadline, /*fresh=*/true, plan_.upstream_tls);
      }
      if (!lease) {
        const auto f = lease.ec == errc::upstream_timeout ? upstream_failure::timeout
                       : lease.ec == errc::upstream_tls   ? upstream_failure::tls
                                                          : upstream_failure::unreachable;
        fail(f, lease.ec, lease.detail, lease.cause);
        co_return std::move(out_);
      }
      const upload_result sent = co_await upload(lease);
      if (sent.ended) co_return std::move(out_);
      std::optional<response_head_parser> rp;
      switch (co_await read_response_head(lease, sent, attempt, rp)) {
        case head_step::retry:
          continue;
        case head_step::ended:
          co_return std::move(out_);
        case head_step::read:
          break;
      }
      if (rp->get().result_int() == 101) {
        co_await upgrade(lease, rp->get());
      } else {
        co_await body(lease, *rp, sent.error);
      }
      co_return std::move(out_);
    }
  }

 private:
  /// What upload() did: `ended` when the exchange is over (out_ says how); `error` the
  /// upstream's write error (it may have answered early: its response is read all the same);
  /// `sent` the request bytes the upstream connection took.
  struct upload_result {
    bool ended = false;
    error_code error;
    std::uint64_t sent = 0;
  };

  enum class head_step { read, retry, ended };

  /// The one failure reporter: logs it (rate-limited), counts it for the pool, tells the plan,
  /// ends the exchange as upstream_failed and, while no response byte reached the client,
  /// makes the session's answer (502/504 naming the cause, `detail` in its body; `cause`, the
  /// system's words, only to the log and the metrics' last error) with the plan's rate-limit
  /// lines and fields.
  void fail(upstream_failure f, const error_code& ec, const std::string& detail = {},
            const std::string& cause = {}) {
    out_.end = exchange_end::upstream_failed;
    out_.keep_alive = false;
    const std::string& why = cause.empty() ? detail : cause;
    log_failure(f, up_, ec, why);
    pool_.count_failure();
    if (plan_.on_failure) plan_.on_failure(f, why.empty() ? ec.message() : why);
    if (c_.head_sent()) return;  // the client sees the connection close instead
    const auto text = describe(f);
    out_.answer = problem(
        version_, text.status, text.title,
        detail.empty() ? std::string(text.detail) : std::string(text.detail) + ": " + detail);
    set_lines(out_.answer->base(), plan_.added_lines);
    for (const auto& [name, value] : plan_.response_fields) out_.answer->set(name, value);
  }

  // --- the request: head, then the body piece by piece -------------------------------------
  asio::awaitable<upload_result> upload(upstream_lease& lease) {
    upload_result r;
    auto& ups = *lease.stream;
    hop_writer to_upstream(head_text_, framing_ == body_framing::chunked);
    if (!has_body_) {
      const auto head = to_upstream.next(nullptr, 0, true);
      auto w = send_now(ups, head);
      if (w.pending) w = co_await send_rest(ups, head, w, up_.timeout);
      r.error = w.ec;
      r.sent += w.bytes;
      out_.body_read = true;
      co_return r;
    }
    if (c_.expects_continue() && !continued_) {
      // Admitted, and the upstream is there: now the client may send the body.
      continued_ = true;
      if (co_await c_.send_continue()) {
        out_.end = exchange_end::client_gone;
        r.ended = true;
        co_return r;
      }
    }
    if (!block_) block_ = buffers_.take();
    // With a minimum rate, the time spent waiting for body bytes (not writing them upstream)
    // may reach read_timeout + received / rate, as Apache's mod_reqtimeout does: a client
    // trickling a byte just inside each read_timeout is cut all the same.
    steady::duration waited{};
    std::uint64_t received = 0;
    const auto min_rate = c_.body_min_rate();
    for (;;) {
      std::chrono::milliseconds wait = c_.read_timeout();
      steady::time_point began{};
      if (min_rate > 0) {
        const auto allowed =
            c_.read_timeout() + std::chrono::milliseconds(received * 1000 / min_rate);
        wait =
            std::min(wait, std::chrono::duration_cast<std::chrono::milliseconds>(allowed - waited));
        began = steady::now();
      }
      std::size_t got = 0;
      error_code rec;
      if (carried_) {
        got = *carried_;  // read before; only the send failed
        carried_.reset();
        received -= got;
        out_.bytes_in -= got;
      } else {
        rec = co_await c_.read_body(block_.get(), buffer_pool::block_size, wait, got);
      }
      if (min_rate > 0) waited += steady::now() - began;
      if (rec) {
        // The upstream got part of a request: that connection is done for.
        ups.close();
        if (rec == beast::error::timeout)
          stats_.body_timeouts.fetch_add(1, std::memory_order_relaxed);
        out_.answer = body_error_answer(rec, version_);
        out_.end = exchange_end::not_forwarded;
        r.ended = true;
        co_return r;
      }
      received += got;
      out_.bytes_in += got;
      const bool done = c_.body_done();
      if (got == 0 && !done) continue;  // chunk framing only
      const auto piece = to_upstream.next(block_.get(), got, done);
      auto w = send_now(ups, piece);
      if (w.pending) w = co_await send_rest(ups, piece, w, up_.timeout);
      // The first piece read but not sent (the pooled connection was closed): a retry
      // sends it first.
      if (w.ec && r.sent == 0 && w.bytes == 0) carried_ = got;
      r.sent += w.bytes;
      if (w.ec) {
        r.error = w.ec;  // the upstream may have answered early: read it below
        break;
      }
      if (done) break;
    }
    out_.body_read = c_.body_done();
    co_return r;
  }

  // --- the response head (interim responses relayed or skipped) ----------------------------
  // Fills `rp` with the final head (read), or retries a stale pooled connection once when
  // RFC 9110 §9.2.2 allows, or ends the exchange.
  asio::awaitable<head_step> read_response_head(upstream_lease& lease, const upload_result& sent,
                                                int attempt,
                                                std::optional<response_head_parser>& rp) {
    auto& ups = *lease.stream;
    const auto sent_at = steady::now();
    error_code head_error;
    if (lease.watch) {
      // The read the pooled connection kept outstanding receives the response's first bytes.
      ups.expires_after(up_.timeout);
      head_error = ups.timeout_error(co_await upstream_pool::first_read(lease));
      if (head_error == asio::error::eof) head_error = bhttp::error::end_of_stream;
    }
    bool got_bytes = lease.buffer.size() > 0;
    while (!head_error) {
      rp.emplace();
      rp->header_limit(upstream_pool::response_header_limit);
      rp->body_limit(limit_of(plan_.max_response_body));
      rp->skip(head_request_);  // a response to HEAD has no content (RFC 9110 §9.3.2)
      error_code ec;
      if (!parse_head_buffered(lease.buffer, *rp, ec)) {
        ups.expires_after(up_.timeout);
        ec = co_await read_head(ups, lease.buffer, *rp);
      }
      got_bytes = got_bytes || rp->got_some() || lease.buffer.size() > 0;
      if (ec) {
        head_error = ec;
        break;
      }
      const unsigned status = rp->get().result_int();
      if (status / 100 != 1 || status == 101) break;
      if (status != 100) {
        if (co_await c_.send_interim(rp->get())) {
          ups.close();
          out_.end = exchange_end::client_gone;
          co_return head_step::ended;
        }
      }
    }
    if (head_error) {
      ups.close();
      if (sent.error) head_error = sent.error;
      const bool stale = lease.reused && !got_bytes && head_error != beast::error::timeout;
      // A stale pooled connection: the upstream closed it while our request was on the way.
      // Sent again once on a fresh one when RFC 9110 §9.2.2 allows: nothing of it had gone
      // out, or it may be repeated (idempotent, its body not consumed).
      if (stale && attempt == 0 && (sent.sent == 0 || replayable_)) {
        pool_.count_retry(sent.sent == 0 ? upstream_pool::retry_reason::not_sent
                                         : upstream_pool::retry_reason::idempotent);
        co_return head_step::retry;
      }
      if (stale) pool_.count_stale_failure();
      fail(head_failure(head_error), head_error);
      co_return head_step::ended;
    }
    const response_head& res = rp->get();
    const unsigned status = res.result_int();
    out_.upstream_status = status;
    const auto head_time = steady::now() - sent_at;
    out_.upstream_ms = std::chrono::duration<double, std::milli>(head_time).count();
    if (plan_.on_response_head) plan_.on_response_head(head_time);
    plan_.watch.head(res, status);
    co_return head_step::read;
  }

  // --- an upgrade: relay the 101, then tunnel ------------------------------------------------
  asio::awaitable<void> upgrade(upstream_lease& lease, const response_head& res) {
    auto& ups = *lease.stream;
    http1_client* h1 = c_.http1();
    if (!plan_.upgrade || !h1) {
      ups.close();
      fail(upstream_failure::malformed, bhttp::error::bad_status);
      co_return;
    }
    client_hop hop;
    hop.limited = plan_.limited;
    hop.upgrade = res[bhttp::field::upgrade];
    if (hop.upgrade.empty()) hop.upgrade = "websocket";
    hop.added_lines = plan_.added_lines;
    hop.fields = plan_.response_fields;
    render_client_response(head_text_, res, hop);
    const auto head = asio::buffer(head_text_);
    auto w = send_now(h1->stream, head);
    if (w.pending) w = co_await send_rest(h1->stream, head, w, h1->write_timeout);
    out_.bytes_out += w.bytes;
    if (!w.ec) {
      out_.status = 101;
      stats_.tunnels_open.fetch_add(1, std::memory_order_relaxed);
      stats_.tunnels_total.fetch_add(1, std::memory_order_relaxed);
      co_await tunnel(h1->stream, h1->buffer, ups, lease.buffer, plan_.tunnel_idle_timeout);
      stats_.tunnels_open.fetch_sub(1, std::memory_order_relaxed);
    }
    out_.end = exchange_end::tunnel_closed;
    ups.close();
    out_.keep_alive = false;
  }

  // --- the response: head, then the body piece by piece --------------------------------------
  asio::awaitable<void> body(upstream_lease& lease, response_head_parser& rp,
                             const error_code& upload_error) {
    auto& ups = *lease.stream;
    const response_head& res = rp.get();
    const unsigned status = res.result_int();
    const bool upstream_keep = rp.keep_alive();  // the parser's flags: Connection, need_eof()
    const auto idle_for = upstream_pool::idle_lifetime(res[bhttp::field::keep_alive]);
    const bool no_body = head_request_ || status == 204 || status == 304 || status / 100 == 1;
    const bool close_delimited = !no_body && !rp.chunked() && !rp.content_length();
    response_shape shape;
    shape.status = status;
    shape.no_body = no_body;
    if (const auto length = rp.content_length(); length && !rp.chunked()) shape.length = *length;
    shape.streamed = rp.chunked() || close_delimited;
    shape.may_keep = out_.body_read && !upload_error;
    const bool keep = c_.begin_response(res, shape, plan_);
    // The upstream connection goes back to the pool after a complete exchange that allows it.
    const auto finish = [&] {
      if (upstream_keep && lease.buffer.size() == 0 && !upload_error) {
        pool_.release(std::move(lease), idle_for);
      } else {
        ups.close();  // e.g. more bytes than the Content-Length announced
      }
    };

    if (no_body || rp.is_done()) {
      const auto w = co_await c_.write(nullptr, 0, true);
      out_.bytes_out += w.bytes;
      if (w.ec) {
        out_.end = exchange_end::client_gone;
        ups.close();
      } else {
        out_.status = status;
        finish();
      }
      out_.keep_alive = keep && !w.ec;
      co_return;
    }

    if (lease.buffer.size() == 0) {
      // Nothing of the body has arrived yet (an event stream, a long poll): the head goes
      // first, so the client sees the response start now.
      const auto w = co_await c_.write(nullptr, 0, false);
      out_.bytes_out += w.bytes;
      if (w.ec) {
        ups.close();
        out_.end = exchange_end::client_gone;
        co_return;
      }
      out_.status = status;
    }
    if (!block_) block_ = buffers_.take();
    lease.buffer.reserve(read_reserve);  // else Beast reads 512 bytes at a time
    for (;;) {
      rp.window(block_.get(), buffer_pool::block_size);
      error_code rec;
      if (!parse_buffered(lease.buffer, rp, rec)) {
        ups.expires_after(up_.timeout);
        rec = co_await read_more(ups, lease.buffer, rp);
      }
      if (rec == bhttp::error::need_buffer) rec = {};
      if (rec == bhttp::error::end_of_stream && close_delimited) rec = {};  // EOF ends it
      if (rec) {
        ups.close();
        fail(rec == bhttp::error::body_limit ? upstream_failure::too_large
                                             : upstream_failure::body_failed,
             rec);
        co_return;
      }
      const std::size_t got = buffer_pool::block_size - rp.window_left();
      const bool done = rp.is_done();
      if (got == 0 && !done) continue;                     // chunk framing only
      if (got > 0) plan_.watch.body({block_.get(), got});  // observed, never held
      const auto w = co_await c_.write(block_.get(), got, done);
      out_.bytes_out += w.bytes;
      if (w.bytes > 0) out_.status = status;
      if (w.ec) {
        ups.close();  // the client is gone or too slow; the body is not read to its end
        out_.end = exchange_end::client_gone;
        co_return;
      }
      if (done) break;
    }
    finish();
    out_.keep_alive = keep;
  }

  client_port& c_;
  forward_plan& plan_;
  upstream_pool& pool_;
  buffer_pool& buffers_;
  relay_stats& stats_;
  const config::upstream& up_;
  const unsigned version_;
  const bool head_request_;
  const bool has_body_;
  const bool replayable_;
  body_framing framing_ = body_framing::none;
  std::string& head_text_;
  relay_result out_;
  std::unique_ptr<char[]> block_;  // the body block from buffers_, given back at the end
  bool continued_ = false;         // `100 Continue` was sent (once, whatever the attempts)
  // The first piece of the request body, read from the client but not sent (its write found
  // the pooled connection closed): a retry sends it first.
  std::optional<std::size_t> carried_;
};

}  // namespace

asio::awaitable<relay_result> relay(client_port& c, forward_plan& plan, upstream_pool& pool,
                                    buffer_pool& buffers, relay_stats& stats) {
  relay_run run(c, plan, pool, buffers, stats);
  co_return co_await run.run();
}

}  // namespace sluice::http
