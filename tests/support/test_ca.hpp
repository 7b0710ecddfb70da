// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// Test helper: a certificate authority made for one test with Debian's openssl command
/// (`openssl req`, `openssl x509`), and certificates it issues: server and client
/// certificates with the names asked for, expired ones, encrypted keys. Everything lives in
/// the directory given (a temp_dir). Each openssl run has a deadline of 20 s.

#include <filesystem>
#include <string>
#include <vector>

namespace sluice::test {

/// Whether /usr/bin/openssl exists (Debian's `openssl`, in scripts/setup).
bool have_openssl();

/// A certificate and its key, as PEM files.
struct issued {
  std::filesystem::path cert;
  std::filesystem::path key;
};

/// What to issue: `cert_request("a.test").names({"DNS:a.test"}).org("first")`.
struct cert_request {
  explicit cert_request(std::string cn) : common_name(std::move(cn)) {}
  /// subjectAltName entries, e.g. {"DNS:a.test", "DNS:*.a.test", "IP:127.0.0.1"}.
  cert_request& names(std::vector<std::string> v) {
    alt_names = std::move(v);
    return *this;
  }
  /// The subject's O (tells two certificates for one name apart).
  cert_request& org(std::string o) {
    organization = std::move(o);
    return *this;
  }
  /// extendedKeyUsage clientAuth (else serverAuth).
  cert_request& for_client() {
    client = true;
    return *this;
  }
  /// notAfter one day before now.
  cert_request& already_expired() {
    expired = true;
    return *this;
  }

  std::string common_name;  ///< the subject's CN
  std::vector<std::string> alt_names;
  std::string organization;
  bool client = false;
  bool expired = false;
};

/// A self-signed CA (EC P-256) in `dir`; issue() signs certificates with it.
class test_ca {
 public:
  /// Makes the CA's key and certificate (`<name>-ca.pem`). Throws std::runtime_error when
  /// openssl fails (with its stderr).
  test_ca(std::filesystem::path dir, std::string name = "sluice test CA");

  /// The CA certificate (PEM), what clients and the gateway trust.
  const std::filesystem::path& cert() const { return cert_; }
  /// Issues a certificate for `r` (a fresh EC P-256 key), signed by this CA.
  issued issue(const cert_request& r) const;

  /// Writes `key` encrypted with `passphrase` (AES-256) to `out`.
  static void encrypt_key(const std::filesystem::path& key, const std::string& passphrase,
                          const std::filesystem::path& out);
  /// The subject of a certificate file as openssl prints it, e.g. `CN = a.test, O = second`.
  static std::string subject(const std::filesystem::path& cert);

 private:
  std::filesystem::path dir_, key_, cert_;
  std::string name_;
};

/// Runs argv (argv[0] a path) to completion within 20 s; throws std::runtime_error with its
/// stderr when it fails. Returns its stdout.
std::string run_checked(const std::vector<std::string>& argv, const std::filesystem::path& dir);

}  // namespace sluice::test
