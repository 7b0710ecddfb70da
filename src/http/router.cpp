// SPDX-License-Identifier: Apache-2.0
// Request-target canonicalisation and route matching.
//
// The canonical path is what the router matches and what the upstream receives, so a request
// cannot reach a route (or dodge one) by spelling its path differently: DESIGN.md,
// "Canonical paths". Order of the steps (RFC 3986 §6.2.2): percent-decode unreserved
// characters (§2.3) and upper-case the hex of every other escape (§6.2.2.1), merge repeated
// slashes, then remove dot segments (§5.2.4). Decoding comes first so that `%2E%2E` is a dot
// segment like `..` is.
//
// Deliberate departures from RFC 3986, each a 400 (errc::bad_request):
// - `..` above the root is an error (the RFC clamps it to the root): a client asking for it is
//   probing for traversal, and clamping would hand the upstream a path the client never wrote.
// - `%2F` and `%00` are errors: an encoded '/' changes the segment structure for upstreams that
//   decode it, and NUL truncates paths in C code behind us.
// - Asterisk-form and authority-form targets, fragments, control bytes and malformed escapes.

#include "sluice/http/router.hpp"

#include <cctype>

#include "sluice/errc.hpp"

#include <algorithm>
#include <iterator>
#include <vector>

namespace sluice::http {
namespace {

bool is_unreserved(unsigned char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '.' || c == '_' || c == '~';
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

bool iequals_prefix(std::string_view s, std::string_view prefix) {
  if (s.size() < prefix.size()) return false;
  for (std::size_t i = 0; i < prefix.size(); ++i) {
    char c = s[i];
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    if (c != prefix[i]) return false;
  }
  return true;
}

/// Step 1: decodes escapes of unreserved characters, upper-cases the hex of the others.
/// Rejects malformed escapes, `%2F`, `%00`, and raw control bytes or spaces.
boost::system::result<std::string> normalise_escapes(std::string_view path) {
  std::string out;
  out.reserve(path.size());
  for (std::size_t i = 0; i < path.size(); ++i) {
    const auto c = static_cast<unsigned char>(path[i]);
    if (c <= 0x20 || c == 0x7f || c == '#') return errc::bad_request;
    if (c != '%') {
      out.push_back(static_cast<char>(c));
      continue;
    }
    if (i + 2 >= path.size()) return errc::bad_request;  // truncated escape
    const int hi = hex_value(path[i + 1]);
    const int lo = hex_value(path[i + 2]);
    if (hi < 0 || lo < 0) return errc::bad_request;
    const auto decoded = static_cast<unsigned char>(hi * 16 + lo);
    if (decoded == '/' || decoded == 0) return errc::bad_request;
    if (is_unreserved(decoded)) {
      out.push_back(static_cast<char>(decoded));
    } else {
      static constexpr char digits[] = "0123456789ABCDEF";
      out.push_back('%');
      out.push_back(digits[hi]);
      out.push_back(digits[lo]);
    }
    i += 2;
  }
  return out;
}

/// Steps 2 and 3: merges repeated slashes and removes dot segments, tracking the depth so a
/// `..` above the root is an error rather than silently clamped. `path` starts with '/'.
/// Linear in the path length.
boost::system::result<std::string> remove_dot_segments(std::string_view path) {
  std::vector<std::string_view> segments;
  bool trailing_slash = false;
  std::size_t pos = 1;  // skip the leading '/'
  while (pos <= path.size()) {
    std::size_t end = path.find('/', pos);
    if (end == std::string_view::npos) end = path.size();
    const std::string_view seg = path.substr(pos, end - pos);
    const bool last = end == path.size();
    if (seg.empty()) {
      // An empty segment is a repeated slash (merged) or the trailing slash.
      if (last) trailing_slash = true;
    } else if (seg == ".") {
      if (last) trailing_slash = true;
    } else if (seg == "..") {
      if (segments.empty()) return errc::bad_request;
      segments.pop_back();
      if (last) trailing_slash = true;
    } else {
      segments.push_back(seg);
      if (last) trailing_slash = false;
    }
    pos = end + 1;
  }
  std::string out = "/";
  for (std::size_t i = 0; i < segments.size(); ++i) {
    if (i) out.push_back('/');
    out.append(segments[i]);
  }
  if (trailing_slash && !segments.empty()) out.push_back('/');
  return out;
}

}  // namespace

namespace {

bool is_reg_name_char(unsigned char c) {
  // unreserved / pct-encoded ('%') / sub-delims (RFC 3986 §3.2.2)
  if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9')) return true;
  return std::string_view("-._~%!$&'()*+,;=").find(static_cast<char>(c)) != std::string_view::npos;
}

bool is_port(std::string_view p) {
  if (p.size() > 5) return false;
  for (const char c : p) {
    if (c < '0' || c > '9') return false;
  }
  return true;
}

/// `Host = uri-host [ ":" port ]` (RFC 9112 §3.2, RFC 3986 §3.2.2). An empty value is valid
/// (a target URI without authority).
}  // namespace

bool valid_host(std::string_view h) {
  if (h.empty()) return true;
  if (h.front() == '[') {
    const auto close = h.find(']');
    if (close == std::string_view::npos || close < 2) return false;
    for (const char c : h.substr(1, close - 1)) {
      const bool ok = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F') ||
                      c == ':' || c == '.';
      if (!ok) return false;
    }
    const std::string_view rest = h.substr(close + 1);
    if (rest.empty()) return true;
    return rest.front() == ':' && is_port(rest.substr(1));
  }
  std::string_view host = h;
  if (const auto colon = h.rfind(':'); colon != std::string_view::npos) {
    if (!is_port(h.substr(colon + 1))) return false;
    host = h.substr(0, colon);
  }
  if (host.empty()) return false;
  for (std::size_t i = 0; i < host.size(); ++i) {
    const auto c = static_cast<unsigned char>(host[i]);
    if (!is_reg_name_char(c)) return false;
    if (c == '%') {  // pct-encoded = "%" HEXDIG HEXDIG
      if (i + 2 >= host.size()) return false;
      if (!std::isxdigit(static_cast<unsigned char>(host[i + 1])) ||
          !std::isxdigit(static_cast<unsigned char>(host[i + 2])))
        return false;
      i += 2;
    }
  }
  return true;
}

boost::system::result<canonical_target> canonicalize(std::string_view target) {
  if (target.empty()) return errc::bad_request;

  // Absolute-form (RFC 9112 §3.2.2): keep the path and query, drop scheme and authority.
  if (target.front() != '/') {
    std::size_t scheme_len = 0;
    if (iequals_prefix(target, "http://")) {
      scheme_len = 7;
    } else if (iequals_prefix(target, "https://")) {
      scheme_len = 8;
    } else {
      return errc::bad_request;  // asterisk-form, authority-form, or garbage
    }
    const std::string_view rest = target.substr(scheme_len);
    const std::size_t path_start = rest.find_first_of("/?#");
    const std::string_view authority = rest.substr(0, path_start);
    if (authority.empty() || authority.find('@') != std::string_view::npos) {
      return errc::bad_request;  // no host, or userinfo (forbidden by RFC 9110 §4.2.1)
    }
    if (!valid_host(authority)) return errc::bad_request;
    canonical_target out;
    if (path_start == std::string_view::npos) {
      out = canonical_target{"/", "", {}};
    } else if (rest[path_start] == '#') {
      return errc::bad_request;
    } else if (rest[path_start] == '?') {
      auto r = canonicalize("/" + std::string(rest.substr(path_start)));
      if (!r) return r;
      out = std::move(*r);
    } else {
      auto r = canonicalize(rest.substr(path_start));
      if (!r) return r;
      out = std::move(*r);
    }
    out.authority = std::string(authority);
    return out;
  }

  std::string_view path = target;
  std::string_view query;
  if (const auto q = target.find('?'); q != std::string_view::npos) {
    path = target.substr(0, q);
    query = target.substr(q + 1);
    // The query is kept as given, but it must still be a valid part of a request line.
    for (const char ch : query) {
      const auto c = static_cast<unsigned char>(ch);
      if (c <= 0x20 || c == 0x7f || c == '#') return errc::bad_request;
    }
  }

  auto escaped = normalise_escapes(path);
  if (!escaped) return escaped.error();
  auto canonical = remove_dot_segments(*escaped);
  if (!canonical) return canonical.error();
  return canonical_target{std::move(*canonical), std::string(query), {}};
}

namespace {

// Bit of a well-known method in a route's set (RFC 9110 §9 and PATCH, RFC 5789); -1 for an
// extension method, which is compared as text.
int method_bit(std::string_view m) {
  static constexpr std::string_view known[] = {"GET",     "HEAD",    "POST",  "PUT",  "DELETE",
                                               "CONNECT", "OPTIONS", "TRACE", "PATCH"};
  for (int i = 0; i < static_cast<int>(std::size(known)); ++i)
    if (known[i] == m) return i;
  return -1;
}

std::vector<std::string_view> split_segments(std::string_view path) {
  std::vector<std::string_view> out;
  std::size_t pos = 1;
  while (pos <= path.size()) {
    std::size_t end = path.find('/', pos);
    if (end == std::string_view::npos) end = path.size();
    if (end > pos) out.push_back(path.substr(pos, end - pos));
    pos = end + 1;
  }
  return out;
}

// Glob over segments. With at most one `**` (validated), a greedy two-sided match is exact:
// the segments before `**` match a prefix, those after it a suffix. O(segments).
template <class Path>
bool glob_match(const std::vector<std::string>& pattern, const Path& path) {
  std::size_t star2 = pattern.size();
  for (std::size_t i = 0; i < pattern.size(); ++i)
    if (pattern[i] == "**") star2 = i;
  auto seg_ok = [](const std::string& p, std::string_view s) { return p == "*" || p == s; };
  if (star2 == pattern.size()) {
    if (pattern.size() != path.size()) return false;
    for (std::size_t i = 0; i < pattern.size(); ++i)
      if (!seg_ok(pattern[i], path[i])) return false;
    return true;
  }
  const std::size_t before = star2, after = pattern.size() - star2 - 1;
  if (path.size() < before + after) return false;
  for (std::size_t i = 0; i < before; ++i)
    if (!seg_ok(pattern[i], path[i])) return false;
  for (std::size_t i = 0; i < after; ++i)
    if (!seg_ok(pattern[star2 + 1 + i], path[path.size() - after + i])) return false;
  return true;
}

// The host part of a Host field value, without port, lower-cased into `out`.
void host_of(std::string_view value, std::string& out) {
  out.clear();
  std::string_view h = value;
  if (!h.empty() && h.front() == '[') {
    const auto close = h.find(']');
    h = h.substr(0, close == std::string_view::npos ? h.size() : close + 1);
  } else if (const auto colon = h.rfind(':'); colon != std::string_view::npos) {
    h = h.substr(0, colon);
  }
  while (!h.empty() && h.back() == '.') h.remove_suffix(1);  // FQDN form "example.com."
  out.reserve(h.size());
  for (char c : h) out.push_back(c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c);
}

}  // namespace

router::router(const config::rules& rules) {
  routes_.reserve(rules.routes.size());
  for (const config::route& r : rules.routes) {
    compiled c;
    c.route = &r;
    c.kind = r.match.kind;
    c.pattern = r.match.kind == config::path_kind::prefix ? r.match.path_prefix : r.match.path;
    if (c.kind == config::path_kind::glob) {
      for (auto seg : split_segments(c.pattern)) c.segments.emplace_back(seg);
    }
    for (const auto& m : r.match.methods) {
      const int bit = method_bit(m);
      if (bit >= 0)
        c.methods |= 1u << bit;
      else
        c.other_methods.push_back(m);
    }
    // RFC 9110 §9.3.2: a route allowing GET also takes HEAD.
    if (c.methods & (1u << method_bit("GET"))) c.methods |= 1u << method_bit("HEAD");
    c.any_method = r.match.methods.empty();
    c.host = r.match.host;
    routes_.push_back(std::move(c));
  }
}

const config::route* router::match(std::string_view method, std::string_view path) const {
  return match(method, {}, path);
}

const config::route* router::match(std::string_view method, std::string_view host,
                                   std::string_view path) const {
  const int bit = method_bit(method);
  std::string host_lc;
  bool host_done = false;
  std::vector<std::string_view> segments;
  bool segments_done = false;
  for (const compiled& c : routes_) {
    switch (c.kind) {
      case config::path_kind::prefix:
        // Plain string prefix, as Envoy's `prefix` match: "/v1/items" also matches "/v1/itemsX".
        if (!path.starts_with(c.pattern)) continue;
        break;
      case config::path_kind::exact:
        if (path != c.pattern) continue;
        break;
      case config::path_kind::glob:
        if (!segments_done) {
          segments = split_segments(path);
          segments_done = true;
        }
        if (!glob_match(c.segments, segments)) continue;
        break;
    }
    if (!c.any_method) {
      const bool known = bit >= 0 && (c.methods & (1u << bit)) != 0;
      const bool other = std::find(c.other_methods.begin(), c.other_methods.end(), method) !=
                         c.other_methods.end();
      if (!known && !other) continue;
    }
    if (!c.host.empty()) {
      if (!host_done) {
        host_of(host, host_lc);
        host_done = true;
      }
      if (host_lc != c.host) continue;
    }
    return c.route;
  }
  return nullptr;
}

}  // namespace sluice::http
