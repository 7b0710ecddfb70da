// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// RFC 9457 problem details: the `application/problem+json` answers sluice makes itself.

#include "sluice/http/types.hpp"

#include <string>
#include <string_view>

namespace sluice::http {

/// Appends `s` to `out` as the content of a JSON string, without the quotes (RFC 8259 §7:
/// `"`, `\` and control characters escaped).
void append_json_string(std::string& out, std::string_view s);

/// An RFC 9457 problem body: `{"type":…,"title":…,"status":…,"detail":…}`; `type` is a URI,
/// "about:blank" when empty; `detail` is left out when empty. Strings are JSON-escaped.
std::string problem_body(unsigned status, std::string_view title, std::string_view detail,
                         std::string_view type = {});

/// A response carrying problem_body(): `Server: sluice`,
/// `Content-Type: application/problem+json`; the session frames it.
response problem(unsigned version, beast_http::status status, std::string_view title,
                 std::string_view detail);

/// The problem title and detail for an upstream failure, and its status (502 or 504).
struct failure_text {
  beast_http::status status;
  std::string_view title;
  std::string_view detail;
};
failure_text describe(upstream_failure f);

}  // namespace sluice::http
