// SPDX-License-Identifier: Apache-2.0
// The `status:` section: the size of the status page's table of the most limited callers and
// the span and resolution of its rate graphs.

#include "config/loader_internal.hpp"

namespace sluice::config::detail {

void loader::parse_status(const entry& e, rules& r) {
  static const std::vector<std::string> status_keys{"top", "window", "graph", "graph_step"};
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
  if (const entry* g = m->find("graph")) {
    if (auto d = duration(*g, "status.graph", "graph", std::chrono::hours{1})) {
      if (d->count() % 60'000 != 0) {
        error(g->line, "status.graph", "graph must be whole minutes (1m to 60m)");
      } else {
        r.status_graph_minutes = static_cast<std::size_t>(d->count() / 60'000);
      }
    }
  }
  if (const entry* st = m->find("graph_step")) {
    if (auto d = duration(*st, "status.graph_step", "graph_step", std::chrono::minutes{1})) {
      if (d->count() % 1000 != 0) {
        error(st->line, "status.graph_step", "graph_step must be whole seconds (1s to 60s)");
      } else {
        r.status_graph_step = *d;
      }
    }
  }
  if (r.status_graph_minutes * 60'000 / static_cast<std::size_t>(r.status_graph_step.count()) >
      720) {
    error(e.line, "status",
          "graph / graph_step is over 720 points: take a longer graph_step or a shorter graph");
  }
}

}  // namespace sluice::config::detail
