// SPDX-License-Identifier: Apache-2.0
// Header rules of the proxy, for both directions in one place (RFC 9110 §7.6.1: hop-by-hop fields).
//
// Connection-level fields describe one hop: forwarding them lets a client steer the gateway's
// pooled upstream connections (one `Connection: close` would tear a pooled connection down) and
// lets an upstream steer the client's connection. Each hop gets its own framing and connection
// fields, set by sluice: render_client_response for the client hop, render_upstream_request for
// the upstream hop. Both lifetimes stay independent. Heads are rendered from the received
// fields in one pass (no field set is edited on the way through).

#include "sluice/http/headers.hpp"

#include "sluice/text_writer.hpp"

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
template <class Lines>
name_list connection_named(const Lines& fields) {
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
template <class Line>
bool hop_only(const Line& line, const name_list& named) {
  return is_hop_by_hop(line.name()) || (!named.empty() && listed(named, line.name_string()));
}

/// Appends one `name: a, b, c` line from the non-empty values and `last` (skipped when
/// empty); nothing when all are empty (RFC 9110 §5.3: one list, in arrival order).
void append_list_line(text_writer& out, std::string_view name, const name_list& values,
                      std::string_view last) {
  bool first = true;
  auto add = [&](std::string_view v) {
    if (v.empty()) return;
    if (first) {
      out.put(name).put(": ");
      first = false;
    } else {
      out.put(", ");
    }
    out.put(v);
  };
  for (const auto v : values) add(trim(v));
  add(last);
  if (!first) out.put("\r\n");
}

/// The space a head is rendered into at first: more than a usual head with its added
/// lines (text_writer grows for a larger one).
constexpr std::size_t head_estimate = 768;

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

void set_lines(bhttp::fields& res, std::string_view lines) {
  while (!lines.empty()) {
    const auto eol = lines.find("\r\n");
    const std::string_view line = lines.substr(0, eol);
    lines = eol == std::string_view::npos ? std::string_view{} : lines.substr(eol + 2);
    const auto colon = line.find(':');
    if (colon == std::string_view::npos) continue;
    res.set(line.substr(0, colon), trim(line.substr(colon + 1)));
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

void render_upstream_request(std::string& out, const request_head& head, const upstream_hop& hop) {
  out.clear();
  text_writer w(out, head_estimate + hop.target.size());
  w.put(head.method_string()).put(' ').put(hop.target).put(" HTTP/1.1\r\n");

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
    w.line(name, line.value());
  }
  append_list_line(w, "X-Forwarded-For", forwarded_for, hop.client_address);
  append_list_line(w, "Via", via, via_entry(head.version()));
  if (hop.upgrade) w.put("Connection: upgrade\r\nUpgrade: websocket\r\n");
  switch (hop.framing) {
    case body_framing::chunked:
      w.put("Transfer-Encoding: chunked\r\n");
      break;
    case body_framing::content_length:
      // One line with the parsed length, whatever repeats or lists the client sent
      // (`5, 5`: RFC 9110 §8.6 lets a recipient collapse identical values).
      w.put("Content-Length: ").number(hop.length).put("\r\n");
      break;
    case body_framing::none: {
      const auto method = head.method();
      if (method == bhttp::verb::post || method == bhttp::verb::put ||
          method == bhttp::verb::patch) {
        w.put("Content-Length: 0\r\n");
      }
      break;
    }
  }
  if (!has_host && hop.default_host) {
    w.put("Host: ").put(hop.default_host->host);
    if (hop.default_host->port != (hop.default_host->tls ? 443 : 80))
      w.put(':').number(std::uint64_t{hop.default_host->port});
    w.put("\r\n");
  }
  w.put("\r\n");
}

namespace {

/// render_client_response for either head type (Beast's header, the relay's response_head).
template <class Head>
void render_response(std::string& out, const Head& res, const client_hop& hop) {
  out.clear();
  std::size_t added = hop.added_lines.size() + hop.upgrade.size();
  for (const auto& [name, value] : hop.fields) added += name.size() + value.size() + 4;
  text_writer w(out, head_estimate + added);
  w.put(hop.version == 10 ? "HTTP/1.0 " : "HTTP/1.1 ")
      .number(std::uint64_t{res.result_int()})
      .put(' ')
      .put(res.reason())
      .put("\r\n");

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
    w.line(name, line.value());
  }
  append_list_line(w, "Via", via, via_entry(res.version()));
  w.put(hop.added_lines);
  for (const auto& [name, value] : hop.fields) w.line(name, value);
  if (!hop.upgrade.empty()) {
    w.put("Connection: upgrade\r\n").line("Upgrade", hop.upgrade);
  } else {
    switch (hop.framing) {
      case response_framing::chunked:
        w.put("Transfer-Encoding: chunked\r\n");
        break;
      case response_framing::content_length:
        w.put("Content-Length: ").number(hop.length).put("\r\n");
        break;
      case response_framing::none:
        break;
    }
    // RFC 9112 §9.3: HTTP/1.1 persists unless closed, HTTP/1.0 only when asked to.
    if (hop.version == 10 ? hop.keep_alive : !hop.keep_alive) {
      w.put(hop.version == 10 ? "Connection: keep-alive\r\n" : "Connection: close\r\n");
    }
  }
  w.put("\r\n");
}

}  // namespace

void render_client_response(std::string& out, const bhttp::response_header<>& res,
                            const client_hop& hop) {
  render_response(out, res, hop);
}

void render_client_response(std::string& out, const response_head& res, const client_hop& hop) {
  render_response(out, res, hop);
}

}  // namespace sluice::http
