// SPDX-License-Identifier: Apache-2.0
// The `routes:` section: match (path, method, host), upstream, cost, limits, CORS.

#include "config/loader_internal.hpp"

namespace sluice::config::detail {

void loader::parse_routes(const entry& e) {
  if (!sequence(e.value, "routes", e.line, true)) return;
  static const std::vector<std::string> keys{"name",
                                             "match",
                                             "upstream",
                                             "cost",
                                             "on_store_failure",
                                             "limits",
                                             "max_request_body",
                                             "max_response_body",
                                             "upgrade",
                                             "tunnel_idle_timeout",
                                             "cors"};
  static const std::vector<std::string> match_keys{"path", "path_prefix", "path_glob", "methods",
                                                   "host"};
  std::size_t i = 0;
  for (const auto& item : e.value) {
    route_src rs;
    rs.path = at("routes", i++);
    const int line = line_of(item, e.line);
    rs.value.line = line;
    auto m = fields(item, rs.path, line, keys);
    if (!m) continue;

    if (const entry* n = m->find("name")) {
      rs.name_path = join(rs.path, "name");
      rs.name_line = n->line;
      if (auto s = non_empty(*n, rs.name_path)) rs.value.name = *s;
    } else {
      error(line, rs.path, "missing required key 'name'");
    }

    if (const entry* mt = m->find("match")) {
      const std::string mpath = join(rs.path, "match");
      if (auto mm = fields(mt->value, mpath, mt->line, match_keys)) {
        rs.value.match.path_prefix = "/";
        const entry* exact = mm->find("path");
        const entry* glob = mm->find("path_glob");
        const int kinds = (exact ? 1 : 0) + (glob ? 1 : 0) + (mm->find("path_prefix") ? 1 : 0);
        if (kinds > 1) {
          error(mt->line, mpath,
                "use one of path, path_prefix and path_glob, not " + std::to_string(kinds));
        } else if (exact) {
          const std::string p = join(mpath, "path");
          if (auto s = string(exact->value, p, exact->line)) {
            if (match_path(*s, p, exact->line, "path")) {
              rs.value.match.kind = path_kind::exact;
              rs.value.match.path = *s;
            }
          }
        } else if (glob) {
          const std::string p = join(mpath, "path_glob");
          if (auto s = string(glob->value, p, glob->line)) {
            if (match_path(*s, p, glob->line, "path_glob") && glob_ok(*s, p, glob->line)) {
              rs.value.match.kind = path_kind::glob;
              rs.value.match.path = *s;
            }
          }
        }
        if (const entry* h = mm->find("host")) {
          const std::string p = join(mpath, "host");
          if (auto s = string(h->value, p, h->line)) {
            if (auto host = host_name(*s, p, h->line)) rs.value.match.host = *host;
          }
        }
        if (const entry* pp = mm->find("path_prefix"); pp && kinds == 1) {
          const std::string p = join(mpath, "path_prefix");
          if (auto s = string(pp->value, p, pp->line)) {
            const bool bad_char = std::any_of(s->begin(), s->end(), [](char c) {
              return static_cast<unsigned char>(c) <= ' ' || c == 0x7f || c == '?' || c == '#';
            });
            if (s->empty() || s->front() != '/')
              error(pp->line, p, "path_prefix '" + *s + "' must start with '/'");
            else if (bad_char)
              error(pp->line, p,
                    "path_prefix '" + *s +
                        "' must not contain whitespace, control characters, '?' or '#'");
            else
              rs.value.match.path_prefix = *s;
          }
        }
        if (const entry* ms = mm->find("methods")) {
          const std::string p = join(mpath, "methods");
          if (sequence(ms->value, p, ms->line)) {
            std::size_t j = 0;
            for (const auto& mi : ms->value) {
              const std::string ip = at(p, j++);
              const int mline = line_of(mi, ms->line);
              auto s = string(mi, ip, mline);
              if (!s) continue;
              if (!text::is_token(*s)) {
                error(mline, ip, "invalid method '" + *s + "': a method is an HTTP token");
                continue;
              }
              std::string upper = *s;
              std::transform(upper.begin(), upper.end(), upper.begin(), [](char c) {
                return static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
              });
              auto& v = rs.value.match.methods;
              if (std::find(v.begin(), v.end(), upper) == v.end()) v.push_back(upper);
            }
          }
        }
      }
    } else {
      error(line, rs.path, "missing required key 'match'");
    }

    if (const entry* u = m->find("upstream")) {
      rs.upstream_path = join(rs.path, "upstream");
      rs.upstream_line = u->line;
      if (auto s = non_empty(*u, rs.upstream_path)) rs.value.upstream = *s;
    } else {
      error(line, rs.path, "missing required key 'upstream'");
    }

    if (const entry* c = m->find("cost")) {
      if (auto v = integer(*c, join(rs.path, "cost"), "cost", 1, max_exact_integer))
        rs.value.cost = *v;
      else
        rs.cost_ok = false;
    }

    if (const entry* f = m->find("on_store_failure")) {
      auto p = choice<failure_policy>(f->value, join(rs.path, "on_store_failure"), f->line,
                                      "failure policy",
                                      {{"fail_open", failure_policy::fail_open},
                                       {"fail_closed", failure_policy::fail_closed},
                                       {"local", failure_policy::local}});
      if (p) rs.value.on_store_failure = *p;
    }

    if (const entry* l = m->find("limits")) rs.limits = parse_limits(*l, join(rs.path, "limits"));
    if (const entry* b = m->find("max_request_body")) {
      if (auto v = size(*b, join(rs.path, "max_request_body"))) rs.value.max_request_body = *v;
    }
    if (const entry* b = m->find("max_response_body")) {
      if (auto v = size(*b, join(rs.path, "max_response_body"))) rs.value.max_response_body = *v;
    }
    if (const entry* u = m->find("upgrade")) {
      if (auto v = boolean(*u, join(rs.path, "upgrade"))) rs.value.upgrade = *v;
    }
    if (const entry* t = m->find("tunnel_idle_timeout")) {
      if (auto d = duration(*t, join(rs.path, "tunnel_idle_timeout"), "tunnel_idle_timeout",
                            std::chrono::hours{24}))
        rs.value.tunnel_idle_timeout = *d;
    }
    if (const entry* c = m->find("cors")) rs.value.cors = parse_cors(*c, join(rs.path, "cors"));
    routes_.push_back(std::move(rs));
  }
}

bool loader::match_path(const std::string& s, const std::string& path, int line,
                        std::string_view field) {
  const std::string f(field);
  const bool bad_char = std::any_of(s.begin(), s.end(), [](char c) {
    return static_cast<unsigned char>(c) <= ' ' || c == 0x7f || c == '?' || c == '#';
  });
  if (s.empty() || s.front() != '/') {
    error(line, path, f + " '" + s + "' must start with '/'");
    return false;
  }
  if (bad_char) {
    error(line, path,
          f + " '" + s + "' must not contain whitespace, control characters, '?' or '#'");
    return false;
  }
  const bool repeated = s.find("//") != std::string::npos;
  bool dots = false;
  for (std::size_t pos = 0; pos < s.size();) {
    std::size_t end = s.find('/', pos + 1);
    if (end == std::string::npos) end = s.size();
    const std::string_view seg(s.data() + pos + 1, end - pos - 1);
    if (seg == "." || seg == "..") dots = true;
    pos = end;
  }
  if (repeated || dots || s.find('%') != std::string::npos) {
    error(line, path,
          f + " '" + s +
              "' is not canonical (repeated '/', a '.' or '..' segment, or a percent escape); "
              "requests are matched in canonical form, so it could never match");
    return false;
  }
  return true;
}

bool loader::glob_ok(const std::string& s, const std::string& path, int line) {
  int doubles = 0;
  for (std::size_t pos = 0; pos < s.size();) {
    std::size_t end = s.find('/', pos + 1);
    if (end == std::string::npos) end = s.size();
    const std::string_view seg(s.data() + pos + 1, end - pos - 1);
    if (seg.find('*') != std::string_view::npos && seg != "*" && seg != "**") {
      error(line, path,
            "path_glob '" + s + "': '" + std::string(seg) +
                "' mixes '*' with other characters; '*' matches one whole segment and '**' "
                "any number of segments");
      return false;
    }
    if (seg == "**") ++doubles;
    pos = end;
  }
  if (doubles > 1) {
    error(line, path, "path_glob '" + s + "' has more than one '**'");
    return false;
  }
  return true;
}

std::optional<std::string> loader::host_name(const std::string& s, const std::string& path,
                                             int line) {
  std::string h = s;
  std::transform(h.begin(), h.end(), h.begin(), [](char c) {
    return static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  });
  const bool bracketed = h.size() > 2 && h.front() == '[' && h.back() == ']';
  const bool ok =
      !h.empty() && (bracketed || std::all_of(h.begin(), h.end(), [](char c) {
                       return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.';
                     }));
  if (!bracketed && h.find(':') != std::string::npos) {
    error(line, path,
          "host '" + s + "' must not name a port; the request's port is ignored when matching");
    return std::nullopt;
  }
  if (!ok) {
    error(line, path, "invalid host '" + s + "': expected a host name such as api.example.com");
    return std::nullopt;
  }
  return h;
}

}  // namespace sluice::config::detail
