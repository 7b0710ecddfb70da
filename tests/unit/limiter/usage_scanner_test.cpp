// SPDX-License-Identifier: Apache-2.0
#include "sluice/limiter/usage_scanner.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <new>
#include <optional>
#include <random>
#include <string>
#include <vector>

// Every allocation of this test binary is counted, so a test can show that scanning a large body
// allocates nothing (the scanner's state is bounded, it never holds the body). The replacements
// pair malloc with free; GCC cannot see that through inlining and warns.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif
namespace {
std::atomic<std::size_t> allocations{0};
}  // namespace

void* operator new(std::size_t n) {
  allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept {
  std::free(p);
}
void operator delete(void* p, std::size_t) noexcept {
  ::operator delete(p);
}

namespace sluice::limiter {

void PrintTo(const usage_reading& r, std::ostream* os) {
  *os << "{cost: " << (r.cost ? std::to_string(*r.cost) : "none")
      << ", failure: " << (r.failure ? label(*r.failure) : "none") << "}";
}

namespace {

using F = usage_failure;

usage_reading ok(std::uint64_t n) {
  return {n, std::nullopt};
}
usage_reading bad(F f) {
  return {std::nullopt, f};
}
usage_reading cut_at(std::uint64_t n) {
  return {n, F::cut};
}

usage_source body_source(std::string_view path = "usage.total_tokens") {
  std::string why;
  auto steps = parse_usage_path(path, why);
  EXPECT_TRUE(steps) << why;
  usage_source s;
  s.path = steps.value_or(std::vector<usage_path_step>{});
  return s;
}

/// Feeds `body` split at `cuts` (ascending offsets) and finishes.
usage_reading scan(usage_scanner& s, std::string_view type, std::string_view body,
                   const std::vector<std::size_t>& cuts, bool complete = true) {
  s.start(type);
  std::size_t at = 0;
  for (const std::size_t c : cuts) {
    s.feed(body.substr(at, c - at));
    at = c;
  }
  s.feed(body.substr(at));
  return s.finish(complete);
}

/// The reading of `body` fed whole, at every single split point, byte by byte and in 50
/// random chunkings: all must agree (the scanner sees bytes, not chunks).
void expect_every_split(const usage_source& src, std::string_view type, std::string_view body,
                        const usage_reading& want, bool complete = true) {
  usage_scanner s(src);
  ASSERT_EQ(scan(s, type, body, {}, complete), want) << "whole: " << body;
  for (std::size_t i = 0; i <= body.size(); ++i) {
    ASSERT_EQ(scan(s, type, body, {i}, complete), want) << "split at " << i << ": " << body;
  }
  std::vector<std::size_t> bytes;
  for (std::size_t i = 1; i < body.size(); ++i) bytes.push_back(i);
  ASSERT_EQ(scan(s, type, body, bytes, complete), want) << "byte by byte: " << body;
  std::mt19937 rng(42);
  for (int round = 0; round < 50; ++round) {
    std::vector<std::size_t> cuts;
    std::size_t at = 0;
    while (true) {
      at += std::uniform_int_distribution<std::size_t>(0, 7)(rng);
      if (at >= body.size()) break;
      cuts.push_back(at);
    }
    ASSERT_EQ(scan(s, type, body, cuts, complete), want)
        << "random round " << round << ": " << body;
  }
}

struct json_case {
  const char* name;
  const char* body;
  usage_reading want;
  const char* path = "usage.total_tokens";
};

// Non-streamed JSON bodies: the number at the path, and every way it can fail to be one.
const json_case json_cases[] = {
    {"plain", R"({"usage":{"total_tokens":1234}})", ok(1234)},
    {"openai_completion",
     R"({"id":"chatcmpl-1","object":"chat.completion","created":1700000000,"model":"m",)"
     R"("choices":[{"index":0,"message":{"role":"assistant","content":"Hi \"there\" {1}"},)"
     R"("finish_reason":"stop"}],"usage":{"prompt_tokens":9,"completion_tokens":12,)"
     R"("total_tokens":21}})",
     ok(21)},
    {"another_member", R"({"usage":{"prompt_tokens":9,"completion_tokens":12}})", ok(12),
     "usage.completion_tokens"},
    {"zero", R"({"usage":{"total_tokens":0}})", ok(0)},
    {"minus_zero", R"({"usage":{"total_tokens":-0}})", ok(0)},
    {"whitespace_everywhere", " \n{ \"usage\" :\t{ \"total_tokens\" : 7 } }\r\n ", ok(7)},
    {"whole_fraction", R"({"usage":{"total_tokens":12.0}})", ok(12)},
    {"whole_exponent", R"({"usage":{"total_tokens":1e3}})", ok(1000)},
    {"cap_itself", R"({"usage":{"total_tokens":9007199254740992}})", ok(9007199254740992)},
    {"escaped_key", R"({"us\u0061ge":{"total\u005ftokens":8}})", ok(8)},
    {"last_duplicate_wins", R"({"usage":{"total_tokens":5},"usage":{"total_tokens":7}})", ok(7)},
    {"last_duplicate_replaces_the_subtree", R"({"usage":{"total_tokens":5},"usage":3})",
     bad(F::path_absent)},
    {"last_duplicate_without_the_member",
     R"({"usage":{"total_tokens":5},"usage":{"prompt_tokens":1}})", bad(F::path_absent)},
    {"same_names_elsewhere_ignored",
     R"({"a":[{"usage":{"total_tokens":1}}],"usage":{"inner":{"total_tokens":3},)"
     R"("total_tokens":4,"x":[[{"total_tokens":9}]]},"total_tokens":6})",
     ok(4)},
    {"fraction", R"({"usage":{"total_tokens":12.5}})", bad(F::not_a_number)},
    {"string_number", R"({"usage":{"total_tokens":"123"}})", bad(F::not_a_number)},
    {"null", R"({"usage":{"total_tokens":null}})", bad(F::not_a_number)},
    {"bool", R"({"usage":{"total_tokens":true}})", bad(F::not_a_number)},
    {"object_value", R"({"usage":{"total_tokens":{"n":5}}})", bad(F::not_a_number)},
    {"array_value", R"({"usage":{"total_tokens":[5]}})", bad(F::not_a_number)},
    {"negative", R"({"usage":{"total_tokens":-5}})", bad(F::negative)},
    {"negative_fraction", R"({"usage":{"total_tokens":-0.5}})", bad(F::negative)},
    {"above_cap", R"({"usage":{"total_tokens":9007199254740993}})", bad(F::too_large)},
    {"above_uint64", R"({"usage":{"total_tokens":99999999999999999999999}})", bad(F::too_large)},
    {"huge_exponent", R"({"usage":{"total_tokens":1e300}})", bad(F::too_large)},
    {"absent_member", R"({"usage":{"prompt_tokens":5}})", bad(F::path_absent)},
    {"key_prefix_and_longer", R"({"usage":{"total_token":5,"total_tokens_x":6}})",
     bad(F::path_absent)},
    {"nested_elsewhere", R"({"x":{"usage":{"total_tokens":5}}})", bad(F::path_absent)},
    {"step_is_a_number", R"({"usage":5})", bad(F::path_absent)},
    {"step_is_an_array", R"({"usage":[{"total_tokens":5}]})", bad(F::path_absent)},
    {"root_is_an_array", R"([{"usage":{"total_tokens":5}}])", bad(F::path_absent)},
    {"root_is_a_number", "5", bad(F::path_absent)},
    {"index", R"({"choices":[{"n":1},{"n":2}]})", ok(2), "choices[1].n"},
    {"index_first", R"({"choices":[{"n":1},{"n":2}]})", ok(1), "choices[0].n"},
    {"index_past_end", R"({"choices":[{"n":1},{"n":2}]})", bad(F::path_absent), "choices[2].n"},
    {"index_of_scalars", R"([4,[5],6])", ok(6), "[2]"},
    {"index_nested", R"([[1,2],[3,4]])", ok(3), "[1][0]"},
    {"index_on_an_object", R"({"0":{"n":3}})", bad(F::path_absent), "[0].n"},
    {"member_named_like_a_number", R"({"0":{"n":3}})", ok(3), "0.n"},
    {"unclosed", R"({"usage":{"total_tokens":5})", bad(F::malformed)},
    {"trailing_garbage", R"({"usage":{"total_tokens":5}} x)", bad(F::malformed)},
    {"two_documents", R"({"usage":{"total_tokens":5}}{})", bad(F::malformed)},
    {"syntax_error", R"({"usage":{"total_tokens":5,}})", bad(F::malformed)},
    {"bad_number", R"({"usage":{"total_tokens":05}})", bad(F::malformed)},
    {"empty", "", bad(F::malformed)},
    {"blank", " \r\n", bad(F::malformed)},
};

TEST(usage_scanner, json_bodies_at_every_split_point) {
  for (const auto& c : json_cases) {
    SCOPED_TRACE(c.name);
    expect_every_split(body_source(c.path), "application/json", c.body, c.want);
  }
}

TEST(usage_scanner, invalid_utf8_in_a_string_is_tolerated) {
  const std::string body = "{\"text\":\"caf\xC3 \xFF\xFE\",\"usage\":{\"total_tokens\":3}}";
  expect_every_split(body_source(), "application/json", body, ok(3));
  // A UTF-8 sequence split between chunks (é is C3 A9).
  expect_every_split(body_source(), "application/json",
                     "{\"t\":\"\xC3\xA9\xE2\x82\xAC\",\"usage\":{\"total_tokens\":4}}", ok(4));
}

TEST(usage_scanner, nesting_deeper_than_the_limit_is_malformed) {
  const std::string deep =
      std::string(max_json_depth + 1, '[') + std::string(max_json_depth + 1, ']');
  const std::string at_limit =
      "{\"usage\":{\"total_tokens\":1},\"x\":" + std::string(max_json_depth - 1, '[') +
      std::string(max_json_depth - 1, ']') + "}";
  const usage_source src = body_source();
  usage_scanner s(src);
  EXPECT_EQ(scan(s, "application/json", deep, {}), bad(F::malformed));
  EXPECT_EQ(scan(s, "application/json", at_limit, {}), ok(1));
}

TEST(usage_scanner, media_types) {
  const std::string body = R"({"usage":{"total_tokens":5}})";
  const usage_source src = body_source();
  usage_scanner s(src);
  for (const char* type :
       {"application/json", "application/json; charset=utf-8", "Application/JSON;charset=UTF-8",
        " application/json ", "application/vnd.api+json", "application/problem+json"}) {
    EXPECT_EQ(scan(s, type, body, {}), ok(5)) << type;
  }
  for (const char* type : {"", "text/plain", "application/jsonx", "application/x-json", "+json",
                           "/+json", "text/html; a=application/json"}) {
    EXPECT_EQ(scan(s, type, body, {}), bad(F::not_json)) << type;
    s.start(type);
    EXPECT_FALSE(s.wants_body()) << type;
  }
}

TEST(usage_scanner, a_cut_json_body_keeps_only_what_a_complete_part_said) {
  const usage_source src = body_source();
  // The number was followed by a byte: it is whole.
  expect_every_split(src, "application/json", R"({"usage":{"total_tokens":5}, "x":)", cut_at(5),
                     false);
  usage_scanner s(src);
  // "12" may be the start of "123": a number in flight is not read.
  EXPECT_EQ(scan(s, "application/json", R"({"usage":{"total_tokens":12)", {}, false), bad(F::cut));
  EXPECT_EQ(scan(s, "application/json", R"({"usage":{"total_to)", {}, false), bad(F::cut));
  // A whole document whose connection then failed: the cost, and that it was cut.
  EXPECT_EQ(scan(s, "application/json", R"({"usage":{"total_tokens":5}})", {}, false), cut_at(5));
  // A complete body that is not a whole document is malformed, not cut.
  EXPECT_EQ(scan(s, "application/json", R"({"usage":{"total_tokens":5},)", {}, true),
            bad(F::malformed));
}

TEST(usage_scanner, a_body_over_the_scan_limit_is_not_read) {
  usage_source src = body_source();
  src.scan_limit = 32;
  const std::string fits = R"({"usage":{"total_tokens":5}})";         // 28 bytes
  const std::string over = R"({"usage":{"total_tokens":5}, "a":1})";  // 35 bytes
  expect_every_split(src, "application/json", fits, ok(5));
  expect_every_split(src, "application/json", over, bad(F::over_scan_limit));
  usage_scanner s(src);
  // A stated length over the limit: not scanned at all.
  s.start("application/json", std::nullopt, over.size());
  EXPECT_FALSE(s.wants_body());
  s.feed(over);
  EXPECT_EQ(s.finish(true), bad(F::over_scan_limit));
  EXPECT_EQ(s.bytes_seen(), over.size());
  s.start("application/json", std::nullopt, fits.size());
  EXPECT_TRUE(s.wants_body());
  s.feed(fits);
  EXPECT_EQ(s.finish(true), ok(5));
}

TEST(usage_scanner, the_cap_is_the_sources) {
  usage_source src = body_source();
  src.max_cost = 8000;
  usage_scanner s(src);
  EXPECT_EQ(scan(s, "application/json", R"({"usage":{"total_tokens":8000}})", {}), ok(8000));
  EXPECT_EQ(scan(s, "application/json", R"({"usage":{"total_tokens":8001}})", {}),
            bad(F::too_large));
  EXPECT_EQ(scan(s, "application/json", R"({"usage":{"total_tokens":8000.5}})", {}),
            bad(F::not_a_number));
  EXPECT_EQ(scan(s, "application/json", R"({"usage":{"total_tokens":8e3}})", {}), ok(8000));
}

// -- Event streams --------------------------------------------------------------------------

std::string openai_chunk(const std::string& content) {
  return R"(data: {"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,)"
         R"("delta":{"content":")" +
         content + R"("},"finish_reason":null}],"usage":null})" + "\n\n";
}

std::string openai_stream(std::uint64_t total, const std::string& nl = "\n") {
  std::string s;
  for (const char* word : {"Hello", " there", ", {friend}", "\\n"}) s += openai_chunk(word);
  s += R"(data: {"id":"c1","object":"chat.completion.chunk","choices":[],"usage":)"
       R"({"prompt_tokens":3,"completion_tokens":4,"total_tokens":)" +
       std::to_string(total) + "}}\n\n";
  s += "data: [DONE]\n\n";
  if (nl != "\n") {
    std::string out;
    for (const char c : s) out += c == '\n' ? nl : std::string(1, c);
    return out;
  }
  return s;
}

struct sse_case {
  const char* name;
  std::string body;
  usage_reading want;
  bool complete = true;
};

const std::vector<sse_case>& sse_cases() {
  static const std::vector<sse_case> cases = {
      {"openai_usage_chunk", openai_stream(77), ok(77)},
      {"crlf", openai_stream(78, "\r\n"), ok(78)},
      {"cr", openai_stream(79, "\r"), ok(79)},
      {"no_space_after_colon", "data:{\"usage\":{\"total_tokens\":3}}\n\n", ok(3)},
      {"two_spaces_after_colon", "data:  {\"usage\":{\"total_tokens\":3}}\n\n", ok(3)},
      {"multi_line_data", "data: {\"usage\":\ndata: {\"total_tokens\"\ndata: :9}}\n\n", ok(9)},
      {"multi_line_data_crlf", "data: {\"usage\":\r\ndata: {\"total_tokens\":10}}\r\n\r\n", ok(10)},
      {"comments_and_fields",
       ": keep-alive\n\nretry: 1000\nid: 7\nevent: delta\n: a comment with data: in it\n"
       "data: {\"usage\":{\"total_tokens\":11}}\nid: 8\n\n: bye\n",
       ok(11)},
      {"data_without_colon_is_an_empty_line",
       "data: {\"usage\":{\"total_tokens\":12}\ndata\ndata:}\n\n", ok(12)},
      {"leading_bom",
       "\xEF\xBB\xBF"
       "data: {\"usage\":{\"total_tokens\":13}}\n\n",
       ok(13)},
      {"the_last_event_with_the_path_wins",
       "data: {\"usage\":{\"total_tokens\":1}}\n\ndata: {\"usage\":{\"total_tokens\":2}}\n\n"
       "data: {\"choices\":[]}\n\ndata: [DONE]\n\n",
       ok(2)},
      {"a_bad_value_in_the_last_event_is_its_failure",
       "data: {\"usage\":{\"total_tokens\":1}}\n\ndata: {\"usage\":{\"total_tokens\":-2}}\n\n",
       bad(F::negative)},
      {"usage_null_does_not_carry_the_path", openai_chunk("x") + openai_chunk("y"),
       bad(F::path_absent)},
      {"no_event_has_the_path", "data: {\"choices\":[]}\n\ndata: [DONE]\n\n", bad(F::path_absent)},
      {"empty_stream", "", bad(F::path_absent)},
      {"other_field_names_are_not_data",
       "Data: {\"usage\":{\"total_tokens\":1}}\n\ndat: {\"usage\":{\"total_tokens\":1}}\n\n"
       "datas: {\"usage\":{\"total_tokens\":1}}\n\n data: {\"usage\":{\"total_tokens\":1}}\n\n",
       bad(F::path_absent)},
      {"two_documents_in_one_event_are_not_json",
       "data: {\"usage\":{\"total_tokens\":1}}\ndata: {\"a\":1}\n\n", bad(F::path_absent)},
      {"an_event_without_its_blank_line_is_cut",
       "data: {\"usage\":{\"total_tokens\":1}}\n\ndata: {\"usage\":{\"total_tokens\":2}}\n",
       cut_at(1)},
      {"cut_mid_line", "data: {\"usage\":{\"total_tokens\":1}}\n\ndata: {\"choi", cut_at(1)},
      {"cut_before_any_usage", "data: {\"choices\":[]}\n\ndata: {\"usage\":{\"total_tok",
       bad(F::cut)},
      {"cut_at_an_event_boundary", openai_stream(80), cut_at(80), false},
      {"cut_before_done", openai_stream(81).substr(0, openai_stream(81).size() - 8), cut_at(81),
       false},
      {"ends_in_cr_crlf", "data: {\"usage\":{\"total_tokens\":14}}\r\r\n", ok(14)},
  };
  return cases;
}

TEST(usage_scanner, event_streams_at_every_split_point) {
  for (const auto& c : sse_cases()) {
    SCOPED_TRACE(c.name);
    expect_every_split(body_source(), "text/event-stream", c.body, c.want, c.complete);
  }
}

TEST(usage_scanner, event_stream_media_type_takes_parameters) {
  const usage_source src = body_source();
  usage_scanner s(src);
  EXPECT_EQ(scan(s, "Text/Event-Stream; charset=utf-8", openai_stream(5), {}), ok(5));
}

// -- Header source --------------------------------------------------------------------------

TEST(usage_scanner, header_values_are_digits_only) {
  constexpr std::uint64_t cap = std::uint64_t{1} << 53;
  const struct {
    std::optional<std::string_view> value;
    usage_reading want;
  } cases[] = {
      {"1234", ok(1234)},
      {"0", ok(0)},
      {"007", ok(7)},
      {"-0", ok(0)},
      {"9007199254740992", ok(cap)},
      {std::nullopt, bad(F::no_header)},
      {"", bad(F::not_a_number)},
      {" 12", bad(F::not_a_number)},
      {"12 ", bad(F::not_a_number)},
      {"+12", bad(F::not_a_number)},
      {"12a", bad(F::not_a_number)},
      {"1.5", bad(F::not_a_number)},
      {"1e3", bad(F::not_a_number)},
      {"12, 13", bad(F::not_a_number)},
      {"-", bad(F::not_a_number)},
      {"-5", bad(F::negative)},
      {"-99999999999999999999999", bad(F::negative)},
      {"-1x", bad(F::not_a_number)},
      {"9007199254740993", bad(F::too_large)},
      {"18446744073709551615", bad(F::too_large)},
      {"18446744073709551616", bad(F::too_large)},
      {"99999999999999999999999999999", bad(F::too_large)},
  };
  for (const auto& c : cases) {
    EXPECT_EQ(read_usage_header(c.value, cap), c.want) << c.value.value_or("(absent)");
  }
  EXPECT_EQ(read_usage_header("18446744073709551615", ~std::uint64_t{0}), ok(~std::uint64_t{0}));
}

TEST(usage_scanner, a_header_source_ignores_the_body) {
  usage_source src;
  src.header = "X-Usage-Tokens";
  usage_scanner s(src);
  s.start("application/json", "42");
  EXPECT_FALSE(s.wants_body());
  s.feed(R"({"usage":{"total_tokens":5}})");
  EXPECT_EQ(s.finish(true), ok(42));
  s.start("text/plain", std::nullopt);
  EXPECT_EQ(s.finish(true), bad(F::no_header));
  s.start("text/plain", "42");
  EXPECT_EQ(s.finish(false), cut_at(42));  // read, but the body was cut
  s.start("text/plain", "x");
  EXPECT_EQ(s.finish(false), bad(F::not_a_number));
}

TEST(usage_scanner, finish_twice_says_the_same_and_start_resets) {
  const usage_source src = body_source();
  usage_scanner s(src);
  s.start("text/event-stream");
  s.feed("data: {\"usage\":{\"total_tokens\":3}}\n\ndata: {\"x");
  EXPECT_EQ(s.finish(true), cut_at(3));
  EXPECT_EQ(s.finish(true), cut_at(3));
  s.feed("\":1}\n\n");  // after finish: ignored
  EXPECT_EQ(s.finish(true), cut_at(3));
  s.start("text/event-stream");  // a new response: nothing carried over
  s.feed("data: {\"usage\":{\"total_tokens\":4}}\n\n");
  EXPECT_EQ(s.finish(true), ok(4));
  EXPECT_EQ(s.bytes_seen(), 36u);
}

// -- Paths ------------------------------------------------------------------------------------

TEST(usage_scanner, paths) {
  std::string why;
  const auto p = parse_usage_path("choices[0].usage.total_tokens", why);
  ASSERT_TRUE(p) << why;
  ASSERT_EQ(p->size(), 4u);
  EXPECT_EQ((*p)[0], (usage_path_step{"choices", std::nullopt}));
  EXPECT_EQ((*p)[1], (usage_path_step{"", 0}));
  EXPECT_EQ((*p)[2], (usage_path_step{"usage", std::nullopt}));
  EXPECT_EQ((*p)[3], (usage_path_step{"total_tokens", std::nullopt}));
  EXPECT_EQ(parse_usage_path("[3][1].a", why)->size(), 3u);
  EXPECT_EQ(parse_usage_path("a-b c:d", why)->front().member, "a-b c:d");

  const struct {
    const char* text;
    const char* why;
  } bad_paths[] = {
      {"", "empty path"},
      {".a", "empty member name at offset 0"},
      {"a.", "empty member name at offset 2"},
      {"a..b", "empty member name at offset 2"},
      {"a.[0]", "empty member name at offset 2"},
      {"a[]", "an index is [digits], at offset 1"},
      {"a[x]", "an index is [digits], at offset 1"},
      {"a[1", "an index is [digits], at offset 1"},
      {"a[-1]", "an index is [digits], at offset 1"},
      {"a]", "unexpected ']' at offset 1"},
      {"a[0]b", "unexpected 'b' at offset 4"},
      {"a[99999999999]", "index too large at offset 1"},
  };
  for (const auto& c : bad_paths) {
    why.clear();
    EXPECT_FALSE(parse_usage_path(c.text, why)) << c.text;
    EXPECT_EQ(why, c.why) << c.text;
  }
}

TEST(usage_scanner, labels) {
  std::vector<std::string> all;
  for (std::size_t i = 0; i < usage_failure_count; ++i) {
    all.emplace_back(label(static_cast<usage_failure>(i)));
  }
  EXPECT_EQ(all, (std::vector<std::string>{"no_header", "not_json", "path_absent", "not_a_number",
                                           "negative", "too_large", "over_scan_limit", "cut",
                                           "malformed"}));
}

// -- Bounded memory ---------------------------------------------------------------------------

/// Feeds `total` bytes made by `make(i)` (64 KiB pieces) and returns the allocations made
/// during the feed.
template <class Make>
std::size_t allocations_while_feeding(usage_scanner& s, std::size_t pieces, Make make) {
  std::string piece;
  std::size_t counted = 0;
  for (std::size_t i = 0; i < pieces; ++i) {
    make(i, piece);  // the test's own buffer: not counted
    const std::size_t before = allocations.load();
    s.feed(piece);
    counted += allocations.load() - before;
  }
  return counted;
}

TEST(usage_scanner, ten_megabytes_stream_through_with_no_allocation) {
  constexpr std::size_t pieces = 160;  // × 64 KiB = 10 MiB
  usage_source src = body_source();
  src.scan_limit = std::size_t{64} << 20;
  usage_scanner s(src);
  // Warm up the parser's stack to the depth used below (it is kept for the next document).
  EXPECT_EQ(scan(s, "application/json", R"({"a":[{"b":[[1]]}],"usage":{"total_tokens":1}})", {}),
            ok(1));

  // A JSON body: a long array of objects with strings, then the usage.
  s.start("application/json");
  s.feed(R"({"data":[)");
  std::size_t n = allocations_while_feeding(s, pieces, [](std::size_t i, std::string& out) {
    out.clear();
    while (out.size() < 65536) {
      out += R"({"id":)" + std::to_string(i) +
             R"(,"text":"lorem ipsum \"dolor\" \u00e9",)"
             R"("v":[1.5,-2,true,null,{"usage":{"total_tokens":99}}]},)";
    }
  });
  s.feed(R"(0],"usage":{"total_tokens":4321}})");
  EXPECT_EQ(s.finish(true), ok(4321));
  EXPECT_EQ(n, 0u);
  EXPECT_GT(s.bytes_seen(), std::uint64_t{10} << 20);

  // One string of 10 MiB (a key of 10 MiB too): no copy of either is kept.
  s.start("application/json");
  s.feed(R"({"text":")");
  n = allocations_while_feeding(s, pieces,
                                [](std::size_t, std::string& out) { out.assign(65536, 'x'); });
  s.feed(R"(","usage":{"total_tokens":5}})");
  EXPECT_EQ(s.finish(true), ok(5));
  EXPECT_EQ(n, 0u);
  s.start("application/json");
  s.feed(R"({"usage":{")");
  n = allocations_while_feeding(s, pieces,
                                [](std::size_t, std::string& out) { out.assign(65536, 't'); });
  s.feed(R"(":1,"total_tokens":6}})");
  EXPECT_EQ(s.finish(true), ok(6));
  EXPECT_EQ(n, 0u);

  // Over the default scan limit: observed, not parsed.
  const usage_source limited_src = body_source();
  usage_scanner limited(limited_src);
  EXPECT_EQ(scan(limited, "application/json", "[[1]]", {}), bad(F::path_absent));  // warm up
  limited.start("application/json");
  n = allocations_while_feeding(limited, pieces,
                                [](std::size_t, std::string& out) { out.assign(65536, ' '); });
  EXPECT_EQ(limited.finish(true), bad(F::over_scan_limit));
  EXPECT_EQ(n, 0u);

  // An event stream of 10 MiB: thousands of events, one long data line among them.
  s.start("text/event-stream");
  n = allocations_while_feeding(s, pieces, [](std::size_t i, std::string& out) {
    out.clear();
    if (i == 7) {
      out = "data: {\"long\":\"" + std::string(65000, 'y') + "\"}\n\n";
      return;
    }
    while (out.size() < 65536) {
      out +=
          ": ping\r\nevent: x\r\ndata: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}],\r\n"
          "data: \"usage\":{\"total_tokens\":" +
          std::to_string(i) + "}}\r\n\r\n";
    }
  });
  s.feed("data: [DONE]\n\n");
  EXPECT_EQ(s.finish(true), ok(pieces - 1));
  EXPECT_EQ(n, 0u);
}

}  // namespace
}  // namespace sluice::limiter
