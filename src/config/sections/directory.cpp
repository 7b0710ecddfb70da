// SPDX-License-Identifier: Apache-2.0
// The `directory:` section: where API keys are looked up when they are not in the file
// (the Redis plan directory) and its caches.

#include "config/loader_internal.hpp"

namespace sluice::config::detail {

void loader::parse_directory(const entry& e, rules& r) {
  static const std::vector<std::string> keys{"type", "hash", "cache_ttl", "negative_ttl",
                                             "cache_size"};
  const std::string path = "identity.directory";
  auto m = fields(e.value, path, e.line, keys);
  if (!m) return;
  directory_line_ = e.line;
  r.identity.directory.enabled = true;
  if (const entry* t = m->find("type")) {
    enum class kind { redis };
    choice<kind>(t->value, join(path, "type"), t->line, "directory type", {{"redis", kind::redis}});
  } else {
    error(e.line, path, "missing required key 'type'");
  }
  if (const entry* h = m->find("hash")) {
    if (auto s = non_empty(*h, join(path, "hash"))) r.identity.directory.hash = *s;
  }
  if (const entry* t = m->find("cache_ttl")) {
    if (auto d = duration(*t, join(path, "cache_ttl"), "cache_ttl", std::chrono::hours{24}))
      r.identity.directory.cache_ttl = *d;
  }
  if (const entry* t = m->find("negative_ttl")) {
    if (auto d = duration(*t, join(path, "negative_ttl"), "negative_ttl", std::chrono::hours{24}))
      r.identity.directory.negative_ttl = *d;
  }
  if (const entry* c = m->find("cache_size")) {
    if (auto v = integer(*c, join(path, "cache_size"), "cache_size", 1, 100'000'000))
      r.identity.directory.cache_size = static_cast<std::size_t>(*v);
  }
}

}  // namespace sluice::config::detail
