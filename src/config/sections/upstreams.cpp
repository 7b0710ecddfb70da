// SPDX-License-Identifier: Apache-2.0
// The `upstreams:` section: each upstream's URL and its settings (for an https:// one, how its
// certificate is verified: `ca_file`, `verify`; `http2` for an upstream spoken to over HTTP/2: h2c,
// or h2 by ALPN over https; `max_idle`, the idle connections kept).

#include "config/loader_internal.hpp"

namespace sluice::config::detail {

/// The largest `max_idle`: idle connections per worker and upstream (each holds a socket and
/// a 4 KiB read buffer).
constexpr std::int64_t max_idle_connections = 65536;

void loader::parse_upstreams(const entry& e, rules& r) {
  auto m = mapping(e.value, "upstreams", e.line, nullptr, true);
  if (!m) return;
  static const std::vector<std::string> keys{"url",    "connect_timeout", "timeout", "ca_file",
                                             "verify", "http2",           "max_idle"};
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
    // TLS settings are for https:// upstreams; the files are read by http::build_tls.
    const bool http_url = !u.url.empty() && !u.tls && !u.host.empty();
    if (const entry* v = um->find("verify")) {
      const std::string p = join(path, "verify");
      if (auto b = boolean(*v, p)) {
        u.verify = *b;
        if (http_url) error(v->line, p, "verify is for https:// upstreams; this url is http://");
      }
    }
    if (const entry* c = um->find("ca_file")) {
      const std::string p = join(path, "ca_file");
      if (auto f = file_path(*c, p)) {
        u.ca_file = *f;
        if (http_url) {
          error(c->line, p, "ca_file is for https:// upstreams; this url is http://");
        } else if (!u.verify) {
          error(c->line, p, "ca_file is not used with verify: false");
        }
      }
    }
    if (const entry* h = um->find("http2")) {
      const std::string p = join(path, "http2");
      if (auto b = boolean(*h, p)) {
        u.http2 = *b;  // over https://: TLS with ALPN `h2` (client_tls)
      }
    }
    if (const entry* n = um->find("max_idle")) {
      if (auto v = integer(*n, join(path, "max_idle"), "max_idle", 0, max_idle_connections))
        u.max_idle = static_cast<std::uint32_t>(*v);
    }
    r.upstreams[u.name] = u;
  }
}

}  // namespace sluice::config::detail
