// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// A JSON path naming a number in a response body (`usage.total_tokens`), as a limit's
/// `charge: {settle: {json: PATH}}` writes it: parsed when the rules are loaded, walked by the
/// usage scanner (limiter/usage_scanner.hpp).

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::config {

/// One step of a JSON path: an object member by name, or an array element by index.
struct usage_path_step {
  std::string member;                ///< the member's name (unescaped), when not an index
  std::optional<std::size_t> index;  ///< the element's position (from 0), when an index
  bool operator==(const usage_path_step&) const = default;
};

/// Parses a JSON path: members separated by dots, array elements as `[N]` after a member or
/// at the start — `usage.total_tokens`, `choices[0].usage.total_tokens`, `[0].usage`. A member
/// name is any non-empty run of bytes other than `.`, `[` and `]` (no escapes: a member whose
/// name holds one of those cannot be named). Returns nullopt and sets `why` (a sentence
/// fragment naming the fault, e.g. "empty member name at offset 6") on a bad path; an empty
/// path is bad.
std::optional<std::vector<usage_path_step>> parse_usage_path(std::string_view text,
                                                             std::string& why);

}  // namespace sluice::config
