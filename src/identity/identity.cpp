#include "sluice/identity/identity.hpp"

#include <boost/container/small_vector.hpp>

#include "sluice/config/key_file.hpp"

#include <boost/url/encoding_opts.hpp>
#include <boost/url/pct_string_view.hpp>

#include <algorithm>
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

// The values of every line of header `name`, in order. Returns whether any line exists.
boost::container::small_vector<std::string_view, 2> lines(const boost::beast::http::fields& headers,
                                                          std::string_view name) {
  boost::container::small_vector<std::string_view, 2> out;
  auto range = headers.equal_range(name);
  for (auto it = range.first; it != range.second; ++it) out.push_back(it->value());
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
  std::optional<std::string> value;
  for (auto v : lines(headers, name)) {
    auto t = std::string(trim(v));
    if (value && *value != t) return std::nullopt;
    value = std::move(t);
  }
  return value.value_or(std::string());
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

ip::address client_address(const ip::address& peer, const boost::beast::http::fields& headers,
                           const std::vector<config::cidr>& trusted) {
  ip::address client = normalise(peer);
  if (!is_trusted(client, trusted)) return client;
  std::vector<std::string_view> entries;
  for (auto line : lines(headers, "X-Forwarded-For")) {
    while (true) {
      auto comma = line.find(',');
      auto item = trim(line.substr(0, comma));
      if (!item.empty()) entries.push_back(item);
      if (comma == std::string_view::npos) break;
      line.remove_prefix(comma + 1);
    }
  }
  // Walk from the right: each trusted hop vouches for the address to its left.
  for (auto it = entries.rbegin(); it != entries.rend(); ++it) {
    boost::system::error_code ec;
    auto text = std::string(*it);
    if (text.size() > 2 && text.front() == '[' && text.back() == ']')
      text = text.substr(1, text.size() - 2);
    auto addr = ip::make_address(text, ec);
    if (ec) break;  // garbage: the last trusted hop is the client
    client = normalise(addr);
    if (!is_trusted(client, trusted)) break;
  }
  return client;
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
  if (prefix == 128) return a.to_string();
  auto bytes = a.to_v6().to_bytes();
  int bits = prefix;
  for (auto& b : bytes) {
    if (bits >= 8) {
      bits -= 8;
    } else {
      b = static_cast<unsigned char>(b & ((0xffu << (8 - bits)) & 0xffu));
      bits = 0;
    }
  }
  // The scope id is dropped: link-local clients of one prefix share it regardless.
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
  if (auto it = rules.api_keys.find(std::string(key)); it != rules.api_keys.end())
    return it->second;
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
