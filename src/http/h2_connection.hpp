// SPDX-License-Identifier: Apache-2.0
#pragma once
// Private to the http room: one HTTP/2 client connection (h2_session.cpp has its design): its
// streams, the relay's client side of a stream (h2_client) and the connection's state and
// steps, defined in h2_session.cpp (the connection: reader, writer, idle watch, defences) and
// h2_frames.cpp (nghttp2's callbacks, and each stream from its head to its response).

#include "sluice/http/h2_session.hpp"

#include "sluice/errc.hpp"
#include "sluice/http/grpc.hpp"
#include "sluice/http/h2_upstream.hpp"
#include "sluice/http/headers.hpp"
#include "sluice/http/problem.hpp"
#include "sluice/http/router.hpp"
#include "sluice/http/server.hpp"

#include <nghttp2/nghttp2.h>
#include <spdlog/spdlog.h>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/string.hpp>

#include <array>
#include <charconv>
#include <chrono>
#include <cstring>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace sluice::http::h2_detail {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = beast::http;
using error_code = boost::system::error_code;
using steady = std::chrono::steady_clock;

inline constexpr auto use_tuple = asio::as_tuple(asio::use_awaitable);

/// One request stream.
struct h2_stream {
  explicit h2_stream(asio::any_io_executor ex, std::int32_t i)
      : id(i), body_wait(ex), send_wait(ex) {
    body_wait.expires_at(steady::time_point::max());
  }
  std::int32_t id;
  request_head head;
  std::string method, path, authority, scheme;
  std::uint32_t fields = 0;
  std::uint64_t header_bytes = 0;
  std::optional<bhttp::status> bad;  ///< found while reading the head
  std::string body;
  std::uint64_t body_cap = 0;
  bool decided = false;  ///< the body's bytes are consumed as they come
  bool keep_body = false;
  bool too_large = false;
  bool end_stream = false;
  bool relaying = false;  ///< the body is consumed as relay() reads it
  bool closed = false;
  std::uint64_t unconsumed = 0;
  asio::steady_timer body_wait;  ///< cancelled when body bytes, the end or a close arrive
  // The response body, given to nghttp2 by the data provider.
  std::string out;
  std::size_t out_pos = 0;
  bool out_eof = false;          ///< the body's last byte is in `out`
  asio::steady_timer send_wait;  ///< cancelled when the provider took bytes, or a close
  std::size_t pending() const { return out.size() - out_pos; }
  h2_fields trailers;          ///< sent after the body (an HTTP/2 upstream's, e.g. grpc-status)
  h2_fields request_trailers;  ///< the client's, after its body (to an HTTP/2 upstream)
};

/// Response bytes a relayed stream may have queued for nghttp2 before relay's next write waits.
inline constexpr std::size_t h2_send_queue_bound = 64 * 1024;

/// Response fields HTTP/2 forbids (RFC 9113 §8.2.2): connection-specific ones.
inline bool connection_specific(std::string_view name) {
  return beast::iequals(name, "connection") || beast::iequals(name, "keep-alive") ||
         beast::iequals(name, "transfer-encoding") || beast::iequals(name, "upgrade") ||
         beast::iequals(name, "proxy-connection");
}

inline std::string lower(std::string_view s) {
  std::string out(s);
  for (auto& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

struct h2_connection;

/// An HTTP/2 stream as the client side of relay(): the body from the stream's received DATA
/// (consumed as it is read), the response through the stream's data provider.
class h2_client final : public client_port {
 public:
  h2_client(h2_connection& c, std::shared_ptr<h2_stream> s, std::chrono::milliseconds read_wait,
            std::chrono::milliseconds write_wait, std::uint64_t min_rate)
      : c_(c),
        s_(std::move(s)),
        read_wait_(read_wait),
        write_wait_(write_wait),
        min_rate_(min_rate) {
    const auto cl = s_->head[bhttp::field::content_length];
    std::uint64_t n = 0;
    if (!cl.empty() && std::from_chars(cl.data(), cl.data() + cl.size(), n).ec == std::errc{}) {
      length_ = n;
    }
  }

  const request_head& head() const override { return s_->head; }
  unsigned version() const override { return 11; }
  bool body_done() const override { return s_->end_stream && s_->body.empty(); }
  body_framing framing() const override {
    return length_ ? body_framing::content_length : body_framing::chunked;
  }
  std::uint64_t length() const override { return length_.value_or(0); }
  void limit_body(std::uint64_t max) override {
    max_ = max;
    if (length_ && *length_ > max) over_ = true;
  }
  std::chrono::milliseconds read_timeout() const override { return read_wait_; }
  std::uint64_t body_min_rate() const override { return min_rate_; }
  asio::awaitable<error_code> read_body(char* data, std::size_t size,
                                        std::chrono::milliseconds wait, std::size_t& got) override;
  bool expects_continue() const override {
    return beast::iequals(s_->head[bhttp::field::expect], "100-continue");
  }
  asio::awaitable<error_code> send_continue() override;
  asio::awaitable<error_code> send_interim(const response_head&) override {
    co_return error_code{};  // (interim responses other than 100 are not relayed over h2)
  }
  bool begin_response(const response_head& res, const response_shape& shape,
                      const forward_plan& plan) override;
  asio::awaitable<send_result> write(const char* data, std::size_t n, bool last) override;
  bool head_sent() const override { return head_sent_; }
  std::string& head_buffer() override { return heads_; }

  /// Whether the response was sent to its end (else, once a head went out, the stream is
  /// reset: the client must not take a cut body for a whole one).
  bool finished() const { return finished_; }

 private:
  h2_connection& c_;
  std::shared_ptr<h2_stream> s_;
  std::chrono::milliseconds read_wait_;
  std::chrono::milliseconds write_wait_;
  std::uint64_t min_rate_;
  std::optional<std::uint64_t> length_;  ///< the request's Content-Length
  std::uint64_t max_ = 0;
  std::uint64_t received_ = 0;
  bool over_ = false;
  std::string heads_;
  unsigned status_ = 0;
  bool no_body_ = false;
  bhttp::fields fields_;
  bool head_sent_ = false;
  bool finished_ = false;
};

struct h2_connection : std::enable_shared_from_this<h2_connection> {
  h2_connection(h2_peer& p)
      : peer(p),
        handler(p.handler),
        ctx(p.ctx),
        limits(p.limits),
        pool(p.pool),
        stats(p.stats),
        keep(p.keep),
        peer_buffers(p.buffers),
        peer_relays(p.relays),
        ex(p.stream.get_executor()),
        wake(ex),
        idle(ex),
        done(ex) {}
  ~h2_connection() {
    if (ng) nghttp2_session_del(ng);
  }

  h2_peer& peer;  ///< valid while serve_h2 runs (`alive`)
  std::shared_ptr<request_handler> handler;
  request_context ctx;
  session_limits limits;
  upstream_pool& pool;
  h2_stats& stats;
  std::shared_ptr<void> keep;
  buffer_pool& peer_buffers;  ///< the worker's (kept alive by `keep`)
  relay_stats& peer_relays;
  asio::any_io_executor ex;
  nghttp2_session* ng = nullptr;
  asio::steady_timer wake;  ///< the writer waits on it
  asio::steady_timer idle;
  asio::steady_timer done;  ///< serve_h2 waits on it for the reader's end
  bool reader_done = false;
  bool alive = true;  ///< the socket is served (false: streams still deciding drop their answers)
  std::map<std::int32_t, std::shared_ptr<h2_stream>> streams;
  std::deque<steady::time_point> resets;
  steady::time_point last_activity = steady::now();
  // The defences' counts (see h2_session.hpp's h2_max_* bounds).
  std::uint32_t continuations = 0;  ///< CONTINUATION frames of the header block being read
  steady::time_point control_window{};
  std::uint32_t control_frames = 0;  ///< PING and SETTINGS in the window from control_window
  bool calmed = false;

  void kick() { wake.cancel(); }

  std::shared_ptr<h2_stream> find(std::int32_t id);

  /// Sends the interim `100 (Continue)` on the stream (RFC 9110 §10.1.1: the client that
  /// sent `expect: 100-continue` may now send its body); false when the stream is gone.
  bool send_100(h2_stream& s);

  /// Reopens the window of body bytes taken by a decided stream.
  void consume(h2_stream& s);

  // --- the defences ------------------------------------------------------------------------

  /// Ends the connection for an attack: GOAWAY ENHANCE_YOUR_CALM (RFC 9113 §7), counted once.
  /// The caller returns NGHTTP2_ERR_CALLBACK_FAILURE from its callback, so nghttp2 reads no
  /// further; the writer still sends the GOAWAY.
  int calm();

  /// Counts a stream ended at once (reset by the client, or by the gateway for the client's
  /// fault); true when it is one more than h2_max_resets_per_second within the last second.
  bool reset_flood();

  /// Counts a PING or SETTINGS frame; true when it is one more than
  /// h2_max_control_frames_per_second in the current one-second window.
  bool control_flood();

  /// After nghttp2_session_mem_recv failed with `rv` (a fatal error: nghttp2 queued no GOAWAY),
  /// queues the GOAWAY its cause calls for; the writer sends it before the connection closes.
  void received_error(std::int64_t rv);

  // --- nghttp2 callbacks -------------------------------------------------------------------

  static int on_begin_frame(nghttp2_session*, const nghttp2_frame_hd* hd, void* user);

  /// A frame nghttp2 refused with a stream error (a malformed request: RST_STREAM
  /// PROTOCOL_ERROR; a stream past the cap: REFUSED_STREAM) counts as a reset.
  static int on_invalid_frame(nghttp2_session*, const nghttp2_frame*, int, void* user);

  static int on_begin_headers(nghttp2_session*, const nghttp2_frame* frame, void* user);

  static int on_header(nghttp2_session*, const nghttp2_frame* frame, const std::uint8_t* name,
                       std::size_t namelen, const std::uint8_t* value, std::size_t valuelen,
                       std::uint8_t, void* user);

  static int on_frame_recv(nghttp2_session*, const nghttp2_frame* frame, void* user);

  static int on_data_chunk(nghttp2_session*, std::uint8_t, std::int32_t id,
                           const std::uint8_t* data, std::size_t len, void* user);

  /// A whole answer sent to a request that waits for `100 (Continue)` (a refusal: 429, 413 by
  /// its content-length): RST_STREAM NO_ERROR tells the client its body is not wanted (RFC
  /// 9113 §8.1, RFC 9110 §10.1.1), so it ends the stream without sending it. Other clients
  /// already sending a body keep sending it (consumed and dropped): some (curl 7.88) take a
  /// reset during their upload for a failed exchange, even after a whole answer.
  static int on_frame_send(nghttp2_session* ng, const nghttp2_frame* frame, void* user);

  static int on_stream_close(nghttp2_session*, std::int32_t id, std::uint32_t, void* user);

  /// The data provider: the stream's queued response bytes; deferred while the queue is
  /// empty and the body not ended (a write resumes it). The body's end sends the stream's
  /// trailers when it has any.
  static ssize_t read_body(nghttp2_session* ng, std::int32_t id, std::uint8_t* buf,
                           std::size_t length, std::uint32_t* flags, nghttp2_data_source* source,
                           void*);

  /// Ends stream `id` with a HEADERS frame of `trailers` (after its last DATA frame).
  static void submit_trailers(nghttp2_session* ng, std::int32_t id, const h2_fields& trailers);

  // --- streams -----------------------------------------------------------------------------

  /// Waits until the stream's body is whole (or the stream closed, or it went over its cap).
  asio::awaitable<void> await_body(std::shared_ptr<h2_stream> s);

  /// Submits `res` on the stream (connection-specific fields dropped, names lowercased).
  void submit(h2_stream& s, response& res, bool head_request);

  /// Submits a response head on the stream: `:status` and `fields` (connection-specific ones
  /// dropped, names lowercased); with the data provider when a body follows (s.out).
  void submit_head(h2_stream& s, unsigned code, const bhttp::fields& fields, bool with_body);

  /// Builds the request head from the pseudo-header fields: the answer when it is refused.
  std::optional<bhttp::status> make_head(h2_stream& s);

  asio::awaitable<void> run_stream(std::shared_ptr<h2_stream> s);

  /// Reads the stream's whole request body, up to `cap` bytes, as a request with the stream's
  /// head (Content-Length set for a body or a method that carries one). Nullopt when there is
  /// none to hand on: the stream closed, or `answer` is set (413 over `cap`, 408 when the body
  /// stalled past body_timeout).
  asio::awaitable<std::optional<request>> read_whole(std::shared_ptr<h2_stream> s,
                                                     std::uint64_t cap, exchange_result& r,
                                                     std::optional<response>& answer);

  /// Forwards a stream to an upstream that speaks HTTP/2 (h2_forward(): its body read whole
  /// first, up to the route's max_request_body, then sent with the client's trailers; the
  /// upstream's trailers kept for the answer).
  asio::awaitable<void> forward_h2(std::shared_ptr<h2_stream> s, forward_plan& plan,
                                   exchange_result& r, std::optional<response>& answer);

  /// Relays a forwarded stream to its upstream (relay(), the stream as its client side);
  /// `answer` is the session's own response when relay made one before any response byte.
  asio::awaitable<void> relay_stream(std::shared_ptr<h2_stream> s, forward_plan& plan,
                                     exchange_result& r, std::optional<response>& answer);

  // --- the connection's loops --------------------------------------------------------------

  asio::awaitable<void> reader();

  asio::awaitable<void> writer();

  asio::awaitable<void> idle_watch();

  /// The drain: GOAWAY with the last stream taken; those streams still finish.
  void drain();

  /// Makes the nghttp2 session and queues the server's SETTINGS; false on failure.
  bool start();
};

}  // namespace sluice::http::h2_detail
