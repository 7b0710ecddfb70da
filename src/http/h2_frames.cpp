// SPDX-License-Identifier: Apache-2.0
// An HTTP/2 connection's frames in and each stream's way out (h2_connection.hpp; the design is
// in h2_session.cpp): nghttp2's callbacks build each request head, count the defences' frames
// and feed the bodies; a stream whose head is whole runs through the handler, and its answer
// or relayed response is submitted with its data provider and trailers.

#include "http/h2_connection.hpp"

namespace sluice::http::h2_detail {

int h2_connection::on_begin_frame(nghttp2_session*, const nghttp2_frame_hd* hd, void* user) {
  auto* self = static_cast<h2_connection*>(user);
  if (hd->type == NGHTTP2_HEADERS) self->continuations = 0;
  if (hd->type == NGHTTP2_CONTINUATION && ++self->continuations > h2_max_continuations)
    return self->calm();
  return 0;
}

int h2_connection::on_invalid_frame(nghttp2_session*, const nghttp2_frame*, int, void* user) {
  auto* self = static_cast<h2_connection*>(user);
  return self->reset_flood() ? self->calm() : 0;
}

int h2_connection::on_begin_headers(nghttp2_session*, const nghttp2_frame* frame, void* user) {
  auto* self = static_cast<h2_connection*>(user);
  if (frame->hd.type != NGHTTP2_HEADERS || frame->headers.cat != NGHTTP2_HCAT_REQUEST) return 0;
  self->streams.emplace(frame->hd.stream_id,
                        std::make_shared<h2_stream>(self->ex, frame->hd.stream_id));
  return 0;
}

int h2_connection::on_header(nghttp2_session*, const nghttp2_frame* frame, const std::uint8_t* name,
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

int h2_connection::on_frame_recv(nghttp2_session*, const nghttp2_frame* frame, void* user) {
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

int h2_connection::on_data_chunk(nghttp2_session*, std::uint8_t, std::int32_t id,
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

int h2_connection::on_frame_send(nghttp2_session* ng, const nghttp2_frame* frame, void* user) {
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

int h2_connection::on_stream_close(nghttp2_session*, std::int32_t id, std::uint32_t, void* user) {
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

ssize_t h2_connection::read_body(nghttp2_session* ng, std::int32_t id, std::uint8_t* buf,
                                 std::size_t length, std::uint32_t* flags,
                                 nghttp2_data_source* source, void*) {
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

void h2_connection::submit_trailers(nghttp2_session* ng, std::int32_t id,
                                    const h2_fields& trailers) {
  std::vector<nghttp2_nv> nva;
  for (const auto& [n, v] : trailers)
    nva.push_back({reinterpret_cast<std::uint8_t*>(const_cast<char*>(n.data())),
                   reinterpret_cast<std::uint8_t*>(const_cast<char*>(v.data())), n.size(), v.size(),
                   NGHTTP2_NV_FLAG_NONE});
  nghttp2_submit_trailer(ng, id, nva.data(), nva.size());
}

asio::awaitable<void> h2_connection::await_body(std::shared_ptr<h2_stream> s) {
  s->body_wait.expires_after(limits.body_timeout);
  while (!s->end_stream && !s->closed && !s->too_large) {
    auto [ec] = co_await s->body_wait.async_wait(use_tuple);
    if (!ec) break;  // the body timeout passed
    if (s->body_wait.expiry() == steady::time_point::max()) break;
  }
}

void h2_connection::submit(h2_stream& s, response& res, bool head_request) {
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

void h2_connection::submit_head(h2_stream& s, unsigned code, const bhttp::fields& fields,
                                bool with_body) {
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

std::optional<bhttp::status> h2_connection::make_head(h2_stream& s) {
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

asio::awaitable<void> h2_connection::run_stream(std::shared_ptr<h2_stream> s) {
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

}  // namespace sluice::http::h2_detail
