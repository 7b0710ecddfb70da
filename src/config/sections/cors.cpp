// SPDX-License-Identifier: Apache-2.0
// The `cors:` blocks (top level and per route): origin patterns, methods, headers, max age,
// credentials and the preflight setting.

#include "config/loader_internal.hpp"

namespace sluice::config::detail {

std::optional<origin_pattern> loader::origin(const std::string& s, const std::string& path,
                                             int line) {
  origin_pattern o;
  o.text = s;
  if (s == "*") {
    o.any = true;
    return o;
  }
  auto bad = [&](const std::string& why) {
    error(line, path, "origin '" + s + "' " + why);
    return std::nullopt;
  };
  if (s == "null")
    return bad("is sent by sandboxed and local pages of any site, so it cannot be allowed");
  const auto sep = s.find("://");
  if (sep == std::string::npos || sep == 0)
    return bad("never matches: an origin is scheme://host[:port], such as https://app.example.com");
  o.scheme = s.substr(0, sep);
  std::string rest = s.substr(sep + 3);
  if (std::any_of(s.begin(), s.end(), [](char c) { return c >= 'A' && c <= 'Z'; })) {
    std::string lower = s;
    std::transform(lower.begin(), lower.end(), lower.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    return bad("never matches: browsers send origins in lower case; write '" + lower + "'");
  }
  if (!std::all_of(o.scheme.begin(), o.scheme.end(), [](char c) {
        return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '+' || c == '-' || c == '.';
      }))
    return bad("never matches: the scheme '" + o.scheme + "' is not a URL scheme");
  if (const auto slash = rest.find_first_of("/?#"); slash != std::string::npos)
    return bad("never matches: an origin has no path, query or fragment; write '" + o.scheme +
               "://" + rest.substr(0, slash) + "'");
  // host [":" port]; an IPv6 host is bracketed.
  std::string host = rest;
  if (!rest.empty() && rest.front() == '[') {
    const auto close = rest.find(']');
    if (close == std::string::npos) return bad("never matches: an unclosed '['");
    host = rest.substr(0, close + 1);
    if (close + 1 < rest.size()) {
      if (rest[close + 1] != ':') return bad("never matches: text after the host");
      o.port = rest.substr(close + 2);
      if (o.port.empty()) return bad("never matches: an empty port");
    }
  } else if (const auto colon = rest.rfind(':'); colon != std::string::npos) {
    host = rest.substr(0, colon);
    o.port = rest.substr(colon + 1);
    if (o.port.empty()) return bad("never matches: an empty port");
  }
  if (o.port != "*" && !o.port.empty()) {
    const bool digits =
        std::all_of(o.port.begin(), o.port.end(), [](char c) { return c >= '0' && c <= '9'; });
    if (!digits || o.port.size() > 5 || o.port.front() == '0' || std::stol(o.port) > 65535)
      return bad("never matches: the port '" + o.port + "' is not 1..65535");
    if ((o.scheme == "http" && o.port == "80") || (o.scheme == "https" && o.port == "443"))
      return bad("never matches: browsers leave out the default port; write '" + o.scheme + "://" +
                 host + "'");
  }
  if (host.starts_with("*.")) {
    o.any_subdomain = true;
    host = host.substr(1);  // ".example.com": what a matching host ends with
  }
  const auto wild_ok = host.find('*') == std::string::npos;
  if (!wild_ok || host.empty() || host == ".")
    return bad(
        "never matches: '*' stands for the whole origin ('*'), whole labels at the "
        "start of the host (https://*.example.com) or the port (http://localhost:*)");
  const bool v6 = host.front() == '[';
  if (!v6 && (!std::all_of(host.begin(), host.end(),
                           [](char c) {
                             return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
                                    c == '.';
                           }) ||
              host.back() == '.' || host.find("..") != std::string::npos ||
              (!o.any_subdomain && host.front() == '.')))
    return bad("never matches: '" + host + "' is not a host name or address");
  o.host = host;
  return o;
}

std::optional<std::vector<std::string>> loader::token_list(const entry& e, const std::string& path,
                                                           bool upper, const char* what) {
  if (!sequence(e.value, path, e.line, true)) {
    if (e.value.IsNull()) return std::vector<std::string>{};
    return std::nullopt;
  }
  std::vector<std::string> out;
  bool ok = true;
  std::size_t i = 0;
  for (const auto& item : e.value) {
    const std::string p = at(path, i++);
    const int line = line_of(item, e.line);
    auto s = string(item, p, line);
    if (!s) {
      ok = false;
      continue;
    }
    if (*s != "*" && !text::is_token(*s)) {
      error(line, p, "invalid " + std::string(what) + " '" + *s + "': an HTTP token or '*'");
      ok = false;
      continue;
    }
    std::string v = *s;
    if (upper)
      std::transform(v.begin(), v.end(), v.begin(),
                     [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
    if (std::find(out.begin(), out.end(), v) == out.end()) out.push_back(v);
  }
  if (!ok) return std::nullopt;
  return out;
}

std::shared_ptr<const cors_policy> loader::parse_cors(const entry& e, const std::string& path) {
  static const std::vector<std::string> keys{"origins", "methods",     "headers",  "expose_headers",
                                             "max_age", "credentials", "preflight"};
  auto m = fields(e.value, path, e.line, keys);
  if (!m) return nullptr;
  auto c = std::make_shared<cors_policy>();
  c->line = e.line;
  const std::size_t errors = diags_.size();
  if (const entry* b = m->find("credentials")) {
    if (auto v = boolean(*b, join(path, "credentials"))) c->credentials = *v;
  }
  if (const entry* o = m->find("origins")) {
    const std::string p = join(path, "origins");
    if (sequence(o->value, p, o->line)) {
      std::size_t i = 0;
      for (const auto& item : o->value) {
        const std::string ip = at(p, i++);
        const int line = line_of(item, o->line);
        auto s = string(item, ip, line);
        if (!s) continue;
        auto pat = origin(*s, ip, line);
        if (!pat) continue;
        if (pat->any && c->credentials)
          error(line, ip,
                "origin '*' with credentials: true would let every site make credentialed "
                "requests (and browsers refuse '*' with credentials); list the origins");
        else
          c->origins.push_back(std::move(*pat));
      }
      if (o->value.size() == 0) error(o->line, p, "origins must list at least one origin");
    }
  } else {
    error(e.line, path, "missing required key 'origins'");
  }
  if (const entry* l = m->find("methods")) {
    if (auto v = token_list(*l, join(path, "methods"), true, "method")) c->methods = *v;
  }
  if (const entry* l = m->find("headers")) {
    if (auto v = token_list(*l, join(path, "headers"), false, "header name")) c->headers = *v;
  }
  if (const entry* l = m->find("expose_headers")) {
    if (auto v = token_list(*l, join(path, "expose_headers"), false, "header name"))
      c->expose_headers = *v;
  }
  if (c->credentials) {
    // With credentials, '*' is a literal name to browsers, never a wildcard (Fetch §3.2.3).
    for (const char* k : {"methods", "headers", "expose_headers"}) {
      const auto& list = std::string_view(k) == "methods"   ? c->methods
                         : std::string_view(k) == "headers" ? c->headers
                                                            : c->expose_headers;
      if (std::find(list.begin(), list.end(), "*") != list.end()) {
        const entry* l = m->find(k);
        error(l ? l->line : e.line, join(path, k),
              "'*' with credentials: true is not a wildcard to browsers; list the names");
      }
    }
  }
  if (const entry* a = m->find("max_age")) {
    if (auto d = duration(*a, join(path, "max_age"), "max_age", std::chrono::hours{24})) {
      if (d->count() % 1000 != 0)
        error(a->line, join(path, "max_age"), "max_age must be whole seconds");
      else
        c->max_age_seconds = d->count() / 1000;
    }
  }
  if (const entry* f = m->find("preflight")) {
    auto k = choice<preflight_mode>(
        f->value, join(path, "preflight"), f->line, "preflight mode",
        {{"answer", preflight_mode::answer}, {"forward", preflight_mode::forward}});
    if (k) c->preflight = *k;
  }
  if (diags_.size() != errors) return nullptr;
  return c;
}

}  // namespace sluice::config::detail
