// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// Why a TLS handshake failed, as a bounded set of reasons: the label values of
/// `sluice_tls_handshake_failures_total{side,reason}`.

#include <boost/system/error_code.hpp>

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>

namespace sluice::http {

/// The reason a TLS handshake failed (client listener or upstream connection).
enum class tls_failure : std::uint8_t {
  timeout,                  ///< the deadline passed (listener: header_timeout; upstream: connect)
  closed,                   ///< the peer closed or reset the connection mid-handshake
  not_tls,                  ///< the peer does not speak TLS (plain HTTP on a TLS port, ...)
  protocol_version,         ///< no common version: the peer offered only TLS 1.1 or older
  no_shared_cipher,         ///< no common cipher suite or signature algorithm
  no_application_protocol,  ///< ALPN offered without http/1.1 (RFC 7301 §3.2)
  no_certificate,           ///< a client certificate is required and none was sent
  bad_certificate,          ///< the peer's certificate did not verify (CA, expiry, ...)
  name_mismatch,            ///< an upstream's certificate does not name its host (RFC 6125)
  peer_alert,               ///< the peer refused us with an alert (e.g. it distrusts our CA)
  other,                    ///< anything else
};

/// Number of tls_failure values.
inline constexpr std::size_t tls_failure_count = 11;

/// The metric label of `f` (`timeout`, `closed`, `not_tls`, ...).
const char* label(tls_failure f) noexcept;

/// Classifies a failed handshake's error: `ec` after timed_socket::timeout_error() (so a
/// deadline is beast::error::timeout), `verify_result` the peer verification's result
/// (SSL_get_verify_result; X509_V_OK when unknown) to tell a name mismatch from another
/// certificate failure.
tls_failure classify_tls_failure(const boost::system::error_code& ec, long verify_result) noexcept;

/// Handshake counters of one side, one writer thread (the worker), any reader.
struct tls_counters {
  std::atomic<std::uint64_t> handshakes{0};                              ///< completed handshakes
  std::array<std::atomic<std::uint64_t>, tls_failure_count> failures{};  ///< by tls_failure

  /// Counts one failure (owner thread only: no locked instruction).
  void fail(tls_failure f) noexcept {
    auto& c = failures[static_cast<std::size_t>(f)];
    c.store(c.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  }
  /// Counts one completed handshake (owner thread only).
  void succeed() noexcept {
    handshakes.store(handshakes.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  }
};

}  // namespace sluice::http
