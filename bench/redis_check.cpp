// SPDX-License-Identifier: Apache-2.0
// Redis check driver (bench/redis_cpu.sh drives it): sends checks straight to a redis-server
// through the product's own store::redis_store (so the script gets the gateway's real keys
// and arguments), and prints how many were decided, allowed and refused. Redis-side figures
// (INFO commandstats) are read by the script around the run.
//
//   sluice-bench-redis-check PORT ALGORITHM LIMITS KEYS CHECKS [refuse|first]
//     ALGORITHM  token_bucket | fixed_window | sliding_window | sliding_log
//     LIMITS     limits per check (1..8), each its own limit name (own buckets)
//     KEYS       identities, cycled in order (key-0 .. key-KEYS-1)
//     CHECKS     checks to send (64 in flight at a time); the run stops after 120 s anyway
//     refuse     every limit has room for one unit per day and every check is refused (run
//                `first` once before, on the same keys); otherwise the limits are never reached
//     first      the same limits as refuse, with every key's first check admitted
// Exit status: 0, or 1 when a check failed or a decision was not the expected one.

#include "sluice/limiter/check.hpp"
#include "sluice/limiter/keys.hpp"
#include "sluice/store/redis_store.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

namespace asio = boost::asio;
using namespace sluice;

namespace {

struct run_state {
  std::size_t next = 0, total = 0, keys = 0;
  std::size_t allowed = 0, refused = 0, failed = 0, unexpected = 0;
  bool refuse = false;  // one unit per day
  bool first = false;   // every key's first check admits, the others are refused
  std::chrono::steady_clock::time_point stop_at;
  std::vector<limiter::check_request> templates;  // one per key
};

asio::awaitable<void> client(store::redis_store& s, run_state& st) {
  while (st.next < st.total && std::chrono::steady_clock::now() < st.stop_at) {
    const std::size_t i = st.next++;
    const std::size_t k = i % st.keys;
    auto r = co_await s.check(st.templates[k]);
    if (!r) {
      ++st.failed;
      continue;
    }
    if (r->allowed) {
      ++st.allowed;
    } else {
      ++st.refused;
    }
    // Never reached: every check admits. Refusal-heavy: only a key's first check admits.
    const bool want = !st.refuse || (st.first && i < st.keys);
    if (r->allowed != want) ++st.unexpected;
  }
}

int usage() {
  std::fprintf(
      stderr, "usage: sluice-bench-redis-check PORT ALGORITHM LIMITS KEYS CHECKS [refuse|first]\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 6) return usage();
  const auto port = static_cast<std::uint16_t>(std::atoi(argv[1]));
  const std::string_view algo_name = argv[2];
  const int limits = std::atoi(argv[3]);
  run_state st;
  st.keys = static_cast<std::size_t>(std::atol(argv[4]));
  st.total = static_cast<std::size_t>(std::atol(argv[5]));
  const std::string_view mode = argc > 6 ? argv[6] : "";
  st.first = mode == "first";
  st.refuse = st.first || mode == "refuse";
  if (!mode.empty() && !st.refuse) return usage();
  config::algorithm algo;
  if (algo_name == "token_bucket") {
    algo = config::algorithm::token_bucket;
  } else if (algo_name == "fixed_window") {
    algo = config::algorithm::fixed_window;
  } else if (algo_name == "sliding_window") {
    algo = config::algorithm::sliding_window;
  } else if (algo_name == "sliding_log") {
    algo = config::algorithm::sliding_log;
  } else {
    return usage();
  }
  if (port == 0 || limits < 1 || limits > 8 || st.keys == 0 || st.total == 0) return usage();

  // Limits never reached: 1,000,000 units per hour (a token bucket keeps its balance, a window
  // its count, a log its stamps, as the gateway's would); refusal-heavy: 1 per day.
  config::limit_params p;
  p.rate.count = st.refuse ? 1 : 1'000'000;
  p.rate.period =
      st.refuse ? std::chrono::milliseconds(86'400'000) : std::chrono::milliseconds(3'600'000);
  if (algo == config::algorithm::sliding_log && !st.refuse) p.rate.count = 100'000;  // its max
  const auto bucket = limiter::bucket_params::from(p);
  st.templates.resize(st.keys);
  for (std::size_t k = 0; k < st.keys; ++k) {
    for (int l = 0; l < limits; ++l) {
      st.templates[k].limits.push_back(
          {limiter::bucket_key("bench_" + std::to_string(l), limiter::key_namespace::api_key,
                               "key-" + std::to_string(k)),
           algo, bucket, 1, false});
    }
  }

  asio::io_context io;
  store::redis_settings rs;
  rs.port = port;
  rs.command_timeout = std::chrono::milliseconds(1000);
  rs.connect_timeout = std::chrono::milliseconds(1000);
  rs.breaker_failures = 0;
  store::redis_store s(io.get_executor(), rs);
  s.start();
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (!s.stats().connected && std::chrono::steady_clock::now() < give_up) {
    io.run_for(std::chrono::milliseconds(10));
  }
  if (!s.stats().connected) {
    std::fprintf(stderr, "sluice-bench-redis-check: cannot connect to 127.0.0.1:%u\n", port);
    return 1;
  }
  st.stop_at = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  const auto t0 = std::chrono::steady_clock::now();
  for (int c = 0; c < 64; ++c) asio::co_spawn(io, client(s, st), asio::detached);
  while (st.allowed + st.refused + st.failed < st.next || st.next < st.total) {
    if (std::chrono::steady_clock::now() >= st.stop_at + std::chrono::seconds(5)) break;
    if (io.run_one_for(std::chrono::milliseconds(100)) == 0 && st.next >= st.total) break;
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  s.stop();
  io.run_for(std::chrono::milliseconds(50));
  std::printf("checks=%zu allowed=%zu refused=%zu failed=%zu unexpected=%zu seconds=%.2f\n",
              st.allowed + st.refused + st.failed, st.allowed, st.refused, st.failed, st.unexpected,
              secs);
  return st.failed == 0 && st.unexpected == 0 ? 0 : 1;
}
