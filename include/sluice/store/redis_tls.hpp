// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// How sluice speaks TLS to Redis (Redis 6+ `tls-port`; managed services such as ElastiCache
/// with in-transit encryption, Azure Cache on 6380, Upstash and Redis Cloud accept nothing
/// else). One client context serves every connection of a store: data nodes, Sentinels and
/// cluster nodes alike (https://redis.io/docs/management/security/encryption/).

#include <memory>
#include <string>

namespace boost::asio::ssl {
class context;
}

namespace sluice::store {

/// What a rules file says about TLS towards Redis (`store.tls`).
struct redis_tls_options {
  /// PEM certificates the server's chain is checked against; "" = the system's trust store.
  std::string ca_file;
  /// Check the server's chain and name (false only for a test bed: anyone in the path can
  /// then read and change every check).
  bool verify = true;
  std::string cert_file;  ///< a client certificate (PEM), "" = none (`tls-auth-clients no`)
  std::string key_file;   ///< its private key (PEM), given with `cert_file`
};

/// The TLS side of a Redis connection: no context = plain TCP.
struct redis_tls {
  /// Shared by every connection of the store (OpenSSL contexts may be shared across threads
  /// once built). Null: plain TCP.
  std::shared_ptr<boost::asio::ssl::context> context;
  /// The name sent as SNI (RFC 6066 §3) and checked against the certificate (RFC 6125: the
  /// subjectAltName DNS or IP entries); "" = the host being connected to, as written or as a
  /// Sentinel or the cluster named it.
  std::string server_name;
  bool verify = true;  ///< as redis_tls_options::verify
};

/// Builds the client context of `o`: TLS 1.2 or later, the CA file or the system store, the
/// client certificate and key if given. Throws std::runtime_error naming the file and
/// OpenSSL's reason when one cannot be read or the key does not match the certificate.
std::shared_ptr<boost::asio::ssl::context> make_redis_tls_context(const redis_tls_options& o);

}  // namespace sluice::store
