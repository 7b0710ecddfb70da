// SPDX-License-Identifier: Apache-2.0
// Bucket keys and the memory store's synchronous decision (memory_store::decide), for one and
// three limits, token bucket, fixed and sliding window, on one hot bucket or rotating buckets,
// and a fresh key per check below and at the store's bound (store.max_buckets).

#include "fixture.hpp"

#include "sluice/limiter/check.hpp"
#include "sluice/limiter/keys.hpp"
#include "sluice/store/memory_store.hpp"

#include <benchmark/benchmark.h>

#include <chrono>
#include <string>
#include <vector>

namespace sluice::micro {
namespace {

using limiter::key_namespace;

void BM_BucketKeyPlain(benchmark::State& state) {
  for (auto _ : state) {
    benchmark::DoNotOptimize(limiter::bucket_key("items_key", key_namespace::api_key, "key-a"));
  }
}
BENCHMARK(BM_BucketKeyPlain);

// An IPv6 /64 (':' and '/' are not plain): hashed with SHA-256.
void BM_BucketKeyHashedV6(benchmark::State& state) {
  for (auto _ : state) {
    benchmark::DoNotOptimize(
        limiter::bucket_key("items_ip", key_namespace::ip, "2001:db8:1:2::/64"));
  }
}
BENCHMARK(BM_BucketKeyHashedV6);

// A 200-byte caller value (too long to keep): hashed.
void BM_BucketKeyHashedLong(benchmark::State& state) {
  const std::string value(200, 'v');
  for (auto _ : state) {
    benchmark::DoNotOptimize(limiter::bucket_key("orders_tenant", key_namespace::header, value));
  }
}
BENCHMARK(BM_BucketKeyHashedLong);

void BM_PackedAddress(benchmark::State& state) {
  const std::string key = limiter::bucket_key("items_key", key_namespace::api_key, "key-a");
  for (auto _ : state) benchmark::DoNotOptimize(limiter::packed_address(key, 65536));
}
BENCHMARK(BM_PackedAddress);

/// One limit of a benchmark check: algorithm, rate N/period, burst.
struct limit_spec {
  const char* name;
  config::algorithm algorithm;
  std::int64_t count;
  std::chrono::milliseconds period;
  std::int64_t burst;  ///< token bucket only; 0 = count
};

constexpr auto kHour = std::chrono::milliseconds{3600000};
constexpr auto kMinute = std::chrono::milliseconds{60000};

// Never refuses during a run: a huge burst or window. The token buckets refill slowly, so a
// spent bucket stays live (a full bucket expires, and deciding it again is a fresh insert).
constexpr limit_spec kTokenBucket{"tb", config::algorithm::token_bucket, 1000, kHour, 1000000000};
constexpr limit_spec kFixed{"fw", config::algorithm::fixed_window, 1000000000000, kHour, 0};
constexpr limit_spec kSliding{"sw", config::algorithm::sliding_window, 1000000000000, kHour, 0};
// Refuses every request after the first of each bucket.
constexpr limit_spec kTokenBucketEmpty{"tb_empty", config::algorithm::token_bucket, 1, kHour, 1};

/// Check requests for `identities` callers, each holding one limit_check per spec.
std::vector<limiter::check_request> make_checks(const std::vector<limit_spec>& specs,
                                                std::size_t identities) {
  std::vector<limiter::check_request> out(identities);
  for (std::size_t i = 0; i < identities; ++i) {
    for (const auto& s : specs) {
      config::limit_params p;
      p.rate.count = s.count;
      p.rate.period = s.period;
      p.burst = s.burst;
      out[i].limits.push_back(
          {limiter::bucket_key(s.name, key_namespace::api_key, "key-" + std::to_string(i)),
           s.algorithm, limiter::bucket_params::from(p), 1, false});
    }
  }
  return out;
}

// decide() over `specs`, cycling through state.range(0) identities on a fresh store.
void decide_case(benchmark::State& state, const std::vector<limit_spec>& specs, bool want_allowed) {
  store::memory_store store;
  const auto checks = make_checks(specs, static_cast<std::size_t>(state.range(0)));
  // Warm every bucket once, so the loop measures updates rather than first inserts.
  for (const auto& c : checks) store.decide(c);
  if (store.decide(checks[0]).allowed != want_allowed) {
    state.SkipWithError("unexpected decision");
    return;
  }
  std::size_t i = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(store.decide(checks[i]));
    if (++i == checks.size()) i = 0;
  }
  state.counters["buckets"] = static_cast<double>(store.size());
}

void BM_DecideTokenBucket1(benchmark::State& state) {
  decide_case(state, {kTokenBucket}, true);
}
BENCHMARK(BM_DecideTokenBucket1)->Arg(1)->Arg(10000);

void BM_DecideTokenBucket3(benchmark::State& state) {
  decide_case(state,
              {kTokenBucket,
               {"tb2", config::algorithm::token_bucket, 100, kHour, 1000000000},
               {"tb3", config::algorithm::token_bucket, 10, kMinute, 1000000000}},
              true);
}
BENCHMARK(BM_DecideTokenBucket3)->Arg(1)->Arg(10000);

void BM_DecideTokenBucketRefused(benchmark::State& state) {
  decide_case(state, {kTokenBucketEmpty}, false);
}
BENCHMARK(BM_DecideTokenBucketRefused)->Arg(1)->Arg(10000);

void BM_DecideFixedWindow1(benchmark::State& state) {
  decide_case(state, {kFixed}, true);
}
BENCHMARK(BM_DecideFixedWindow1)->Arg(1)->Arg(10000);

void BM_DecideSlidingWindow1(benchmark::State& state) {
  decide_case(state, {kSliding}, true);
}
BENCHMARK(BM_DecideSlidingWindow1)->Arg(1)->Arg(10000);

// One limit of each: token bucket, fixed window, sliding window, in one atomic check.
void BM_DecideMixed3(benchmark::State& state) {
  decide_case(state, {kTokenBucket, kFixed, kSliding}, true);
}
BENCHMARK(BM_DecideMixed3)->Arg(1)->Arg(10000);

// Two threads deciding on one shared store: the same hot bucket (arg 1) or 10,000 buckets.
void BM_DecideTokenBucketShared(benchmark::State& state) {
  static store::memory_store store;
  static const auto hot = make_checks({kTokenBucket}, 1);
  static const auto many = make_checks({kTokenBucket}, 10000);
  const auto& checks = state.range(0) == 1 ? hot : many;
  std::size_t i = static_cast<std::size_t>(state.thread_index()) * 5003 % checks.size();
  for (auto _ : state) {
    benchmark::DoNotOptimize(store.decide(checks[i]));
    if (++i == checks.size()) i = 0;
  }
}
BENCHMARK(BM_DecideTokenBucketShared)->Arg(1)->Arg(10000)->Threads(2)->UseRealTime();

// Every check a fresh key (10/1h, one token spent: live for 6 minutes), on a store whose bound
// is state.range(0) buckets (0: no bound in practice). With a bound, the store is first filled
// to it, so every measured check makes room (samples and evicts one bucket) before it inserts.
void BM_DecideFreshKey(benchmark::State& state) {
  const auto bound =
      state.range(0) == 0 ? std::uint64_t{1} << 40 : static_cast<std::uint64_t>(state.range(0));
  store::memory_store store({}, bound);
  auto check = make_checks({{"fresh", config::algorithm::token_bucket, 10, kHour, 10}}, 1)[0];
  std::uint64_t n = 0;
  auto next_key = [&check, &n] {
    check.limits[0].key =
        limiter::bucket_key("fresh", key_namespace::header, "caller-" + std::to_string(n++));
  };
  if (state.range(0) != 0) {
    while (store.stats().buckets < store.capacity()) {
      for (int i = 0; i < 10000; ++i) {
        next_key();
        store.decide(check);
      }
    }
  }
  const auto evictions_before = store.stats().evictions;
  for (auto _ : state) {
    next_key();
    benchmark::DoNotOptimize(store.decide(check));
  }
  const auto st = store.stats();
  state.counters["buckets"] = static_cast<double>(st.buckets);
  state.counters["evictions"] = static_cast<double>(st.evictions - evictions_before);
}
// A fixed count: without a bound the store grows by one bucket per iteration.
BENCHMARK(BM_DecideFreshKey)->Arg(0)->Arg(100000)->Arg(1000000)->Iterations(500000);

}  // namespace
}  // namespace sluice::micro
