// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// Request-target canonicalisation and route matching.

#include "sluice/config/rules.hpp"

#include <boost/system/result.hpp>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::http {

/// The canonical form of a request target (DESIGN.md, "Canonical paths").
struct canonical_target {
  std::string path;   ///< canonical path, starts with '/'
  std::string query;  ///< the query string without '?', unchanged ("" when none)
  /// The authority of an absolute-form target (`host[:port]` as sent), "" for origin-form.
  /// It replaces the Host field for routing and upstream (RFC 9112 §3.2.2).
  std::string authority;
};

/// `Host = uri-host [ ":" port ]` (RFC 9112 §3.2, RFC 3986 §3.2.2): a reg-name (unreserved,
/// pct-encoded, sub-delims) or an IP literal in brackets, and an optional port of up to 5
/// digits. An empty value is valid (a target URI without authority).
bool valid_host(std::string_view host);

/// Canonicalises an origin-form or absolute-form request target: absolute-form is reduced to
/// its path (its authority kept in `authority`); percent-encoded unreserved characters are decoded
/// (RFC 3986 §2.3, §6.2.2.2); repeated slashes merged; dot segments removed (RFC 3986 §5.2.4).
/// Errors: errc::bad_request for an encoded '/' or NUL, a `..` above the root, an
/// asterisk-form or authority-form target, or malformed percent-encoding.
boost::system::result<canonical_target> canonicalize(std::string_view target);

/// A route table compiled once per rules snapshot: each route's path pattern is turned into
/// a matcher (prefix, exact, or a vector of glob segments), its methods into a bit set and its
/// host into lower-case text, so matching a request walks no YAML and allocates nothing.
///
/// Matching: routes in declaration order, first match wins (404 when none). A route allowing
/// GET also takes HEAD (RFC 9110 §9.3.2). `path_glob`: `*` is exactly one segment, `**` any
/// number of segments including none (`/v1/**` matches `/v1` and `/v1/a/b`). `host` compares
/// case-insensitively with the request's Host, its port ignored.
///
/// Thread-safety: const after construction; shared by every worker. The router keeps
/// pointers into `rules`, which must outlive it (a snapshot owns both).
class router {
 public:
  explicit router(const config::rules& rules);

  /// The first matching route, or nullptr. `path` must be canonical; `host` is the request's
  /// Host field value as received ("" when absent; then only routes without `host` match).
  const config::route* match(std::string_view method, std::string_view host,
                             std::string_view path) const;

  /// match() for a request without a Host: routes with a `host` condition never match.
  const config::route* match(std::string_view method, std::string_view path) const;

 private:
  struct compiled {
    const config::route* route;
    config::path_kind kind;
    std::string pattern;                     ///< prefix or exact path
    std::vector<std::string> segments;       ///< glob: "*", "**" or literal segments
    bool any_method = true;                  ///< no `methods:` given
    std::uint32_t methods = 0;               ///< bit set of the well-known methods allowed
    std::vector<std::string> other_methods;  ///< extension methods, compared as text
    std::string host;                        ///< lower-case; "" = any
  };
  std::vector<compiled> routes_;
};

}  // namespace sluice::http
