// SPDX-License-Identifier: Apache-2.0
// An HTTP/2 upstream exchange on nghttp2's client session (the frames, HPACK, flow control
// and the protocol's state machine are nghttp2's): one connection, one stream. The coroutine
// alternates flushing nghttp2_session_mem_send to the socket and feeding what it reads to
// nghttp2_session_mem_recv until the stream closes; each read waits at most upstream.timeout.

#include "sluice/http/h2_upstream.hpp"

#include "sluice/errc.hpp"
#include "sluice/http/headers.hpp"
#include "sluice/http/problem.hpp"

#include <nghttp2/nghttp2.h>
#include <openssl/ssl.h>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/string.hpp>
#include <boost/beast/http/field.hpp>

#include <array>
#include <chrono>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

namespace sluice::http {

namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = beast::http;
using steady = std::chrono::steady_clock;

constexpr auto use_tuple = asio::as_tuple(asio::use_awaitable);

std::string lower(std::string_view s) {
  std::string out(s);
  for (auto& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

/// Calls `each(name, value)` for every field line of a rendered HTTP/1.1 head (the start
/// line skipped).
template <class F>
void each_line(std::string_view rendered, F&& each) {
  rendered.remove_prefix(std::min(rendered.size(), rendered.find("\r\n") + 2));
  while (!rendered.empty()) {
    const auto eol = rendered.find("\r\n");
    const auto line = rendered.substr(0, eol);
    rendered.remove_prefix(eol == std::string_view::npos ? rendered.size() : eol + 2);
    const auto colon = line.find(':');
    if (line.empty() || colon == std::string_view::npos) continue;
    auto value = line.substr(colon + 1);
    while (!value.empty() && value.front() == ' ') value.remove_prefix(1);
    each(line.substr(0, colon), value);
  }
}

/// One exchange's state, the nghttp2 session's user data.
struct exchange {
  std::string body;  ///< the request body
  std::size_t body_pos = 0;
  h2_fields request_trailers;  ///< sent after the body
  std::int32_t stream_id = -1;
  response res;
  bool head_seen = false;
  h2_fields trailers;
  std::uint64_t body_cap = 0;
  bool too_large = false;
  bool closed = false;
  std::uint32_t close_code = 0;

  static int on_header(nghttp2_session*, const nghttp2_frame* frame, const std::uint8_t* name,
                       std::size_t namelen, const std::uint8_t* value, std::size_t valuelen,
                       std::uint8_t, void* user) {
    auto* x = static_cast<exchange*>(user);
    if (frame->hd.type != NGHTTP2_HEADERS || frame->hd.stream_id != x->stream_id) return 0;
    const std::string_view n(reinterpret_cast<const char*>(name), namelen);
    const std::string_view v(reinterpret_cast<const char*>(value), valuelen);
    switch (frame->headers.cat) {
      case NGHTTP2_HCAT_RESPONSE:
        if (n == ":status") {
          unsigned code = 0;
          for (const char c : v) code = code * 10 + static_cast<unsigned>(c - '0');
          x->res.result(code);
        } else if (!n.empty() && n.front() != ':') {
          x->res.insert(n, v);
        }
        break;
      case NGHTTP2_HCAT_HEADERS:  // after the final head: the trailers
        if (x->head_seen && !n.empty() && n.front() != ':') x->trailers.emplace_back(n, v);
        break;
      default:
        break;
    }
    return 0;
  }

  static int on_frame_recv(nghttp2_session*, const nghttp2_frame* frame, void* user) {
    auto* x = static_cast<exchange*>(user);
    if (frame->hd.type == NGHTTP2_HEADERS && frame->hd.stream_id == x->stream_id &&
        frame->headers.cat == NGHTTP2_HCAT_RESPONSE && x->res.result_int() >= 200)
      x->head_seen = true;
    return 0;
  }

  static int on_data_chunk(nghttp2_session*, std::uint8_t, std::int32_t id,
                           const std::uint8_t* data, std::size_t len, void* user) {
    auto* x = static_cast<exchange*>(user);
    if (id != x->stream_id || x->too_large) return 0;
    if (x->res.body().size() + len > x->body_cap) {
      x->too_large = true;
      return 0;
    }
    x->res.body().append(reinterpret_cast<const char*>(data), len);
    return 0;
  }

  static int on_stream_close(nghttp2_session*, std::int32_t id, std::uint32_t code, void* user) {
    auto* x = static_cast<exchange*>(user);
    if (id != x->stream_id) return 0;
    x->closed = true;
    x->close_code = code;
    return 0;
  }

  static ssize_t read_body(nghttp2_session* ng, std::int32_t id, std::uint8_t* buf,
                           std::size_t length, std::uint32_t* flags, nghttp2_data_source* source,
                           void*) {
    auto* x = static_cast<exchange*>(source->ptr);
    const std::size_t n = std::min(length, x->body.size() - x->body_pos);
    std::memcpy(buf, x->body.data() + x->body_pos, n);
    x->body_pos += n;
    if (x->body_pos == x->body.size()) {
      *flags |= NGHTTP2_DATA_FLAG_EOF;
      if (!x->request_trailers.empty()) {  // the stream ends with the trailers' HEADERS
        *flags |= NGHTTP2_DATA_FLAG_NO_END_STREAM;
        std::vector<nghttp2_nv> nva;
        for (const auto& [tn, tv] : x->request_trailers)
          nva.push_back({reinterpret_cast<std::uint8_t*>(const_cast<char*>(tn.data())),
                         reinterpret_cast<std::uint8_t*>(const_cast<char*>(tv.data())), tn.size(),
                         tv.size(), NGHTTP2_NV_FLAG_NONE});
        nghttp2_submit_trailer(ng, id, nva.data(), nva.size());
      }
    }
    return static_cast<ssize_t>(n);
  }
};

/// An nghttp2 client session, deleted with it.
struct session_ptr {
  nghttp2_session* ng = nullptr;
  ~session_ptr() {
    if (ng) nghttp2_session_del(ng);
  }
};

/// The exchange on a connected socket; the failure kind and what went wrong when it failed.
asio::awaitable<std::optional<upstream_failure>> run(timed_socket& stream,
                                                     const config::upstream& up, exchange& x,
                                                     const std::vector<nghttp2_nv>& nva,
                                                     std::string& why) {
  session_ptr s;
  nghttp2_session_callbacks* cbs = nullptr;
  if (nghttp2_session_callbacks_new(&cbs) != 0) co_return upstream_failure::malformed;
  nghttp2_session_callbacks_set_on_header_callback(cbs, &exchange::on_header);
  nghttp2_session_callbacks_set_on_frame_recv_callback(cbs, &exchange::on_frame_recv);
  nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cbs, &exchange::on_data_chunk);
  nghttp2_session_callbacks_set_on_stream_close_callback(cbs, &exchange::on_stream_close);
  const int rv = nghttp2_session_client_new(&s.ng, cbs, &x);
  nghttp2_session_callbacks_del(cbs);
  if (rv != 0) co_return upstream_failure::malformed;
  nghttp2_submit_settings(s.ng, NGHTTP2_FLAG_NONE, nullptr, 0);
  nghttp2_data_provider provider{};
  provider.source.ptr = &x;
  provider.read_callback = &exchange::read_body;
  const bool has_body = !x.body.empty() || !x.request_trailers.empty();
  x.stream_id = nghttp2_submit_request(s.ng, nullptr, nva.data(), nva.size(),
                                       has_body ? &provider : nullptr, nullptr);
  if (x.stream_id < 0) {
    why = nghttp2_strerror(x.stream_id);
    co_return upstream_failure::malformed;
  }
  std::string out;
  std::array<std::uint8_t, 16 * 1024> scratch{};
  while (!x.closed) {
    out.clear();
    for (;;) {
      const std::uint8_t* data = nullptr;
      const auto n = nghttp2_session_mem_send(s.ng, &data);
      if (n <= 0) break;
      out.append(reinterpret_cast<const char*>(data), static_cast<std::size_t>(n));
    }
    if (!out.empty()) {
      stream.expires_after(up.timeout);
      auto [ec, n] = co_await asio::async_write(stream, asio::buffer(out), use_tuple);
      (void)n;
      if (ec) {
        why = stream.timed_out() ? "the request could not be sent within timeout" : ec.message();
        co_return stream.timed_out() ? upstream_failure::timeout : upstream_failure::closed;
      }
    }
    if (x.closed) break;
    if (!nghttp2_session_want_read(s.ng)) {
      why = "the upstream ended the HTTP/2 session (GOAWAY) before the response was whole";
      co_return x.head_seen ? upstream_failure::body_failed : upstream_failure::closed;
    }
    stream.expires_after(up.timeout);
    auto [ec, n] = co_await stream.async_read_some(asio::buffer(scratch), use_tuple);
    if (ec) {
      const bool late = stream.timed_out();
      why = late ? "no response within timeout" : ec.message();
      if (late) co_return upstream_failure::timeout;
      co_return x.head_seen ? upstream_failure::body_failed : upstream_failure::closed;
    }
    const auto got = nghttp2_session_mem_recv(s.ng, scratch.data(), n);
    if (got < 0) {
      why = nghttp2_strerror(static_cast<int>(got));
      co_return upstream_failure::malformed;
    }
    if (x.too_large) co_return upstream_failure::too_large;
  }
  stream.expires_never();
  if (x.too_large) co_return upstream_failure::too_large;
  if (x.close_code != NGHTTP2_NO_ERROR || !x.head_seen) {
    why = std::string("the upstream reset the stream: ") + nghttp2_http2_strerror(x.close_code);
    co_return x.head_seen ? upstream_failure::body_failed : upstream_failure::closed;
  }
  co_return std::nullopt;
}

}  // namespace

asio::awaitable<h2_upstream_answer> h2_forward(upstream_pool& pool, forward_plan& plan,
                                               request whole, exchange_result& r,
                                               h2_fields trailers) {
  const config::upstream& up = *plan.upstream;
  auto fail = [&](upstream_failure f, std::string_view why) {
    if (plan.on_failure) plan.on_failure(f, why);
    pool.count_failure();
    plan.watch.end(exchange_end::upstream_failed);
    const auto text = describe(f);
    h2_upstream_answer a{problem(11, text.status, text.title, text.detail), {}};
    set_lines(a.res.base(), plan.added_lines);
    return a;
  };

  // The upstream hop's fields, by the HTTP/1.1 hop's rules, read back as HTTP/2 fields.
  upstream_hop hop;
  hop.target = plan.target;
  hop.client_address = plan.client_address;
  hop.framing = whole.body().empty() ? body_framing::none : body_framing::content_length;
  hop.length = whole.body().size();
  hop.default_host = &up;
  std::string rendered;
  render_upstream_request(rendered, whole.base(), hop);
  std::vector<std::string> names;  // stable storage for the lowercased names
  std::vector<std::string_view> values;
  std::string authority;
  each_line(rendered, [&](std::string_view n, std::string_view v) {
    if (beast::iequals(n, "host")) {
      authority = v;
      return;
    }
    names.push_back(lower(n));
    values.push_back(v);
  });
  // TE is hop-by-hop in HTTP/1.1, but `te: trailers` is allowed in HTTP/2 (RFC 9113
  // §8.2.2) and gRPC servers want it.
  bool te_trailers = false;
  for (const auto t : bhttp::token_list{whole[bhttp::field::te]})
    if (beast::iequals(t, "trailers")) te_trailers = true;
  auto nv = [](std::string_view n, std::string_view v) {
    return nghttp2_nv{reinterpret_cast<std::uint8_t*>(const_cast<char*>(n.data())),
                      reinterpret_cast<std::uint8_t*>(const_cast<char*>(v.data())), n.size(),
                      v.size(), NGHTTP2_NV_FLAG_NONE};
  };
  const std::string method(whole.method_string());
  std::vector<nghttp2_nv> nva;
  nva.reserve(names.size() + 5);
  nva.push_back(nv(":method", method));
  nva.push_back(nv(":scheme", up.tls ? "https" : "http"));
  nva.push_back(nv(":authority", authority));
  nva.push_back(nv(":path", plan.target));
  for (std::size_t i = 0; i < names.size(); ++i) nva.push_back(nv(names[i], values[i]));
  if (te_trailers) nva.push_back(nv("te", "trailers"));

  plan.watch.relaying();
  const auto sent = steady::now();
  auto lease = co_await pool.acquire(up, sent + up.connect_timeout, true, plan.upstream_tls);
  if (!lease) {
    const auto f = lease.ec == sluice::errc::upstream_timeout ? upstream_failure::timeout
                   : lease.ec == sluice::errc::upstream_tls   ? upstream_failure::tls
                                                              : upstream_failure::unreachable;
    co_return fail(f, !lease.detail.empty() ? lease.detail
                      : lease.cause.empty() ? lease.ec.message()
                                            : lease.cause);
  }
  if (lease.stream->tls()) {
    // RFC 9113 §3.2: over TLS, HTTP/2 only when ALPN chose `h2` (else the upstream would
    // read our preface as a bad HTTP/1.1 request).
    const unsigned char* alpn = nullptr;
    unsigned alpn_size = 0;
    SSL_get0_alpn_selected(lease.stream->native_tls(), &alpn, &alpn_size);
    if (alpn_size != 2 || std::memcmp(alpn, "h2", 2) != 0) {
      boost::system::error_code ignored;
      lease.stream->socket().close(ignored);
      co_return fail(upstream_failure::tls, "the upstream did not agree to HTTP/2 (ALPN h2)");
    }
  }
  exchange x;
  x.body = std::move(whole.body());
  x.request_trailers = std::move(trailers);
  x.body_cap = plan.max_response_body == config::unlimited_size
                   ? upstream_pool::default_response_body_limit
                   : plan.max_response_body;
  std::string why;
  const auto failed = co_await run(*lease.stream, up, x, nva, why);
  boost::system::error_code ignored;
  lease.stream->socket().close(ignored);  // one connection per exchange (this step)
  if (failed) co_return fail(*failed, why.empty() ? describe(*failed).detail : why);

  r.upstream_ms = std::chrono::duration<double, std::milli>(steady::now() - sent).count();
  if (plan.on_response_head) plan.on_response_head(steady::now() - sent);
  r.upstream_status = x.res.result_int();

  // The client hop's rules are HTTP/1.1's, rendered once, then read back as fields.
  client_hop chop;
  chop.limited = plan.limited;
  chop.added_lines = plan.added_lines;
  chop.fields = plan.response_fields;
  chop.framing = response_framing::content_length;
  chop.length = x.res.body().size();
  render_client_response(rendered, x.res.base(), chop);
  h2_upstream_answer a{response{x.res.result(), 11}, std::move(x.trailers)};
  each_line(rendered, [&](std::string_view n, std::string_view v) { a.res.insert(n, v); });
  a.res.body() = std::move(x.res.body());
  plan.watch.end(exchange_end::complete);
  co_return a;
}

}  // namespace sluice::http
