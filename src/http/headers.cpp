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
    // Host identifies the target on the next hop and Content-Length frames the message on
    // it: neither can be hop-by-hop, and a Connection line naming them is ignored for that
    // name (else `Connection: Content-Length` would strip a body's length and let the next
    // hop read the body as another message). Transfer-Encoding is reset per hop anyway.
    if (boost::beast::iequals(name, "host") || boost::beast::iequals(name, "content-length"))
      continue;
    fields.erase(name);  // case-insensitive
  }
}

bool is_idempotent(bhttp::verb method) {
  switch (method) {
    case bhttp::verb::get:
    case bhttp::verb::head:
    case bhttp::verb::options:
    case bhttp::verb::put:
    case bhttp::verb::delete_:
    case bhttp::verb::trace:
      return true;
    default:
      return false;
  }
}

bool is_websocket_upgrade(const request_head& head) {
  if (head.version() < 11) return false;
  auto lists = [&head](bhttp::field f, std::string_view token) {
    for (const auto& line : head) {
      if (line.name() != f) continue;
      for (const auto t : bhttp::token_list{line.value()}) {
        if (boost::beast::iequals(t, token)) return true;
      }
    }
    return false;
  };
  return lists(bhttp::field::upgrade, "websocket") && lists(bhttp::field::connection, "upgrade");
}

void prepare_upstream_head(request_head& head, std::string_view target,
                           std::string_view client_address, body_framing framing, bool upgrade,
                           std::uint64_t length) {
  const unsigned received_version = head.version();
  // Upgrade is hop-by-hop: kept (with `Connection: upgrade`) only when the route allows it.
  strip_hop_by_hop(head);

  // Method overrides let a caller charged for a GET run a DELETE behind the limiter.
  head.erase("X-HTTP-Method-Override");
  head.erase("X-Method-Override");
  head.erase("X-HTTP-Method");
  // The session answers `Expect: 100-continue` itself, once the request is admitted; passing
  // it on would only make the upstream send an interim response nobody waits for.
  head.erase(bhttp::field::expect);

  append_to_list(head, "X-Forwarded-For", client_address);
  append_to_list(head, "Via", via_entry(received_version));

  head.target(target);
  head.version(11);
  if (upgrade) {
    head.set(bhttp::field::connection, "upgrade");
    head.set(bhttp::field::upgrade, "websocket");
  }

  // Exactly one framing field on the upstream hop (RFC 9112 §6.3).
  const auto method = head.method();
  switch (framing) {
    case body_framing::chunked:
      head.erase(bhttp::field::content_length);
      head.set(bhttp::field::transfer_encoding, "chunked");
      break;
    case body_framing::content_length:
      // One line with the parsed length, whatever repeats or lists the client sent
      // (`5, 5`: RFC 9110 §8.6 lets a recipient collapse identical values).
      head.set(bhttp::field::content_length, std::to_string(length));
      break;
    case body_framing::none:
      if (method == bhttp::verb::post || method == bhttp::verb::put ||
          method == bhttp::verb::patch) {
        head.set(bhttp::field::content_length, "0");
      } else {
        head.erase(bhttp::field::content_length);
      }
      break;
  }
}

void prepare_upstream_request(request& req, std::string_view target,
                              std::string_view client_address) {
  // The body is in memory, so its length is known: Content-Length (or none when empty).
  const bool body = !req.body().empty();
  prepare_upstream_head(req.base(), target, client_address,
                        body ? body_framing::content_length : body_framing::none, false,
                        req.body().size());
  req.keep_alive(true);
  if (body) req.content_length(req.body().size());
}

void set_default_host(request_head& head, const config::upstream& up) {
  if (head.count(bhttp::field::host) > 0) return;
  head.set(bhttp::field::host, up.port == 80 ? up.host : up.host + ":" + std::to_string(up.port));
}

void prepare_client_response(bhttp::response_header<>& res, bool limited) {
  strip_hop_by_hop(res);
  if (limited) {
    // On a limited route only the gateway's quota fields are true (DESIGN.md).
    std::vector<std::string> names;
    for (const auto& f : res) {
      const std::string_view name = f.name_string();
      if (name.size() >= 12 && boost::beast::iequals(name.substr(0, 12), "x-ratelimit-")) {
        names.emplace_back(name);
      }
    }
    for (const auto& n : names) res.erase(n);
    res.erase("RateLimit");
    res.erase("RateLimit-Policy");
  }
  append_to_list(res, "Via", via_entry(res.version()));
}

}  // namespace sluice::http
