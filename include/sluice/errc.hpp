// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// sluice's error codes: one enum with a boost::system error category, so errors stay
/// `error_code`s on the data path (no exceptions cross a request).

#include <boost/system/error_code.hpp>

#include <type_traits>

namespace sluice {

/// Errors produced by sluice itself (as opposed to Asio, Beast or the OS).
enum class errc {
  ok = 0,
  store_unavailable = 1,  ///< the counter store is not connected (connecting, reconnecting, down)
  store_timeout,          ///< a store command missed its deadline; its reply will be dropped
  store_error,            ///< the store answered with an error reply (READONLY, OOM, BUSY, ...)
  store_protocol,         ///< the store's reply did not have the expected shape
  noscript,               ///< EVALSHA answered NOSCRIPT (handled internally: reload once, retry)
  bad_request,            ///< a malformed client request (400)
  not_found,              ///< no route matches (404)
  upstream_unreachable,   ///< connecting to the upstream failed (502)
  upstream_timeout,       ///< the upstream did not answer in time (504)
  upstream_protocol,      ///< the upstream sent a malformed response (502)
  config_invalid,         ///< a rules file failed validation
  /// Identity (400): an identity header or the API key query parameter was given twice with
  /// different values, or the header and the query parameter disagree.
  conflicting_values,
  /// Identity (400): the API key query parameter has a malformed percent-escape or a NUL.
  malformed_value,
  unknown_key,  ///< identity (401): `unknown_key: reject` and the key is absent or unknown
  /// The TLS handshake with an https upstream failed (its certificate did not verify, no
  /// common protocol version...): 502.
  upstream_tls,
};

/// The category of sluice::errc; its name is "sluice".
const boost::system::error_category& error_category() noexcept;

/// Makes an error_code of sluice's category (found by ADL for `errc` values).
inline boost::system::error_code make_error_code(errc e) noexcept {
  return {static_cast<int>(e), error_category()};
}

}  // namespace sluice

namespace boost::system {
template <>
struct is_error_code_enum<sluice::errc> : std::true_type {};
}  // namespace boost::system
