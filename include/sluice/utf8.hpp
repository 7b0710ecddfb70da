// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// UTF-8 well-formedness (RFC 3629 §4): the rules file is YAML, whose text is Unicode, and
/// every JSON document sluice writes (RFC 8259 §8.1: UTF-8) must stay parseable whatever
/// bytes a client put in a request target or a header.

#include <cstddef>
#include <string>
#include <string_view>

namespace sluice::utf8 {

/// The offset of the first byte of `s` that does not begin a well-formed UTF-8 sequence
/// (RFC 3629 §4: no overlong form, no surrogate U+D800..U+DFFF, nothing above U+10FFFF, no
/// truncated sequence), or std::string_view::npos when all of `s` is well formed. O(|s|).
std::size_t first_invalid(std::string_view s) noexcept;

/// How make_valid() writes a byte of an ill-formed sequence.
enum class repair {
  replacement_character,  ///< U+FFFD, one per byte (Unicode §3.9 allows either practice)
  percent_encode,         ///< `%XX`, upper-case hex (how a URI writes a byte, RFC 3986 §2.1)
};

/// `s` with each byte of every ill-formed sequence written as `how` says; well-formed text
/// (ASCII included) is copied unchanged. Never throws except std::bad_alloc.
std::string make_valid(std::string_view s, repair how = repair::replacement_character);

}  // namespace sluice::utf8
