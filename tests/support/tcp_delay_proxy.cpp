// SPDX-License-Identifier: Apache-2.0
// A delaying TCP proxy for fault tests: one io_context on its own thread; per connection two
// pumps (client -> server, server -> client), each a reader coroutine queueing stamped chunks
// and a writer coroutine delivering them when due and not held. A timer per pump, cancelled
// to wake its writer, stands in for a condition variable (everything runs on one thread, so
// no wake-up is lost between the writer's check and its wait).

#include "support/tcp_delay_proxy.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>

#include <atomic>
#include <deque>
#include <future>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace sluice::test {
namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using error_code = boost::system::error_code;
using clock_type = std::chrono::steady_clock;
constexpr auto use_tuple = asio::as_tuple(asio::use_awaitable);

struct chunk {
  std::string bytes;
  clock_type::time_point due;
};

struct pump {
  explicit pump(asio::any_io_executor ex) : wake(ex) {}
  std::deque<chunk> queue;
  asio::steady_timer wake;
  bool eof = false;
};

struct connection {
  explicit connection(asio::any_io_executor ex) : client(ex), server(ex), up(ex), down(ex) {}
  tcp::socket client;
  tcp::socket server;
  pump up;    // client -> server
  pump down;  // server -> client (the replies)
  void close() {
    error_code ec;
    client.close(ec);
    server.close(ec);
    up.wake.cancel();
    down.wake.cancel();
  }
};

}  // namespace

struct tcp_delay_proxy::impl {
  asio::io_context ioc{1};
  tcp::acceptor acceptor{ioc};
  std::uint16_t target_port = 0;
  std::chrono::milliseconds delay{0};
  bool hold = false;
  std::atomic<std::size_t> accepted{0};
  std::vector<std::weak_ptr<connection>> connections;
  std::thread thread;

  void wake_all() {
    for (auto& w : connections) {
      if (auto c = w.lock()) {
        c->up.wake.cancel();
        c->down.wake.cancel();
      }
    }
  }

  template <class F>
  void run_on_thread(F f) {
    std::promise<void> done;
    asio::post(ioc, [&] {
      f();
      done.set_value();
    });
    done.get_future().wait();
  }
};

namespace {

asio::awaitable<void> read_side(tcp_delay_proxy::impl* self, std::shared_ptr<connection> c,
                                bool replies) {
  tcp::socket& from = replies ? c->server : c->client;
  pump& p = replies ? c->down : c->up;
  std::string buf(16 * 1024, '\0');
  while (true) {
    auto [ec, n] = co_await from.async_read_some(asio::buffer(buf), use_tuple);
    if (ec) break;
    p.queue.push_back({buf.substr(0, n),
                       clock_type::now() + (replies ? self->delay : std::chrono::milliseconds(0))});
    p.wake.cancel();
  }
  p.eof = true;
  p.wake.cancel();
}

asio::awaitable<void> write_side(tcp_delay_proxy::impl* self, std::shared_ptr<connection> c,
                                 bool replies) {
  tcp::socket& to = replies ? c->client : c->server;
  pump& p = replies ? c->down : c->up;
  while (true) {
    if (self->hold || p.queue.empty()) {
      if (!self->hold && p.eof) break;
      if (!to.is_open()) co_return;
      p.wake.expires_at(clock_type::time_point::max());
      co_await p.wake.async_wait(use_tuple);
      continue;
    }
    if (p.queue.front().due > clock_type::now()) {
      p.wake.expires_at(p.queue.front().due);
      co_await p.wake.async_wait(use_tuple);
      continue;
    }
    const std::string bytes = std::move(p.queue.front().bytes);
    p.queue.pop_front();
    auto [ec, n] = co_await asio::async_write(to, asio::buffer(bytes), use_tuple);
    if (ec) {
      c->close();
      co_return;
    }
  }
  // The source closed and everything was delivered: pass the close on.
  error_code ec;
  to.shutdown(tcp::socket::shutdown_send, ec);
  if (c->up.eof && c->down.eof) c->close();
}

asio::awaitable<void> serve(tcp_delay_proxy::impl* self, std::shared_ptr<connection> c) {
  auto [ec] = co_await c->server.async_connect(
      tcp::endpoint(asio::ip::address_v4::loopback(), self->target_port), use_tuple);
  if (ec) {
    c->close();
    co_return;
  }
  auto ex = c->client.get_executor();
  asio::co_spawn(ex, read_side(self, c, false), asio::detached);
  asio::co_spawn(ex, read_side(self, c, true), asio::detached);
  asio::co_spawn(ex, write_side(self, c, false), asio::detached);
  asio::co_spawn(ex, write_side(self, c, true), asio::detached);
}

asio::awaitable<void> accept_loop(tcp_delay_proxy::impl* self) {
  while (true) {
    auto c = std::make_shared<connection>(self->ioc.get_executor());
    auto [ec] = co_await self->acceptor.async_accept(c->client, use_tuple);
    if (ec) {
      if (!self->acceptor.is_open()) co_return;
      continue;
    }
    self->accepted.fetch_add(1);
    self->connections.push_back(c);
    asio::co_spawn(self->ioc, serve(self, c), asio::detached);
  }
}

}  // namespace

tcp_delay_proxy::tcp_delay_proxy(std::uint16_t target_port) : impl_(std::make_unique<impl>()) {
  impl_->target_port = target_port;
  tcp::endpoint ep(asio::ip::address_v4::loopback(), 0);
  impl_->acceptor.open(ep.protocol());
  impl_->acceptor.bind(ep);
  impl_->acceptor.listen();
  asio::co_spawn(impl_->ioc, accept_loop(impl_.get()), asio::detached);
  impl_->thread = std::thread([i = impl_.get()] { i->ioc.run(); });
}

tcp_delay_proxy::~tcp_delay_proxy() {
  impl_->run_on_thread([i = impl_.get()] {
    error_code ec;
    i->acceptor.close(ec);
    for (auto& w : i->connections) {
      if (auto c = w.lock()) c->close();
    }
    i->ioc.stop();
  });
  impl_->thread.join();
}

std::uint16_t tcp_delay_proxy::port() const {
  return impl_->acceptor.local_endpoint().port();
}

void tcp_delay_proxy::set_reply_delay(std::chrono::milliseconds delay) {
  impl_->run_on_thread([i = impl_.get(), delay] { i->delay = delay; });
}

void tcp_delay_proxy::set_hold(bool hold) {
  impl_->run_on_thread([i = impl_.get(), hold] {
    i->hold = hold;
    i->wake_all();
  });
}

void tcp_delay_proxy::set_target(std::uint16_t port) {
  impl_->run_on_thread([i = impl_.get(), port] { i->target_port = port; });
}

std::size_t tcp_delay_proxy::accepts() const {
  return impl_->accepted.load();
}

}  // namespace sluice::test
