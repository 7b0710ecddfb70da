// SPDX-License-Identifier: Apache-2.0
// Plan directory micro-benchmark (bench/plan_directory.sh drives it): the cost of an API key
// lookup on a cache hit (the worker's plan_cache, no round trip) and on a miss (one HGET on a
// redis_directory connection to a hash of millions of keys), and the memory of the cache
// (RSS delta per cached key).
//
//   sluice-bench-plan-directory PORT HASH KEYS CACHED
//     PORT    redis-server port on 127.0.0.1, holding HASH with fields key-00000000..KEYS-1
//     CACHED  entries to put in the cache for the hit and memory measurements
// Exit status: 0; 3 when a run of misses made no lookup or found no key (nothing measured).

#include "sluice/identity/plan_cache.hpp"
#include "sluice/store/redis_directory.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <random>
#include <string>
#include <vector>

namespace asio = boost::asio;
using clock_type = std::chrono::steady_clock;

namespace {

std::string key_of(std::size_t i) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "key-%08zu", i);
  return buf;
}

long rss_kb() {
  std::ifstream in("/proc/self/statm");
  long pages = 0, resident = 0;
  in >> pages >> resident;
  return resident * (sysconf(_SC_PAGESIZE) / 1024);
}

double percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  return v[static_cast<std::size_t>(p * (v.size() - 1))];
}

struct miss_result {
  std::vector<double> latencies_us;
  std::size_t found = 0, errors = 0;
  double wall_s = 0;
  unsigned coroutines = 0, finished = 0;
  clock_type::time_point end{};
};

// `concurrency` coroutines each doing `per` sequential HGETs of random keys (a fraction
// `absent` of them not in the hash).
asio::awaitable<void> hgets(sluice::store::redis_directory& dir, std::string hash, std::size_t keys,
                            std::size_t per, double absent, unsigned seed, miss_result* out) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<std::size_t> pick(0, keys - 1);
  std::bernoulli_distribution missing(absent);
  for (std::size_t i = 0; i < per; ++i) {
    const std::string k = missing(rng) ? "absent-" + std::to_string(pick(rng)) : key_of(pick(rng));
    const auto t0 = clock_type::now();
    auto r = co_await dir.hget(hash, k);
    out->latencies_us.push_back(
        std::chrono::duration<double, std::micro>(clock_type::now() - t0).count());
    if (!r)
      ++out->errors;
    else if (*r)
      ++out->found;
  }
  if (++out->finished == out->coroutines) out->end = clock_type::now();
}

miss_result run_misses(std::uint16_t port, const std::string& hash, std::size_t keys,
                       unsigned concurrency, std::size_t per, double absent) {
  asio::io_context ioc{1};
  sluice::store::redis_directory_settings s;
  s.port = port;
  s.command_timeout = std::chrono::milliseconds(1000);
  sluice::store::redis_directory dir(ioc.get_executor(), s);
  dir.start();
  while (!dir.connected()) ioc.run_one_for(std::chrono::milliseconds(10));
  miss_result out;
  out.coroutines = concurrency;
  const auto t0 = clock_type::now();
  for (unsigned c = 0; c < concurrency; ++c)
    asio::co_spawn(ioc, hgets(dir, hash, keys, per, absent, 1000 + c, &out), asio::detached);
  while (out.finished < concurrency && clock_type::now() - t0 < std::chrono::seconds(120))
    ioc.run_one_for(std::chrono::milliseconds(100));
  out.wall_s = std::chrono::duration<double>(out.end - t0).count();
  dir.stop();
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 5) {
    std::fprintf(stderr, "usage: %s PORT HASH KEYS CACHED\n", argv[0]);
    return 2;
  }
  const auto port = static_cast<std::uint16_t>(std::stoul(argv[1]));
  const std::string hash = argv[2];
  const std::size_t keys = std::stoul(argv[3]);
  const std::size_t cached = std::stoul(argv[4]);

  // --- memory and hit cost -----------------------------------------------------------------
  std::vector<std::string> names;  // built before the baseline so only the cache is counted
  names.reserve(cached);
  for (std::size_t i = 0; i < cached; ++i) names.push_back(key_of(i * (keys / cached)));
  const long before_kb = rss_kb();
  sluice::identity::plan_cache cache(cached);
  const auto now = sluice::identity::plan_cache::clock::now();
  for (std::size_t i = 0; i < cached; ++i)
    cache.put(names[i], i % 10 == 0 ? std::optional<std::string>() : std::string("pro"), now,
              std::chrono::seconds(3600));
  const long after_kb = rss_kb();
  std::printf("cache entries: %zu (10%% negative), key length %zu bytes\n", cache.size(),
              names.front().size());
  std::printf("cache RSS delta: %.1f MiB = %.0f bytes per cached key\n",
              (after_kb - before_kb) / 1024.0, (after_kb - before_kb) * 1024.0 / cached);

  std::mt19937_64 rng(7);
  std::uniform_int_distribution<std::size_t> pick(0, cached - 1);
  std::vector<std::size_t> order(2'000'000);
  for (auto& o : order) o = pick(rng);
  std::string plan;
  std::size_t hits = 0;
  const auto t0 = clock_type::now();
  for (std::size_t i : order) {
    if (cache.get(names[i], now, plan) != sluice::identity::cache_state::miss) ++hits;
  }
  const double hit_ns =
      std::chrono::duration<double, std::nano>(clock_type::now() - t0).count() / order.size();
  std::printf("cache hit: %.0f ns per lookup (%zu lookups, %zu hits, random keys over %zu)\n",
              hit_ns, order.size(), hits, cached);

  // --- miss cost: one HGET round trip ---------------------------------------------------------
  for (unsigned conc : {1u, 32u}) {
    const std::size_t per = conc == 1 ? 20000 : 2000;
    auto r = run_misses(port, hash, keys, conc, per, 0.1);
    const std::size_t n = r.latencies_us.size();
    if (n == 0 || r.found == 0) {
      std::fprintf(stderr,
                   "sluice-bench-plan-directory: measured nothing: %zu lookups with %u in flight, "
                   "%zu found, %zu errors\n",
                   n, conc, r.found, r.errors);
      return 3;
    }
    std::printf(
        "cache miss (HGET, %u in flight): p50 %.1f us, p99 %.1f us, mean %.1f us; "
        "%.0f lookups/s (%.1f us each amortised); %zu found, %zu absent, %zu errors\n",
        conc, percentile(r.latencies_us, 0.5), percentile(r.latencies_us, 0.99),
        [&] {
          double s = 0;
          for (double x : r.latencies_us) s += x;
          return s / n;
        }(),
        n / r.wall_s, r.wall_s * 1e6 / n, r.found, n - r.found - r.errors, r.errors);
  }
  return 0;
}
