// SPDX-License-Identifier: Apache-2.0
// sluice-echo-upstream: a fast HTTP/1.1 upstream for demos and load runs.
//
//   sluice-echo-upstream --listen 127.0.0.1:8081 [--threads N]
//
// Answers every request `200 {"ok":true,"path":"<target path>"}` with keep-alive. One
// io_context and one SO_REUSEPORT listener per thread (the kernel spreads connections), one
// coroutine per connection; request bodies are read and discarded.

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/write.hpp>

#include <sys/socket.h>

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = beast::http;
using tcp = asio::ip::tcp;
constexpr auto use_tuple = asio::as_tuple(asio::use_awaitable);

std::string json_escape(std::string_view s) {
  std::string out;
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == '"' || c == '\\') {
      out.push_back('\\');
      out.push_back(ch);
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out.push_back(ch);
    }
  }
  return out;
}

asio::awaitable<void> session(tcp::socket socket) {
  beast::tcp_stream stream(std::move(socket));
  beast::flat_buffer buffer;
  for (;;) {
    bhttp::request_parser<bhttp::string_body> parser;
    parser.body_limit(16 * 1024 * 1024);
    stream.expires_after(std::chrono::seconds(60));
    auto [ec, n] = co_await bhttp::async_read(stream, buffer, parser, use_tuple);
    (void)n;
    if (ec) break;
    const auto& req = parser.get();
    std::string_view path = req.target();
    path = path.substr(0, path.find('?'));

    bhttp::response<bhttp::string_body> res{bhttp::status::ok, req.version()};
    res.set(bhttp::field::content_type, "application/json");
    res.body() = "{\"ok\":true,\"path\":\"" + json_escape(path) + "\"}";
    res.keep_alive(req.keep_alive());
    if (req.method() == bhttp::verb::head) {
      res.content_length(res.body().size());
      res.body().clear();
    } else {
      res.prepare_payload();
    }
    stream.expires_after(std::chrono::seconds(60));
    auto [wec, wn] = co_await bhttp::async_write(stream, res, use_tuple);
    (void)wn;
    if (wec || !res.keep_alive()) break;
  }
  boost::system::error_code ignored;
  stream.socket().shutdown(tcp::socket::shutdown_send, ignored);
}

asio::awaitable<void> accept_loop(std::shared_ptr<tcp::acceptor> acceptor) {
  for (;;) {
    auto [ec, socket] = co_await acceptor->async_accept(use_tuple);
    if (ec) {
      if (!acceptor->is_open()) co_return;
      continue;
    }
    boost::system::error_code ignored;
    socket.set_option(tcp::no_delay(true), ignored);
    asio::co_spawn(acceptor->get_executor(), session(std::move(socket)), asio::detached);
  }
}

std::shared_ptr<tcp::acceptor> listen_on(asio::io_context& ioc, const tcp::endpoint& ep) {
  auto acc = std::make_shared<tcp::acceptor>(ioc);
  acc->open(ep.protocol());
  acc->set_option(tcp::acceptor::reuse_address(true));
  const int one = 1;
  ::setsockopt(acc->native_handle(), SOL_SOCKET, SO_REUSEPORT, &one, sizeof one);
  acc->bind(ep);
  acc->listen(asio::socket_base::max_listen_connections);
  return acc;
}

int usage() {
  std::cerr << "usage: sluice-echo-upstream --listen HOST:PORT [--threads N]\n";
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::string listen = "127.0.0.1:8081";
  unsigned threads = std::max(1u, std::thread::hardware_concurrency());
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--listen" && i + 1 < argc) {
      listen = argv[++i];
    } else if (arg == "--threads" && i + 1 < argc) {
      threads = static_cast<unsigned>(std::max(1, std::atoi(argv[++i])));
    } else if (arg == "--help" || arg == "-h") {
      usage();
      return 0;
    } else {
      return usage();
    }
  }
  const auto colon = listen.rfind(':');
  if (colon == std::string::npos) return usage();
  std::string host = listen.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }

  try {
    tcp::endpoint ep{asio::ip::make_address(host),
                     static_cast<std::uint16_t>(std::stoul(listen.substr(colon + 1)))};
    std::vector<std::unique_ptr<asio::io_context>> contexts;
    std::vector<std::shared_ptr<tcp::acceptor>> acceptors;
    for (unsigned i = 0; i < threads; ++i) {
      contexts.push_back(std::make_unique<asio::io_context>(1));
      acceptors.push_back(listen_on(*contexts.back(), ep));
      ep = acceptors.back()->local_endpoint();  // port 0: the others share the port chosen
      asio::co_spawn(*contexts.back(), accept_loop(acceptors.back()), asio::detached);
    }
    std::cout << "sluice-echo-upstream listening on " << ep << " with " << threads << " threads"
              << std::endl;

    asio::signal_set signals(*contexts.front(), SIGINT, SIGTERM);
    signals.async_wait([&contexts](const boost::system::error_code&, int) {
      for (auto& c : contexts) c->stop();
    });

    std::vector<std::thread> pool;
    for (unsigned i = 1; i < threads; ++i) pool.emplace_back([c = contexts[i].get()] { c->run(); });
    contexts.front()->run();
    for (auto& c : contexts) c->stop();
    for (auto& t : pool) t.join();
  } catch (const std::exception& e) {
    std::cerr << "sluice-echo-upstream: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
