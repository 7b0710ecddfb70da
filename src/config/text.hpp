// SPDX-License-Identifier: Apache-2.0
#pragma once
// Scalar syntaxes of the rules file (durations, rates, addresses, urls, CIDR networks, HTTP
// tokens) and the edit distance behind "did you mean". Private to the config room: the loader
// turns the error kinds below into diagnostics with a path and a line.

#include "sluice/config/rules.hpp"

#include <chrono>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace sluice::config::text {

/// Why a number did not parse as a whole number.
enum class int_error { none, not_a_number, fractional, negative, too_large };

/// Parses a decimal integer `-?[0-9]+`. Values above 2^53 give `too_large` (also on int64
/// overflow); a negative value is returned with `negative` so that callers can report it.
struct int_result {
  int_error error = int_error::none;
  std::int64_t value = 0;
};
int_result parse_int(std::string_view s);

/// How a scalar that is not plain digits reads as a decimal number (an optional sign, digits
/// with an optional fraction, an optional exponent): not at all (`abc`, `0x10`, `1_000`), a
/// whole number in other notation (`1e3`, `2.0`, `+5`, `150e-1`), or a fraction (`1.5`, `1e-3`).
/// Integer fields take digits only, so the first two are refused with different messages.
enum class notation { not_a_number, whole, fractional };
notation classify_number(std::string_view s);

/// Why a duration did not parse.
enum class duration_error { none, malformed, zero, too_large };

/// Parses `<integer><unit>` with unit ms|s|m|h|d; at most 2^53 ms.
struct duration_result {
  duration_error error = duration_error::none;
  std::chrono::milliseconds value{0};
};
duration_result parse_duration(std::string_view s);

/// Why a size did not parse.
enum class size_error { none, malformed, too_large };

/// Parses a byte size: `<integer>[unit]`, unit B, KB, MB, GB (powers of 1000) or KiB, MiB,
/// GiB (powers of 1024; IEC 80000-13), or `unlimited` (config::unlimited_size). At most 2^53.
struct size_result {
  size_error error = size_error::none;
  std::uint64_t value = 0;
};
size_result parse_size(std::string_view s);

/// Why a rate did not parse. `zero` still fills in the period (count 0).
enum class rate_error {
  none,
  malformed,
  negative,
  fractional,
  not_digits,  ///< a whole count in other notation (`1e3/1m`)
  too_large,
  bad_period,
  zero_period,
  long_period
};

/// Parses `N/DURATION`, or `N/UNIT` meaning one unit (`10/s`).
struct rate_result {
  rate_error error = rate_error::none;
  struct rate value;
  std::string period_text;  ///< the text after '/', for messages
};
rate_result parse_rate(std::string_view s);

/// `host:port` or `[v6]:port`. The host is returned without brackets.
struct address {
  std::string host;
  std::uint16_t port = 0;
};
/// Returns nullopt and sets `why` (a message fragment) when malformed.
std::optional<address> parse_address(std::string_view s, bool allow_port_zero, std::string& why);

/// `http://host[:port][/base]` or `https://host[:port][/base]` (default port 80 or 443).
/// Fills host, port, base_path and tls of `out`.
bool parse_http_url(std::string_view s, upstream& out, std::string& why);

/// `a.b.c.d/len`, `v6/len`, or a bare address (a host network). `why` may name the intended
/// network when host bits are set.
std::optional<cidr> parse_cidr(std::string_view s, std::string& why);

/// An HTTP token (RFC 9110 §5.6.2): a method or a header field name.
bool is_token(std::string_view s);

/// Optimal string alignment distance (Levenshtein plus adjacent transpositions), ASCII
/// case-insensitive. O(|a|·|b|).
std::size_t edit_distance(std::string_view a, std::string_view b);

/// The candidate closest to `word`, if it is close enough to be a plausible typo.
std::optional<std::string> suggest(std::string_view word, std::span<const std::string> candidates);

}  // namespace sluice::config::text
