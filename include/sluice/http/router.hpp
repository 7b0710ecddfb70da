#pragma once
/// @file
/// Request-target canonicalisation and route matching.

#include "sluice/config/rules.hpp"

#include <boost/system/result.hpp>

#include <string>
#include <string_view>

namespace sluice::http {

/// The canonical form of a request target (DESIGN.md, "Canonical paths").
struct canonical_target {
  std::string path;   ///< canonical path, starts with '/'
  std::string query;  ///< the query string without '?', unchanged ("" when none)
};

/// Canonicalises an origin-form or absolute-form request target: absolute-form is reduced to
/// its path; percent-encoded unreserved characters are decoded (RFC 3986 §2.3, §6.2.2.2);
/// repeated slashes merged; dot segments removed (RFC 3986 §5.2.4).
/// Errors: errc::bad_request for an encoded '/' or NUL, a `..` above the root, an
/// asterisk-form or authority-form target, or malformed percent-encoding.
boost::system::result<canonical_target> canonicalize(std::string_view target);

/// A route table compiled once per rules snapshot.
class router {
 public:
  explicit router(const config::rules& rules);

  /// The first route whose prefix and methods match, or nullptr (404). `path` must be
  /// canonical. A route allowing GET also matches HEAD.
  const config::route* match(std::string_view method, std::string_view path) const;

 private:
  const config::rules* rules_;
};

}  // namespace sluice::http
