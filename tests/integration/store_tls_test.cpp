// SPDX-License-Identifier: Apache-2.0
// sluice-test-support: redis_server redis_tls test_ca upstream_server http_client
// The gateway's store over TLS, end to end: the sluice binary with a rules file whose
// `store.tls` names a test CA and a client certificate, `store.username` an ACL user allowed
// only what sluice sends, against a redis-server serving `--tls-port` with client
// certificates required. Redis decides every request (fail_closed routes answer 200 then
// 429). With a CA that did not sign the server, or a server name the certificate does not
// carry, the store never connects: the log says why once, /readyz answers 503 with the same
// reason, and each route's failure policy answers (fail_closed 503, fail_open 200).

#include "support/child_process.hpp"
#include "support/eventually.hpp"
#include "support/http_client.hpp"
#include "support/redis_server.hpp"
#include "support/redis_tls.hpp"
#include "support/temp_dir.hpp"
#include "support/upstream_server.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace sluice::test {
namespace {

namespace fs = std::filesystem;

constexpr const char* user = "sluice";
constexpr const char* password = "gateway-tls-secret";

struct tls_world {
  temp_dir dir{"store-tls"};
  redis_tls_material tls{dir.path};
  std::uint16_t tls_port = free_loopback_port();
  redis_server redis{args()};
  upstream_server upstream;
  fs::path rules = dir.path / "rules.yaml";
  fs::path secret = dir.path / "redis.pass";

  std::vector<std::string> args() const {
    auto a = tls.server_args(tls_port, true);
    for (auto& x : acl_args(user, password)) a.push_back(std::move(x));
    return a;
  }

  // `ca`: the CA file the gateway trusts; `server_name`: the name it checks.
  void write_rules(const fs::path& ca, const std::string& server_name) {
    std::ofstream(secret) << password << "\n";
    fs::permissions(secret, fs::perms::owner_read | fs::perms::owner_write);
    std::ofstream(rules) << "store:\n"
                            "  type: redis\n"
                            "  address: \"127.0.0.1:"
                         << tls_port
                         << "\"\n"
                            "  timeout: 500ms\n"
                            "  username: sluice\n"
                            "  password_file: redis.pass\n"
                            "  tls:\n"
                            "    ca_file: \""
                         << ca.string()
                         << "\"\n"
                            "    server_name: "
                         << server_name
                         << "\n"
                            "    cert_file: \""
                         << tls.client.cert.string()
                         << "\"\n"
                            "    key_file: \""
                         << tls.client.key.string()
                         << "\"\n"
                            "upstreams: {api: {url: \""
                         << upstream.url()
                         << "\"}}\n"
                            "routes:\n"
                            "  - name: closed\n"
                            "    match: {path_prefix: /closed}\n"
                            "    upstream: api\n"
                            "    on_store_failure: fail_closed\n"
                            "    limits: [{name: closed_ip, by: ip, rate: 2/1m, burst: 2}]\n"
                            "  - name: open\n"
                            "    match: {path_prefix: /open}\n"
                            "    upstream: api\n"
                            "    on_store_failure: fail_open\n"
                            "    limits: [{name: open_ip, by: ip, rate: 2/1m, burst: 2}]\n";
  }
};

TEST(store_tls, redis_decides_over_tls_as_an_acl_user) {
  tls_world w;
  w.write_rules(w.tls.ca.cert(), "localhost");
  sluice_process gw(w.rules, w.dir.path, 1);
  ASSERT_TRUE(gw.wait_listening()) << gw.log();
  ASSERT_TRUE(eventually([&] { return get(gw.admin_port, "/readyz").status == 200u; }))
      << get(gw.admin_port, "/readyz").body << gw.log();
  EXPECT_EQ(get(gw.port, "/closed/1").status, 200u);
  EXPECT_EQ(get(gw.port, "/closed/2").status, 200u);
  EXPECT_EQ(get(gw.port, "/closed/3").status, 429u);
  EXPECT_FALSE(w.redis.command({"KEYS", "sl:*"}).elements.empty());
  EXPECT_EQ(gw.log().find(password), std::string::npos);
}

// One failure: the reason in the log (once) and in /readyz, and each route's policy answers.
void expect_store_failure(tls_world& w, const std::string& reason) {
  sluice_process gw(w.rules, w.dir.path, 1);
  ASSERT_TRUE(gw.wait_listening()) << gw.log();
  const std::string line =
      "redis 127.0.0.1:" + std::to_string(w.tls_port) + ": cannot connect: " + reason;
  ASSERT_TRUE(eventually([&] { return gw.log().find(line) != std::string::npos; })) << gw.log();
  const auto ready = get(gw.admin_port, "/readyz");
  EXPECT_EQ(ready.status, 503u);
  EXPECT_EQ(ready.body, "not ready: store: redis 127.0.0.1:" + std::to_string(w.tls_port) + ": " +
                            reason + "\n");
  EXPECT_EQ(get(gw.port, "/closed/1").status, 503u);
  EXPECT_EQ(get(gw.port, "/open/1").status, 200u);
}

TEST(store_tls, a_ca_that_did_not_sign_the_server_is_a_store_error_and_the_policy_answers) {
  tls_world w;
  temp_dir other_dir("store-tls-other");
  test_ca other(other_dir.path, "another CA");
  w.write_rules(other.cert(), "localhost");
  expect_store_failure(
      w,
      "TLS handshake failed: certificate verify failed: self-signed certificate in certificate "
      "chain");
}

TEST(store_tls, a_server_name_the_certificate_does_not_carry_is_a_store_error) {
  tls_world w;
  w.write_rules(w.tls.ca.cert(), "redis.example.net");
  expect_store_failure(w, "TLS handshake failed: certificate verify failed: hostname mismatch");
}

TEST(store_tls, an_unreadable_ca_file_stops_the_start_naming_the_field) {
  tls_world w;
  w.write_rules(w.dir.path / "missing-ca.pem", "localhost");
  sluice_process gw(w.rules, w.dir.path, 1);
  EXPECT_FALSE(gw.wait_listening());
  EXPECT_NE(gw.log().find("store.tls.ca_file"), std::string::npos) << gw.log();
}

}  // namespace
}  // namespace sluice::test
