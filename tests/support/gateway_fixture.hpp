// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// Test fixture: the gateway in-process on 127.0.0.1 port 0, from inline YAML.

#include "sluice/app/gateway.hpp"

#include <cstdint>
#include <map>
#include <memory>
#include <string>

namespace sluice::test {

/// Replaces every occurrence of each key of `vars` in `text` by its value.
std::string substitute(std::string text, const std::map<std::string, std::string>& vars);

/// A running gateway built from a rules text. Throws std::runtime_error (with every
/// diagnostic) when the text does not load.
class gateway_fixture {
 public:
  gateway_fixture(const std::string& yaml, unsigned workers = 2);
  ~gateway_fixture();

  std::uint16_t port() const;
  app::gateway& gateway() { return *gateway_; }

  /// Loads `yaml` and swaps it in. Returns the diagnostics joined by newlines ("" = swapped).
  std::string reload(const std::string& yaml);

 private:
  std::unique_ptr<app::gateway> gateway_;
};

}  // namespace sluice::test
