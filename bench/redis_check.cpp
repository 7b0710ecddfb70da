// SPDX-License-Identifier: Apache-2.0
// Redis check driver (bench/redis_cpu.sh and bench/memory.sh drive it): sends checks straight
// to a redis-server through the product's own store::redis_store (so the script gets the
// gateway's real keys and arguments), and prints how many were decided, allowed and refused.
// Redis-side figures (INFO commandstats, INFO memory) are read by the scripts around the run.
//
//   sluice-bench-redis-check PORT ALGORITHM LIMITS KEYS CHECKS [refuse|first|keep]
//                            [layout=hash|key] [name=NAME] [cost=N] [seconds=S]
//     ALGORITHM  token_bucket | fixed_window | sliding_window | sliding_log
//     LIMITS     limits per check (1..8), each its own limit name (own buckets)
//     KEYS       identities key-0000000 .. (KEYS-1, seven digits at least), cycled in order
//     CHECKS     checks to send (64 in flight at a time); the run stops after S seconds anyway
//     refuse     every limit has room for one unit per day and every check is refused (run
//                `first` once before, on the same keys); otherwise the limits are never reached
//     first      the same limits as refuse, with every key's first check admitted
//     keep       every limit 100 units per day: each check is admitted (up to 100 units per
//                key) and leaves a bucket that lives until its units are back (14.4 minutes
//                a unit for a token bucket, the window for the others), so after one check
//                per key every bucket is still there when the run ends (bench/memory.sh)
//     layout=    store.layout (default hash, 65,536 groups per limit)
//     name=      the first limit's name (default bench_0); limit l > 0 is NAME_l
//     cost=      units per check and limit (default 1)
//     seconds=   the run's bound in seconds (default 120)
// Exit status: 0; 1 when a check failed, a decision was not the expected one or nothing was
// decided; 2 for bad arguments.

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

enum class run_mode { never_reached, refuse, first, keep };

struct run_state {
  std::size_t next = 0, total = 0, keys = 0;
  std::size_t allowed = 0, refused = 0, failed = 0, unexpected = 0;
  run_mode mode = run_mode::never_reached;
  std::chrono::steady_clock::time_point stop_at;
  // What every check carries: its limits' names, algorithm, bucket and cost.
  std::vector<std::string> names;
  config::algorithm algo = config::algorithm::token_bucket;
  limiter::bucket_params bucket;
  std::int64_t cost = 1;
};

/// The identity of key k: key-0000000 .. (seven digits at least, as the gateway's API keys).
std::string identity(std::size_t k) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "key-%07zu", k);
  return buf;
}

/// The check of key k: one limit per name, each its own bucket. Made per check, so a run of
/// millions of keys holds no request per key.
limiter::check_request request_for(const run_state& st, std::size_t k) {
  limiter::check_request r;
  const std::string id = identity(k);
  for (const auto& name : st.names) {
    r.limits.push_back({limiter::bucket_key(name, limiter::key_namespace::api_key, id), st.algo,
                        st.bucket, st.cost, false});
  }
  return r;
}

asio::awaitable<void> client(store::redis_store& s, run_state& st) {
  while (st.next < st.total && std::chrono::steady_clock::now() < st.stop_at) {
    const std::size_t i = st.next++;
    auto r = co_await s.check(request_for(st, i % st.keys));
    if (!r) {
      ++st.failed;
      continue;
    }
    if (r->allowed) {
      ++st.allowed;
    } else {
      ++st.refused;
    }
    // Never reached and keep: every check admits. Refusal-heavy: only a key's first check
    // admits (first), or none (refuse).
    const bool want = st.mode == run_mode::never_reached || st.mode == run_mode::keep ||
                      (st.mode == run_mode::first && i < st.keys);
    if (r->allowed != want) ++st.unexpected;
  }
}

int usage() {
  std::fprintf(stderr,
               "usage: sluice-bench-redis-check PORT ALGORITHM LIMITS KEYS CHECKS "
               "[refuse|first|keep] [layout=hash|key] [name=NAME] [cost=N] [seconds=S]\n");
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
  store::redis_settings rs;
  std::string name = "bench_0";
  long seconds = 120;
  for (int a = 6; a < argc; ++a) {
    const std::string_view arg = argv[a];
    if (arg == "refuse") {
      st.mode = run_mode::refuse;
    } else if (arg == "first") {
      st.mode = run_mode::first;
    } else if (arg == "keep") {
      st.mode = run_mode::keep;
    } else if (arg == "layout=hash" || arg == "layout=key") {
      rs.layout.packed = arg == "layout=hash";
    } else if (arg.starts_with("name=") && arg.size() > 5) {
      name = std::string(arg.substr(5));
    } else if (arg.starts_with("cost=")) {
      st.cost = std::atol(argv[a] + 5);
    } else if (arg.starts_with("seconds=")) {
      seconds = std::atol(argv[a] + 8);
    } else {
      return usage();
    }
  }
  if (algo_name == "token_bucket") {
    st.algo = config::algorithm::token_bucket;
  } else if (algo_name == "fixed_window") {
    st.algo = config::algorithm::fixed_window;
  } else if (algo_name == "sliding_window") {
    st.algo = config::algorithm::sliding_window;
  } else if (algo_name == "sliding_log") {
    st.algo = config::algorithm::sliding_log;
  } else {
    return usage();
  }
  if (port == 0 || limits < 1 || limits > 8 || st.keys == 0 || st.total == 0 || st.cost < 1 ||
      seconds < 1)
    return usage();

  // Limits never reached: 1,000,000 units per hour (a token bucket keeps its balance, a window
  // its count, a log its stamps, as the gateway's would); refusal-heavy: 1 per day; keep: 100
  // per day (a bucket with a unit taken lives at least 14.4 minutes).
  config::limit_params p;
  switch (st.mode) {
    case run_mode::never_reached:
      p.rate.count = st.algo == config::algorithm::sliding_log ? 100'000 : 1'000'000;  // its max
      p.rate.period = std::chrono::milliseconds(3'600'000);
      break;
    case run_mode::refuse:
    case run_mode::first:
      p.rate.count = 1;
      p.rate.period = std::chrono::milliseconds(86'400'000);
      break;
    case run_mode::keep:
      p.rate.count = 100;
      p.rate.period = std::chrono::milliseconds(86'400'000);
      break;
  }
  if (st.cost > p.rate.count) return usage();
  st.bucket = limiter::bucket_params::from(p);
  st.names.push_back(name);
  for (int l = 1; l < limits; ++l) st.names.push_back(name + "_" + std::to_string(l));

  asio::io_context io;
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
  st.stop_at = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  const auto t0 = std::chrono::steady_clock::now();
  for (int c = 0; c < 64; ++c) asio::co_spawn(io, client(s, st), asio::detached);
  while (st.allowed + st.refused + st.failed < st.next || st.next < st.total) {
    if (std::chrono::steady_clock::now() >= st.stop_at + std::chrono::seconds(5)) break;
    if (io.run_one_for(std::chrono::milliseconds(100)) == 0 && st.next >= st.total) break;
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  s.stop();
  io.run_for(std::chrono::milliseconds(50));
  const std::size_t decided = st.allowed + st.refused;
  std::printf("checks=%zu allowed=%zu refused=%zu failed=%zu unexpected=%zu seconds=%.2f\n",
              decided + st.failed, st.allowed, st.refused, st.failed, st.unexpected, secs);
  if (decided == 0) {
    std::fprintf(stderr, "sluice-bench-redis-check: measured nothing: no check was decided\n");
    return 1;
  }
  return st.failed == 0 && st.unexpected == 0 ? 0 : 1;
}
