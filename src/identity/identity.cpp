// SPDX-License-Identifier: Apache-2.0
#include "sluice/identity/identity.hpp"

#include <boost/beast/core/string.hpp>
#include <boost/container/small_vector.hpp>

#include "sluice/config/key_file.hpp"

#include <boost/url/encoding_opts.hpp>
#include <boost/url/pct_string_view.hpp>

#include <algorithm>
#include <cctype>
#include <optional>
#include <vector>

namespace sluice::identity {
namespace {

namespace ip = boost::asio::ip;

bool in_network(const ip::address& addr, const config::cidr& net) {
  std::array<unsigned char, 16> bytes{};
  std::size_t len = 0;
  if (addr.is_v4()) {
    if (net.v6) return false;
    auto b = addr.to_v4().to_bytes();
    std::copy(b.begin(), b.end(), bytes.begin());
    len = 4;
  } else {
    if (!net.v6) return false;
    auto b = addr.to_v6().to_bytes();
    std::copy(b.begin(), b.end(), bytes.begin());
    len = 16;
  }
  int bits = net.prefix;
  for (std::size_t i = 0; i < len && bits > 0; ++i, bits -= 8) {
    const unsigned mask = bits >= 8 ? 0xffu : (0xffu << (8 - bits)) & 0xffu;
    if ((bytes[i] & mask) != (net.bytes[i] & mask)) return false;
  }
  return true;
}

// The values of every line of header `name` (case-insensitive), in order. A walk over the
// lines, names compared by length first: a request has few, and the field set's ordered
// index would compare every name it passes letter by letter.
boost::container::small_vector<std::string_view, 2> lines(const boost::beast::http::fields& headers,
                                                          std::string_view name) {
  boost::container::small_vector<std::string_view, 2> out;
  for (const auto& line : headers) {
    const auto n = line.name_string();
    if (n.size() == name.size() && boost::beast::iequals(n, name)) out.push_back(line.value());
  }
  return out;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// One identity header's value: "" when absent or empty; nullopt when repeated with different
// values (an ambiguous identity is a client error).
std::optional<std::string> single_value(const boost::beast::http::fields& headers,
                                        std::string_view name) {
  std::optional<std::string_view> value;
  for (auto v : lines(headers, name)) {
    const auto t = trim(v);
    if (value && *value != t) return std::nullopt;
    value = t;
  }
  return std::string(value.value_or(std::string_view()));
}

// One query component (a parameter's name or value) percent-decoded; nullopt when an escape is
// malformed (`%zz`, a `%` without two hex digits after it). Boost.URL validates and decodes.
//
// `+` is read as a space: RFC 3986 gives `+` no meaning in a query, but the WHATWG URL
// standard's application/x-www-form-urlencoded parser does, and so do HTML forms and the
// frameworks an upstream is likely to run (PHP, Rack, Express, Go's url.ParseQuery, Python's
// parse_qs) and most API gateways. What matters is that sluice reads the key the way the
// upstream will; a literal plus is sent as `%2B`.
std::optional<std::string> decode_component(std::string_view s) {
  if (s.find_first_of("%+") == std::string_view::npos) return std::string(s);
  auto pct = boost::urls::make_pct_string_view(boost::urls::string_view(s.data(), s.size()));
  if (!pct) return std::nullopt;
  boost::urls::encoding_opts opts;
  opts.space_as_plus = true;
  return pct->decode(opts);
}

// The decoded value of query parameter `name` (non-empty) in `query`; see presented_key().
//
// The query is split by hand on `&` and at the first `=` (the WHATWG urlencoded split) rather
// than with boost::urls::parse_query: that grammar is strict RFC 3986 and refuses characters
// real clients send unescaped and the router forwards (`|`, `{`, `"`, bytes above 0x7f), so it
// would turn such requests into 400s although their API key is well formed. Only occurrences
// of `name` are validated. A name with a malformed escape is not `name`: a lenient decoder
// keeps the `%`, so it cannot read it as `name` either. Linear in the query's length.
std::variant<std::string, caller_error> query_param(std::string_view query, std::string_view name) {
  std::optional<std::string> value;
  while (true) {
    const auto amp = query.find('&');
    const auto part = query.substr(0, amp);
    const auto eq = part.find('=');
    if (auto decoded = decode_component(part.substr(0, eq))) {
      const auto nul = decoded->find('\0');
      // A name with a NUL after `name` is `name` to an upstream that reads C strings.
      if (std::string_view(*decoded).substr(0, nul) == name) {
        if (nul != std::string::npos) return caller_error::malformed_value;
        auto v = eq == std::string_view::npos ? std::optional<std::string>(std::string())
                                              : decode_component(part.substr(eq + 1));
        if (!v || v->find('\0') != std::string::npos) return caller_error::malformed_value;
        if (value && *value != *v) return caller_error::conflicting_values;
        value = std::move(*v);
      }
    }
    if (amp == std::string_view::npos) break;
    query.remove_prefix(amp + 1);
  }
  return value.value_or(std::string());
}

}  // namespace

ip::address normalise(const ip::address& a) {
  if (a.is_v6() && a.to_v6().is_v4_mapped()) {
    return ip::make_address_v4(ip::v4_mapped, a.to_v6());
  }
  return a;
}

bool is_trusted(const ip::address& addr, const std::vector<config::cidr>& networks) {
  const auto a = normalise(addr);
  return std::any_of(networks.begin(), networks.end(),
                     [&](const config::cidr& n) { return in_network(a, n); });
}

namespace {

bool is_digit(char c) {
  return c >= '0' && c <= '9';
}
bool is_alpha(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

// An RFC 7239 obfuscated identifier (obfnode / obfport, §6.3): "_" 1*(ALPHA / DIGIT / "." /
// "_" / "-").
bool is_obfuscated(std::string_view s) {
  if (s.size() < 2 || s.front() != '_') return false;
  return std::all_of(s.begin() + 1, s.end(), [](char c) {
    return is_alpha(c) || is_digit(c) || c == '.' || c == '_' || c == '-';
  });
}

// A decimal port: 1..5 digits, at most 65535.
bool is_port(std::string_view s) {
  if (s.empty() || s.size() > 5 || !std::all_of(s.begin(), s.end(), is_digit)) return false;
  unsigned v = 0;
  for (char c : s) v = v * 10 + static_cast<unsigned>(c - '0');
  return v <= 65535;
}

forwarded_node node_of(ip::address a) {
  return {forwarded_node::kind::address, normalise(a)};
}

forwarded_node unreadable() {
  return {forwarded_node::kind::unreadable, {}};
}

// An IPv6 zone index (RFC 4007 §11: `fe80::1%eth0`; RFC 6874 §2 writes the `%` as `%25` in a
// URI): 1*(unreserved / "%"), at most an interface name's length (IFNAMSIZ).
bool is_zone(std::string_view z) {
  return !z.empty() && z.size() <= 16 && std::all_of(z.begin(), z.end(), [](char c) {
    return is_alpha(c) || is_digit(c) || c == '-' || c == '.' || c == '_' || c == '~' || c == '%';
  });
}

// `text` as an IPv4 address (dotted quad) when `v4`, else as an IPv6 address. An IPv6 zone
// index is dropped: it names an interface of the host that wrote it and means nothing here, so
// `fe80::1%eth0` is the client `fe80::1` (keyed with the rest of its prefix).
std::optional<ip::address> parse_ip(std::string_view text, bool v4) {
  if (const auto pct = text.find('%'); !v4 && pct != std::string_view::npos) {
    if (!is_zone(text.substr(pct + 1))) return std::nullopt;
    text = text.substr(0, pct);
  }
  if (text.empty() || text.size() > 45 || text.find('%') != std::string_view::npos)
    return std::nullopt;
  char buf[46];
  std::copy(text.begin(), text.end(), buf);
  buf[text.size()] = '\0';
  boost::system::error_code ec;
  if (v4) {
    auto a = ip::make_address_v4(buf, ec);
    if (ec) return std::nullopt;
    return ip::address(a);
  }
  auto a = ip::make_address_v6(buf, ec);
  if (ec) return std::nullopt;
  return ip::address(a);
}

// `[v6]` followed by nothing or `:` and a port accepted by `port_ok`.
template <class PortOk>
std::optional<ip::address> bracketed(std::string_view s, PortOk port_ok) {
  const auto close = s.find(']');
  if (s.empty() || s.front() != '[' || close == std::string_view::npos) return std::nullopt;
  const auto rest = s.substr(close + 1);
  if (!rest.empty() && (rest.front() != ':' || !port_ok(rest.substr(1)))) return std::nullopt;
  return parse_ip(s.substr(1, close - 1), false);
}

bool is_tchar(char c) {
  return is_alpha(c) || is_digit(c) ||
         std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
}

bool iequal(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) ==
                  std::tolower(static_cast<unsigned char>(y));
         });
}

// A cursor over one Forwarded line (RFC 7239 §4 with RFC 9110 §5.6's lists).
struct forwarded_reader {
  std::string_view s;
  std::size_t i = 0;

  bool done() const { return i >= s.size(); }
  char peek() const { return s[i]; }
  void blanks() {
    while (!done() && (peek() == ' ' || peek() == '\t')) ++i;
  }
  std::string_view token() {
    const auto start = i;
    while (!done() && is_tchar(peek())) ++i;
    return s.substr(start, i - start);
  }
  // A quoted-string's content with quoted-pairs resolved into `out`; false when malformed.
  bool quoted(std::string& out) {
    ++i;  // the opening DQUOTE
    while (!done()) {
      const auto c = static_cast<unsigned char>(peek());
      if (c == '"') {
        ++i;
        return true;
      }
      if (c == '\\') {
        if (++i >= s.size()) return false;
        const auto e = static_cast<unsigned char>(peek());
        if (e != '\t' && (e < 0x20 || e == 0x7f)) return false;
        out += static_cast<char>(e);
      } else if (c == '\t' || (c >= 0x20 && c != 0x7f)) {
        out += static_cast<char>(c);
      } else {
        return false;
      }
      ++i;
    }
    return false;  // no closing DQUOTE
  }
};

}  // namespace

forwarded_node parse_xff_entry(std::string_view entry) {
  const auto s = trim(entry);
  if (s.empty()) return unreadable();
  if (s.front() == '[') {
    if (auto a = bracketed(s, is_port)) return node_of(*a);
    return unreadable();
  }
  if (iequal(s, "unknown")) return {forwarded_node::kind::unknown, {}};
  const auto colons = std::count(s.begin(), s.end(), ':');
  if (colons == 0) {
    if (auto a = parse_ip(s, true)) return node_of(*a);
  } else if (colons == 1) {  // v4:port (a bare IPv6 address has at least two colons)
    const auto colon = s.find(':');
    if (is_port(s.substr(colon + 1))) {
      if (auto a = parse_ip(s.substr(0, colon), true)) return node_of(*a);
    }
  } else if (auto a = parse_ip(s, false)) {
    return node_of(*a);
  }
  return unreadable();
}

forwarded_node parse_forwarded_node(std::string_view node) {
  // node = nodename [ ":" node-port ]; node-port = port / obfport (RFC 7239 §6)
  auto port_ok = [](std::string_view p) { return is_port(p) || is_obfuscated(p); };
  if (!node.empty() && node.front() == '[') {
    if (auto a = bracketed(node, port_ok)) return node_of(*a);
    return unreadable();
  }
  const auto colon = node.find(':');
  const auto name = node.substr(0, colon);
  if (colon != std::string_view::npos && !port_ok(node.substr(colon + 1))) return unreadable();
  if (iequal(name, "unknown")) return {forwarded_node::kind::unknown, {}};
  if (is_obfuscated(name)) return {forwarded_node::kind::obfuscated, {}};
  if (auto a = parse_ip(name, true)) return node_of(*a);
  return unreadable();
}

bool parse_forwarded_line(std::string_view line, std::vector<forwarded_node>& out) {
  const auto first = out.size();
  forwarded_reader r{line};
  auto fail = [&] {
    out.resize(first);
    out.push_back({forwarded_node::kind::syntax_error, {}});
    return false;
  };
  r.blanks();
  while (!r.done()) {
    if (r.peek() == ',') {  // an empty element (RFC 9110 §5.6.1)
      ++r.i;
      r.blanks();
      continue;
    }
    // One element: pairs separated by ';'.
    std::optional<forwarded_node> node;
    boost::container::small_vector<std::string_view, 4> names;
    std::string value;
    while (true) {
      const auto name = r.token();
      if (name.empty() || r.done() || r.peek() != '=') return fail();
      for (auto seen : names) {
        if (iequal(seen, name)) return fail();  // each parameter once per element (§4)
      }
      names.push_back(name);
      ++r.i;
      value.clear();
      if (!r.done() && r.peek() == '"') {
        if (!r.quoted(value)) return fail();
      } else {
        const auto t = r.token();
        if (t.empty()) return fail();
        value.assign(t);
      }
      if (iequal(name, "for")) node = parse_forwarded_node(value);
      r.blanks();
      if (r.done() || r.peek() == ',') break;
      if (r.peek() != ';') return fail();
      ++r.i;
      r.blanks();
      if (r.done() || r.peek() == ',') break;  // a trailing ';' ends the element
    }
    out.push_back(node.value_or(forwarded_node{forwarded_node::kind::unknown, {}}));
    if (!r.done()) ++r.i;  // the ','
    r.blanks();
  }
  return true;
}

std::string_view label(address_source s) {
  switch (s) {
    case address_source::peer:
      return "peer";
    case address_source::forwarded:
      return "forwarded";
    case address_source::no_header:
      return "no_header";
    case address_source::all_trusted:
      return "all_trusted";
    case address_source::unreadable:
      return "unreadable";
    case address_source::syntax_error:
      return "syntax_error";
    case address_source::unknown:
      return "unknown";
    case address_source::obfuscated:
      return "obfuscated";
  }
  return "unreadable";
}

namespace {

client_origin locate(const ip::address& peer, const boost::beast::http::fields& headers,
                     const std::vector<config::cidr>& trusted, config::forwarded_header header) {
  client_origin out{normalise(peer), address_source::peer};
  if (!is_trusted(out.address, trusted)) return out;
  boost::container::small_vector<forwarded_node, 4> nodes;
  if (header == config::forwarded_header::rfc7239) {
    std::vector<forwarded_node> parsed;
    for (auto line : lines(headers, "Forwarded")) parse_forwarded_line(line, parsed);
    nodes.assign(parsed.begin(), parsed.end());
  } else {
    for (auto line : lines(headers, "X-Forwarded-For")) {
      while (true) {
        const auto comma = line.find(',');
        const auto item = trim(line.substr(0, comma));
        if (!item.empty()) nodes.push_back(parse_xff_entry(item));  // empty items: RFC 9110 §5.6.1
        if (comma == std::string_view::npos) break;
        line.remove_prefix(comma + 1);
      }
    }
  }
  if (nodes.empty()) {
    out.source = address_source::no_header;
    return out;
  }
  // Walk from the right: each trusted hop vouches for the entry to its left.
  using kind = forwarded_node::kind;
  for (auto it = nodes.rbegin(); it != nodes.rend(); ++it) {
    switch (it->what) {
      case kind::address:
        out.address = it->address;
        if (!is_trusted(out.address, trusted)) {
          out.source = address_source::forwarded;
          return out;
        }
        continue;
      case kind::unknown:
        out.source = address_source::unknown;
        return out;
      case kind::obfuscated:
        out.source = address_source::obfuscated;
        return out;
      case kind::unreadable:
        out.source = address_source::unreadable;
        return out;
      case kind::syntax_error:
        out.source = address_source::syntax_error;
        return out;
    }
  }
  out.source = address_source::all_trusted;
  return out;
}

}  // namespace

client_origin locate_client(const ip::address& peer, const boost::beast::http::fields& headers,
                            const config::identity_settings& settings) {
  return locate(peer, headers, settings.trusted_proxies, settings.forwarded);
}

ip::address client_address(const ip::address& peer, const boost::beast::http::fields& headers,
                           const std::vector<config::cidr>& trusted) {
  return locate(peer, headers, trusted, config::forwarded_header::x_forwarded_for).address;
}

std::string client_key(const ip::address& client, const config::identity_settings& settings,
                       std::string_view known_text) {
  const ip::address a = normalise(client);
  if (a.is_v4()) {
    const int prefix = std::clamp(settings.ipv4_prefix, 1, 32);
    if (prefix == 32) return known_text.empty() ? a.to_string() : std::string(known_text);
    const std::uint32_t bits = a.to_v4().to_uint();
    const std::uint32_t mask = ~std::uint32_t{0} << (32 - prefix);
    return ip::make_address_v4(bits & mask).to_string() + "/" + std::to_string(prefix);
  }
  const int prefix = std::clamp(settings.ipv6_prefix, 1, 128);
  auto bytes = a.to_v6().to_bytes();
  // The scope id (a zone index) is dropped: it names an interface, not a client.
  if (prefix == 128) return ip::make_address_v6(bytes).to_string();
  int bits = prefix;
  for (auto& b : bytes) {
    if (bits >= 8) {
      bits -= 8;
    } else {
      b = static_cast<unsigned char>(b & ((0xffu << (8 - bits)) & 0xffu));
      bits = 0;
    }
  }
  return ip::make_address_v6(bytes).to_string() + "/" + std::to_string(prefix);
}

std::string_view describe(caller_error e) {
  switch (e) {
    case caller_error::conflicting_values:
      return "the API key or an identity header was given more than once with different values";
    case caller_error::malformed_value:
      return "the API key query parameter has a malformed percent-escape or encodes NUL";
    case caller_error::unknown_key:
      return "a valid API key is required";
    default:
      break;
  }
  return "the caller cannot be identified";
}

std::variant<std::string, caller_error> presented_key(const config::rules& rules,
                                                      const boost::beast::http::fields& headers,
                                                      std::string_view query) {
  std::string from_header;
  if (!rules.identity.api_key_header.empty()) {
    auto v = single_value(headers, rules.identity.api_key_header);
    if (!v) return caller_error::conflicting_values;
    from_header = std::move(*v);
  }
  // The query is read even when the header gives a key: the upstream may prefer either
  // source, so two different keys are as ambiguous as two different header lines.
  std::string from_query;
  if (!rules.identity.api_key_query.empty()) {
    auto v = query_param(query, rules.identity.api_key_query);
    if (auto* err = std::get_if<caller_error>(&v)) return *err;
    from_query = std::move(std::get<std::string>(v));
  }
  if (from_header.empty()) return from_query;
  if (!from_query.empty() && from_query != from_header) return caller_error::conflicting_values;
  return from_header;
}

std::optional<std::string> static_plan(const config::rules& rules, std::string_view key) {
  if (key.empty()) return std::nullopt;
  if (auto it = rules.api_keys.find(key); it != rules.api_keys.end()) return it->second;
  if (rules.api_keys_file) return rules.api_keys_file->find(key);
  return std::nullopt;
}

caller anonymous_caller(const config::rules& rules, const ip::address& client,
                        std::string_view client_text) {
  caller who;
  who.client_ip = client_key(client, rules.identity, client_text);
  who.plan = "anonymous";
  who.anonymous = true;
  return who;
}

std::variant<caller, caller_error> make_caller(const config::rules& rules, std::string key,
                                               std::optional<std::string> plan,
                                               const ip::address& client,
                                               std::string_view client_text) {
  if (!key.empty() && plan && rules.plans.contains(*plan)) {
    caller who;
    who.client_ip = client_key(client, rules.identity, client_text);
    who.api_key = std::move(key);
    who.plan = std::move(*plan);
    who.anonymous = false;
    return who;
  }
  if (rules.identity.unknown_key == config::unknown_key_policy::reject) {
    return caller_error::unknown_key;
  }
  return anonymous_caller(rules, client, client_text);
}

std::variant<caller, caller_error> identify(const config::rules& rules,
                                            const boost::beast::http::fields& headers,
                                            std::string_view query, const ip::address& client) {
  auto key = presented_key(rules, headers, query);
  if (auto* err = std::get_if<caller_error>(&key)) return *err;
  auto& k = std::get<std::string>(key);
  auto plan = static_plan(rules, k);
  return make_caller(rules, std::move(k), std::move(plan), client);
}

std::optional<std::pair<limiter::key_namespace, std::string>> limit_identity(
    const config::limit& limit, const caller& who, const config::rules& rules,
    const boost::beast::http::fields& headers) {
  using ns = limiter::key_namespace;
  switch (limit.by) {
    case config::identity_kind::api_key:
      if (who.anonymous) return std::pair{ns::anonymous_ip, who.client_ip};
      return std::pair{ns::api_key, who.api_key};
    case config::identity_kind::ip:
      return std::pair{ns::ip, who.client_ip};
    case config::identity_kind::global:
      return std::pair{ns::global, std::string("*")};
    case config::identity_kind::user:
    case config::identity_kind::header: {
      const std::string& name =
          limit.by == config::identity_kind::user ? rules.identity.user_header : limit.header_name;
      std::optional<std::string> v =
          name.empty() ? std::optional<std::string>(std::string()) : single_value(headers, name);
      if (!v) return std::nullopt;
      if (v->empty()) return std::pair{ns::fallback_ip, who.client_ip};
      return std::pair{limit.by == config::identity_kind::user ? ns::user : ns::header,
                       std::move(*v)};
    }
  }
  return std::pair{ns::ip, who.client_ip};
}

}  // namespace sluice::identity
