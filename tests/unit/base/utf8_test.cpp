// SPDX-License-Identifier: Apache-2.0
#include "sluice/utf8.hpp"

#include <gtest/gtest.h>

#include <string>

namespace sluice::utf8 {
namespace {

constexpr auto npos = std::string_view::npos;

// RFC 3629 §4's table: every boundary of each sequence length, and what lies just past it.
TEST(utf8, first_invalid_follows_rfc3629) {
  struct row {
    std::string text;
    std::size_t bad;
  };
  const row rows[] = {
      {"", npos},
      {"plain ASCII /v1/search?q=1", npos},
      {"caf\xC3\xA9", npos},       // U+00E9
      {"\xE2\x82\xAC", npos},      // U+20AC
      {"\xEF\xBF\xBD", npos},      // U+FFFD
      {"\xF0\x9F\x98\x80", npos},  // U+1F600
      {"\xF4\x8F\xBF\xBF", npos},  // U+10FFFF, the last code point
      {"\xED\x9F\xBF", npos},      // U+D7FF, just below the surrogates
      {"a\xFF", 1},                // never in UTF-8
      {"\x80", 0},                 // a lone continuation byte
      {"\xC0\xAF", 0},             // overlong '/'
      {"\xC1\xBF", 0},             // overlong
      {"\xE0\x9F\xBF", 0},         // overlong 3-byte form
      {"\xF0\x8F\xBF\xBF", 0},     // overlong 4-byte form
      {"\xED\xA0\x80", 0},         // U+D800, a surrogate
      {"\xF4\x90\x80\x80", 0},     // above U+10FFFF
      {"\xF5\x80\x80\x80", 0},
      {"ok\xE2\x82", 2},                  // truncated at the end
      {"\xC3(", 0},                       // a lead byte without its tail
      {std::string("nul\0ok", 6), npos},  // NUL is a code point
  };
  for (const auto& r : rows) {
    EXPECT_EQ(first_invalid(r.text), r.bad) << "text: '" << r.text << "'";
  }
}

TEST(utf8, make_valid_replaces_only_the_ill_formed_bytes) {
  EXPECT_EQ(make_valid("/caf\xC3\xA9"), "/caf\xC3\xA9");
  EXPECT_EQ(make_valid("/a\xFF"
                       "b\xC3"),
            "/a\xEF\xBF\xBD"
            "b\xEF\xBF\xBD");
  EXPECT_EQ(make_valid("\xE2\x82"
                       "x"),
            "\xEF\xBF\xBD\xEF\xBF\xBDx");
  EXPECT_EQ(make_valid("/a\xFF\xC3\xA9%41", repair::percent_encode), "/a%FF\xC3\xA9%41");
  EXPECT_EQ(make_valid("\xED\xA0\x80", repair::percent_encode), "%ED%A0%80");
  for (const auto* s : {"\xC0\xAF", "\xF4\x90\x80\x80",
                        "a\x80"
                        "b"}) {
    EXPECT_EQ(first_invalid(make_valid(s)), npos) << s;
    EXPECT_EQ(first_invalid(make_valid(s, repair::percent_encode)), npos) << s;
  }
}

}  // namespace
}  // namespace sluice::utf8
