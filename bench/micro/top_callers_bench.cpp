// SPDX-License-Identifier: Apache-2.0
// The most limited callers: what one refusal costs to record (a mutex and a Space-Saving
// update), for a few repeated callers and for a flood of distinct ones (every record
// replaces the smallest counter), alone and with two threads recording at once; and reading
// the top 10 of a full 10-minute window.

#include "sluice/observability/top_callers.hpp"

#include <benchmark/benchmark.h>

#include <string>
#include <vector>

namespace sluice::micro {
namespace {

observability::top_callers& shared_top() {
  static observability::top_callers top({});
  return top;
}

std::vector<std::string> callers(std::size_t n) {
  std::vector<std::string> out;
  for (std::size_t i = 0; i < n; ++i) out.push_back("k" + std::to_string(1'000'000 + i));
  return out;
}

void BM_TopRecordRepeatedCaller(benchmark::State& state) {
  const auto keys = callers(16);
  std::size_t i = 0;
  for (auto _ : state) shared_top().record(keys[i++ % keys.size()], "items", "items_key", 1'000);
}
BENCHMARK(BM_TopRecordRepeatedCaller)->Threads(1)->Threads(2);

void BM_TopRecordDistinctCallers(benchmark::State& state) {
  const auto keys = callers(1 << 16);
  std::size_t i = 0;
  for (auto _ : state) shared_top().record(keys[i++ % keys.size()], "items", "items_key", 61'000);
}
BENCHMARK(BM_TopRecordDistinctCallers)->Threads(1)->Threads(2);

void BM_TopReadFullWindow(benchmark::State& state) {
  observability::top_callers top({});
  const auto keys = callers(4096);
  for (std::int64_t m = 0; m < 10; ++m)
    for (const auto& k : keys) top.record(k, "items", "items_key", m * 60'000);
  for (auto _ : state) benchmark::DoNotOptimize(top.top(10, 9 * 60'000));
}
BENCHMARK(BM_TopReadFullWindow);

}  // namespace
}  // namespace sluice::micro
