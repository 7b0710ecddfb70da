// SPDX-License-Identifier: Apache-2.0
// Fuzz target: the response usage scanner (src/limiter/usage_scanner.cpp) — a streaming JSON
// reader following a path through Boost.JSON's basic_parser, and the SSE event-stream reader
// in front of it — and the strict header reading.
//
// Byte 0 chooses the case: bit 0 the body kind (JSON or event stream), bits 1–2 the path
// (`usage.total_tokens`, `a`, `choices[1].n`, `[0][0]`), bit 3 a small cap (1000) instead of
// 2^53, bit 4 a body cut (finish(false)). Byte 1 seeds the chunking. The rest is the body.
//
// Besides "no crash, no UB, no leak", the target checks the documented contracts: a reading
// is a cost, a failure, or a cost beside `cut`; a cost is at most the cap; the reading does
// not depend on where the body is split (whole, byte by byte, seeded chunks); a cut body
// reads as cut. For JSON it also checks the reading against a reference: Boost.JSON's DOM
// parse of the whole body, with the path looked up in the tree (the last duplicate member wins
// in both) and the number rules applied to the value found.

#include "sluice/limiter/usage_scanner.hpp"
#include "fuzz_check.hpp"

#include <boost/json.hpp>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace {

using sluice::limiter::usage_failure;
using sluice::limiter::usage_reading;
using sluice::limiter::usage_scanner;
using sluice::limiter::usage_source;

usage_source make_source(unsigned which, bool small_cap) {
  static const char* paths[] = {"usage.total_tokens", "a", "choices[1].n", "[0][0]"};
  std::string why;
  usage_source s;
  s.path = *sluice::limiter::parse_usage_path(paths[which & 3], why);
  s.max_cost = small_cap ? 1000 : sluice::limiter::default_max_usage;
  s.scan_limit = 1 << 16;
  return s;
}

usage_reading scan(usage_scanner& s, std::string_view type, std::string_view body,
                   std::size_t chunk_seed, bool complete) {
  s.start(type);
  std::size_t at = 0;
  std::uint32_t x = static_cast<std::uint32_t>(chunk_seed) * 2654435761u + 1;
  while (at < body.size()) {
    std::size_t n = body.size() - at;
    if (chunk_seed != 0) {
      x = x * 1103515245u + 12345u;
      n = std::min<std::size_t>(n, chunk_seed == 1 ? 1 : 1 + (x >> 16) % 17);
    }
    s.feed(body.substr(at, n));
    at += n;
  }
  return s.finish(complete);
}

/// The reference reading of a whole JSON body: the DOM, the path walked, the number rules.
usage_reading reference(const usage_source& src, std::string_view body) {
  boost::json::parse_options opt;
  opt.max_depth = sluice::limiter::max_json_depth;
  opt.allow_invalid_utf8 = true;
  boost::json::error_code ec;
  const boost::json::value doc = boost::json::parse(body, ec, {}, opt);
  if (ec) return {std::nullopt, usage_failure::malformed};
  const boost::json::value* v = &doc;
  for (const auto& step : src.path) {
    if (step.index) {
      const auto* a = v->if_array();
      if (!a || *step.index >= a->size()) return {std::nullopt, usage_failure::path_absent};
      v = &(*a)[*step.index];
    } else {
      const auto* o = v->if_object();
      const auto* m = o ? o->if_contains(step.member) : nullptr;
      if (!m) return {std::nullopt, usage_failure::path_absent};
      v = m;
    }
  }
  if (v->is_int64()) {
    const auto i = v->as_int64();
    if (i < 0) return {std::nullopt, usage_failure::negative};
    if (static_cast<std::uint64_t>(i) > src.max_cost)
      return {std::nullopt, usage_failure::too_large};
    return {static_cast<std::uint64_t>(i), std::nullopt};
  }
  if (v->is_uint64()) {
    if (v->as_uint64() > src.max_cost) return {std::nullopt, usage_failure::too_large};
    return {v->as_uint64(), std::nullopt};
  }
  if (v->is_double()) {
    const double d = v->as_double();
    if (std::isnan(d)) return {std::nullopt, usage_failure::not_a_number};
    if (d < 0) return {std::nullopt, usage_failure::negative};
    if (std::isinf(d)) return {std::nullopt, usage_failure::too_large};
    if (d != std::floor(d)) return {std::nullopt, usage_failure::not_a_number};
    if (d > static_cast<double>(src.max_cost)) return {std::nullopt, usage_failure::too_large};
    return {static_cast<std::uint64_t>(d), std::nullopt};
  }
  return {std::nullopt, usage_failure::not_a_number};
}

void check_shape(const usage_reading& r, const usage_source& src) {
  FUZZ_CHECK(r.cost || r.failure, "a reading says something");
  FUZZ_CHECK(!r.cost || !r.failure || *r.failure == usage_failure::cut,
             "a cost stands alone or beside cut");
  FUZZ_CHECK(!r.cost || *r.cost <= src.max_cost, "a cost is at most the cap");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 2) return 0;
  const unsigned mode = data[0];
  const std::size_t chunk_seed = data[1];
  const std::string_view body(reinterpret_cast<const char*>(data + 2), size - 2);
  const bool sse = mode & 1;
  const bool complete = !(mode & 16);
  const usage_source src = make_source((mode >> 1) & 3, mode & 8);
  const std::string_view type = sse ? "text/event-stream" : "application/json";

  usage_scanner s(src);
  const usage_reading whole = scan(s, type, body, 0, complete);
  check_shape(whole, src);
  FUZZ_CHECK(scan(s, type, body, 1, complete) == whole, "byte by byte reads the same");
  FUZZ_CHECK(scan(s, type, body, chunk_seed + 2, complete) == whole, "chunks read the same");
  if (!complete)
    FUZZ_CHECK(whole.failure == usage_failure::cut || (!sse && whole.failure),
               "a cut body reads as cut (JSON: or its earlier failure)");
  if (!sse && complete && body.size() <= src.scan_limit) {
    FUZZ_CHECK(whole == reference(src, body), "JSON reads as the DOM says");
  }
  // The header reading: the body's text as a header value.
  const auto h = sluice::limiter::read_usage_header(body, src.max_cost);
  check_shape(h, src);
  FUZZ_CHECK(!h.failure || *h.failure != usage_failure::cut, "a header is never cut");
  return 0;
}
