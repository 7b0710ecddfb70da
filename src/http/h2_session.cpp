// SPDX-License-Identifier: Apache-2.0
// HTTP/2 client connections on nghttp2's server session (the frames, HPACK, flow control and
// the protocol's state machine are nghttp2's; nothing here parses a frame).
//
// One connection is three coroutines on the worker's thread, the only thread that touches
// the nghttp2 session: the reader feeds received bytes to nghttp2_session_mem_recv, the
// writer flushes nghttp2_session_mem_send to the socket whenever it is woken, and the idle
// watch closes a connection with no stream open for idle_timeout (GOAWAY NO_ERROR). Each
// request stream is its own coroutine, spawned once its head is whole: it builds a Beast
// request head from the pseudo-header fields and the others, and goes through the handler
// exactly as an HTTP/1.1 request does (decide_now / decide, then the answer, respond() for a
// buffered one, or the upstream for a forwarded one), then record().
//
// Request bodies: nghttp2's automatic WINDOW_UPDATE is off; a stream's bytes are consumed
// (its window reopened) only once its request is decided, so an undecided stream holds at
// most its initial window (64 KiB). A decided stream's body is kept up to its limit (the
// route's max_request_body when forwarded, client body_limit when buffered): over it, 413 and
// the stream is reset. Bodies of answered requests are consumed and dropped.
//
// Defences (bounds in h2_session.hpp): the counts of streams ended at once, CONTINUATION
// frames and PING/SETTINGS frames, and a header list's decoded size, are kept by the callbacks;
// past a bound, calm() queues GOAWAY ENHANCE_YOUR_CALM and the callback fails, so nghttp2
// reads no further while the writer sends the GOAWAY. A fatal error of nghttp2's own (its
// flood and CONTINUATION checks) gets its GOAWAY from received_error().
//
// Forwarded: the stream is the client side (h2_client) of relay(), the one relay an HTTP/1.1
// request goes through. Its body is taken from the stream's received DATA as relay reads it,
// and only then consumed (the window reopens as the upstream takes the bytes); the response
// goes out through a data provider that defers while its queue is empty and is resumed by
// each write, and a write waits while the stream's queue is over h2_send_queue_bound (the
// client's flow control holds the upstream back).

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

namespace sluice::http {

bool starts_h2_preface(std::string_view bytes, bool& complete) {
  const auto n = std::min(bytes.size(), h2_preface.size());
  complete = bytes.size() >= h2_preface.size();
  return bytes.substr(0, n) == h2_preface.substr(0, n);
}

namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = beast::http;
using error_code = boost::system::error_code;
using steady = std::chrono::steady_clock;

constexpr auto use_tuple = asio::as_tuple(asio::use_awaitable);

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
constexpr std::size_t h2_send_queue_bound = 64 * 1024;

/// Response fields HTTP/2 forbids (RFC 9113 §8.2.2): connection-specific ones.
bool connection_specific(std::string_view name) {
  return beast::iequals(name, "connection") || beast::iequals(name, "keep-alive") ||
         beast::iequals(name, "transfer-encoding") || beast::iequals(name, "upgrade") ||
         beast::iequals(name, "proxy-connection");
}

std::string lower(std::string_view s) {
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

  std::shared_ptr<h2_stream> find(std::int32_t id) {
    auto it = streams.find(id);
    return it == streams.end() ? nullptr : it->second;
  }

  /// Sends the interim `100 (Continue)` on the stream (RFC 9110 §10.1.1: the client that
  /// sent `expect: 100-continue` may now send its body); false when the stream is gone.
  bool send_100(h2_stream& s) {
    if (s.closed || !alive || !ng) return false;
    static constexpr std::string_view status = "100";
    static constexpr std::string_view name = ":status";
    nghttp2_nv nv{reinterpret_cast<std::uint8_t*>(const_cast<char*>(name.data())),
                  reinterpret_cast<std::uint8_t*>(const_cast<char*>(status.data())), name.size(),
                  status.size(), NGHTTP2_NV_FLAG_NONE};
    nghttp2_submit_headers(ng, NGHTTP2_FLAG_NONE, s.id, nullptr, &nv, 1, nullptr);
    kick();
    return true;
  }

  /// Reopens the window of body bytes taken by a decided stream.
  void consume(h2_stream& s) {
    if (s.unconsumed == 0 || s.closed || !ng) return;
    nghttp2_session_consume(ng, s.id, s.unconsumed);
    s.unconsumed = 0;
    kick();
  }

  // --- the defences ------------------------------------------------------------------------

  /// Ends the connection for an attack: GOAWAY ENHANCE_YOUR_CALM (RFC 9113 §7), counted once.
  /// The caller returns NGHTTP2_ERR_CALLBACK_FAILURE from its callback, so nghttp2 reads no
  /// further; the writer still sends the GOAWAY.
  int calm() {
    if (!calmed) {
      calmed = true;
      ++stats.calm_goaways;
      nghttp2_session_terminate_session(ng, NGHTTP2_ENHANCE_YOUR_CALM);
    }
    return NGHTTP2_ERR_CALLBACK_FAILURE;
  }

  /// Counts a stream ended at once (reset by the client, or by the gateway for the client's
  /// fault); true when it is one more than h2_max_resets_per_second within the last second.
  bool reset_flood() {
    const auto now = steady::now();
    resets.push_back(now);
    while (!resets.empty() && now - resets.front() > std::chrono::seconds(1)) resets.pop_front();
    return resets.size() > h2_max_resets_per_second;
  }

  /// Counts a PING or SETTINGS frame; true when it is one more than
  /// h2_max_control_frames_per_second in the current one-second window.
  bool control_flood() {
    const auto now = steady::now();
    if (now - control_window >= std::chrono::seconds(1)) {
      control_window = now;
      control_frames = 0;
    }
    return ++control_frames > h2_max_control_frames_per_second;
  }

  /// After nghttp2_session_mem_recv failed with `rv` (a fatal error: nghttp2 queued no GOAWAY),
  /// queues the GOAWAY its cause calls for; the writer sends it before the connection closes.
  void received_error(std::int64_t rv) {
    if (rv == NGHTTP2_ERR_FLOODED || rv == NGHTTP2_ERR_TOO_MANY_CONTINUATIONS) {
      calm();  // (nghttp2's own bounds: its outbound queue, its CONTINUATION count)
    } else if (rv == NGHTTP2_ERR_BAD_CLIENT_MAGIC) {
      nghttp2_session_terminate_session(ng, NGHTTP2_PROTOCOL_ERROR);
    } else {
      nghttp2_session_terminate_session(ng, NGHTTP2_INTERNAL_ERROR);  // (a no-op after calm())
    }
    kick();
  }

  // --- nghttp2 callbacks -------------------------------------------------------------------

  static int on_begin_frame(nghttp2_session*, const nghttp2_frame_hd* hd, void* user) {
    auto* self = static_cast<h2_connection*>(user);
    if (hd->type == NGHTTP2_HEADERS) self->continuations = 0;
    if (hd->type == NGHTTP2_CONTINUATION && ++self->continuations > h2_max_continuations)
      return self->calm();
    return 0;
  }

  /// A frame nghttp2 refused with a stream error (a malformed request: RST_STREAM
  /// PROTOCOL_ERROR; a stream past the cap: REFUSED_STREAM) counts as a reset.
  static int on_invalid_frame(nghttp2_session*, const nghttp2_frame*, int, void* user) {
    auto* self = static_cast<h2_connection*>(user);
    return self->reset_flood() ? self->calm() : 0;
  }

  static int on_begin_headers(nghttp2_session*, const nghttp2_frame* frame, void* user) {
    auto* self = static_cast<h2_connection*>(user);
    if (frame->hd.type != NGHTTP2_HEADERS || frame->headers.cat != NGHTTP2_HCAT_REQUEST) return 0;
    self->streams.emplace(frame->hd.stream_id,
                          std::make_shared<h2_stream>(self->ex, frame->hd.stream_id));
    return 0;
  }

  static int on_header(nghttp2_session*, const nghttp2_frame* frame, const std::uint8_t* name,
                       std::size_t namelen, const std::uint8_t* value, std::size_t valuelen,
                       std::uint8_t, void* user) {
    auto* self = static_cast<h2_connection*>(user);
    if (frame->hd.type != NGHTTP2_HEADERS) return 0;
    const bool trailer = frame->headers.cat == NGHTTP2_HCAT_HEADERS;
    if (frame->headers.cat != NGHTTP2_HCAT_REQUEST && !trailer) return 0;
    auto s = self->find(frame->hd.stream_id);
    if (!s) return 0;
    const std::string_view n(reinterpret_cast<const char*>(name), namelen);
    const std::string_view v(reinterpret_cast<const char*>(value), valuelen);
    // The decoded list is bounded as an HTTP/1.1 head is (RFC 9113 §6.5.2: the field's size
    // counts 32 bytes of overhead): over it 431 and the rest dropped (RFC 9113 §10.5.1: the
    // block is still decoded, the connection's state kept); an HPACK bomb, far over it, ends
    // the connection.
    s->header_bytes += namelen + valuelen + 32;
    const std::uint64_t limit = self->limits.header_limit;
    if (s->header_bytes > limit * h2_header_list_calm_factor) return self->calm();
    if (trailer) {
      // Request trailers (nghttp2 refuses pseudo-header fields in them, RFC 9113 §8.1) count
      // with the head; that is decided already, so over the bound the stream is reset.
      if (s->header_bytes > limit) return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
      s->request_trailers.emplace_back(n, v);
      return 0;
    }
    if (s->header_bytes > limit) {
      s->bad = bhttp::status::request_header_fields_too_large;
      return 0;
    }
    if (!n.empty() && n.front() == ':') {
      if (n == ":method") s->method = v;
      if (n == ":path") s->path = v;
      if (n == ":authority") s->authority = v;
      if (n == ":scheme") s->scheme = v;
      return 0;
    }
    if (++s->fields > self->limits.header_count_limit) {
      s->bad = bhttp::status::request_header_fields_too_large;
      return 0;
    }
    s->head.insert(n, v);
    return 0;
  }

  static int on_frame_recv(nghttp2_session*, const nghttp2_frame* frame, void* user) {
    auto* self = static_cast<h2_connection*>(user);
    switch (frame->hd.type) {
      case NGHTTP2_RST_STREAM:
        if (self->reset_flood()) return self->calm();
        break;
      case NGHTTP2_PING:
      case NGHTTP2_SETTINGS:
        if (!(frame->hd.flags & NGHTTP2_FLAG_ACK) && self->control_flood()) return self->calm();
        break;
      case NGHTTP2_HEADERS:
      case NGHTTP2_DATA: {
        auto s = self->find(frame->hd.stream_id);
        if (!s) break;
        if (frame->hd.flags & NGHTTP2_FLAG_END_STREAM) {
          s->end_stream = true;
          s->body_wait.cancel();
        }
        if (frame->hd.type == NGHTTP2_HEADERS && frame->headers.cat == NGHTTP2_HCAT_REQUEST) {
          // Started from a fresh handler: this callback runs inside the reader coroutine.
          asio::post(self->ex, [c = self->shared_from_this(), s] {
            asio::co_spawn(c->ex, c->run_stream(s), asio::detached);
          });
        }
        break;
      }
      default:
        break;
    }
    return 0;
  }

  static int on_data_chunk(nghttp2_session*, std::uint8_t, std::int32_t id,
                           const std::uint8_t* data, std::size_t len, void* user) {
    auto* self = static_cast<h2_connection*>(user);
    auto s = self->find(id);
    if (!s) return 0;
    s->unconsumed += len;
    if (s->relaying) {
      s->body.append(reinterpret_cast<const char*>(data), len);  // bounded by the window
      s->body_wait.cancel();
      return 0;
    }
    if (!s->too_large && s->keep_body) {
      if (s->body.size() + len > s->body_cap) {
        s->too_large = true;
        s->body.clear();
      } else {
        s->body.append(reinterpret_cast<const char*>(data), len);
      }
    } else if (!s->decided) {
      s->body.append(reinterpret_cast<const char*>(data), len);  // bounded by the window
    }
    if (s->decided) self->consume(*s);
    s->body_wait.cancel();
    return 0;
  }

  /// A whole answer sent to a request that waits for `100 (Continue)` (a refusal: 429, 413 by
  /// its content-length): RST_STREAM NO_ERROR tells the client its body is not wanted (RFC
  /// 9113 §8.1, RFC 9110 §10.1.1), so it ends the stream without sending it. Other clients
  /// already sending a body keep sending it (consumed and dropped): some (curl 7.88) take a
  /// reset during their upload for a failed exchange, even after a whole answer.
  static int on_frame_send(nghttp2_session* ng, const nghttp2_frame* frame, void* user) {
    auto* self = static_cast<h2_connection*>(user);
    if ((frame->hd.type != NGHTTP2_HEADERS && frame->hd.type != NGHTTP2_DATA) ||
        !(frame->hd.flags & NGHTTP2_FLAG_END_STREAM))
      return 0;
    auto s = self->find(frame->hd.stream_id);
    if (s && !s->end_stream && !s->closed &&
        beast::iequals(s->head[bhttp::field::expect], "100-continue"))
      nghttp2_submit_rst_stream(ng, NGHTTP2_FLAG_NONE, s->id, NGHTTP2_NO_ERROR);
    return 0;
  }

  static int on_stream_close(nghttp2_session*, std::int32_t id, std::uint32_t, void* user) {
    auto* self = static_cast<h2_connection*>(user);
    auto it = self->streams.find(id);
    if (it == self->streams.end()) return 0;
    it->second->closed = true;
    it->second->body_wait.cancel();
    it->second->send_wait.cancel();
    self->streams.erase(it);
    if (self->streams.empty()) self->last_activity = steady::now();
    return 0;
  }

  /// The data provider: the stream's queued response bytes; deferred while the queue is
  /// empty and the body not ended (a write resumes it). The body's end sends the stream's
  /// trailers when it has any.
  static ssize_t read_body(nghttp2_session* ng, std::int32_t id, std::uint8_t* buf,
                           std::size_t length, std::uint32_t* flags, nghttp2_data_source* source,
                           void*) {
    auto* s = static_cast<h2_stream*>(source->ptr);
    if (s->pending() == 0 && !s->out_eof) return NGHTTP2_ERR_DEFERRED;
    const std::size_t n = std::min(length, s->pending());
    std::memcpy(buf, s->out.data() + s->out_pos, n);
    s->out_pos += n;
    if (s->pending() == 0) {
      if (s->out_eof) {
        *flags |= NGHTTP2_DATA_FLAG_EOF;
        if (!s->trailers.empty()) {
          *flags |= NGHTTP2_DATA_FLAG_NO_END_STREAM;
          submit_trailers(ng, id, s->trailers);
        }
      }
      s->out.clear();
      s->out_pos = 0;
    }
    if (s->pending() <= h2_send_queue_bound) s->send_wait.cancel();
    return static_cast<ssize_t>(n);
  }

  /// Ends stream `id` with a HEADERS frame of `trailers` (after its last DATA frame).
  static void submit_trailers(nghttp2_session* ng, std::int32_t id, const h2_fields& trailers) {
    std::vector<nghttp2_nv> nva;
    for (const auto& [n, v] : trailers)
      nva.push_back({reinterpret_cast<std::uint8_t*>(const_cast<char*>(n.data())),
                     reinterpret_cast<std::uint8_t*>(const_cast<char*>(v.data())), n.size(),
                     v.size(), NGHTTP2_NV_FLAG_NONE});
    nghttp2_submit_trailer(ng, id, nva.data(), nva.size());
  }

  // --- streams -----------------------------------------------------------------------------

  /// Waits until the stream's body is whole (or the stream closed, or it went over its cap).
  asio::awaitable<void> await_body(std::shared_ptr<h2_stream> s) {
    s->body_wait.expires_after(limits.body_timeout);
    while (!s->end_stream && !s->closed && !s->too_large) {
      auto [ec] = co_await s->body_wait.async_wait(use_tuple);
      if (!ec) break;  // the body timeout passed
      if (s->body_wait.expiry() == steady::time_point::max()) break;
    }
  }

  /// Submits `res` on the stream (connection-specific fields dropped, names lowercased).
  void submit(h2_stream& s, response& res, bool head_request) {
    if (!alive || s.closed || !ng) return;
    // A gRPC client is answered a gateway refusal as gRPC: trailers-only, grpc-status.
    if (is_grpc_request(s.head)) to_grpc_answer(res);
    const unsigned code = res.result_int();
    const bool no_body = head_request || code == 204 || code == 304 || code / 100 == 1;
    if (!no_body && !res.body().empty()) res.content_length(res.body().size());
    // (a body-less answer with trailers still needs the provider: its end sends them)
    const bool with_body = !no_body && (!res.body().empty() || !s.trailers.empty());
    if (with_body) {
      s.out = std::move(res.body());
      s.out_pos = 0;
      s.out_eof = true;
    }
    submit_head(s, code, res.base(), with_body);
  }

  /// Submits a response head on the stream: `:status` and `fields` (connection-specific ones
  /// dropped, names lowercased); with the data provider when a body follows (s.out).
  void submit_head(h2_stream& s, unsigned code, const bhttp::fields& fields, bool with_body) {
    std::vector<std::string> names;
    names.reserve(16);
    std::vector<std::pair<std::size_t, std::string_view>> values;
    for (const auto& f : fields) {
      if (connection_specific(f.name_string())) continue;
      names.push_back(lower(f.name_string()));
      values.emplace_back(names.size() - 1, f.value());
    }
    const std::string status = std::to_string(code);
    std::vector<nghttp2_nv> nva;
    nva.reserve(values.size() + 1);
    auto nv = [](std::string_view n, std::string_view v) {
      return nghttp2_nv{reinterpret_cast<std::uint8_t*>(const_cast<char*>(n.data())),
                        reinterpret_cast<std::uint8_t*>(const_cast<char*>(v.data())), n.size(),
                        v.size(), NGHTTP2_NV_FLAG_NONE};
    };
    nva.push_back(nv(":status", status));
    for (const auto& [i, v] : values) nva.push_back(nv(names[i], v));
    nghttp2_data_provider provider{};
    if (with_body) {
      provider.source.ptr = &s;
      provider.read_callback = &h2_connection::read_body;
    }
    nghttp2_submit_response(ng, s.id, nva.data(), nva.size(), with_body ? &provider : nullptr);
    kick();
  }

  /// Builds the request head from the pseudo-header fields: the answer when it is refused.
  std::optional<bhttp::status> make_head(h2_stream& s) {
    if (s.bad) return s.bad;
    auto& head = s.head;
    head.version(11);  // the handler's rules are HTTP/1.1's; the access log says HTTP/2.0
    head.method_string(s.method);
    head.target(s.path);
    if (s.path.size() > limits.uri_limit) return bhttp::status::uri_too_long;
    // RFC 9113 §8.3.1: :authority stands for Host; a Host field must agree with it.
    const auto host = head[bhttp::field::host];
    if (!s.authority.empty()) {
      if (!host.empty() && host != s.authority) return bhttp::status::bad_request;
      if (host.empty()) head.set(bhttp::field::host, s.authority);
    }
    if (head.count(bhttp::field::host) != 1) return bhttp::status::bad_request;
    if (!valid_host(head[bhttp::field::host])) return bhttp::status::bad_request;
    return std::nullopt;
  }

  asio::awaitable<void> run_stream(std::shared_ptr<h2_stream> s) {
    auto hold = shared_from_this();
    ++stats.streams;
    const bool records = handler->records();
    exchange_result ex_result;
    const auto began = steady::now();
    ex_result.unix_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                            std::chrono::system_clock::now().time_since_epoch())
                            .count();
    const bool head_request = s->method == "HEAD";

    verdict v;
    std::optional<response> answer;
    if (auto status = make_head(*s)) {
      answer = problem(11, *status, bhttp::obsolete_reason(*status), {});
      s->decided = true;
      consume(*s);
      submit(*s, *answer, head_request);
      co_return;  // answered before any decision: not recorded, as HTTP/1.1's
    }
    bool failed = false;
    try {
      if (!handler->decide_now(s->head, ctx, v)) v = co_await handler->decide(s->head, ctx);
    } catch (const std::exception& e) {
      spdlog::error("request handler threw: {}", e.what());
      failed = true;
    }
    if (failed) {
      answer = problem(11, bhttp::status::internal_server_error, "Internal Server Error", {});
      s->decided = true;
      consume(*s);
      submit(*s, *answer, head_request);
      co_return;
    }

    switch (v.what) {
      case verdict::kind::answer:
        answer = std::move(v.answer);
        s->decided = true;
        s->body.clear();
        consume(*s);
        break;
      case verdict::kind::forward:
        if (v.forward.upstream->http2) {
          co_await forward_h2(s, v.forward, ex_result, answer);
          break;
        }
        co_await relay_stream(s, v.forward, ex_result, answer);
        break;
      case verdict::kind::buffer: {
        auto whole = co_await read_whole(s, limits.body_limit, ex_result, answer);
        if (!whole) break;
        try {
          answer = co_await handler->respond(std::move(*whole), ctx);
        } catch (const std::exception& e) {
          spdlog::error("request handler threw: {}", e.what());
          answer = problem(11, bhttp::status::internal_server_error, "Internal Server Error", {});
        }
        break;
      }
    }
    if (answer && !s->closed) {
      submit(*s, *answer, head_request);
      ex_result.status = answer->result_int();
      ex_result.bytes_out = s->out.size();
    }
    if (records) {
      ex_result.total_ms = std::chrono::duration<double, std::milli>(steady::now() - began).count();
      s->head.version(20);  // the access log's protocol
      handler->record(s->head, ctx, v, ex_result);
    }
  }

  /// Reads the stream's whole request body, up to `cap` bytes, as a request with the stream's
  /// head (Content-Length set for a body or a method that carries one). Nullopt when there is
  /// none to hand on: the stream closed, or `answer` is set (413 over `cap`, 408 when the body
  /// stalled past body_timeout).
  asio::awaitable<std::optional<request>> read_whole(std::shared_ptr<h2_stream> s,
                                                     std::uint64_t cap, exchange_result& r,
                                                     std::optional<response>& answer) {
    s->body_cap = cap;
    s->keep_body = true;
    s->decided = true;
    const auto cl = s->head[bhttp::field::content_length];
    std::uint64_t declared = 0;
    const bool has_length =
        !cl.empty() &&
        std::from_chars(cl.data(), cl.data() + cl.size(), declared).ec == std::errc{};
    if (s->body.size() > s->body_cap || (has_length && declared > s->body_cap)) {
      s->too_large = true;
      s->body.clear();
    } else if (!s->end_stream && beast::iequals(s->head[bhttp::field::expect], "100-continue")) {
      send_100(*s);  // admitted: the client waiting for it may send the body now
    }
    consume(*s);
    co_await await_body(s);
    if (s->closed) co_return std::nullopt;
    if (s->too_large) {
      answer = problem(11, bhttp::status::payload_too_large, "Payload Too Large",
                       "the request body is over the route's limit");
      co_return std::nullopt;
    }
    if (!s->end_stream) {
      answer = problem(11, bhttp::status::request_timeout, "Request Timeout", {});
      co_return std::nullopt;
    }
    r.bytes_in = s->body.size();
    request whole{s->head.method(), s->head.target(), 11};
    whole.base() = s->head;
    whole.body() = std::move(s->body);
    if (!whole.body().empty() || whole.method() == bhttp::verb::post ||
        whole.method() == bhttp::verb::put || whole.method() == bhttp::verb::patch)
      whole.content_length(whole.body().size());
    co_return whole;
  }

  /// Forwards a stream to an upstream that speaks HTTP/2 (h2_forward(): its body read whole
  /// first, up to the route's max_request_body, then sent with the client's trailers; the
  /// upstream's trailers kept for the answer).
  asio::awaitable<void> forward_h2(std::shared_ptr<h2_stream> s, forward_plan& plan,
                                   exchange_result& r, std::optional<response>& answer) {
    auto whole = co_await read_whole(s, plan.max_request_body, r, answer);
    if (!whole) {
      if (!s->closed) plan.watch.end(exchange_end::not_forwarded);
      co_return;
    }
    auto got = co_await h2_forward(pool, plan, std::move(*whole), r, s->request_trailers);
    answer = std::move(got.res);
    s->trailers = std::move(got.trailers);
  }

  /// Relays a forwarded stream to its upstream (relay(), the stream as its client side);
  /// `answer` is the session's own response when relay made one before any response byte.
  asio::awaitable<void> relay_stream(std::shared_ptr<h2_stream> s, forward_plan& plan,
                                     exchange_result& r, std::optional<response>& answer) {
    s->decided = true;
    s->relaying = true;
    plan.upgrade = false;  // (an upgrade is HTTP/1.1's; HTTP/2 has no 101)
    h2_client client(*this, s, limits.body_timeout, limits.send_timeout, limits.body_min_rate);
    auto out = co_await relay(client, plan, pool, peer_buffers, peer_relays);
    plan.watch.end(out.end);
    r.status = out.status;
    r.upstream_status = out.upstream_status;
    r.upstream_ms = out.upstream_ms;
    r.bytes_in = out.bytes_in;
    r.bytes_out = out.bytes_out;
    // What the relay did not read of the body is dropped, its window reopened.
    s->relaying = false;
    s->body.clear();
    consume(*s);
    if (out.answer) {
      answer = std::move(out.answer);
    } else if (!client.finished() && !s->closed && alive && ng) {
      nghttp2_submit_rst_stream(ng, NGHTTP2_FLAG_NONE, s->id, NGHTTP2_INTERNAL_ERROR);
      kick();
    }
  }

  // --- the connection's loops --------------------------------------------------------------

  asio::awaitable<void> reader() {
    auto hold = shared_from_this();
    auto& buf = peer.buffer;
    std::array<std::uint8_t, 16 * 1024> scratch{};
    if (buf.size() > 0) {
      const auto d = buf.data();
      const auto rv =
          nghttp2_session_mem_recv(ng, static_cast<const std::uint8_t*>(d.data()), d.size());
      buf.consume(buf.size());
      if (rv < 0) received_error(rv);
      kick();
      if (rv < 0) {
        alive = false;
        reader_done = true;
        done.cancel();
        kick();
        co_return;
      }
    }
    for (;;) {
      auto [ec, n] = co_await peer.stream.async_read_some(asio::buffer(scratch), use_tuple);
      if (ec || !alive) break;
      last_activity = steady::now();
      const auto rv = nghttp2_session_mem_recv(ng, scratch.data(), n);
      kick();
      if (rv < 0) {
        received_error(rv);  // (the writer sends the GOAWAY, then ends)
        break;
      }
      if (!nghttp2_session_want_read(ng) && !nghttp2_session_want_write(ng)) break;
    }
    alive = false;
    reader_done = true;
    done.cancel();
    kick();
  }

  asio::awaitable<void> writer() {
    std::string out;
    for (;;) {
      out.clear();
      for (;;) {
        const std::uint8_t* data = nullptr;
        const auto n = nghttp2_session_mem_send(ng, &data);
        if (n <= 0) break;
        out.append(reinterpret_cast<const char*>(data), static_cast<std::size_t>(n));
        if (out.size() >= 64 * 1024) break;
      }
      if (!out.empty()) {
        peer.stream.expires_after(limits.send_timeout);
        auto [ec, n] = co_await asio::async_write(peer.stream, asio::buffer(out), use_tuple);
        peer.stream.expires_never();
        (void)n;
        if (ec) break;
        continue;
      }
      if (!alive) break;
      if (!nghttp2_session_want_read(ng) && !nghttp2_session_want_write(ng)) break;
      wake.expires_at(steady::time_point::max());
      co_await wake.async_wait(use_tuple);
    }
    alive = false;
    error_code ignored;
    peer.stream.socket().cancel(ignored);  // ends the reader
    idle.cancel();
  }

  asio::awaitable<void> idle_watch() {
    auto hold = shared_from_this();
    while (alive) {
      idle.expires_at(last_activity + limits.idle_timeout);
      auto [ec] = co_await idle.async_wait(use_tuple);
      if (ec || !alive) break;
      if (streams.empty() && steady::now() - last_activity >= limits.idle_timeout) {
        nghttp2_session_terminate_session(ng, NGHTTP2_NO_ERROR);
        kick();
        break;
      }
      if (!streams.empty()) last_activity = steady::now();
    }
  }

  /// The drain: GOAWAY with the last stream taken; those streams still finish.
  void drain() {
    if (!alive || !ng) return;
    nghttp2_submit_goaway(ng, NGHTTP2_FLAG_NONE, nghttp2_session_get_last_proc_stream_id(ng),
                          NGHTTP2_NO_ERROR, nullptr, 0);
    kick();
  }

  /// Makes the nghttp2 session and queues the server's SETTINGS; false on failure.
  bool start() {
    nghttp2_session_callbacks* cbs = nullptr;
    if (nghttp2_session_callbacks_new(&cbs) != 0) return false;
    nghttp2_session_callbacks_set_on_begin_frame_callback(cbs, &on_begin_frame);
    nghttp2_session_callbacks_set_on_invalid_frame_recv_callback(cbs, &on_invalid_frame);
    nghttp2_session_callbacks_set_on_begin_headers_callback(cbs, &on_begin_headers);
    nghttp2_session_callbacks_set_on_header_callback(cbs, &on_header);
    nghttp2_session_callbacks_set_on_frame_recv_callback(cbs, &on_frame_recv);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cbs, &on_data_chunk);
    nghttp2_session_callbacks_set_on_stream_close_callback(cbs, &on_stream_close);
    nghttp2_session_callbacks_set_on_frame_send_callback(cbs, &on_frame_send);
    nghttp2_option* opt = nullptr;
    nghttp2_option_new(&opt);
    nghttp2_option_set_no_auto_window_update(opt, 1);
    nghttp2_option_set_max_settings(opt, 32);  // a SETTINGS frame with more entries: GOAWAY
    nghttp2_option_set_max_deflate_dynamic_table_size(opt, 4096);
    // (a backstop: on_begin_frame ends the flood at h2_max_continuations, with its GOAWAY)
    nghttp2_option_set_max_continuations(opt, 2 * h2_max_continuations);
    const int rv = nghttp2_session_server_new2(&ng, cbs, this, opt);
    nghttp2_option_del(opt);
    nghttp2_session_callbacks_del(cbs);
    if (rv != 0) return false;
    const nghttp2_settings_entry settings[] = {
        {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, h2_max_concurrent_streams},
        {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, limits.header_limit},
    };
    return nghttp2_submit_settings(ng, NGHTTP2_FLAG_NONE, settings, std::size(settings)) == 0;
  }
};

asio::awaitable<error_code> h2_client::read_body(char* data, std::size_t size,
                                                 std::chrono::milliseconds wait, std::size_t& got) {
  got = 0;
  if (over_) co_return bhttp::error::body_limit;
  auto& s = *s_;
  for (;;) {
    if (!s.body.empty()) {
      const std::size_t n = std::min(size, s.body.size());
      received_ += n;
      if (max_ != config::unlimited_size && received_ > max_) {
        over_ = true;
        co_return bhttp::error::body_limit;
      }
      std::memcpy(data, s.body.data(), n);
      s.body.erase(0, n);
      got = n;
      // The window reopens by what went on: the client sends as fast as the upstream takes.
      if (!s.closed && c_.ng) {
        nghttp2_session_consume(c_.ng, s.id, n);
        s.unconsumed -= std::min<std::uint64_t>(s.unconsumed, n);
        c_.kick();
      }
      co_return error_code{};
    }
    if (s.end_stream) co_return error_code{};                            // body_done()
    if (s.closed || !c_.alive) co_return bhttp::error::partial_message;  // reset, or gone
    if (wait.count() <= 0) co_return beast::error::timeout;
    s.body_wait.expires_after(wait);
    auto [ec] = co_await s.body_wait.async_wait(use_tuple);
    if (!ec && s.body.empty() && !s.end_stream && !s.closed) co_return beast::error::timeout;
  }
}

asio::awaitable<error_code> h2_client::send_continue() {
  co_return c_.send_100(*s_) ? error_code{} : error_code(asio::error::connection_reset);
}

bool h2_client::begin_response(const response_head& res, const response_shape& shape,
                               const forward_plan& plan) {
  // The client hop's header rules are HTTP/1.1's (client_hop), rendered once, then read back
  // as fields; submit_head drops the connection-specific ones.
  client_hop hop;
  hop.limited = plan.limited;
  hop.added_lines = plan.added_lines;
  hop.fields = plan.response_fields;
  if (shape.length && shape.status != 204 && shape.status / 100 != 1) {
    hop.framing = response_framing::content_length;
    hop.length = *shape.length;
  }
  render_client_response(heads_, res, hop);
  fields_.clear();
  std::string_view rest(heads_);
  rest.remove_prefix(std::min(rest.size(), rest.find("\r\n") + 2));  // the status line
  while (!rest.empty()) {
    const auto eol = rest.find("\r\n");
    const auto line = rest.substr(0, eol);
    rest.remove_prefix(eol == std::string_view::npos ? rest.size() : eol + 2);
    const auto colon = line.find(':');
    if (line.empty() || colon == std::string_view::npos) continue;
    auto value = line.substr(colon + 1);
    while (!value.empty() && value.front() == ' ') value.remove_prefix(1);
    fields_.insert(line.substr(0, colon), value);
  }
  status_ = shape.status;
  no_body_ = shape.no_body;
  head_sent_ = false;
  return true;
}

asio::awaitable<send_result> h2_client::write(const char* data, std::size_t n, bool last) {
  auto& s = *s_;
  send_result out;
  if (s.closed || !c_.alive || !c_.ng) {
    out.ec = asio::error::connection_reset;
    co_return out;
  }
  // What nghttp2 already took goes first: a slow reader keeps some bytes pending at every
  // write, so the queue would otherwise only grow (to the whole body).
  s.out.erase(0, s.out_pos);
  s.out_pos = 0;
  s.out.append(data, n);
  if (last) s.out_eof = true;
  if (!head_sent_) {
    head_sent_ = true;
    // A response that ends with its head goes without a provider (END_STREAM on HEADERS).
    c_.submit_head(s, status_, fields_, !(last && s.pending() == 0) && !no_body_);
  } else {
    nghttp2_session_resume_data(c_.ng, s.id);
  }
  c_.kick();
  out.bytes = n;
  if (last) finished_ = true;
  // Back-pressure: the next piece waits until the client took most of this one.
  while (s.pending() > h2_send_queue_bound && !s.closed && c_.alive) {
    s.send_wait.expires_after(write_wait_);
    auto [ec] = co_await s.send_wait.async_wait(use_tuple);
    if (!ec && s.pending() > h2_send_queue_bound && !s.closed) {
      out.ec = beast::error::timeout;
      finished_ = false;
      co_return out;
    }
  }
  if (s.closed && s.pending() > 0) {
    out.ec = asio::error::connection_reset;
    finished_ = false;
  }
  co_return out;
}

}  // namespace

asio::awaitable<void> serve_h2(h2_peer& peer) {
  auto c = std::make_shared<h2_connection>(peer);
  if (!c->start()) co_return;
  ++peer.stats.connections;
  peer.stream.expires_never();
  peer.on_drain = [weak = std::weak_ptr<h2_connection>(c)] {
    if (auto c = weak.lock()) c->drain();
  };
  // The reader and the idle watch run beside the writer; the writer's end stops both, and
  // this waits for the reader (it uses the socket and the buffer, which are the caller's).
  asio::co_spawn(c->ex, c->idle_watch(), asio::detached);
  asio::co_spawn(c->ex, c->reader(), asio::detached);
  co_await c->writer();
  while (!c->reader_done) {
    c->done.expires_at(steady::time_point::max());
    co_await c->done.async_wait(use_tuple);
  }
  peer.on_drain = nullptr;
  c->alive = false;
}

}  // namespace sluice::http
