// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// Test helper: Redis over TLS. A test CA (test_ca) issues a server certificate for
/// `localhost` and 127.0.0.1 and a client certificate; server_args() are the redis-server
/// arguments that serve TLS with them on a second port (the plain port stays, for the
/// fixtures' own commands), and acl_args() an ACL user allowed only what sluice sends.

#include "support/test_ca.hpp"

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace sluice::test {

/// The certificates of one test, in `dir` (a temp_dir).
struct redis_tls_material {
  explicit redis_tls_material(const std::filesystem::path& dir);
  test_ca ca;
  issued server;  ///< CN localhost, subjectAltName DNS:localhost, IP:127.0.0.1
  issued client;  ///< clientAuth, for `--tls-auth-clients yes`

  /// `--tls-port <tls_port> --tls-cert-file ... --tls-key-file ... --tls-ca-cert-file ...
  /// --tls-client-cert-file ... --tls-client-key-file ... --tls-auth-clients yes|no` (the
  /// client certificate is what the server presents when it connects out: replication, the
  /// Sentinels' links, the cluster bus).
  std::vector<std::string> server_args(std::uint16_t tls_port, bool require_client_certs) const;
};

/// The ACL rule of a user that may do only what sluice's store sends (docs/operating.md,
/// "Redis over TLS and ACL users"): the check function's load and calls, the script fallback,
/// the commands the check runs, PING, ROLE, the plan directory's HGET and the cluster's
/// topology queries, on keys starting with `sl:` (and the directory hash, read only).
std::string sluice_acl_rule(const std::string& password);

/// `--user <name> <rule>`: redis-server's argument form of that user.
std::vector<std::string> acl_args(const std::string& user, const std::string& password);

}  // namespace sluice::test
