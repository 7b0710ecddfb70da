// SPDX-License-Identifier: Apache-2.0
// The `status:` section: the size of the status page's table of the most limited callers and
// the span and resolution of its rate graphs.

#include "config/loader_internal.hpp"

#include <optional>
#include <string>

namespace sluice::config::detail {

void loader::parse_status(const entry& e, rules& r) {
  static const std::vector<std::string> status_keys{"top", "window", "graph", "graph_step"};
  auto m = fields(e.value, "status", e.line, status_keys, true);
  if (!m) return;
  if (const entry* t = m->find("top")) {
    if (auto v = integer(*t, "status.top", "top", 1, 100))
      r.status_top = static_cast<std::size_t>(*v);
  }
  // A duration of `name` in whole units of `unit` ms, up to `max`: the count of units.
  auto whole = [&](const char* name, std::chrono::milliseconds max, std::int64_t unit,
                   const char* range) -> std::optional<std::int64_t> {
    const entry* f = m->find(name);
    if (!f) return std::nullopt;
    const std::string path = std::string("status.") + name;
    auto d = duration(*f, path, name, max);
    if (!d) return std::nullopt;
    if (d->count() % unit != 0) {
      error(f->line, path, std::string(name) + " must be whole " + range);
      return std::nullopt;
    }
    return d->count() / unit;
  };
  if (auto v = whole("window", std::chrono::hours{1}, 60'000, "minutes (1m to 60m)"))
    r.status_window_minutes = static_cast<std::size_t>(*v);
  if (auto v = whole("graph", std::chrono::hours{1}, 60'000, "minutes (1m to 60m)"))
    r.status_graph_minutes = static_cast<std::size_t>(*v);
  if (auto v = whole("graph_step", std::chrono::minutes{1}, 1000, "seconds (1s to 60s)"))
    r.status_graph_step = std::chrono::seconds{*v};
  if (r.status_graph_minutes * 60'000 / static_cast<std::size_t>(r.status_graph_step.count()) >
      720) {
    error(e.line, "status",
          "graph / graph_step is over 720 points: take a longer graph_step or a shorter graph");
  }
}

}  // namespace sluice::config::detail
