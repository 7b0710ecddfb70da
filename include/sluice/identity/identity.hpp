// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// Who is calling: the client address (with trusted-proxy X-Forwarded-For handling), the API
/// key and its plan, the user, and the per-limit identity a bucket is keyed by
/// (DESIGN.md, "Identity": spoofed X-Forwarded-For; empty ids).

#include "sluice/config/rules.hpp"
#include "sluice/errc.hpp"
#include "sluice/limiter/keys.hpp"

#include <boost/asio/ip/address.hpp>
#include <boost/beast/http/fields.hpp>

#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace sluice::identity {

/// The outcome of identifying a request's caller.
struct caller {
  /// The client as buckets keyed by address see it (never empty): the canonical address
  /// text, or `network/prefix` when `identity.ipv6_prefix` / `ipv4_prefix` is shorter than
  /// the address (`2001:db8:1:2::/64`), so one host cannot rotate through its network.
  std::string client_ip;
  std::string plan;       ///< the caller's plan name ("anonymous" when anonymous)
  std::string api_key;    ///< the directory key; "" when anonymous
  bool anonymous = true;  ///< no key, an empty key, or a key not in the directory
};

/// Why a request's caller could not be established: sluice's errc values
/// errc::conflicting_values (400: an identity header, or the API key query parameter, given
/// twice with different values, or header and parameter disagree — the upstream might read
/// another copy than sluice does), errc::malformed_value (400: a malformed percent-escape or
/// a NUL in the API key parameter) and errc::unknown_key (401 under `unknown_key: reject`).
using caller_error = sluice::errc;

/// The problem-details `detail` text (RFC 9457) for an identity error: one fixed sentence per
/// error (a generic one for any other errc).
std::string_view describe(caller_error e);

/// `a` with an IPv4-mapped IPv6 address (`::ffff:a.b.c.d`) turned into the IPv4 address; any
/// other address unchanged. Every address sluice keys, logs or forwards goes through it.
boost::asio::ip::address normalise(const boost::asio::ip::address& a);

/// True when `addr` lies in one of `networks`. IPv4-mapped IPv6 addresses are compared as
/// IPv4.
bool is_trusted(const boost::asio::ip::address& addr, const std::vector<config::cidr>& networks);

/// One hop named by a forwarding header, as read.
struct forwarded_node {
  enum class kind {
    address,       ///< an IP address (any port dropped)
    unknown,       ///< `unknown` (RFC 7239 §6.2), or an element without `for=`
    obfuscated,    ///< an obfuscated identifier `_abc` (RFC 7239 §6.3): not an address
    unreadable,    ///< not an address in any form a proxy writes
    syntax_error,  ///< a `Forwarded` line that does not follow RFC 7239 §4's grammar
  };
  kind what = kind::unreadable;
  boost::asio::ip::address address;  ///< for kind::address, IPv4-mapped IPv6 as IPv4
};

/// One X-Forwarded-For entry (one comma-separated item, blanks around it allowed):
/// `192.0.2.1`, `192.0.2.1:51000`, `2001:db8::6`, `[2001:db8::6]`, `[2001:db8::6]:51000`, or
/// `unknown`. A port is 1..5 digits up to 65535 and is dropped. Anything else (a host name,
/// an IPv4 address in brackets, a zone id `%eth0`, an empty port) is kind::unreadable.
/// Pure; no allocation.
forwarded_node parse_xff_entry(std::string_view entry);

/// One RFC 7239 node (§6), the value of a `for=` parameter with any quoting removed:
/// `192.0.2.1`, `[2001:db8::6]`, each with an optional `:port` or obfuscated `:_port`,
/// `unknown`, or an obfuscated identifier `_hidden` (`_` and 1+ of ALPHA DIGIT `.` `_` `-`).
/// An IPv6 address must be in brackets. Anything else is kind::unreadable. Pure.
forwarded_node parse_forwarded_node(std::string_view node);

/// Appends one node per element of one `Forwarded` field line to `out`: the element's `for=`
/// node (parse_forwarded_node()), or kind::unknown when the element has none. Grammar
/// (RFC 7239 §4, RFC 9110 §5.6): elements separated by `,` with optional blanks, empty
/// elements skipped; pairs `token=value` separated by `;` (blanks around `;` tolerated),
/// names case-insensitive, a value a token or a quoted string (`\` escapes); a parameter
/// given twice in one element is an error. On a syntax error the line contributes one
/// kind::syntax_error node instead (nothing of it can be trusted) and false is returned.
bool parse_forwarded_line(std::string_view line, std::vector<forwarded_node>& out);

/// Where the client address of a request came from: the first two are real clients, every
/// other value means the request is keyed on a trusted proxy's own address (the peer or the
/// last trusted entry read), which the gateway counts by this reason.
enum class address_source {
  peer,          ///< the peer is not a trusted proxy
  forwarded,     ///< the right-most untrusted entry of the forwarding header
  no_header,     ///< a trusted peer sent no entry
  all_trusted,   ///< every entry is a trusted proxy: the left-most is keyed
  unreadable,    ///< the walk reached an entry that is not an address
  syntax_error,  ///< the walk reached a `Forwarded` line with a syntax error
  unknown,       ///< the walk reached `unknown` (or an element without `for=`)
  obfuscated,    ///< the walk reached an obfuscated identifier (random per request: §6.3)
};
/// Number of address_source values.
inline constexpr std::size_t address_source_count = 8;
/// The metric label of `s` (`no_header`, `syntax_error`...).
std::string_view label(address_source s);

/// The client of a request, and where it was read.
struct client_origin {
  boost::asio::ip::address address;  ///< IPv4-mapped IPv6 normalised to IPv4
  address_source source = address_source::peer;
};

/// The client address: the TCP peer, or — only when the peer is a trusted proxy — the
/// forwarding header `settings.forwarded` selects (X-Forwarded-For, or RFC 7239 `Forwarded`;
/// all lines joined in order), walked from the right: each trusted address vouches for the
/// entry to its left, and the first untrusted address is the client. When every entry is
/// trusted, the left-most is the client. An entry that is not an address (unreadable,
/// `unknown`, obfuscated, a syntax error) stops the walk: the last trusted address read (the
/// peer when none) is then the client, and `source` says why. RFC 7239 §5.2, §6 (a spoofed
/// X-Forwarded-For).
client_origin locate_client(const boost::asio::ip::address& peer,
                            const boost::beast::http::fields& headers,
                            const config::identity_settings& settings);

/// locate_client()'s address with X-Forwarded-For and `trusted` (kept for callers that have
/// no identity settings at hand).
boost::asio::ip::address client_address(const boost::asio::ip::address& peer,
                                        const boost::beast::http::fields& headers,
                                        const std::vector<config::cidr>& trusted);

/// The text buckets key `client` by: the address (IPv4-mapped IPv6 as IPv4) masked to
/// `ipv4_prefix` / `ipv6_prefix` bits; `addr/prefix` when the prefix is shorter than the
/// address, the plain address otherwise.
/// `known_text`: the text of `client` when the caller already has it (the session keeps its
/// peer's), or "": it saves formatting the address again when no prefix applies.
std::string client_key(const boost::asio::ip::address& client,
                       const config::identity_settings& settings, std::string_view known_text = {});

/// The API key a request presents, from the configured header (names match
/// case-insensitively; surrounding blanks trimmed) and the query parameter
/// `identity.api_key.query` of `query` (the raw query string, without '?').
///
/// The query parameter's name and value are percent-decoded (RFC 3986 §2.1) with `+` read as
/// a space (the WHATWG application/x-www-form-urlencoded convention; `%2B` is a plus) before
/// they are compared, looked up or keyed; parameters are split on `&` and at the first `=`.
/// An empty value, or a parameter without `=`, is absent, as an empty header is.
///
/// Returns "" when neither source gives a non-empty key; otherwise that key. Errors:
/// - conflicting_values: the header is repeated with different values, the parameter is
///   repeated with different decoded values (identical repeats are accepted), or both
///   sources are non-empty and differ (`key%2Da` in the query equals `key-a` in the header).
/// - malformed_value: an occurrence of the parameter has a malformed escape or decodes to NUL
///   in its value, or its decoded name is the parameter's name followed by a NUL.
/// Other parameters are not validated. Thread-safe; allocates.
std::variant<std::string, caller_error> presented_key(const config::rules& rules,
                                                      const boost::beast::http::fields& headers,
                                                      std::string_view query);

/// The plan of `key` from the directories held in the snapshot: inline `api_keys`, then
/// `api_keys_file`. nullopt when neither lists it (a store-backed directory may still).
std::optional<std::string> static_plan(const config::rules& rules, std::string_view key);

/// The anonymous caller at `client` (plan `anonymous`, keyed by its client_key()), whatever
/// `unknown_key` says: what make_caller() gives an unknown key under `anonymous`, and what the
/// gateway limits by when the directory cannot be read under the `local` policy.
/// `client_text`: as for client_key().
caller anonymous_caller(const config::rules& rules, const boost::asio::ip::address& client,
                        std::string_view client_text = {});

/// The caller for a presented `key` (may be "") whose directory plan is `plan` (nullopt:
/// unknown). An empty or unknown key is anonymous (plan `anonymous`) unless
/// `unknown_key: reject` (caller_error::unknown_key). A plan the snapshot does not define is
/// treated as unknown.
/// `client_text`: as for client_key().
std::variant<caller, caller_error> make_caller(const config::rules& rules, std::string key,
                                               std::optional<std::string> plan,
                                               const boost::asio::ip::address& client,
                                               std::string_view client_text = {});

/// Identifies the caller of a request from the snapshot alone: presented_key(), then
/// static_plan(), then make_caller(). The gateway consults the store-backed directory
/// between the last two steps.
std::variant<caller, caller_error> identify(const config::rules& rules,
                                            const boost::beast::http::fields& headers,
                                            std::string_view query,
                                            const boost::asio::ip::address& client);

/// The identity one limit keys its bucket by, for this caller: a namespace and a non-empty
/// value. `by: api_key` of an anonymous caller is the client address in the anonymous
/// namespace; `by: user` / `by: header:NAME` whose value is absent or empty falls back to the
/// client address in its own namespace (never an empty, shared bucket for empty ids).
/// Returns nullopt when an identity header is repeated with different values (400).
std::optional<std::pair<limiter::key_namespace, std::string>> limit_identity(
    const config::limit& limit, const caller& who, const config::rules& rules,
    const boost::beast::http::fields& headers);

}  // namespace sluice::identity
