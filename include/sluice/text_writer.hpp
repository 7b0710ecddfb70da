// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// Appending short pieces of text to a std::string without a capacity check per piece: the
/// heads and header lines of every request are rendered this way (std::string::append checks
/// and may grow on every call; here the string grows once, by a bound the caller computes).

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace sluice {

/// Appends to `out` through a cursor into space made once: `bound` bytes, the caller's
/// estimate of what it writes (a piece that does not fit grows the space: slower, never
/// wrong). The destructor trims `out` to what was written. `out` must not be touched
/// otherwise while the writer lives.
class text_writer {
 public:
  text_writer(std::string& out, std::size_t bound) : out_(out) {
    const std::size_t start = out.size();
    out.resize(start + bound);
    p_ = out.data() + start;
    end_ = p_ + bound;
  }
  ~text_writer() { out_.resize(static_cast<std::size_t>(p_ - out_.data())); }
  text_writer(const text_writer&) = delete;
  text_writer& operator=(const text_writer&) = delete;

  /// Writes `s`.
  [[gnu::always_inline]] text_writer& put(std::string_view s) {
    if (s.empty()) return *this;  // (an empty view's data() may be null: not memcpy's)
    if (s.size() > static_cast<std::size_t>(end_ - p_)) grow(s.size());
    std::memcpy(p_, s.data(), s.size());
    p_ += s.size();
    return *this;
  }
  [[gnu::always_inline]] text_writer& put(char c) {
    if (p_ == end_) grow(1);
    *p_++ = c;
    return *this;
  }
  /// Writes the decimal text of `n` (at most 20 bytes; a minus sign and 19 for a negative
  /// int64). Digits are made right to left into a scratch array: for the short numbers of a
  /// head (a status, a length, a count of tokens) this beats std::to_chars' general path.
  [[gnu::always_inline]] text_writer& number(std::uint64_t n) {
    char digits[20];
    char* d = digits + sizeof digits;
    do {
      *--d = static_cast<char>('0' + n % 10);
      n /= 10;
    } while (n != 0);
    return put(std::string_view(d, static_cast<std::size_t>(digits + sizeof digits - d)));
  }
  [[gnu::always_inline]] text_writer& number(std::int64_t n) {
    if (n >= 0) return number(static_cast<std::uint64_t>(n));
    put('-');
    return number(static_cast<std::uint64_t>(0) - static_cast<std::uint64_t>(n));
  }
  /// Writes one field line: `name: value` CRLF (name.size() + value.size() + 4 bytes).
  [[gnu::always_inline]] text_writer& line(std::string_view name, std::string_view value) {
    const std::size_t n = name.size() + value.size() + 4;
    if (n > static_cast<std::size_t>(end_ - p_)) grow(n);
    std::memcpy(p_, name.data(), name.size());
    p_ += name.size();
    std::memcpy(p_, ": ", 2);
    p_ += 2;
    if (!value.empty()) std::memcpy(p_, value.data(), value.size());
    p_ += value.size();
    std::memcpy(p_, "\r\n", 2);
    p_ += 2;
    return *this;
  }

 private:
  /// Makes room for `n` more bytes (and as many again), keeping what was written. Out of
  /// line: the pieces' fast paths stay small enough to inline.
  [[gnu::noinline, gnu::cold]] void grow(std::size_t n) {
    const auto used = static_cast<std::size_t>(p_ - out_.data());
    const auto size = static_cast<std::size_t>(end_ - out_.data());
    out_.resize(size + 2 * n);
    p_ = out_.data() + used;
    end_ = out_.data() + out_.size();
  }

  std::string& out_;
  char* p_;
  char* end_;
};

}  // namespace sluice
