// SPDX-License-Identifier: Apache-2.0
// The `plans:` and `api_keys:` sections (`api_keys_file:` is read by the top-level walk once
// the plans are known).

#include "config/loader_internal.hpp"

namespace sluice::config::detail {

void loader::parse_plans(const entry& e) {
  auto m = mapping(e.value, "plans", e.line, nullptr, true);
  if (!m) return;
  static const std::vector<std::string> keys{"limits"};
  for (const entry& pe : m->entries) {
    plan_src p;
    p.name = pe.key;
    p.path = join("plans", pe.key);
    if (auto pm = fields(pe.value, p.path, pe.line, keys, true)) {
      if (const entry* l = pm->find("limits")) p.limits = parse_limits(*l, join(p.path, "limits"));
    }
    plans_.push_back(std::move(p));
  }
}

void loader::parse_api_keys(const entry& e) {
  // API keys are credentials, and diagnostics reach logs and the admin endpoints: an entry
  // is named by its line, never by its key (as in api_keys_file).
  auto m = mapping(e.value, "api_keys", e.line, nullptr, true, true);
  if (!m) return;
  for (const entry& ke : m->entries) {
    const std::string path = "api_keys";
    if (ke.key.empty()) {
      error(ke.key_line, "api_keys", "an API key must not be empty");
      continue;
    }
    if (auto s = string(ke.value, path, ke.line)) api_keys_.push_back({ke.key, *s, path, ke.line});
  }
}

}  // namespace sluice::config::detail
