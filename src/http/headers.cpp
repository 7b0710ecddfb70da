// Header rules of the proxy, for both directions in one place (RFC 9110 §7.6.1; case c17).
//
// Connection-level fields describe one hop: forwarding them lets a client steer the gateway's
// pooled upstream connections (one `Connection: close` would tear a pooled connection down) and
// lets an upstream steer the client's connection. Each hop gets its own framing and connection
// fields, set by sluice: the session for the client hop, prepare_upstream_request for the
// upstream hop. Both lifetimes stay independent.

#include "sluice/http/headers.hpp"

#include <boost/beast/core/string.hpp>
#include <boost/beast/http/rfc7230.hpp>

#include <array>
#include <vector>

namespace sluice::http {
namespace {

namespace bhttp = boost::beast::http;

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

/// Joins every line of field `name`, in order, into one comma-separated list (RFC 9110 §5.3),
/// skipping empty lines. Returns "" when there is none.
std::string join_lines(const bhttp::fields& fields, std::string_view name) {
  // Walk the whole list: it keeps arrival order, which fields::equal_range does not when
  // lines of one name are not adjacent.
  std::string joined;
  for (const auto& line : fields) {
    if (!boost::beast::iequals(line.name_string(), name)) continue;
    const std::string_view v = trim(line.value());
    if (v.empty()) continue;
    if (!joined.empty()) joined += ", ";
    joined.append(v);
  }
  return joined;
}

/// Appends `entry` to the list carried by field `name`, leaving a single line.
void append_to_list(bhttp::fields& fields, std::string_view name, std::string_view entry) {
  std::string joined = join_lines(fields, name);
  if (!entry.empty()) {
    if (!joined.empty()) joined += ", ";
    joined.append(entry);
  }
  fields.erase(name);
  if (!joined.empty()) fields.set(name, joined);
}

std::string via_entry(unsigned version) {
  // Via names the protocol of the message as received (RFC 9110 §7.6.3).
  return version == 10 ? "1.0 sluice" : "1.1 sluice";
}

}  // namespace

void strip_hop_by_hop(bhttp::fields& fields) {
  // Names listed in any Connection line (RFC 9110 §7.6.1), collected before erasing.
  std::vector<std::string> named;
  for (const auto& line : fields) {
    if (line.name() != bhttp::field::connection) continue;
    for (const auto token : bhttp::token_list{line.value()}) {
      named.emplace_back(token);
    }
  }
  static constexpr std::array fixed{bhttp::field::connection,
                                    bhttp::field::keep_alive,
                                    bhttp::field::te,
                                    bhttp::field::trailer,
                                    bhttp::field::transfer_encoding,
                                    bhttp::field::upgrade,
                                    bhttp::field::proxy_connection,
                                    bhttp::field::proxy_authenticate,
                                    bhttp::field::proxy_authorization};
  for (const auto f : fixed) fields.erase(f);
  for (const auto& name : named) {
    // Host identifies the target on the next hop and cannot be hop-by-hop; a Connection line
    // naming it is ignored for that name (the framing fields are reset per hop anyway).
    if (boost::beast::iequals(name, "host")) continue;
    fields.erase(name);  // case-insensitive
  }
}

void prepare_upstream_request(request& req, std::string_view target,
                              std::string_view client_address) {
  const unsigned received_version = req.version();
  strip_hop_by_hop(req.base());

  // Method overrides let a caller charged for a GET run a DELETE behind the limiter.
  req.erase("X-HTTP-Method-Override");
  req.erase("X-Method-Override");
  req.erase("X-HTTP-Method");
  // The session has already answered `Expect: 100-continue` and read the whole body; passing
  // it on would only make the upstream send an interim response nobody waits for.
  req.erase(bhttp::field::expect);

  append_to_list(req.base(), "X-Forwarded-For", client_address);
  append_to_list(req.base(), "Via", via_entry(received_version));

  req.target(target);
  req.version(11);
  req.keep_alive(true);

  // Exactly one framing field on the upstream hop: the body is fully buffered, so its length
  // is known (RFC 9112 §6.3); Transfer-Encoding never goes upstream.
  req.erase(bhttp::field::transfer_encoding);
  const auto method = req.method();
  if (!req.body().empty() || method == bhttp::verb::post || method == bhttp::verb::put ||
      method == bhttp::verb::patch) {
    req.content_length(req.body().size());
  } else {
    req.erase(bhttp::field::content_length);
  }
}

void prepare_client_response(response& res, bool limited) {
  strip_hop_by_hop(res.base());
  if (limited) {
    // On a limited route only the gateway's quota fields are true (DESIGN.md).
    std::vector<std::string> names;
    for (const auto& f : res.base()) {
      const std::string_view name = f.name_string();
      if (name.size() >= 12 && boost::beast::iequals(name.substr(0, 12), "x-ratelimit-")) {
        names.emplace_back(name);
      }
    }
    for (const auto& n : names) res.erase(n);
    res.erase("RateLimit");
    res.erase("RateLimit-Policy");
  }
  append_to_list(res.base(), "Via", via_entry(res.version()));
}

}  // namespace sluice::http
