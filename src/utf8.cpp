// SPDX-License-Identifier: Apache-2.0
// UTF-8 well-formedness: the table of RFC 3629 §4 (UTF8-octets), byte by byte.

#include "sluice/utf8.hpp"

namespace sluice::utf8 {
namespace {

/// The length of the well-formed sequence starting at `s[i]`, or 0 when it is ill formed.
std::size_t sequence_at(std::string_view s, std::size_t i) noexcept {
  const auto b = [&](std::size_t k) { return static_cast<unsigned char>(s[i + k]); };
  const unsigned char c = b(0);
  if (c < 0x80) return 1;
  const std::size_t left = s.size() - i;
  auto tail = [&](std::size_t k) { return k < left && (b(k) & 0xC0) == 0x80; };
  // UTF8-2 = %xC2-DF UTF8-tail
  if (c >= 0xC2 && c <= 0xDF) return tail(1) ? 2 : 0;
  // UTF8-3 = %xE0 %xA0-BF UTF8-tail / %xE1-EC 2( UTF8-tail ) / %xED %x80-9F UTF8-tail /
  //          %xEE-EF 2( UTF8-tail )
  if (c >= 0xE0 && c <= 0xEF) {
    if (left < 3 || !tail(1) || !tail(2)) return 0;
    if (c == 0xE0 && b(1) < 0xA0) return 0;  // overlong
    if (c == 0xED && b(1) > 0x9F) return 0;  // a surrogate
    return 3;
  }
  // UTF8-4 = %xF0 %x90-BF 2( UTF8-tail ) / %xF1-F3 3( UTF8-tail ) / %xF4 %x80-8F 2( UTF8-tail )
  if (c >= 0xF0 && c <= 0xF4) {
    if (left < 4 || !tail(1) || !tail(2) || !tail(3)) return 0;
    if (c == 0xF0 && b(1) < 0x90) return 0;  // overlong
    if (c == 0xF4 && b(1) > 0x8F) return 0;  // above U+10FFFF
    return 4;
  }
  return 0;  // a continuation byte, C0, C1 (overlong) or F5..FF
}

}  // namespace

std::size_t first_invalid(std::string_view s) noexcept {
  for (std::size_t i = 0; i < s.size();) {
    const std::size_t n = sequence_at(s, i);
    if (n == 0) return i;
    i += n;
  }
  return std::string_view::npos;
}

std::string make_valid(std::string_view s, repair how) {
  std::size_t bad = first_invalid(s);
  if (bad == std::string_view::npos) return std::string(s);
  static constexpr char hex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(s.size() + 8);
  out.append(s.substr(0, bad));
  for (std::size_t i = bad; i < s.size();) {
    if (const std::size_t n = sequence_at(s, i); n != 0) {
      out.append(s.substr(i, n));
      i += n;
      continue;
    }
    if (how == repair::percent_encode) {
      const auto c = static_cast<unsigned char>(s[i]);
      out += '%';
      out += hex[c >> 4];
      out += hex[c & 15];
    } else {
      out += "\xEF\xBF\xBD";  // U+FFFD
    }
    ++i;
  }
  return out;
}

}  // namespace sluice::utf8
