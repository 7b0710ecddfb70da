// SPDX-License-Identifier: Apache-2.0
// Reading a response's cost as its body streams by (limiter::usage_scanner): bytes per second
// on a 1 MB JSON body and on an SSE stream of 1,000 events, so the cost per response byte of a
// settled limit is on record.

#include "sluice/limiter/usage_scanner.hpp"

#include <benchmark/benchmark.h>

#include <string>
#include <vector>

namespace sluice::micro {
namespace {

limiter::usage_source source() {
  limiter::usage_source s;
  std::string why;
  s.path = *limiter::parse_usage_path("usage.total_tokens", why);
  s.scan_limit = std::size_t{4} << 20;
  return s;
}

/// A chat.completion body of about 1 MB: many choices with text, escapes and numbers, the
/// usage last (as OpenAI writes it).
const std::string& json_body() {
  static const std::string body = [] {
    std::string b = R"({"id":"chatcmpl-1","object":"chat.completion","created":1700000000,)"
                    R"("model":"m","choices":[)";
    for (int i = 0; b.size() < 1'000'000; ++i) {
      if (i) b += ',';
      b += R"({"index":)" + std::to_string(i) +
           R"(,"message":{"role":"assistant","content":"The quick brown fox jumps over the )"
           R"(lazy dog; \"quoted\", caf\u00e9, line\nbreak."},"logprobs":null,)"
           R"("finish_reason":"stop","scores":[0.25,-1.5e-3,42]})";
    }
    b += R"(],"usage":{"prompt_tokens":9,"completion_tokens":12,"total_tokens":21}})";
    return b;
  }();
  return body;
}

/// 1,000 OpenAI stream chunks (one content delta each), the usage chunk, then [DONE]: one
/// string per event, as the upstream's writes deliver them.
const std::vector<std::string>& sse_events() {
  static const std::vector<std::string> events = [] {
    std::vector<std::string> e;
    for (int i = 0; i < 1000; ++i) {
      e.push_back(R"(data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":)"
                  R"(1700000000,"model":"m","choices":[{"index":0,"delta":{"content":"word)" +
                  std::to_string(i) + R"( "},"finish_reason":null}],"usage":null})" + "\n\n");
    }
    e.push_back(R"(data: {"id":"chatcmpl-1","object":"chat.completion.chunk","choices":[],)"
                R"("usage":{"prompt_tokens":9,"completion_tokens":1000,"total_tokens":1009}})"
                "\n\n");
    e.push_back("data: [DONE]\n\n");
    return e;
  }();
  return events;
}

/// A 1 MB JSON body fed in pieces of range(0) bytes (16 KiB: a typical read).
void BM_usage_scan_json_1mb(benchmark::State& state) {
  const auto src = source();
  limiter::usage_scanner s(src);
  const std::string& body = json_body();
  const auto piece = static_cast<std::size_t>(state.range(0));
  for (auto _ : state) {
    s.start("application/json");
    for (std::size_t at = 0; at < body.size(); at += piece) {
      s.feed(std::string_view(body).substr(at, piece));
    }
    auto r = s.finish(true);
    benchmark::DoNotOptimize(r);
    if (r.cost != 21u) state.SkipWithError("wrong reading");
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * body.size()));
}
BENCHMARK(BM_usage_scan_json_1mb)->Arg(16384)->Arg(1 << 20);

/// An SSE stream of 1,000 events fed one event at a time.
void BM_usage_scan_sse_1000_events(benchmark::State& state) {
  const auto src = source();
  limiter::usage_scanner s(src);
  const auto& events = sse_events();
  std::size_t bytes = 0;
  for (const auto& e : events) bytes += e.size();
  for (auto _ : state) {
    s.start("text/event-stream");
    for (const auto& e : events) s.feed(e);
    auto r = s.finish(true);
    benchmark::DoNotOptimize(r);
    if (r.cost != 1009u) state.SkipWithError("wrong reading");
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * bytes));
  state.counters["events"] = static_cast<double>(events.size());
}
BENCHMARK(BM_usage_scan_sse_1000_events);

/// The body observed but not scanned (a JSON body over the scan limit): the floor.
void BM_usage_scan_over_limit(benchmark::State& state) {
  auto src = source();
  src.scan_limit = 1024;
  limiter::usage_scanner s(src);
  const std::string& body = json_body();
  for (auto _ : state) {
    s.start("application/json");
    for (std::size_t at = 0; at < body.size(); at += 16384) {
      s.feed(std::string_view(body).substr(at, 16384));
    }
    auto r = s.finish(true);
    benchmark::DoNotOptimize(r);
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * body.size()));
}
BENCHMARK(BM_usage_scan_over_limit);

}  // namespace
}  // namespace sluice::micro
