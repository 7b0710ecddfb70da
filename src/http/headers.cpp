// Header rules of the proxy, for both directions in one place (RFC 9110 §7.6.1; case c17).
//
// Connection-level fields describe one hop: forwarding them lets a client steer the gateway's
// pooled upstream connections (one `Connection: close` would tear a pooled connection down) and
// lets an upstream steer the client's connection. Each hop gets its own framing and connection
// fields, set by sluice: render_client_response for the client hop, render_upstream_request for
// the upstream hop. Both lifetimes stay independent. Heads are rendered from the received
// fields in one pass (no field set is edited on the way through).

#include "sluice/http/headers.hpp"

#include <boost/beast/core/string.hpp>
#include <boost/beast/http/rfc7230.hpp>
#include <boost/container/small_vector.hpp>

#include <charconv>
#include <iterator>
#include <vector>

namespace sluice::http {
namespace {

namespace bhttp = boost::beast::http;
using boost::beast::iequals;

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

/// The fields that describe one hop only, whatever Connection says (RFC 9110 §7.6.1).
bool is_hop_by_hop(bhttp::field f) {
  switch (f) {
    case bhttp::field::connection:
    case bhttp::field::keep_alive:
    case bhttp::field::te:
    case bhttp::field::trailer:
    case bhttp::field::transfer_encoding:
    case bhttp::field::upgrade:
    case bhttp::field::proxy_connection:
    case bhttp::field::proxy_authenticate:
    case bhttp::field::proxy_authorization:
      return true;
    default:
      return false;
  }
}

/// The names listed in the Connection lines of `fields` (views into their values), less Host
/// and Content-Length: Host identifies the target on the next hop and Content-Length frames
/// the message on it, so neither can be hop-by-hop (else `Connection: Content-Length` would
/// strip a body's length and let the next hop read the body as another message).
using name_list = boost::container::small_vector<std::string_view, 4>;
name_list connection_named(const bhttp::fields& fields) {
  name_list named;
  for (const auto& line : fields) {
    if (line.name() != bhttp::field::connection) continue;
    for (const auto token : bhttp::token_list{line.value()}) {
      const std::string_view t(token.data(), token.size());
      if (iequals(t, "host") || iequals(t, "content-length")) continue;
      named.push_back(t);
    }
  }
  return named;
}

bool listed(const name_list& names, std::string_view name) {
  for (const auto n : names) {
    if (iequals(n, name)) return true;
  }
  return false;
}

/// Whether a line is dropped on every hop: hop-by-hop, or named in Connection.
bool hop_only(const bhttp::fields::value_type& line, const name_list& named) {
  return is_hop_by_hop(line.name()) || (!named.empty() && listed(named, line.name_string()));
}

void append_line(std::string& out, std::string_view name, std::string_view value) {
  out.append(name);
  out.append(": ");
  out.append(value);
  out.append("\r\n");
}

/// Appends one `name: a, b, c` line from the non-empty values and `last` (skipped when
/// empty); nothing when all are empty (RFC 9110 §5.3: one list, in arrival order).
void append_list_line(std::string& out, std::string_view name, const name_list& values,
                      std::string_view last) {
  bool first = true;
  auto add = [&](std::string_view v) {
    if (v.empty()) return;
    if (first) {
      out.append(name);
      out.append(": ");
      first = false;
    } else {
      out.append(", ");
    }
    out.append(v);
  };
  for (const auto v : values) add(trim(v));
  add(last);
  if (!first) out.append("\r\n");
}

void append_number(std::string& out, std::uint64_t n) {
  char digits[24];
  const auto r = std::to_chars(std::begin(digits), std::end(digits), n);
  out.append(digits, r.ptr);
}

std::string_view via_entry(unsigned version) {
  // Via names the protocol of the message as received (RFC 9110 §7.6.3).
  return version == 10 ? "1.0 sluice" : "1.1 sluice";
}

bool is_method_override(std::string_view name) {
  return iequals(name, "X-HTTP-Method-Override") || iequals(name, "X-Method-Override") ||
         iequals(name, "X-HTTP-Method");
}

/// A rate-limit field of the upstream's own, dropped on a limited route (DESIGN.md).
bool is_upstream_quota(std::string_view name) {
  return (name.size() >= 12 && iequals(name.substr(0, 12), "x-ratelimit-")) ||
         iequals(name, "RateLimit") || iequals(name, "RateLimit-Policy");
}

}  // namespace

void strip_hop_by_hop(bhttp::fields& fields) {
  const name_list named = connection_named(fields);
  // Copies: erasing a line frees the value the views point into.
  std::vector<std::string> names(named.begin(), named.end());
  for (auto it = fields.begin(); it != fields.end();) {
    if (is_hop_by_hop(it->name())) {
      it = fields.erase(it);
    } else {
      ++it;
    }
  }
  for (const auto& name : names) fields.erase(name);  // case-insensitive
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

void render_upstream_request(std::string& out, const request_head& head, const upstream_hop& hop) {
  out.clear();
  out.append(head.method_string());
  out.push_back(' ');
  out.append(hop.target);
  out.append(" HTTP/1.1\r\n");

  const name_list named = connection_named(head);
  name_list forwarded_for, via;
  bool has_host = false;
  for (const auto& line : head) {
    if (hop_only(line, named)) continue;
    const auto f = line.name();
    const std::string_view name = line.name_string();
    switch (f) {
      case bhttp::field::expect:          // the session answers 100-continue itself
      case bhttp::field::content_length:  // the framing is this hop's
        continue;
      case bhttp::field::via:
        via.push_back(line.value());
        continue;
      case bhttp::field::host:
        has_host = true;
        break;
      default:
        if (f == bhttp::field::unknown) {
          if (iequals(name, "X-Forwarded-For")) {
            forwarded_for.push_back(line.value());
            continue;
          }
          if (is_method_override(name)) continue;
        }
        break;
    }
    append_line(out, name, line.value());
  }
  append_list_line(out, "X-Forwarded-For", forwarded_for, hop.client_address);
  append_list_line(out, "Via", via, via_entry(head.version()));
  if (hop.upgrade) {
    out.append("Connection: upgrade\r\nUpgrade: websocket\r\n");
  }
  switch (hop.framing) {
    case body_framing::chunked:
      out.append("Transfer-Encoding: chunked\r\n");
      break;
    case body_framing::content_length:
      // One line with the parsed length, whatever repeats or lists the client sent
      // (`5, 5`: RFC 9110 §8.6 lets a recipient collapse identical values).
      out.append("Content-Length: ");
      append_number(out, hop.length);
      out.append("\r\n");
      break;
    case body_framing::none: {
      const auto method = head.method();
      if (method == bhttp::verb::post || method == bhttp::verb::put ||
          method == bhttp::verb::patch) {
        out.append("Content-Length: 0\r\n");
      }
      break;
    }
  }
  if (!has_host && hop.default_host) {
    out.append("Host: ");
    out.append(hop.default_host->host);
    if (hop.default_host->port != (hop.default_host->tls ? 443 : 80)) {
      out.push_back(':');
      append_number(out, hop.default_host->port);
    }
    out.append("\r\n");
  }
  out.append("\r\n");
}

void render_client_response(std::string& out, const bhttp::response_header<>& res,
                            const client_hop& hop) {
  out.clear();
  out.append(hop.version == 10 ? "HTTP/1.0 " : "HTTP/1.1 ");
  append_number(out, res.result_int());
  out.push_back(' ');
  out.append(res.reason());
  out.append("\r\n");

  const name_list named = connection_named(res);
  name_list via;
  for (const auto& line : res) {
    if (hop_only(line, named)) continue;
    const auto f = line.name();
    const std::string_view name = line.name_string();
    if (f == bhttp::field::content_length) continue;  // the framing is this hop's
    if (f == bhttp::field::via) {
      via.push_back(line.value());
      continue;
    }
    if (hop.limited && f == bhttp::field::unknown && is_upstream_quota(name)) continue;
    bool replaced = false;
    for (const auto& [added, value] : hop.fields) {
      // Vary is a list both sides add to (the gateway's `Origin`, the upstream's own).
      if (f == bhttp::field::vary) break;
      if (added.size() == name.size() && iequals(added, name)) {
        replaced = true;
        break;
      }
    }
    if (replaced) continue;
    append_line(out, name, line.value());
  }
  append_list_line(out, "Via", via, via_entry(res.version()));
  for (const auto& [name, value] : hop.fields) append_line(out, name, value);
  if (!hop.upgrade.empty()) {
    out.append("Connection: upgrade\r\n");
    append_line(out, "Upgrade", hop.upgrade);
  } else {
    switch (hop.framing) {
      case response_framing::chunked:
        out.append("Transfer-Encoding: chunked\r\n");
        break;
      case response_framing::content_length:
        out.append("Content-Length: ");
        append_number(out, hop.length);
        out.append("\r\n");
        break;
      case response_framing::none:
        break;
    }
    // RFC 9112 §9.3: HTTP/1.1 persists unless closed, HTTP/1.0 only when asked to.
    if (hop.version == 10 ? hop.keep_alive : !hop.keep_alive) {
      out.append(hop.version == 10 ? "Connection: keep-alive\r\n" : "Connection: close\r\n");
    }
  }
  out.append("\r\n");
}

}  // namespace sluice::http
