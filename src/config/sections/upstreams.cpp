// The `upstreams:` section: each upstream's URL and its settings.

#include "config/loader_internal.hpp"

namespace sluice::config::detail {

void loader::parse_upstreams(const entry& e, rules& r) {
  auto m = mapping(e.value, "upstreams", e.line, nullptr, true);
  if (!m) return;
  static const std::vector<std::string> keys{"url", "connect_timeout", "timeout"};
  for (const entry& ue : m->entries) {
    const std::string path = join("upstreams", ue.key);
    upstream u;
    u.name = ue.key;
    // Registered even when broken so that routes naming it are not reported twice.
    r.upstreams[u.name] = u;
    auto um = fields(ue.value, path, ue.line, keys);
    if (!um) continue;
    if (const entry* url = um->find("url")) {
      const std::string p = join(path, "url");
      if (auto s = string(url->value, p, url->line)) {
        std::string why;
        u.url = *s;
        if (!text::parse_http_url(*s, u, why))
          error(url->line, p, "invalid url '" + *s + "': " + why);
      }
    } else {
      error(ue.line, path, "missing required key 'url'");
    }
    if (const entry* t = um->find("connect_timeout")) {
      if (auto d = duration(*t, join(path, "connect_timeout"), "connect_timeout",
                            std::chrono::minutes{10}))
        u.connect_timeout = *d;
    }
    if (const entry* t = um->find("timeout")) {
      if (auto d = duration(*t, join(path, "timeout"), "timeout", std::chrono::hours{1}))
        u.timeout = *d;
    }
    r.upstreams[u.name] = u;
  }
}

}  // namespace sluice::config::detail
