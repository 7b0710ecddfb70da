// SPDX-License-Identifier: Apache-2.0
// The `status:` section: the size of the status page's table of the most limited callers.

#include "config/loader_internal.hpp"

namespace sluice::config::detail {

void loader::parse_status(const entry& e, rules& r) {
  static const std::vector<std::string> status_keys{"top", "window"};
  auto m = fields(e.value, "status", e.line, status_keys, true);
  if (!m) return;
  if (const entry* t = m->find("top")) {
    if (auto v = integer(*t, "status.top", "top", 1, 100))
      r.status_top = static_cast<std::size_t>(*v);
  }
  if (const entry* w = m->find("window")) {
    if (auto d = duration(*w, "status.window", "window", std::chrono::hours{1})) {
      if (d->count() % 60'000 != 0) {
        error(w->line, "status.window", "window must be whole minutes (1m to 60m)");
      } else {
        r.status_window_minutes = static_cast<std::size_t>(d->count() / 60'000);
      }
    }
  }
}

}  // namespace sluice::config::detail
