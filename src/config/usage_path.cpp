// SPDX-License-Identifier: Apache-2.0
// JSON paths of a response's cost (include/sluice/config/usage_path.hpp): parsed once, when
// the rules are loaded, so a bad path is a rules-file error; the usage scanner
// (limiter/usage_scanner.hpp) walks the steps.
#include "sluice/config/usage_path.hpp"

#include <limits>

namespace sluice::config {

std::optional<std::vector<usage_path_step>> parse_usage_path(std::string_view text,
                                                             std::string& why) {
  std::vector<usage_path_step> steps;
  if (text.empty()) {
    why = "empty path";
    return std::nullopt;
  }
  std::size_t i = 0;
  // A path is: [index]* (member [index]*) ('.' member [index]*)*
  bool expect_member = text.front() != '[';
  while (i < text.size()) {
    if (expect_member) {
      const std::size_t start = i;
      while (i < text.size() && text[i] != '.' && text[i] != '[' && text[i] != ']') ++i;
      if (i == start) {
        why = "empty member name at offset " + std::to_string(start);
        return std::nullopt;
      }
      steps.push_back({std::string(text.substr(start, i - start)), std::nullopt});
      expect_member = false;
      continue;
    }
    if (text[i] == '.') {
      ++i;
      expect_member = true;
      if (i == text.size()) {
        why = "empty member name at offset " + std::to_string(i);
        return std::nullopt;
      }
      continue;
    }
    if (text[i] != '[') {
      why = "unexpected '" + std::string(1, text[i]) + "' at offset " + std::to_string(i);
      return std::nullopt;
    }
    const std::size_t open = i++;
    std::size_t index = 0;
    const std::size_t digits = i;
    while (i < text.size() && text[i] >= '0' && text[i] <= '9') {
      if (index > (std::numeric_limits<std::uint32_t>::max() - 9) / 10) {
        why = "index too large at offset " + std::to_string(open);
        return std::nullopt;
      }
      index = index * 10 + static_cast<std::size_t>(text[i] - '0');
      ++i;
    }
    if (i == digits || i == text.size() || text[i] != ']') {
      why = "an index is [digits], at offset " + std::to_string(open);
      return std::nullopt;
    }
    ++i;
    steps.push_back({std::string(), index});
  }
  return steps;
}

}  // namespace sluice::config
