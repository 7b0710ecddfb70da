// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// OpenSSL contexts built from the rules: the client listener's (its certificates, chosen by
/// SNI; TLS 1.2 and 1.3; ALPN http/1.1; optional client certificates) and one per https
/// upstream (verification against a CA file or the system store, SNI and the host name
/// check). Built off the workers, at start and at each reload; a problem with a file is a
/// config::diagnostic naming the file, the field and the line, and nothing is built.

#include "sluice/config/loader.hpp"
#include "sluice/config/rules.hpp"

#include <boost/asio/ssl/context.hpp>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace sluice::http {

/// The client listener's TLS: one SSL_CTX per `tls.certificates` entry, each with the same
/// protocol versions (TLS 1.2 and 1.3 only), cipher suites, ALPN (`http/1.1`, RFC 7301) and
/// client verification. A handshake starts on the first (the default); its SNI callback
/// (RFC 6066 §3) moves it to the first context whose leaf certificate matches the requested
/// name (X509_check_host: RFC 6125 rules, a wildcard matching one leftmost label), or keeps
/// the default when none does or no name was sent. Cost per handshake: one X509_check_host
/// per certificate until one matches.
///
/// Immutable once built; shared by every worker (OpenSSL allows one SSL_CTX to be used by
/// many threads once it is set up). A connection keeps the server_tls it started with (see
/// timed_socket::start_tls), so a reload never changes an open connection's context.
class server_tls {
 public:
  /// Builds the contexts of `settings` (which must be enabled). Each certificate file is
  /// read whole (a PEM chain, the leaf first) and checked: readable, a certificate, within
  /// its validity period (notBefore .. notAfter, each certificate of the chain), its key
  /// readable and matching the leaf (X509_check_private_key); an encrypted key is decrypted
  /// with the passphrase of `key_passphrase_env` or `key_passphrase_file` (the file refused
  /// when group or others may read or write it). `client_ca` must hold at least one
  /// certificate. Every problem is appended to `problems` as `source:line: field: PATH:
  /// message`; returns null when there was one. Not on a worker thread (it reads files).
  /// `http2`: ALPN offers `h2` first, then `http/1.1` (the rules' `http2:`).
  static std::shared_ptr<const server_tls> build(const config::listener_tls& settings, bool http2,
                                                 const std::string& source,
                                                 std::vector<config::diagnostic>& problems);
  ~server_tls();
  server_tls(const server_tls&) = delete;
  server_tls& operator=(const server_tls&) = delete;

  /// The context a new connection's SSL is made from (the first certificate's). Its SNI
  /// callback refers to this object: keep it alive as long as the connection.
  boost::asio::ssl::context& context() const;
  /// The certificates' subjects (one line each, `CN=a.test`), in `tls.certificates` order.
  const std::vector<std::string>& subjects() const;

  struct impl;

 private:
  server_tls();
  std::unique_ptr<impl> impl_;
};

/// The TLS of one https upstream: an SSL_CTX (TLS 1.2 and 1.3, ALPN http/1.1, or h2 alone for
/// an `http2: true` upstream) verifying the
/// upstream's certificate against `ca_file` or, without one, the system store
/// (SSL_CTX_set_default_verify_paths), or not at all with `verify: false`.
class client_tls {
 public:
  /// Builds the context of `up` (an https upstream). A `ca_file` that cannot be read or
  /// holds no certificate is appended to `problems` (as server_tls::build does); returns
  /// null then. Logs a warning when `up.verify` is false. Not on a worker thread.
  static std::shared_ptr<const client_tls> build(const config::upstream& up,
                                                 const std::string& source,
                                                 std::vector<config::diagnostic>& problems);
  ~client_tls();
  client_tls(const client_tls&) = delete;
  client_tls& operator=(const client_tls&) = delete;

  /// The context new connections' SSL objects are made from.
  boost::asio::ssl::context& context() const;
  /// Prepares one connection's SSL before its handshake: SNI with the upstream's host name
  /// (none for an address: RFC 6066 §3 allows only names) and, when verifying, the name the
  /// certificate must carry (SSL_set1_host: a DNS subjectAltName, or the CN when there is
  /// none; RFC 6125 §6.4, partial wildcards refused) or the address (an IP subjectAltName).
  /// False when OpenSSL refused a setting (out of memory).
  bool prepare(SSL* ssl) const;
  /// Whether the upstream's certificate is verified (`verify:`).
  bool verifies() const;
  /// A number no other client_tls of this process has: pooled connections are kept per
  /// context, so a reload that changes `ca_file` or `verify` never reuses one verified
  /// under the old settings.
  std::uint64_t id() const;

  struct impl;

 private:
  client_tls();
  std::unique_ptr<impl> impl_;
};

/// Everything TLS that one rules snapshot needs.
struct tls_bundle {
  std::shared_ptr<const server_tls> listener;  ///< null: the listener is plain TCP
  /// By upstream name, for the https upstreams only.
  std::map<std::string, std::shared_ptr<const client_tls>> upstreams;

  /// The context of upstream `name`, or null (an http upstream).
  std::shared_ptr<const client_tls> upstream(const std::string& name) const;
};

/// Builds the listener's contexts (when `r.tls.enabled`) and one per https upstream of `r`.
/// Problems are appended to `problems` (each naming its file); returns null when there was
/// one, so that a reload keeps the contexts in force. Not on a worker thread.
std::shared_ptr<const tls_bundle> build_tls(const config::rules& r,
                                            std::vector<config::diagnostic>& problems);

}  // namespace sluice::http
