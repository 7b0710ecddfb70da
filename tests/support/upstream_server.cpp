// SPDX-License-Identifier: Apache-2.0
// The recording upstream: one io_context on its own thread, one coroutine per connection.
// Recorded state is guarded by a mutex: the server thread writes it, the test thread reads it.

#include "support/upstream_server.hpp"

#include "sluice/http/problem.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/string.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/write.hpp>

#include <condition_variable>
#include <map>
#include <mutex>
#include <thread>

namespace sluice::test {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = beast::http;
using tcp = asio::ip::tcp;
using error_code = boost::system::error_code;
constexpr auto use_tuple = asio::as_tuple(asio::use_awaitable);

}  // namespace

std::string json_escape(std::string_view s) {
  std::string out;
  http::append_json_string(out, s);
  return out;
}

std::string recorded_request::header(std::string_view name) const {
  for (const auto& [n, v] : headers) {
    if (beast::iequals(n, name)) return v;
  }
  return {};
}

std::vector<std::string> recorded_request::values(std::string_view name) const {
  std::vector<std::string> out;
  for (const auto& [n, v] : headers) {
    if (beast::iequals(n, name)) out.push_back(v);
  }
  return out;
}

std::size_t recorded_request::count(std::string_view name) const {
  std::size_t n = 0;
  for (const auto& h : headers) {
    if (beast::iequals(h.first, name)) ++n;
  }
  return n;
}

namespace {

/// The server's state, shared by its thread's coroutines and the test thread.
struct server_state {
  asio::io_context ioc{1};
  tcp::acceptor acceptor{ioc};
  std::thread thread;
  std::uint16_t port = 0;
  bool stopped = false;  // test thread only

  // Server thread only.
  std::uint64_t next_connection = 0;
  std::map<std::uint64_t, std::weak_ptr<beast::tcp_stream>> connections;

  mutable std::mutex mutex;  // guards what follows
  canned_response canned;
  std::vector<recorded_request> recorded;
  std::size_t accepted = 0;

  void close_all_connections() {
    for (auto& [id, weak] : connections) {
      if (auto s = weak.lock()) s->close();
    }
  }
};

// Coroutines hold a plain pointer: the impl owns the io_context, which owns their frames, and
// outlives the server thread (the destructor joins it).
using impl_ptr = server_state*;

std::string echo_body(const recorded_request& r) {
  std::string body = "{\"method\":\"" + json_escape(r.method) + "\",\"target\":\"" +
                     json_escape(r.target) + "\",\"headers\":[";
  bool first = true;
  for (const auto& [n, v] : r.headers) {
    if (!first) body += ",";
    first = false;
    body += "[\"" + json_escape(n) + "\",\"" + json_escape(v) + "\"]";
  }
  body += "],\"body\":\"" + json_escape(r.body) + "\"}";
  return body;
}

asio::awaitable<void> serve(impl_ptr self, tcp::socket socket, std::uint64_t id) {
  auto stream = std::make_shared<beast::tcp_stream>(std::move(socket));
  self->connections.emplace(id, stream);
  beast::flat_buffer buffer;
  for (;;) {
    bhttp::request_parser<bhttp::string_body> parser;
    parser.header_limit(1024 * 1024);
    parser.body_limit(64 * 1024 * 1024);
    stream->expires_after(std::chrono::seconds(30));
    auto [ec, n] = co_await bhttp::async_read(*stream, buffer, parser, use_tuple);
    (void)n;
    if (ec) break;
    auto req = parser.release();

    recorded_request rec;
    rec.method = std::string(req.method_string());
    rec.target = std::string(req.target());
    rec.version = req.version();
    for (const auto& f : req) rec.headers.emplace_back(f.name_string(), f.value());
    rec.body = req.body();
    rec.connection = id;

    canned_response canned;
    {
      std::lock_guard lock(self->mutex);
      self->recorded.push_back(rec);
      canned = self->canned;
    }

    if (canned.delay.count() > 0) {
      asio::steady_timer t(self->ioc);
      t.expires_after(canned.delay);
      co_await t.async_wait(use_tuple);
    }
    if (canned.close_without_response) break;

    bhttp::response<bhttp::string_body> res{static_cast<bhttp::status>(canned.status), 11};
    bool close = !req.keep_alive();
    for (const auto& [name, value] : canned.headers) {
      res.insert(name, value);
      if (beast::iequals(name, "connection") && beast::iequals(value, "close")) close = true;
    }
    if (!res.has_content_length() && !res.count(bhttp::field::content_type)) {
      res.set(bhttp::field::content_type, "application/json");
    }
    res.body() = canned.body ? *canned.body : echo_body(rec);
    if (req.method() == bhttp::verb::head) {
      res.content_length(res.body().size());
      res.body().clear();
    } else if (canned.status != 204 && canned.status != 304) {
      res.content_length(res.body().size());
    }
    if (close && !res.count(bhttp::field::connection)) res.set(bhttp::field::connection, "close");

    stream->expires_after(std::chrono::seconds(30));
    auto [wec, wn] = co_await bhttp::async_write(*stream, res, use_tuple);
    (void)wn;
    if (wec || close) break;
  }
  error_code ignored;
  stream->socket().shutdown(tcp::socket::shutdown_send, ignored);
  stream->close();
  self->connections.erase(id);
}

asio::awaitable<void> accept_loop(impl_ptr self) {
  for (;;) {
    auto [ec, socket] = co_await self->acceptor.async_accept(use_tuple);
    if (ec) {
      if (!self->acceptor.is_open()) co_return;
      continue;
    }
    {
      std::lock_guard lock(self->mutex);
      ++self->accepted;
    }
    const auto id = ++self->next_connection;
    asio::co_spawn(self->ioc, serve(self, std::move(socket), id), asio::detached);
  }
}

}  // namespace

struct upstream_server::impl : server_state {};

upstream_server::upstream_server() : impl_(std::make_shared<impl>()) {
  const tcp::endpoint ep{asio::ip::make_address("127.0.0.1"), 0};
  impl_->acceptor.open(ep.protocol());
  impl_->acceptor.set_option(tcp::acceptor::reuse_address(true));
  impl_->acceptor.bind(ep);
  impl_->acceptor.listen();
  impl_->port = impl_->acceptor.local_endpoint().port();
  asio::co_spawn(impl_->ioc, accept_loop(impl_.get()), asio::detached);
  impl_->thread = std::thread([self = impl_] { self->ioc.run(); });
}

upstream_server::~upstream_server() {
  stop();
}

std::uint16_t upstream_server::port() const {
  return impl_->port;
}

std::string upstream_server::url() const {
  return "http://127.0.0.1:" + std::to_string(port());
}

void upstream_server::set_response(canned_response response) {
  std::lock_guard lock(impl_->mutex);
  impl_->canned = std::move(response);
}

void upstream_server::reset() {
  std::lock_guard lock(impl_->mutex);
  impl_->canned = canned_response{};
  impl_->recorded.clear();
  impl_->accepted = 0;
}

std::vector<recorded_request> upstream_server::requests() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->recorded;
}

std::size_t upstream_server::request_count() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->recorded.size();
}

std::size_t upstream_server::accepts() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->accepted;
}

void upstream_server::close_connections() {
  if (impl_->stopped) return;
  std::mutex done_mutex;
  std::condition_variable done_cv;
  bool done = false;
  asio::post(impl_->ioc, [&] {
    impl_->close_all_connections();
    std::lock_guard lock(done_mutex);
    done = true;
    done_cv.notify_one();
  });
  std::unique_lock lock(done_mutex);
  done_cv.wait(lock, [&] { return done; });
}

void upstream_server::stop() {
  if (impl_->stopped) return;
  impl_->stopped = true;
  asio::post(impl_->ioc, [self = impl_] {
    error_code ignored;
    self->acceptor.close(ignored);
    self->close_all_connections();
    self->ioc.stop();
  });
  if (impl_->thread.joinable()) impl_->thread.join();
}

}  // namespace sluice::test
