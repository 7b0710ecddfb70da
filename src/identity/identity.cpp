#include "sluice/identity/identity.hpp"

#include "sluice/config/key_file.hpp"

#include <boost/algorithm/string/trim.hpp>

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
std::vector<std::string_view> lines(const boost::beast::http::fields& headers,
                                    std::string_view name) {
  std::vector<std::string_view> out;
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

std::string query_param(std::string_view query, std::string_view name) {
  while (!query.empty()) {
    auto amp = query.find('&');
    auto part = query.substr(0, amp);
    auto eq = part.find('=');
    if (part.substr(0, eq) == name) return eq == std::string_view::npos ? std::string() : std::string(part.substr(eq + 1));
    if (amp == std::string_view::npos) break;
    query.remove_prefix(amp + 1);
  }
  return {};
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
    if (text.size() > 2 && text.front() == '[' && text.back() == ']') text = text.substr(1, text.size() - 2);
    auto addr = ip::make_address(text, ec);
    if (ec) break;  // garbage: the last trusted hop is the client
    client = normalise(addr);
    if (!is_trusted(client, trusted)) break;
  }
  return client;
}

std::string client_key(const ip::address& client, const config::identity_settings& settings) {
  const ip::address a = normalise(client);
  if (a.is_v4()) {
    const int prefix = std::clamp(settings.ipv4_prefix, 1, 32);
    if (prefix == 32) return a.to_string();
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

std::variant<std::string, caller_error> presented_key(const config::rules& rules,
                                                      const boost::beast::http::fields& headers,
                                                      std::string_view query) {
  std::string key;
  if (!rules.identity.api_key_header.empty()) {
    auto v = single_value(headers, rules.identity.api_key_header);
    if (!v) return caller_error::conflicting_values;
    key = std::move(*v);
  }
  if (key.empty() && !rules.identity.api_key_query.empty()) {
    key = query_param(query, rules.identity.api_key_query);
  }
  return key;
}

std::optional<std::string> static_plan(const config::rules& rules, std::string_view key) {
  if (key.empty()) return std::nullopt;
  if (auto it = rules.api_keys.find(std::string(key)); it != rules.api_keys.end())
    return it->second;
  if (rules.api_keys_file) return rules.api_keys_file->find(key);
  return std::nullopt;
}

std::variant<caller, caller_error> make_caller(const config::rules& rules, std::string key,
                                               std::optional<std::string> plan,
                                               const ip::address& client) {
  caller who;
  who.client_ip = client_key(client, rules.identity);
  if (!key.empty() && plan && rules.plans.contains(*plan)) {
    who.api_key = std::move(key);
    who.plan = std::move(*plan);
    who.anonymous = false;
    return who;
  }
  if (rules.identity.unknown_key == config::unknown_key_policy::reject) {
    return caller_error::unknown_key;
  }
  who.plan = "anonymous";
  who.anonymous = true;
  return who;
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
      const std::string& name = limit.by == config::identity_kind::user
                                    ? rules.identity.user_header
                                    : limit.header_name;
      std::optional<std::string> v = name.empty() ? std::optional<std::string>(std::string())
                                                  : single_value(headers, name);
      if (!v) return std::nullopt;
      if (v->empty()) return std::pair{ns::fallback_ip, who.client_ip};
      return std::pair{limit.by == config::identity_kind::user ? ns::user : ns::header, std::move(*v)};
    }
  }
  return std::pair{ns::ip, who.client_ip};
}

}  // namespace sluice::identity
