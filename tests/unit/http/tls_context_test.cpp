// SPDX-License-Identifier: Apache-2.0
// sluice-test-support: test_ca
#include "sluice/http/tls_context.hpp"

#include "sluice/http/tls_failure.hpp"
#include "support/temp_dir.hpp"
#include "support/test_ca.hpp"

#include <gtest/gtest.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <sys/stat.h>
#include <boost/asio/error.hpp>
#include <boost/asio/ssl/error.hpp>
#include <boost/beast/core/error.hpp>

#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

// http::build_tls against real files made by a test CA (Debian's openssl command): what
// builds, and the exact diagnostic of each bad file.

namespace sluice::http {
namespace {

namespace fs = std::filesystem;
using test::cert_request;
using test::issued;
using test::test_ca;

#define SKIP_WITHOUT_OPENSSL() \
  if (!test::have_openssl()) GTEST_SKIP() << "Debian's openssl is missing (scripts/setup)"

config::file_ref ref(const fs::path& p, std::string field, int line) {
  return {p.string(), std::move(field), line};
}

config::listener_tls listener(const std::vector<issued>& certs) {
  config::listener_tls t;
  t.enabled = true;
  t.line = 1;
  int line = 3;
  for (std::size_t i = 0; i < certs.size(); ++i, ++line) {
    const std::string at = "tls.certificates[" + std::to_string(i) + "]";
    t.certificates.push_back(
        {ref(certs[i].cert, at + ".cert", line), ref(certs[i].key, at + ".key", line)});
  }
  return t;
}

std::vector<std::string> problems_of(const config::listener_tls& t) {
  std::vector<config::diagnostic> problems;
  const auto built = server_tls::build(t, false, "rules.yaml", problems);
  EXPECT_EQ(built == nullptr, !problems.empty());
  std::vector<std::string> out;
  for (const auto& p : problems) out.push_back(p.to_string());
  return out;
}

void write(const fs::path& p, const std::string& text) {
  std::ofstream(p, std::ios::trunc) << text;
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

struct files {
  test::temp_dir dir{"tls-context"};
  test_ca ca{dir.path};
  issued a = ca.issue(cert_request("a.test").names({"DNS:a.test"}));
  issued b = ca.issue(cert_request("b.test").names({"DNS:b.test"}).org("second"));
};

TEST(server_tls, builds_one_context_per_certificate_in_order) {
  SKIP_WITHOUT_OPENSSL();
  files f;
  std::vector<config::diagnostic> problems;
  const auto built = server_tls::build(listener({f.a, f.b}), false, "rules.yaml", problems);
  ASSERT_NE(built, nullptr) << problems.front().to_string();
  EXPECT_EQ(built->subjects(), (std::vector<std::string>{"CN=a.test", "O=second,CN=b.test"}));
  SSL_CTX* ctx = built->context().native_handle();
  EXPECT_EQ(SSL_CTX_get_min_proto_version(ctx), TLS1_2_VERSION);
  EXPECT_EQ(SSL_CTX_get_max_proto_version(ctx), TLS1_3_VERSION);
  EXPECT_EQ(SSL_CTX_get_verify_mode(ctx), SSL_VERIFY_NONE);
}

TEST(server_tls, client_verification_modes) {
  SKIP_WITHOUT_OPENSSL();
  files f;
  auto t = listener({f.a});
  t.client_ca = ref(f.ca.cert(), "tls.client_ca", 5);
  for (const auto& [mode, want] : std::vector<std::pair<config::client_verify, int>>{
           {config::client_verify::require, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT},
           {config::client_verify::optional, SSL_VERIFY_PEER}}) {
    t.verify_client = mode;
    std::vector<config::diagnostic> problems;
    const auto built = server_tls::build(t, false, "rules.yaml", problems);
    ASSERT_NE(built, nullptr);
    EXPECT_EQ(SSL_CTX_get_verify_mode(built->context().native_handle()), want);
    // The CAs the gateway names in its certificate request.
    EXPECT_EQ(sk_X509_NAME_num(SSL_CTX_get_client_CA_list(built->context().native_handle())), 1);
  }
}

TEST(server_tls, every_bad_file_is_a_diagnostic_naming_it) {
  SKIP_WITHOUT_OPENSSL();
  files f;
  const auto expired = f.ca.issue(cert_request("a.test").names({"DNS:a.test"}).already_expired());
  const auto garbage = f.dir.path / "garbage.pem";
  write(garbage, "-----BEGIN NOTHING-----\n");
  const auto missing = f.dir.path / "missing.pem";
  const auto dir = f.dir.path;
  const std::string g = garbage.string(), m = missing.string();

  // The leaf, then an expired certificate as its "intermediate".
  const auto chained = f.dir.path / "chained.pem";
  write(chained, slurp(f.a.cert) + slurp(expired.cert));

  struct row {
    config::listener_tls t;
    std::vector<std::string> expected;  // regular expressions
  };
  auto with = [&](issued x) { return listener({x}); };
  auto q = [](const std::string& s) {
    return std::regex_replace(s, std::regex(R"([.^$|()\[\]{}*+?\\])"), R"(\$&)");
  };
  const std::string cert0 = "rules\\.yaml:3: tls\\.certificates\\[0\\]\\.cert: ";
  const std::string key0 = "rules\\.yaml:3: tls\\.certificates\\[0\\]\\.key: ";
  const std::string date = "\\d{4}-\\d\\d-\\d\\dT\\d\\d:\\d\\d:\\d\\dZ";
  std::vector<row> rows = {
      {with({missing, f.a.key}), {cert0 + q(m) + ": cannot read file: No such file or directory"}},
      {with({dir, f.a.key}), {cert0 + q(dir.string()) + ": cannot read file: not a regular file"}},
      {with({garbage, f.a.key}), {cert0 + q(g) + ": holds no PEM certificate"}},
      {with({f.a.cert, garbage}), {key0 + q(g) + ": holds no PEM private key \\(.*\\)"}},
      {with({f.a.cert, missing}), {key0 + q(m) + ": cannot read file: No such file or directory"}},
      {with(expired), {cert0 + q(expired.cert.string()) + ": the certificate expired on " + date}},
      {with({chained, f.a.key}),
       {cert0 + q(chained.string()) + ": chain certificate 1 \\(CN=a\\.test\\) expired on " +
        date}},
      {with({f.a.cert, f.b.key}),
       {key0 + q(f.b.key.string()) + ": the key does not match the certificate in " +
        q(f.a.cert.string())}},
      // Both entries are checked: every problem is reported.
      {listener({{missing, f.a.key}, {f.b.cert, f.a.key}}),
       {cert0 + q(m) + ": cannot read file: No such file or directory",
        "rules\\.yaml:4: tls\\.certificates\\[1\\]\\.key: " + q(f.a.key.string()) +
            ": the key does not match the certificate in " + q(f.b.cert.string())}},
  };
  {
    auto t = listener({f.a});
    t.client_ca = ref(garbage, "tls.client_ca", 6);
    t.verify_client = config::client_verify::require;
    rows.push_back(
        {t, {"rules\\.yaml:6: tls\\.client_ca: " + q(g) + ": holds no PEM certificate"}});
  }
  {
    config::listener_tls t;
    t.enabled = true;
    t.line = 1;
    rows.push_back({t, {"rules\\.yaml:1: tls\\.certificates: no certificate is given"}});
  }
  for (const auto& r : rows) {
    const auto got = problems_of(r.t);
    ASSERT_EQ(got.size(), r.expected.size()) << (got.empty() ? "(none)" : got.front());
    for (std::size_t i = 0; i < got.size(); ++i)
      EXPECT_TRUE(std::regex_match(got[i], std::regex(r.expected[i])))
          << got[i] << "\n  expected " << r.expected[i];
  }
}

TEST(server_tls, an_encrypted_key_needs_its_passphrase) {
  SKIP_WITHOUT_OPENSSL();
  files f;
  const auto encrypted = f.dir.path / "a.enc.key";
  test_ca::encrypt_key(f.a.key, "open sesame", encrypted);
  auto t = listener({{f.a.cert, encrypted}});
  const std::string key0 = "rules.yaml:3: tls.certificates[0].key: " + encrypted.string() + ": ";
  EXPECT_EQ(problems_of(t),
            (std::vector<std::string>{key0 + "the key is encrypted: give its passphrase with "
                                             "tls.key_passphrase_env or tls.key_passphrase_file"}));

  const auto pass = f.dir.path / "pass";
  write(pass, "open sesame\n");
  ::chmod(pass.c_str(), 0600);
  t.key_passphrase_file = ref(pass, "tls.key_passphrase_file", 7);
  EXPECT_EQ(problems_of(t), std::vector<std::string>{});

  ::chmod(pass.c_str(), 0640);
  EXPECT_EQ(problems_of(t),
            (std::vector<std::string>{"rules.yaml:7: tls.key_passphrase_file: " + pass.string() +
                                      ": group or others may access it (mode 0640): it must be "
                                      "readable by its owner only (chmod 600)"}));
  ::chmod(pass.c_str(), 0600);
  write(pass, "not it\n");
  const auto wrong = problems_of(t);
  ASSERT_EQ(wrong.size(), 1u);
  EXPECT_EQ(
      wrong.front().rfind(key0 + "the key cannot be decrypted with the passphrase given (", 0), 0u)
      << wrong.front();

  t.key_passphrase_file = {};
  t.key_passphrase_env = "SLUICE_TEST_CONTEXT_PASS";
  t.key_passphrase_env_line = 8;
  ::unsetenv("SLUICE_TEST_CONTEXT_PASS");
  EXPECT_EQ(problems_of(t), (std::vector<std::string>{
                                "rules.yaml:8: tls.key_passphrase_env: the environment variable "
                                "SLUICE_TEST_CONTEXT_PASS is not set"}));
  ::setenv("SLUICE_TEST_CONTEXT_PASS", "open sesame", 1);
  EXPECT_EQ(problems_of(t), std::vector<std::string>{});
  ::unsetenv("SLUICE_TEST_CONTEXT_PASS");
}

TEST(client_tls, an_upstream_ca_file_is_checked_and_verify_false_verifies_nothing) {
  SKIP_WITHOUT_OPENSSL();
  files f;
  config::upstream up;
  up.name = "api";
  up.url = "https://api.test";
  up.host = "api.test";
  up.port = 443;
  up.tls = true;
  up.ca_file = ref(f.ca.cert(), "upstreams.api.ca_file", 4);
  std::vector<config::diagnostic> problems;
  const auto ok = client_tls::build(up, "rules.yaml", problems);
  ASSERT_NE(ok, nullptr);
  EXPECT_TRUE(ok->verifies());
  EXPECT_EQ(SSL_CTX_get_verify_mode(ok->context().native_handle()), SSL_VERIFY_PEER);
  const auto again = client_tls::build(up, "rules.yaml", problems);
  EXPECT_NE(again->id(), ok->id());  // pooled connections are kept per context

  up.ca_file = ref(f.dir.path / "none.pem", "upstreams.api.ca_file", 4);
  EXPECT_EQ(client_tls::build(up, "rules.yaml", problems), nullptr);
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_EQ(problems.front().to_string(),
            "rules.yaml:4: upstreams.api.ca_file: " + (f.dir.path / "none.pem").string() +
                ": cannot read file: No such file or directory");

  problems.clear();
  up.ca_file = {};
  up.verify = false;
  const auto loose = client_tls::build(up, "rules.yaml", problems);
  ASSERT_NE(loose, nullptr);
  EXPECT_FALSE(loose->verifies());
  EXPECT_EQ(SSL_CTX_get_verify_mode(loose->context().native_handle()), SSL_VERIFY_NONE);
}

TEST(build_tls, a_bundle_holds_the_listener_and_each_https_upstream) {
  SKIP_WITHOUT_OPENSSL();
  files f;
  config::rules r;
  r.source = "rules.yaml";
  r.tls = listener({f.a});
  config::upstream plain, secure;
  plain.name = "plain";
  plain.host = "127.0.0.1";
  secure.name = "secure";
  secure.host = "api.test";
  secure.tls = true;
  r.upstreams = {{"plain", plain}, {"secure", secure}};
  std::vector<config::diagnostic> problems;
  const auto b = build_tls(r, problems);
  ASSERT_NE(b, nullptr);
  EXPECT_NE(b->listener, nullptr);
  EXPECT_EQ(b->upstream("plain"), nullptr);
  EXPECT_NE(b->upstream("secure"), nullptr);

  r.tls.certificates.front().cert.path = (f.dir.path / "gone.pem").string();
  EXPECT_EQ(build_tls(r, problems), nullptr);
  EXPECT_EQ(problems.size(), 1u);
}

TEST(tls_failure, reasons_from_asio_ssl_errors) {
  namespace asio = boost::asio;
  auto ssl_error = [](int reason) {
    return boost::system::error_code(static_cast<int>(ERR_PACK(ERR_LIB_SSL, 0, reason)),
                                     asio::error::get_ssl_category());
  };
  struct row {
    boost::system::error_code ec;
    long verify;
    tls_failure want;
  };
  const std::vector<row> rows = {
      {boost::beast::error::timeout, 0, tls_failure::timeout},
      {asio::ssl::error::stream_truncated, 0, tls_failure::closed},
      {asio::error::connection_reset, 0, tls_failure::closed},
      {ssl_error(SSL_R_UNSUPPORTED_PROTOCOL), 0, tls_failure::protocol_version},
      {ssl_error(SSL_R_HTTP_REQUEST), 0, tls_failure::not_tls},
      {ssl_error(SSL_R_WRONG_VERSION_NUMBER), 0, tls_failure::not_tls},
      {ssl_error(SSL_R_NO_SHARED_CIPHER), 0, tls_failure::no_shared_cipher},
      {ssl_error(SSL_R_NO_APPLICATION_PROTOCOL), 0, tls_failure::no_application_protocol},
      {ssl_error(SSL_R_PEER_DID_NOT_RETURN_A_CERTIFICATE), 0, tls_failure::no_certificate},
      {ssl_error(SSL_R_CERTIFICATE_VERIFY_FAILED), X509_V_ERR_CERT_HAS_EXPIRED,
       tls_failure::bad_certificate},
      {ssl_error(SSL_R_CERTIFICATE_VERIFY_FAILED), X509_V_ERR_HOSTNAME_MISMATCH,
       tls_failure::name_mismatch},
      {ssl_error(SSL_R_TLSV1_ALERT_UNKNOWN_CA), 0, tls_failure::peer_alert},
      {ssl_error(SSL_R_BAD_PACKET_LENGTH), 0, tls_failure::other},
      {asio::error::host_unreachable, 0, tls_failure::other},
  };
  for (const auto& r : rows) {
    EXPECT_EQ(classify_tls_failure(r.ec, r.verify), r.want) << r.ec.message();
  }
  EXPECT_STREQ(label(tls_failure::no_application_protocol), "no_application_protocol");
}

}  // namespace
}  // namespace sluice::http
