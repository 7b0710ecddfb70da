// SPDX-License-Identifier: Apache-2.0
// sluice-test-support: redis_server redis_tls test_ca
// The Redis store over TLS (redis_connection): a real redis-server serving `--tls-port` with a
// test CA's certificate, client certificates required, and an ACL user allowed only what the
// store sends. It decides and reads as over plain TCP; a CA that did not sign the server's
// certificate, a name the certificate does not carry, a missing client certificate and a
// wrong password each leave the store not connected with the reason in failure(), and checks
// fail at once (store_unavailable: the route's failure policy answers).

#include "sluice/store/redis_store.hpp"

#include "sluice/errc.hpp"
#include "sluice/limiter/keys.hpp"
#include "support/eventually.hpp"
#include "support/redis_server.hpp"
#include "support/redis_tls.hpp"
#include "support/temp_dir.hpp"

#include <gtest/gtest.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <chrono>
#include <optional>
#include <string>

namespace sluice {
namespace {

namespace asio = boost::asio;
using namespace std::chrono_literals;
using result_type = boost::system::result<limiter::check_outcome>;

constexpr const char* user = "sluice";
constexpr const char* password = "tls-acl-secret-42";

limiter::check_request request(const std::string& name, std::int64_t n, std::int64_t burst) {
  config::limit_params p;
  p.rate.count = n;
  p.rate.period = std::chrono::milliseconds(60'000);
  p.burst = burst;
  limiter::limit_check lc;
  lc.key = limiter::bucket_key(name, limiter::key_namespace::global, "tls-test");
  lc.bucket = limiter::bucket_params::from(p);
  limiter::check_request req;
  req.limits.push_back(lc);
  return req;
}

template <class Pred>
bool run_until(asio::io_context& ioc, Pred done, std::chrono::milliseconds limit) {
  return test::eventually(
      [&] {
        if (ioc.stopped()) ioc.restart();
        ioc.run_one_for(5ms);
        return done();
      },
      limit);
}

std::optional<result_type> check_once(asio::io_context& ioc, store::redis_store& s,
                                      limiter::check_request req) {
  std::optional<result_type> out;
  asio::co_spawn(ioc, s.check(std::move(req)), [&](std::exception_ptr e, result_type r) {
    if (!e) out.emplace(std::move(r));
  });
  (void)run_until(
      ioc, [&] { return out.has_value(); }, 5000ms);
  return out;
}

// One TLS redis-server per test: client certificates required, the ACL user `sluice`.
class redis_tls : public ::testing::Test {
 protected:
  redis_tls()
      : dir_("redis-tls"),
        material_(dir_.path),
        tls_port_(test::free_loopback_port()),
        server_(with(material_.server_args(tls_port_, true), test::acl_args(user, password))) {}

  static std::vector<std::string> with(std::vector<std::string> a,
                                       const std::vector<std::string>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
  }

  // What the gateway makes of a rules file's store.tls (ca_file, the client certificate).
  store::redis_settings settings(const std::filesystem::path& ca) const {
    store::redis_settings s;
    s.host = "127.0.0.1";
    s.port = tls_port_;
    s.command_timeout = 1000ms;
    s.connect_timeout = 2000ms;
    s.username = user;
    s.password = password;
    s.tls.context = store::make_redis_tls_context(
        {ca.string(), true, material_.client.cert.string(), material_.client.key.string()});
    s.tls.server_name = "localhost";
    return s;
  }
  store::redis_settings settings() const { return settings(material_.ca.cert()); }

  // Starts `s` and waits until it is connected or has a failure to tell.
  static void start(asio::io_context& ioc, store::redis_store& s) {
    s.start();
    (void)run_until(
        ioc, [&] { return s.stats().connected || !s.failure().empty(); }, 5000ms);
  }

  test::temp_dir dir_;
  test::redis_tls_material material_;
  std::uint16_t tls_port_;
  test::redis_server server_;
};

TEST_F(redis_tls, decides_as_an_acl_user_with_a_client_certificate) {
  asio::io_context ioc;
  store::redis_store s(ioc.get_executor(), settings());
  start(ioc, s);
  ASSERT_TRUE(s.stats().connected) << s.failure();
  EXPECT_EQ(s.failure(), "");
  EXPECT_EQ(s.stats().script_loads, 1u);  // FUNCTION LOAD: the ACL allows it
  for (int i = 0; i < 2; ++i) {
    auto r = check_once(ioc, s, request("tls_ok", 2, 2));
    ASSERT_TRUE(r && r->has_value()) << (r ? r->error().message() : "no answer");
    EXPECT_TRUE((*r)->allowed);
    EXPECT_EQ((*r)->limits.at(0).remaining, 1 - i);
  }
  auto refused = check_once(ioc, s, request("tls_ok", 2, 2));
  ASSERT_TRUE(refused && refused->has_value());
  EXPECT_FALSE((*refused)->allowed);
  // Decided on the server behind TLS: the bucket is there, as the ACL user wrote it.
  EXPECT_FALSE(server_.command({"KEYS", "sl:*"}).elements.empty());
  s.stop();
}

TEST_F(redis_tls, the_plan_directory_reads_as_the_acl_user) {
  ASSERT_FALSE(server_.command({"HSET", "sluice:api_keys", "key-1", "gold"}).is_error());
  asio::io_context ioc;
  auto st = settings();
  st.load_script = false;  // the directory's connection only reads
  store::redis_store s(ioc.get_executor(), st);
  start(ioc, s);
  ASSERT_TRUE(s.stats().connected) << s.failure();
  std::optional<boost::system::result<std::optional<std::string>>> got;
  asio::co_spawn(ioc, s.hget("sluice:api_keys", "key-1"),
                 [&](std::exception_ptr e, boost::system::result<std::optional<std::string>> r) {
                   if (!e) got.emplace(std::move(r));
                 });
  ASSERT_TRUE(run_until(
      ioc, [&] { return got.has_value(); }, 5000ms));
  ASSERT_TRUE(got->has_value()) << got->error().message();
  EXPECT_EQ(**got, std::optional<std::string>("gold"));
  s.stop();
}

// The ACL user is as narrow as documented: a command outside the list is refused to it.
TEST_F(redis_tls, the_acl_user_may_not_run_other_commands) {
  const auto r = server_.command({"ACL", "DRYRUN", user, "FLUSHALL"});
  ASSERT_EQ(r.type, test::redis_reply::kind::string) << r.str;
  EXPECT_NE(r.str.find("no permissions"), std::string::npos) << r.str;
  const auto ok = server_.command({"ACL", "DRYRUN", user, "FCALL", "f", "1", "sl:{x}"});
  EXPECT_EQ(ok.str, "OK");
}

// Failures: not connected, the reason in failure() (the log says the same line), and a check
// fails at once with store_unavailable.
void expect_refused_with(asio::io_context& ioc, store::redis_store& s, const std::string& why) {
  EXPECT_FALSE(s.stats().connected);
  EXPECT_NE(s.failure().find(why), std::string::npos) << s.failure();
  EXPECT_GE(s.stats().connect_failures, 1u);
  auto r = check_once(ioc, s, request("tls_fail", 2, 2));
  ASSERT_TRUE(r.has_value());
  ASSERT_FALSE(r->has_value());
  EXPECT_EQ(r->error(), make_error_code(errc::store_unavailable));
}

TEST_F(redis_tls, a_ca_that_did_not_sign_the_server_is_a_certificate_failure) {
  test::temp_dir other_dir("redis-tls-other");
  test::test_ca other(other_dir.path, "another CA");
  asio::io_context ioc;
  store::redis_store s(ioc.get_executor(), settings(other.cert()));
  start(ioc, s);
  expect_refused_with(ioc, s,
                      "redis 127.0.0.1:" + std::to_string(tls_port_) +
                          ": TLS handshake failed: certificate verify failed: self-signed "
                          "certificate in certificate chain");
  s.stop();
}

TEST_F(redis_tls, a_name_the_certificate_does_not_carry_is_a_hostname_mismatch) {
  asio::io_context ioc;
  auto st = settings();
  st.tls.server_name = "redis.example.net";
  store::redis_store s(ioc.get_executor(), st);
  start(ioc, s);
  expect_refused_with(ioc, s, "TLS handshake failed: certificate verify failed: hostname mismatch");
  s.stop();
}

TEST_F(redis_tls, an_address_is_checked_against_the_certificates_ip_entries) {
  asio::io_context ioc;
  auto st = settings();
  st.tls.server_name.clear();  // 127.0.0.1 itself: the certificate's IP entry
  store::redis_store s(ioc.get_executor(), st);
  start(ioc, s);
  EXPECT_TRUE(s.stats().connected) << s.failure();
  s.stop();
}

TEST_F(redis_tls, no_client_certificate_where_one_is_required_never_connects) {
  asio::io_context ioc;
  auto st = settings();
  st.tls.context = store::make_redis_tls_context({material_.ca.cert().string(), true, "", ""});
  store::redis_store s(ioc.get_executor(), st);
  start(ioc, s);
  // TLS 1.3: the server asks for the certificate after the client's side of the handshake is
  // done, so its refusal comes as an alert on the first read (the AUTH answer).
  EXPECT_FALSE(s.stats().connected);
  EXPECT_NE(s.failure().find("redis 127.0.0.1:" + std::to_string(tls_port_) +
                             ": TLS session failed: tlsv13 alert certificate required"),
            std::string::npos)
      << s.failure();
  s.stop();
}

TEST_F(redis_tls, a_wrong_password_of_the_acl_user_is_an_auth_failure) {
  asio::io_context ioc;
  auto st = settings();
  st.password = "not-the-password";
  store::redis_store s(ioc.get_executor(), st);
  start(ioc, s);
  expect_refused_with(ioc, s, "AUTH failed: WRONGPASS");
  EXPECT_EQ(s.failure().find("not-the-password"), std::string::npos);  // never the secret
  s.stop();
}

TEST_F(redis_tls, plain_tcp_to_the_tls_port_fails_and_tls_to_the_plain_port_fails) {
  asio::io_context ioc;
  auto plain = settings();
  plain.tls = {};
  store::redis_store a(ioc.get_executor(), plain);
  start(ioc, a);
  EXPECT_FALSE(a.stats().connected);
  EXPECT_FALSE(a.failure().empty());
  auto tls = settings();
  tls.port = server_.port();
  store::redis_store b(ioc.get_executor(), tls);
  start(ioc, b);
  // Redis reads the ClientHello as the start of an inline command and waits for its end.
  EXPECT_FALSE(b.stats().connected);
  EXPECT_NE(b.failure().find("no answer within the connect timeout"), std::string::npos)
      << b.failure();
  a.stop();
  b.stop();
}

TEST(redis_tls_context, a_file_that_cannot_be_read_names_its_field) {
  try {
    (void)store::make_redis_tls_context({"/nonexistent/ca.pem", true, "", ""});
    FAIL() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("store.tls.ca_file /nonexistent/ca.pem: "),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace sluice
