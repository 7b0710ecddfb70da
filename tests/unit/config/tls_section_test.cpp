// SPDX-License-Identifier: Apache-2.0
#include "sluice/config/loader.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

// The `tls:` section and the https fields of `upstreams:` as the loader reads them: their
// values and the exact diagnostic of each mistake. (The files they name are read by
// http::build_tls: tests/unit/http/tls_context_test.cpp.)

namespace sluice::config {
namespace {

std::vector<std::string> diags(std::string_view yaml) {
  const load_result r = load_string(yaml, "/etc/sluice/rules.yaml");
  std::vector<std::string> out;
  for (const auto& d : r.diagnostics) out.push_back(d.to_string());
  EXPECT_EQ(r.ok(), out.empty());
  return out;
}

std::shared_ptr<const rules> load_ok(std::string_view yaml) {
  const load_result r = load_string(yaml, "/etc/sluice/rules.yaml");
  for (const auto& d : r.diagnostics) ADD_FAILURE() << d.to_string();
  EXPECT_TRUE(r.ok());
  return r.value;
}

TEST(tls_section, loads_certificates_relative_to_the_rules_file_with_their_lines) {
  const auto r = load_ok(
      "tls:\n"
      "  certificates:\n"
      "    - {cert: a.pem, key: keys/a.key}\n"
      "    - cert: /srv/b.pem\n"
      "      key: /srv/b.key\n"
      "  client_ca: clients.pem\n"
      "  key_passphrase_file: pass.txt\n");
  ASSERT_TRUE(r->tls.enabled);
  ASSERT_EQ(r->tls.certificates.size(), 2u);
  const auto& a = r->tls.certificates[0];
  EXPECT_EQ(a.cert, (file_ref{"/etc/sluice/a.pem", "tls.certificates[0].cert", 3}));
  EXPECT_EQ(a.key, (file_ref{"/etc/sluice/keys/a.key", "tls.certificates[0].key", 3}));
  const auto& b = r->tls.certificates[1];
  EXPECT_EQ(b.cert, (file_ref{"/srv/b.pem", "tls.certificates[1].cert", 4}));
  EXPECT_EQ(b.key, (file_ref{"/srv/b.key", "tls.certificates[1].key", 5}));
  EXPECT_EQ(r->tls.client_ca, (file_ref{"/etc/sluice/clients.pem", "tls.client_ca", 6}));
  // A client CA alone requires client certificates.
  EXPECT_EQ(r->tls.verify_client, client_verify::require);
  EXPECT_EQ(r->tls.key_passphrase_file.path, "/etc/sluice/pass.txt");
  EXPECT_EQ(r->tls.key_passphrase_env, "");
}

TEST(tls_section, verify_client_and_the_passphrase_variable) {
  auto r = load_ok(
      "tls:\n"
      "  certificates: [{cert: a.pem, key: a.key}]\n"
      "  client_ca: ca.pem\n"
      "  verify_client: optional\n"
      "  key_passphrase_env: SLUICE_KEY_PASS\n");
  EXPECT_EQ(r->tls.verify_client, client_verify::optional);
  EXPECT_EQ(r->tls.key_passphrase_env, "SLUICE_KEY_PASS");
  EXPECT_EQ(r->tls.key_passphrase_env_line, 5);
  r = load_ok("tls: {certificates: [{cert: a.pem, key: a.key}], verify_client: off}\n");
  EXPECT_EQ(r->tls.verify_client, client_verify::off);
  r = load_ok("listen: 127.0.0.1:8443\n");
  EXPECT_FALSE(r->tls.enabled);
}

TEST(tls_section, mistakes_are_reported_exactly) {
  struct row {
    const char* yaml;
    std::vector<std::string> expected;
  };
  const std::string f = "/etc/sluice/rules.yaml:";
  const std::vector<row> rows = {
      {"tls: {client_ca: ca.pem}\n",
       {f + "1: tls: missing required key 'certificates' (a list of {cert: FILE, key: FILE})"}},
      {"tls: {certificates: []}\n",
       {f + "1: tls.certificates: needs at least one {cert: FILE, key: FILE}"}},
      {"tls:\n  certificates: [{cert: a.pem}]\n",
       {f + "2: tls.certificates[0]: missing required key 'key'"}},
      {"tls:\n  certificates: [{cert: \"\", key: a.key}]\n",
       {f + "2: tls.certificates[0].cert: must not be empty"}},
      {"tls:\n  certificates: [{cert: a.pem, key: a.key, chain: c.pem}]\n",
       {f + "2: tls.certificates[0].chain: unknown key 'chain'; expected one of cert, key"}},
      {"tls:\n  certificates: [{cert: a.pem, key: a.key}]\n  verify_client: require\n",
       {f + "3: tls.verify_client: verify_client needs client_ca (the CAs client certificates "
            "must chain to)"}},
      {"tls:\n  certificates: [{cert: a.pem, key: a.key}]\n  client_ca: ca.pem\n"
       "  verify_client: off\n",
       {f + "4: tls.verify_client: client_ca is not used with verify_client: off"}},
      {"tls:\n  certificates: [{cert: a.pem, key: a.key}]\n  verify_client: always\n",
       {f + "3: tls.verify_client: unknown verify_client 'always'; expected one of off, "
            "optional, require"}},
      {"tls:\n  certificates: [{cert: a.pem, key: a.key}]\n  key_passphrase_env: A\n"
       "  key_passphrase_file: p.txt\n",
       {f + "4: tls.key_passphrase_file: give key_passphrase_env or key_passphrase_file, not "
            "both"}},
      {"tls:\n  certificates: [{cert: a.pem, key: a.key}]\n  key_passphrase_env: 1PASS\n",
       {f + "3: tls.key_passphrase_env: invalid environment variable name '1PASS': expected "
            "[A-Za-z_][A-Za-z0-9_]*"}},
      {"upstreams: {api: {url: \"http://127.0.0.1:8081\", ca_file: ca.pem}}\n",
       {f + "1: upstreams.api.ca_file: ca_file is for https:// upstreams; this url is http://"}},
      {"upstreams: {api: {url: \"http://127.0.0.1:8081\", verify: false}}\n",
       {f + "1: upstreams.api.verify: verify is for https:// upstreams; this url is http://"}},
      {"upstreams: {api: {url: \"https://api.test\", verify: false, ca_file: ca.pem}}\n",
       {f + "1: upstreams.api.ca_file: ca_file is not used with verify: false"}},
      {"upstreams: {api: {url: \"https://api.test\", verify: no}}\n",
       {f + "1: upstreams.api.verify: expected true or false, got 'no'"}},
      {"upstreams: {api: {url: \"http://api.test\", http2: yes}}\n",
       {f + "1: upstreams.api.http2: expected true or false, got 'yes'"}},
  };
  for (const auto& r : rows) EXPECT_EQ(diags(r.yaml), r.expected) << r.yaml;
}

TEST(tls_section, https_upstreams_default_to_port_443_and_verification) {
  const auto r = load_ok(
      "upstreams:\n"
      "  a: {url: \"https://api.test/v2/\"}\n"
      "  b: {url: \"HTTPS://10.0.0.7:8443\", ca_file: /srv/ca.pem}\n"
      "  c: {url: \"https://api.test\", verify: false}\n"
      "  d: {url: \"http://api.test\"}\n");
  const auto& a = r->upstreams.at("a");
  EXPECT_TRUE(a.tls);
  EXPECT_EQ(a.host, "api.test");
  EXPECT_EQ(a.port, 443);
  EXPECT_EQ(a.base_path, "/v2");
  EXPECT_TRUE(a.verify);
  EXPECT_EQ(a.ca_file.path, "");
  const auto& b = r->upstreams.at("b");
  EXPECT_TRUE(b.tls);
  EXPECT_EQ(b.port, 8443);
  EXPECT_EQ(b.ca_file, (file_ref{"/srv/ca.pem", "upstreams.b.ca_file", 3}));
  EXPECT_FALSE(r->upstreams.at("c").verify);
  EXPECT_FALSE(r->upstreams.at("d").tls);
  EXPECT_EQ(r->upstreams.at("d").port, 80);
}

}  // namespace
}  // namespace sluice::config
