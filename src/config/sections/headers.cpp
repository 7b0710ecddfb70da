// SPDX-License-Identifier: Apache-2.0
// The `headers:` section (which rate-limit header sets are sent) and the gateway's own header
// names (`shadow_header:`, `decision_time_header:`).

#include "config/loader_internal.hpp"

namespace sluice::config::detail {

void loader::parse_headers(const entry& e, rules& r) {
  if (!sequence(e.value, "headers", e.line)) return;
  r.headers = header_sets{false, false};
  std::size_t i = 0;
  for (const auto& item : e.value) {
    enum class set { x_ratelimit, ietf };
    auto s = choice<set>(item, at("headers", i++), line_of(item, e.line), "header set",
                         {{"x-ratelimit", set::x_ratelimit}, {"ietf", set::ietf}});
    if (s == set::x_ratelimit) r.headers.x_ratelimit = true;
    if (s == set::ietf) r.headers.ietf = true;
  }
}

std::optional<std::string> loader::gateway_header(const entry& e, const std::string& path) {
  auto h = header_name(e, path);
  if (!h) return std::nullopt;
  std::string lower = *h;
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  static const std::set<std::string> reserved{"host",
                                              "content-length",
                                              "transfer-encoding",
                                              "connection",
                                              "te",
                                              "trailer",
                                              "upgrade",
                                              "keep-alive",
                                              "proxy-connection",
                                              "x-forwarded-for",
                                              "via",
                                              "expect",
                                              "retry-after",
                                              "ratelimit",
                                              "ratelimit-policy",
                                              "x-ratelimit-limit",
                                              "x-ratelimit-remaining",
                                              "x-ratelimit-reset"};
  if (reserved.contains(lower)) {
    error(e.line, path,
          "'" + *h + "' is managed by the gateway; choose another name, such as X-Sluice-Shadow");
    return std::nullopt;
  }
  return h;
}

}  // namespace sluice::config::detail
