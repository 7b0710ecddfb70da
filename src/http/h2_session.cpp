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

#include "http/h2_connection.hpp"

#include "sluice/http/h2_session.hpp"

namespace sluice::http {

bool starts_h2_preface(std::string_view bytes, bool& complete) {
  const auto n = std::min(bytes.size(), h2_preface.size());
  complete = bytes.size() >= h2_preface.size();
  return bytes.substr(0, n) == h2_preface.substr(0, n);
}

namespace h2_detail {

std::shared_ptr<h2_stream> h2_connection::find(std::int32_t id) {
  auto it = streams.find(id);
  return it == streams.end() ? nullptr : it->second;
}

bool h2_connection::send_100(h2_stream& s) {
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

void h2_connection::consume(h2_stream& s) {
  if (s.unconsumed == 0 || s.closed || !ng) return;
  nghttp2_session_consume(ng, s.id, s.unconsumed);
  s.unconsumed = 0;
  kick();
}

int h2_connection::calm() {
  if (!calmed) {
    calmed = true;
    ++stats.calm_goaways;
    nghttp2_session_terminate_session(ng, NGHTTP2_ENHANCE_YOUR_CALM);
  }
  return NGHTTP2_ERR_CALLBACK_FAILURE;
}

bool h2_connection::reset_flood() {
  const auto now = steady::now();
  resets.push_back(now);
  while (!resets.empty() && now - resets.front() > std::chrono::seconds(1)) resets.pop_front();
  return resets.size() > h2_max_resets_per_second;
}

bool h2_connection::control_flood() {
  const auto now = steady::now();
  if (now - control_window >= std::chrono::seconds(1)) {
    control_window = now;
    control_frames = 0;
  }
  return ++control_frames > h2_max_control_frames_per_second;
}

void h2_connection::received_error(std::int64_t rv) {
  if (rv == NGHTTP2_ERR_FLOODED || rv == NGHTTP2_ERR_TOO_MANY_CONTINUATIONS) {
    calm();  // (nghttp2's own bounds: its outbound queue, its CONTINUATION count)
  } else if (rv == NGHTTP2_ERR_BAD_CLIENT_MAGIC) {
    nghttp2_session_terminate_session(ng, NGHTTP2_PROTOCOL_ERROR);
  } else {
    nghttp2_session_terminate_session(ng, NGHTTP2_INTERNAL_ERROR);  // (a no-op after calm())
  }
  kick();
}

asio::awaitable<std::optional<request>> h2_connection::read_whole(std::shared_ptr<h2_stream> s,
                                                                  std::uint64_t cap,
                                                                  exchange_result& r,
                                                                  std::optional<response>& answer) {
  s->body_cap = cap;
  s->keep_body = true;
  s->decided = true;
  const auto cl = s->head[bhttp::field::content_length];
  std::uint64_t declared = 0;
  const bool has_length =
      !cl.empty() && std::from_chars(cl.data(), cl.data() + cl.size(), declared).ec == std::errc{};
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

asio::awaitable<void> h2_connection::forward_h2(std::shared_ptr<h2_stream> s, forward_plan& plan,
                                                exchange_result& r,
                                                std::optional<response>& answer) {
  auto whole = co_await read_whole(s, plan.max_request_body, r, answer);
  if (!whole) {
    if (!s->closed) plan.watch.end(exchange_end::not_forwarded);
    co_return;
  }
  auto got = co_await h2_forward(pool, plan, std::move(*whole), r, s->request_trailers);
  answer = std::move(got.res);
  s->trailers = std::move(got.trailers);
}

asio::awaitable<void> h2_connection::relay_stream(std::shared_ptr<h2_stream> s, forward_plan& plan,
                                                  exchange_result& r,
                                                  std::optional<response>& answer) {
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

asio::awaitable<void> h2_connection::reader() {
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

asio::awaitable<void> h2_connection::writer() {
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

asio::awaitable<void> h2_connection::idle_watch() {
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

void h2_connection::drain() {
  if (!alive || !ng) return;
  nghttp2_submit_goaway(ng, NGHTTP2_FLAG_NONE, nghttp2_session_get_last_proc_stream_id(ng),
                        NGHTTP2_NO_ERROR, nullptr, 0);
  kick();
}

bool h2_connection::start() {
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

}  // namespace h2_detail

using h2_detail::h2_connection;
using h2_detail::steady;
using h2_detail::use_tuple;
namespace asio = boost::asio;

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
