// SPDX-License-Identifier: Apache-2.0
// Rendering what the client is told: quota header fields (x-ratelimit, ietf), Retry-After,
// the 429 problem body and other problem bodies.

#include "fixture.hpp"

#include "sluice/http/problem.hpp"
#include "sluice/limiter/check.hpp"
#include "sluice/limiter/decision.hpp"
#include "sluice/limiter/keys.hpp"
#include "sluice/store/memory_store.hpp"

#include <benchmark/benchmark.h>

#include <chrono>
#include <string>
#include <vector>

namespace sluice::micro {
namespace {

/// Applied limits and a decided outcome for them.
struct decided {
  std::vector<limiter::applied_limit> applied;
  limiter::check_outcome outcome;
};

/// Decides `n` (1 or 3) token-bucket limits once; `refused`: the last one is empty, so the
/// check is refused and every header takes its refused form.
decided make_decided(std::size_t n, bool refused) {
  static const config::limit_params params[] = {
      {{100, std::chrono::minutes{1}}, 100},
      {{50, std::chrono::seconds{1}}, 100},
      {{1000000, std::chrono::hours{24}}, 1000000},
  };
  decided d;
  limiter::check_request check;
  check.now_ms_override = 1700000000000;
  for (std::size_t i = 0; i < n; ++i) {
    config::limit_params p = params[i];
    if (refused && i + 1 == n) p = {{1, std::chrono::hours{1}}, 1};
    const auto bucket = limiter::bucket_params::from(p);
    const std::string name = "limit_" + std::to_string(i);
    check.limits.push_back({limiter::bucket_key(name, limiter::key_namespace::api_key, "key-p"),
                            config::algorithm::token_bucket, bucket, 1, false});
    d.applied.push_back({name, config::algorithm::token_bucket, bucket, false});
  }
  store::memory_store store;
  d.outcome = store.decide(check);
  check.now_ms_override += 1;
  for (int i = 0; i < 3; ++i) d.outcome = store.decide(check);  // spend a little
  if (d.outcome.allowed == refused) std::abort();
  return d;
}

void quota_case(benchmark::State& state, std::size_t n, bool refused, bool x, bool ietf) {
  const decided d = make_decided(n, refused);
  config::header_sets sets;
  sets.x_ratelimit = x;
  sets.ietf = ietf;
  std::string lines;  // what the request path renders (reused, as a verdict's string would be)
  for (auto _ : state) {
    lines.clear();
    limiter::append_quota_lines(lines, d.applied, d.outcome, sets);
    benchmark::DoNotOptimize(lines.data());
  }
  state.counters["fields"] =
      static_cast<double>(limiter::quota_headers(d.applied, d.outcome, sets).size());
}

void BM_QuotaHeadersXRateLimit1(benchmark::State& s) {
  quota_case(s, 1, false, true, false);
}
BENCHMARK(BM_QuotaHeadersXRateLimit1);
void BM_QuotaHeadersIetf1(benchmark::State& s) {
  quota_case(s, 1, false, false, true);
}
BENCHMARK(BM_QuotaHeadersIetf1);
void BM_QuotaHeadersBoth1(benchmark::State& s) {
  quota_case(s, 1, false, true, true);
}
BENCHMARK(BM_QuotaHeadersBoth1);
void BM_QuotaHeadersXRateLimit3(benchmark::State& s) {
  quota_case(s, 3, false, true, false);
}
BENCHMARK(BM_QuotaHeadersXRateLimit3);
void BM_QuotaHeadersIetf3(benchmark::State& s) {
  quota_case(s, 3, false, false, true);
}
BENCHMARK(BM_QuotaHeadersIetf3);
void BM_QuotaHeadersBoth3(benchmark::State& s) {
  quota_case(s, 3, false, true, true);
}
BENCHMARK(BM_QuotaHeadersBoth3);
void BM_QuotaHeadersBoth3Refused(benchmark::State& s) {
  quota_case(s, 3, true, true, true);
}
BENCHMARK(BM_QuotaHeadersBoth3Refused);

void BM_RetryAfterSeconds3(benchmark::State& state) {
  const decided d = make_decided(3, true);
  for (auto _ : state) benchmark::DoNotOptimize(limiter::retry_after_seconds(d.applied, d.outcome));
}
BENCHMARK(BM_RetryAfterSeconds3);

void BM_JitteredRetryAfter(benchmark::State& state) {
  std::uint64_t r = 0x9e3779b97f4a7c15ULL;
  for (auto _ : state) {
    r = r * 6364136223846793005ULL + 1442695040888963407ULL;
    benchmark::DoNotOptimize(limiter::jittered_retry_after(12, std::chrono::seconds{2}, r));
  }
}
BENCHMARK(BM_JitteredRetryAfter);

void BM_ViolatedPolicies3(benchmark::State& state) {
  const decided d = make_decided(3, true);
  for (auto _ : state) benchmark::DoNotOptimize(limiter::violated_policies(d.applied, d.outcome));
}
BENCHMARK(BM_ViolatedPolicies3);

// The whole 429 rendering: Retry-After, violated policies, the problem+json body.
void BM_QuotaExceededBody(benchmark::State& state) {
  const decided d = make_decided(3, true);
  for (auto _ : state) {
    const auto retry = limiter::retry_after_seconds(d.applied, d.outcome);
    benchmark::DoNotOptimize(
        limiter::quota_exceeded_body(limiter::violated_policies(d.applied, d.outcome), retry));
  }
}
BENCHMARK(BM_QuotaExceededBody);

void BM_ProblemBody(benchmark::State& state) {
  for (auto _ : state) {
    benchmark::DoNotOptimize(http::problem_body(
        502, "Bad Gateway", "the upstream could not be reached: connection refused"));
  }
}
BENCHMARK(BM_ProblemBody);

// A detail that needs JSON escaping (quotes, backslash, control character).
void BM_ProblemBodyEscaped(benchmark::State& state) {
  for (auto _ : state) {
    benchmark::DoNotOptimize(http::problem_body(
        400, "Bad Request", "header \"X-API-Key\" given twice: a\\b\tc", "about:blank"));
  }
}
BENCHMARK(BM_ProblemBodyEscaped);

}  // namespace
}  // namespace sluice::micro
