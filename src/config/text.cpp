// SPDX-License-Identifier: Apache-2.0
// Scalar syntaxes of the rules file. Everything here is pure string work with no allocation
// beyond the results, so the loader can call it for every node without care.

#include "config/text.hpp"

#include "sluice/config/duration_text.hpp"

#include <arpa/inet.h>

#include <algorithm>
#include <cctype>
#include <vector>

namespace sluice::config::text {
namespace {

bool is_digit(char c) {
  return c >= '0' && c <= '9';
}

bool all_digits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), is_digit);
}

char lower(char c) {
  return static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
}

/// Host names and IPv4 literals: letters, digits, '-', '.', '_' (Docker service names).
bool is_host_name(std::string_view s) {
  if (s.empty() || s.size() > 253) return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.' || c == '_';
  });
}

bool is_ipv6(const std::string& s) {
  unsigned char buf[16];
  return ::inet_pton(AF_INET6, s.c_str(), buf) == 1;
}

/// Parses a port `[0-9]{1,5}` in range; sets `why` otherwise.
std::optional<std::uint16_t> parse_port(std::string_view s, bool allow_zero, std::string& why) {
  if (!all_digits(s) || s.size() > 5) {
    why = s.empty() ? "the port is missing" : "the port '" + std::string(s) + "' is not a number";
    return std::nullopt;
  }
  const auto v = parse_int(s).value;
  if (v > 65535 || (v == 0 && !allow_zero)) {
    why = "port " + std::string(s) + " is out of range " + (allow_zero ? "0" : "1") + "..65535";
    return std::nullopt;
  }
  return static_cast<std::uint16_t>(v);
}

/// `host`, `host:port`, `[v6]`, `[v6]:port` (the authority of a url, or an address).
bool split_host_port(std::string_view s, bool port_required, bool allow_port_zero,
                     std::string& host, std::optional<std::uint16_t>& port, std::string& why) {
  std::string_view port_text;
  bool has_port = false;
  if (!s.empty() && s.front() == '[') {
    const auto close = s.find(']');
    if (close == std::string_view::npos) {
      why = "missing ']' after the IPv6 address";
      return false;
    }
    host = std::string(s.substr(1, close - 1));
    if (!is_ipv6(host)) {
      why = "'" + host + "' is not an IPv6 address";
      return false;
    }
    const auto rest = s.substr(close + 1);
    if (!rest.empty()) {
      if (rest.front() != ':') {
        why = "expected ':' and a port after ']'";
        return false;
      }
      has_port = true;
      port_text = rest.substr(1);
    }
  } else {
    const auto colon = s.rfind(':');
    if (colon != std::string_view::npos) {
      if (s.substr(0, colon).find(':') != std::string_view::npos) {
        why = "an IPv6 address is written in brackets, such as \"[::1]:8080\"";
        return false;
      }
      has_port = true;
      port_text = s.substr(colon + 1);
      s = s.substr(0, colon);
    }
    if (s.empty()) {
      why = "the host is missing";
      return false;
    }
    if (!is_host_name(s)) {
      why = "'" + std::string(s) + "' is not a host name or address";
      return false;
    }
    host = std::string(s);
  }
  if (!has_port) {
    if (port_required) {
      why = "the port is missing";
      return false;
    }
    port.reset();
    return true;
  }
  port = parse_port(port_text, allow_port_zero, why);
  return port.has_value();
}

}  // namespace

int_result parse_int(std::string_view s) {
  bool negative = false;
  if (!s.empty() && s.front() == '-') {
    negative = true;
    s.remove_prefix(1);
  }
  if (!all_digits(s)) return {int_error::not_a_number, 0};
  std::int64_t v = 0;
  for (char c : s) {
    v = v * 10 + (c - '0');
    if (v > max_exact_integer) return {int_error::too_large, 0};
  }
  if (negative && v != 0) return {int_error::negative, -v};
  return {int_error::none, v};
}

notation classify_number(std::string_view s) {
  if (!s.empty() && (s.front() == '-' || s.front() == '+')) s.remove_prefix(1);
  // The value is digits × 10^scale: `12.50e3` is 1250 × 10^(3 - 2).
  std::string digits;
  std::int64_t scale = 0;
  std::size_t i = 0;
  while (i < s.size() && is_digit(s[i])) digits += s[i++];
  if (i < s.size() && s[i] == '.') {
    ++i;
    while (i < s.size() && is_digit(s[i])) {
      digits += s[i++];
      --scale;
    }
  }
  if (digits.empty()) return notation::not_a_number;
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    ++i;
    bool negative = false;
    if (i < s.size() && (s[i] == '-' || s[i] == '+')) negative = s[i++] == '-';
    if (i == s.size()) return notation::not_a_number;
    std::int64_t exponent = 0;
    for (; i < s.size() && is_digit(s[i]); ++i)
      exponent = std::min<std::int64_t>(exponent * 10 + (s[i] - '0'), 1'000'000'000);
    scale += negative ? -exponent : exponent;
  }
  if (i != s.size()) return notation::not_a_number;
  // Whole when the digits end in at least -scale zeros (or are all zeros).
  const auto last = digits.find_last_not_of('0');
  if (last == std::string::npos) return notation::whole;
  const auto zeros = static_cast<std::int64_t>(digits.size() - 1 - last);
  return scale + zeros >= 0 ? notation::whole : notation::fractional;
}

duration_result parse_duration(std::string_view s) {
  std::size_t i = 0;
  while (i < s.size() && is_digit(s[i])) ++i;
  if (i == 0 || i == s.size()) return {duration_error::malformed, {}};
  const auto number = parse_int(s.substr(0, i));
  const auto unit = s.substr(i);
  std::int64_t scale = 0;
  if (unit == "ms")
    scale = 1;
  else if (unit == "s")
    scale = 1000;
  else if (unit == "m")
    scale = 60'000;
  else if (unit == "h")
    scale = 3'600'000;
  else if (unit == "d")
    scale = 86'400'000;
  else
    return {duration_error::malformed, {}};
  if (number.error == int_error::too_large) return {duration_error::too_large, {}};
  if (number.value == 0) return {duration_error::zero, {}};
  if (number.value > max_exact_integer / scale) return {duration_error::too_large, {}};
  return {duration_error::none, std::chrono::milliseconds{number.value * scale}};
}

}  // namespace sluice::config::text

namespace sluice::config {

std::string duration_text(std::chrono::milliseconds d) {
  const auto ms = d.count();
  if (ms % 86'400'000 == 0) return std::to_string(ms / 86'400'000) + "d";
  if (ms % 3'600'000 == 0) return std::to_string(ms / 3'600'000) + "h";
  if (ms % 60'000 == 0) return std::to_string(ms / 60'000) + "m";
  if (ms % 1000 == 0) return std::to_string(ms / 1000) + "s";
  return std::to_string(ms) + "ms";
}

}  // namespace sluice::config

namespace sluice::config::text {

size_result parse_size(std::string_view s) {
  if (s == "unlimited") return {size_error::none, ~std::uint64_t{0}};
  std::size_t i = 0;
  while (i < s.size() && is_digit(s[i])) ++i;
  if (i == 0) return {size_error::malformed, 0};
  const auto number = parse_int(s.substr(0, i));
  const auto unit = s.substr(i);
  std::int64_t scale = 0;
  if (unit.empty() || unit == "B")
    scale = 1;
  else if (unit == "KB")
    scale = 1000;
  else if (unit == "MB")
    scale = 1000 * 1000;
  else if (unit == "GB")
    scale = 1000 * 1000 * 1000;
  else if (unit == "KiB")
    scale = 1024;
  else if (unit == "MiB")
    scale = 1024 * 1024;
  else if (unit == "GiB")
    scale = 1024 * 1024 * 1024;
  else
    return {size_error::malformed, 0};
  if (number.error == int_error::too_large) return {size_error::too_large, 0};
  if (number.value > max_exact_integer / scale) return {size_error::too_large, 0};
  return {size_error::none, static_cast<std::uint64_t>(number.value * scale)};
}

rate_result parse_rate(std::string_view s) {
  rate_result out;
  const auto slash = s.find('/');
  if (slash == std::string_view::npos) {
    out.error = rate_error::malformed;
    return out;
  }
  const auto count_text = s.substr(0, slash);
  const auto period_text = s.substr(slash + 1);
  out.period_text = std::string(period_text);
  const auto count = parse_int(count_text);
  switch (count.error) {
    case int_error::none:
      break;
    case int_error::negative:
      out.error = rate_error::negative;
      return out;
    case int_error::too_large:
      out.error = rate_error::too_large;
      return out;
    case int_error::fractional:
    case int_error::not_a_number:
      switch (classify_number(count_text)) {
        case notation::whole:
          out.error = rate_error::not_digits;
          break;
        case notation::fractional:
          out.error = rate_error::fractional;
          break;
        case notation::not_a_number:
          out.error = rate_error::malformed;
          break;
      }
      return out;
  }
  // `10/s` is `10/1s`: a bare unit means one of it.
  std::string period(period_text);
  if (!period.empty() && !is_digit(period.front())) period.insert(0, "1");
  const auto d = parse_duration(period);
  switch (d.error) {
    case duration_error::none:
      break;
    case duration_error::malformed:
      out.error = rate_error::bad_period;
      return out;
    case duration_error::zero:
      out.error = rate_error::zero_period;
      return out;
    case duration_error::too_large:
      out.error = rate_error::long_period;
      return out;
  }
  out.value.count = count.value;
  out.value.period = d.value;
  return out;
}

std::optional<address> parse_address(std::string_view s, bool allow_port_zero, std::string& why) {
  address out;
  std::optional<std::uint16_t> port;
  if (!split_host_port(s, true, allow_port_zero, out.host, port, why)) return std::nullopt;
  out.port = *port;
  return out;
}

bool parse_http_url(std::string_view s, upstream& out, std::string& why) {
  const auto sep = s.find("://");
  if (sep == std::string_view::npos) {
    why = "expected http://host:port[/base] or https://host:port[/base]";
    return false;
  }
  std::string scheme(s.substr(0, sep));
  std::transform(scheme.begin(), scheme.end(), scheme.begin(), lower);
  if (scheme != "http" && scheme != "https") {
    why = "scheme '" + std::string(s.substr(0, sep)) +
          "' is not supported; only http:// and https:// are";
    return false;
  }
  out.tls = scheme == "https";
  const auto rest = s.substr(sep + 3);
  if (rest.find_first_of("?#") != std::string_view::npos) {
    why = "a query or fragment is not allowed";
    return false;
  }
  if (std::any_of(rest.begin(), rest.end(),
                  [](char c) { return static_cast<unsigned char>(c) <= ' ' || c == 0x7f; })) {
    why = "whitespace and control characters are not allowed";
    return false;
  }
  const auto slash = rest.find('/');
  const auto authority = rest.substr(0, slash);
  if (authority.find('@') != std::string_view::npos) {
    why = "user information is not allowed";
    return false;
  }
  std::optional<std::uint16_t> port;
  if (!split_host_port(authority, false, false, out.host, port, why)) return false;
  out.port = port.value_or(out.tls ? 443 : 80);  // RFC 9110 §4.2.1, §4.2.2
  std::string base =
      slash == std::string_view::npos ? std::string() : std::string(rest.substr(slash));
  while (!base.empty() && base.back() == '/') base.pop_back();
  out.base_path = std::move(base);
  return true;
}

std::optional<cidr> parse_cidr(std::string_view s, std::string& why) {
  cidr out;
  out.text = std::string(s);
  const auto slash = s.find('/');
  const std::string addr(s.substr(0, slash));
  if (::inet_pton(AF_INET, addr.c_str(), out.bytes.data()) == 1) {
    out.v6 = false;
  } else if (::inet_pton(AF_INET6, addr.c_str(), out.bytes.data()) == 1) {
    out.v6 = true;
  } else {
    why = "expected an IPv4 or IPv6 network, such as 10.0.0.0/8 or fd00::/8";
    return std::nullopt;
  }
  const int bits = out.v6 ? 128 : 32;
  out.prefix = bits;
  if (slash != std::string_view::npos) {
    const auto len_text = s.substr(slash + 1);
    const auto len = parse_int(len_text);
    if (len.error != int_error::none || !all_digits(len_text) || len.value > bits) {
      why = "the prefix length must be a number from 0 to " + std::to_string(bits);
      return std::nullopt;
    }
    out.prefix = static_cast<int>(len.value);
  }
  // A network with host bits set is almost always a typo for the network or for a longer
  // prefix; refusing it beats silently trusting more (or fewer) addresses than written.
  auto net = out.bytes;
  for (int i = 0; i < bits / 8; ++i) {
    const int keep = std::clamp(out.prefix - i * 8, 0, 8);
    net[static_cast<std::size_t>(i)] &= static_cast<unsigned char>(0xff00u >> keep);
  }
  if (net != out.bytes) {
    char buf[INET6_ADDRSTRLEN] = {};
    ::inet_ntop(out.v6 ? AF_INET6 : AF_INET, net.data(), buf, sizeof buf);
    why = "host bits are set; did you mean '" + std::string(buf) + "/" +
          std::to_string(out.prefix) + "'?";
    return std::nullopt;
  }
  return out;
}

bool is_token(std::string_view s) {
  static constexpr std::string_view extra = "!#$%&'*+-.^_`|~";
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || extra.find(c) != std::string_view::npos;
  });
}

std::size_t edit_distance(std::string_view a, std::string_view b) {
  const std::size_t n = a.size(), m = b.size();
  std::vector<std::vector<std::size_t>> d(n + 1, std::vector<std::size_t>(m + 1));
  for (std::size_t i = 0; i <= n; ++i) d[i][0] = i;
  for (std::size_t j = 0; j <= m; ++j) d[0][j] = j;
  for (std::size_t i = 1; i <= n; ++i) {
    for (std::size_t j = 1; j <= m; ++j) {
      const std::size_t cost = lower(a[i - 1]) == lower(b[j - 1]) ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && lower(a[i - 1]) == lower(b[j - 2]) &&
          lower(a[i - 2]) == lower(b[j - 1])) {
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
      }
    }
  }
  return d[n][m];
}

std::optional<std::string> suggest(std::string_view word, std::span<const std::string> candidates) {
  std::optional<std::string> best;
  std::size_t best_distance = 0;
  for (const auto& c : candidates) {
    // Up to a third of the candidate may be wrong (at least 1, at most 3 edits).
    const std::size_t limit = std::clamp<std::size_t>(c.size() / 3, 1, 3);
    const std::size_t dist = edit_distance(word, c);
    if (dist <= limit && (!best || dist < best_distance)) {
      best = c;
      best_distance = dist;
    }
  }
  return best;
}

}  // namespace sluice::config::text
