// SPDX-License-Identifier: Apache-2.0
// The CORS protocol (Fetch standard §3.2) for the gateway's routes; see cors.hpp.

#include "sluice/http/cors.hpp"

#include <boost/beast/http/field.hpp>

#include <algorithm>

namespace sluice::http {

namespace bhttp = boost::beast::http;

namespace {

// The origin `scheme://host[:port]` split (an IPv6 host keeps its brackets); false when it
// is not of that shape.
struct origin_parts {
  std::string_view scheme, host, port;
};

bool split_origin(std::string_view s, origin_parts& out) {
  const auto sep = s.find("://");
  if (sep == std::string_view::npos || sep == 0) return false;
  out.scheme = s.substr(0, sep);
  auto rest = s.substr(sep + 3);
  std::size_t host_end = rest.size();
  if (!rest.empty() && rest.front() == '[') {
    const auto close = rest.find(']');
    if (close == std::string_view::npos) return false;
    host_end = close + 1;
  } else if (const auto colon = rest.rfind(':'); colon != std::string_view::npos) {
    host_end = colon;
  }
  out.host = rest.substr(0, host_end);
  out.port = rest.substr(host_end);
  if (!out.port.empty()) {
    if (out.port.front() != ':' || out.port.size() == 1) return false;
    out.port.remove_prefix(1);
  }
  return !out.host.empty();
}

bool matches(const config::origin_pattern& p, std::string_view origin) {
  if (p.any) return true;
  origin_parts o;
  if (!split_origin(origin, o) || o.scheme != p.scheme) return false;
  if (p.port != "*" && o.port != p.port) return false;
  if (!p.any_subdomain) return o.host == p.host;
  // `*.example.com`: one or more whole labels, then ".example.com".
  return o.host.size() > p.host.size() && o.host.ends_with(p.host) &&
         o.host[o.host.size() - p.host.size() - 1] != '.';
}

bool wildcard_origins(const config::cors_policy& policy) {
  return !policy.credentials && std::any_of(policy.origins.begin(), policy.origins.end(),
                                            [](const auto& o) { return o.any; });
}

std::string joined(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& i : items) {
    if (!out.empty()) out += ", ";
    out += i;
  }
  return out;
}

bool contains(const std::vector<std::string>& v, std::string_view s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

}  // namespace

bool origin_allowed(const config::cors_policy& policy, std::string_view origin) {
  if (origin.empty()) return false;
  return std::any_of(policy.origins.begin(), policy.origins.end(),
                     [&](const config::origin_pattern& p) { return matches(p, origin); });
}

bool is_preflight(const request_head& head) {
  return head.method() == bhttp::verb::options && head.find(bhttp::field::origin) != head.end() &&
         head.find(bhttp::field::access_control_request_method) != head.end();
}

void append_cors_fields(const config::cors_policy& policy, const request_head& head,
                        field_list& out) {
  const bool wildcard = wildcard_origins(policy);
  // Fetch §3.2.3: a response whose Access-Control-Allow-Origin depends on Origin is marked
  // `Vary: Origin`, even when this request has none (a shared cache must not reuse it).
  if (!wildcard) out.emplace_back("Vary", "Origin");
  const auto origin = head[bhttp::field::origin];
  if (origin.empty() || !origin_allowed(policy, origin)) return;
  out.emplace_back("Access-Control-Allow-Origin",
                   wildcard ? std::string("*") : std::string(origin));
  if (policy.credentials) out.emplace_back("Access-Control-Allow-Credentials", "true");
  std::string exposed(rate_limit_exposed);
  for (const auto& h : policy.expose_headers) {
    exposed += ", ";
    exposed += h;
  }
  out.emplace_back("Access-Control-Expose-Headers", std::move(exposed));
}

response preflight_answer(const config::cors_policy& policy, const request_head& head,
                          const field_list& extra) {
  response res{bhttp::status::no_content, head.version()};
  res.set(bhttp::field::server, "sluice");
  field_list fields;
  const bool allowed = origin_allowed(policy, head[bhttp::field::origin]);
  if (allowed) {
    const auto requested = head[bhttp::field::access_control_request_method];
    fields.emplace_back("Access-Control-Allow-Methods", contains(policy.methods, "*")
                                                            ? std::string(requested)
                                                            : joined(policy.methods));
    const auto asked = head[bhttp::field::access_control_request_headers];
    if (contains(policy.headers, "*")) {
      fields.emplace_back("Access-Control-Allow-Headers",
                          policy.credentials ? std::string(asked) : std::string("*"));
    } else if (!policy.headers.empty()) {
      fields.emplace_back("Access-Control-Allow-Headers", joined(policy.headers));
    }
    if (policy.max_age_seconds >= 0)
      fields.emplace_back("Access-Control-Max-Age", std::to_string(policy.max_age_seconds));
  }
  // The preflight's answer varies with what it asks for, too (Fetch §3.2.3 note on caching).
  if (!wildcard_origins(policy))
    fields.emplace_back("Vary", "Access-Control-Request-Method, Access-Control-Request-Headers");
  for (const auto& [name, value] : fields) res.insert(name, value);
  for (const auto& [name, value] : extra) res.set(name, value);
  return res;
}

}  // namespace sluice::http
