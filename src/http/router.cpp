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

#include "sluice/errc.hpp"

#include <algorithm>
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
    if (path_start == std::string_view::npos) return canonical_target{"/", ""};
    if (rest[path_start] == '#') return errc::bad_request;
    if (rest[path_start] == '?') return canonicalize("/" + std::string(rest.substr(path_start)));
    target = rest.substr(path_start);
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
  return canonical_target{std::move(*canonical), std::string(query)};
}

router::router(const config::rules& rules) : rules_(&rules) {}

const config::route* router::match(std::string_view method, std::string_view path) const {
  for (const config::route& r : rules_->routes) {
    // Plain string prefix, as Envoy's `prefix` match: "/v1/items" also matches "/v1/itemsX".
    if (!path.starts_with(r.match.path_prefix)) continue;
    if (r.match.methods.empty()) return &r;
    const bool allowed =
        std::any_of(r.match.methods.begin(), r.match.methods.end(), [method](const std::string& m) {
          return m == method || (method == "HEAD" && m == "GET");  // RFC 9110 §9.3.2
        });
    if (allowed) return &r;
  }
  return nullptr;
}

}  // namespace sluice::http
