// sluice-accuracy: the accuracy harness's load and measurement (bench/accuracy.sh runs it).
//
//   sluice-accuracy --gateways HOST:PORT[,HOST:PORT...] --upstream-port PORT
//                   --algorithm token_bucket|fixed_window|sliding_window|sliding_log
//                   --rate N --period-ms P [--burst B] [--clients C] [--keys M] [--seconds T]
//                   [--mode greedy|paced|edge] [--interval-ms I] [--edge-ms E]
//
// It is the upstream (a keep-alive HTTP/1.1 server on 127.0.0.1:PORT that records, for every
// forwarded request, its X-Client key, its units (path /b costs 3, any other path 1) and the
// store time of its decision from `X-Sluice-Decided-At`, which the gateways send with
// `decision_time_header: X-Sluice-Decided-At`), and the C clients (one keep-alive connection
// each, round robin over the gateways, a random key of M and a random route per request, as
// fast as answers come: `greedy`). `--mode paced` is even traffic: each client sends once every
// I ms, the clients phase-shifted evenly. `--mode edge` is the adversarial traffic for window
// algorithms: clients send only in the last E ms of each aligned window (all of a window's
// requests at its end).
// After T seconds it prints one line: the ratios of bench/accuracy_analysis.hpp.

#include "accuracy_analysis.hpp"

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = beast::http;
using tcp = asio::ip::tcp;

struct recorder {
  std::mutex mutex;
  std::map<std::string, std::vector<sluice::bench::admitted>> per_key;
  std::atomic<std::uint64_t> requests{0}, without_time{0};
};

void serve_connection(tcp::socket socket, recorder& rec) {
  beast::flat_buffer buf;
  beast::error_code ec;
  for (;;) {
    bhttp::request<bhttp::string_body> req;
    bhttp::read(socket, buf, req, ec);
    if (ec) return;
    const std::string key(req["X-Client"]);
    const auto decided = req["X-Sluice-Decided-At"];
    const std::int64_t units = req.target().starts_with("/b") ? 3 : 1;
    ++rec.requests;
    if (decided.empty()) {
      ++rec.without_time;
    } else {
      std::lock_guard lock(rec.mutex);
      rec.per_key[key].push_back({std::stoll(std::string(decided)), units});
    }
    bhttp::response<bhttp::string_body> res{bhttp::status::ok, req.version()};
    res.body() = "ok";
    res.keep_alive(true);
    res.prepare_payload();
    bhttp::write(socket, res, ec);
    if (ec) return;
  }
}

std::int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

struct options {
  std::vector<std::pair<std::string, std::string>> gateways;
  unsigned short upstream_port = 0;
  std::string algorithm = "token_bucket";
  std::int64_t rate = 20, period_ms = 1000, burst = 0;
  int clients = 16, keys = 4, seconds = 5;
  std::string mode = "greedy";
  std::int64_t edge_ms = 100;
  std::int64_t interval_ms = 100;
};

}  // namespace

int main(int argc, char** argv) {
  options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--gateways") {
      std::size_t pos = 0;
      while (pos <= v.size()) {
        auto comma = v.find(',', pos);
        if (comma == std::string::npos) comma = v.size();
        const std::string hp = v.substr(pos, comma - pos);
        const auto colon = hp.rfind(':');
        o.gateways.emplace_back(hp.substr(0, colon), hp.substr(colon + 1));
        pos = comma + 1;
      }
    } else if (k == "--upstream-port") {
      o.upstream_port = static_cast<unsigned short>(std::stoi(v));
    } else if (k == "--algorithm") {
      o.algorithm = v;
    } else if (k == "--rate") {
      o.rate = std::stoll(v);
    } else if (k == "--period-ms") {
      o.period_ms = std::stoll(v);
    } else if (k == "--burst") {
      o.burst = std::stoll(v);
    } else if (k == "--clients") {
      o.clients = std::stoi(v);
    } else if (k == "--keys") {
      o.keys = std::stoi(v);
    } else if (k == "--seconds") {
      o.seconds = std::stoi(v);
    } else if (k == "--mode") {
      o.mode = v;
    } else if (k == "--interval-ms") {
      o.interval_ms = std::stoll(v);
    } else if (k == "--edge-ms") {
      o.edge_ms = std::stoll(v);
    } else {
      std::cerr << "sluice-accuracy: unknown option " << k << '\n';
      return 2;
    }
  }
  if (o.gateways.empty() || o.upstream_port == 0) {
    std::cerr << "sluice-accuracy: --gateways and --upstream-port are required\n";
    return 2;
  }
  sluice::bench::algo a = sluice::bench::algo::token_bucket;
  if (o.algorithm == "fixed_window") a = sluice::bench::algo::fixed_window;
  if (o.algorithm == "sliding_window") a = sluice::bench::algo::sliding_window;
  if (o.algorithm == "sliding_log") a = sluice::bench::algo::sliding_log;
  if (o.burst == 0) o.burst = o.rate;

  // The upstream.
  recorder rec;
  asio::io_context ioc;
  tcp::acceptor acceptor(ioc, {asio::ip::make_address("127.0.0.1"), o.upstream_port});
  std::thread([&] {
    for (;;) {
      beast::error_code ec;
      tcp::socket s(ioc);
      acceptor.accept(s, ec);
      if (ec) return;
      std::thread(serve_connection, std::move(s), std::ref(rec)).detach();
    }
  }).detach();

  // The clients.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(o.seconds);
  std::atomic<std::uint64_t> sent{0}, ok{0}, refused{0}, other{0};
  std::vector<std::thread> clients;
  for (int c = 0; c < o.clients; ++c) {
    clients.emplace_back([&, c] {
      std::mt19937_64 rng(static_cast<std::uint64_t>(c) * 7919 + 1);
      asio::io_context cio;
      const auto& gw = o.gateways[static_cast<std::size_t>(c) % o.gateways.size()];
      tcp::resolver resolver(cio);
      tcp::socket sock(cio);
      beast::error_code ec;
      asio::connect(sock, resolver.resolve(gw.first, gw.second), ec);
      beast::flat_buffer buf;
      const auto paced_start = std::chrono::steady_clock::now();
      std::int64_t paced_n = 0;
      while (!ec && std::chrono::steady_clock::now() < deadline) {
        if (o.mode == "paced") {
          // Even traffic: this client sends every interval_ms, phase-shifted by its index, so
          // the clients together offer C / interval_ms requests per ms spread evenly in time.
          const auto next = paced_start + std::chrono::milliseconds(
                                               o.interval_ms * paced_n++ +
                                               o.interval_ms * c / std::max(1, o.clients));
          std::this_thread::sleep_until(next);
        } else if (o.mode == "edge") {
          // Wait for the last edge_ms of the current aligned window.
          const std::int64_t t = now_ms();
          const std::int64_t off = t % o.period_ms;
          if (off < o.period_ms - o.edge_ms)
            std::this_thread::sleep_for(std::chrono::milliseconds(o.period_ms - o.edge_ms - off));
        }
        const int key = static_cast<int>(rng() % static_cast<std::uint64_t>(o.keys));
        const bool heavy = rng() % 4 == 0;  // a quarter of requests cost 3
        bhttp::request<bhttp::empty_body> req{bhttp::verb::get, heavy ? "/b" : "/a", 11};
        req.set(bhttp::field::host, "accuracy");
        req.set("X-Client", "client-" + std::to_string(key));
        bhttp::write(sock, req, ec);
        if (ec) break;
        bhttp::response<bhttp::string_body> res;
        bhttp::read(sock, buf, res, ec);
        if (ec) break;
        ++sent;
        if (res.result_int() == 200) {
          ++ok;
        } else if (res.result_int() == 429) {
          ++refused;
        } else {
          ++other;
        }
      }
    });
  }
  for (auto& t : clients) t.join();
  std::this_thread::sleep_for(std::chrono::milliseconds(200));

  std::map<std::string, std::vector<sluice::bench::admitted>> per_key;
  {
    std::lock_guard lock(rec.mutex);
    per_key = rec.per_key;
  }
  const auto r = sluice::bench::analyse(per_key, a, o.rate, o.period_ms, o.burst);
  std::printf(
      "algorithm=%s K=%zu C=%d M=%d T=%d mode=%s rate=%lld/%lldms burst=%lld sent=%llu "
      "admitted=%llu refused=%llu other=%llu untimed=%llu units=%lld ratio=%.3f "
      "rolling_ratio=%.3f worst_key=%s\n",
      o.algorithm.c_str(), o.gateways.size(), o.clients, o.keys, o.seconds, o.mode.c_str(),
      static_cast<long long>(o.rate), static_cast<long long>(o.period_ms),
      static_cast<long long>(o.burst), static_cast<unsigned long long>(sent.load()),
      static_cast<unsigned long long>(ok.load()), static_cast<unsigned long long>(refused.load()),
      static_cast<unsigned long long>(other.load()),
      static_cast<unsigned long long>(rec.without_time.load()), static_cast<long long>(r.units),
      r.ratio, r.rolling_ratio, r.worst_key.c_str());
  std::fflush(stdout);
  std::_Exit(0);  // detached upstream threads may still be blocked in read
}
