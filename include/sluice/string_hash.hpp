// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// A transparent hash for string-keyed unordered containers: a std::string and a
/// std::string_view of the same text hash alike (std::hash of the view), so a lookup by view
/// builds no std::string. Use with std::equal_to<>.

#include <cstddef>
#include <functional>
#include <string_view>

namespace sluice {

/// std::hash<std::string_view> of any string-like key (is_transparent: lookups by view).
struct string_hash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const noexcept {
    return std::hash<std::string_view>{}(s);
  }
};

}  // namespace sluice
