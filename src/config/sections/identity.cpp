// SPDX-License-Identifier: Apache-2.0
// The `identity:` section: API key and user sources, trusted proxies, address prefixes and
// the forwarded-address header.

#include "config/loader_internal.hpp"

namespace sluice::config::detail {

void loader::parse_identity(const entry& e, rules& r) {
  static const std::vector<std::string> keys{"api_key",     "user",        "trusted_proxies",
                                             "unknown_key", "ipv6_prefix", "ipv4_prefix",
                                             "directory",   "forwarded"};
  auto m = fields(e.value, "identity", e.line, keys, true);
  if (!m) return;
  if (const entry* a = m->find("api_key")) {
    static const std::vector<std::string> ak{"header", "query"};
    if (auto am = fields(a->value, "identity.api_key", a->line, ak)) {
      // Naming any source replaces the default: `{query: key}` means the query only.
      r.identity.api_key_header.clear();
      if (const entry* h = am->find("header")) {
        if (auto s = header_name(*h, "identity.api_key.header")) r.identity.api_key_header = *s;
      }
      if (const entry* q = am->find("query")) {
        if (auto s = non_empty(*q, "identity.api_key.query")) r.identity.api_key_query = *s;
      }
      if (!am->find("header") && !am->find("query"))
        error(a->line, "identity.api_key", "api_key needs a header or a query parameter");
    }
  }
  if (const entry* u = m->find("user")) {
    static const std::vector<std::string> uk{"header"};
    if (auto um = fields(u->value, "identity.user", u->line, uk)) {
      if (const entry* h = um->find("header")) {
        if (auto s = header_name(*h, "identity.user.header")) r.identity.user_header = *s;
      } else {
        error(u->line, "identity.user", "missing required key 'header'");
      }
    }
  }
  if (const entry* t = m->find("trusted_proxies")) {
    const std::string path = "identity.trusted_proxies";
    if (sequence(t->value, path, t->line, true)) {
      std::size_t i = 0;
      for (const auto& item : t->value) {
        const std::string p = at(path, i++);
        const int line = line_of(item, t->line);
        auto s = string(item, p, line);
        if (!s) continue;
        std::string why;
        if (auto c = text::parse_cidr(*s, why))
          r.identity.trusted_proxies.push_back(*c);
        else
          error(line, p, "invalid CIDR '" + *s + "': " + why);
      }
    }
  }
  if (const entry* u = m->find("unknown_key")) {
    auto k = choice<unknown_key_policy>(
        u->value, "identity.unknown_key", u->line, "policy",
        {{"anonymous", unknown_key_policy::anonymous}, {"reject", unknown_key_policy::reject}});
    if (k) r.identity.unknown_key = *k;
  }
  if (const entry* p = m->find("ipv6_prefix")) {
    if (auto v = integer(*p, "identity.ipv6_prefix", "ipv6_prefix", 1, 128))
      r.identity.ipv6_prefix = static_cast<int>(*v);
  }
  if (const entry* p = m->find("ipv4_prefix")) {
    if (auto v = integer(*p, "identity.ipv4_prefix", "ipv4_prefix", 1, 32))
      r.identity.ipv4_prefix = static_cast<int>(*v);
  }
  if (const entry* d = m->find("directory")) parse_directory(*d, r);
  if (const entry* f = m->find("forwarded")) {
    auto k = choice<forwarded_header>(f->value, "identity.forwarded", f->line, "header",
                                      {{"x-forwarded-for", forwarded_header::x_forwarded_for},
                                       {"rfc7239", forwarded_header::rfc7239}});
    if (k) r.identity.forwarded = *k;
  }
}

}  // namespace sluice::config::detail
