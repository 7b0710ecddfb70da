// SPDX-License-Identifier: Apache-2.0
// sluice-test-support: runtime_fixture redis_server upstream_server http_client
// The store password from a file (issue 12, item 6): a real redis-server with --requirepass,
// the password in a 0600 file named by `store.password_file`; the gateway authenticates with
// it and Redis decides every request. The file is read again with every reload: one made
// readable by others (or removed) refuses the reload, naming the file, and the running rules
// stay; the password itself never appears in a diagnostic or in /admin/config.

#include "support/http_client.hpp"
#include "support/redis_server.hpp"
#include "support/runtime_fixture.hpp"
#include "support/temp_dir.hpp"
#include "support/upstream_server.hpp"

#include <gtest/gtest.h>
#include <boost/json.hpp>

#include <filesystem>
#include <fstream>
#include <string>

namespace sluice::test {
namespace {

namespace fs = std::filesystem;
namespace json = boost::json;

constexpr const char* password = "pw-from-a-file-7f3a";

void write_private(const fs::path& p, const std::string& content, fs::perms mode) {
  std::ofstream(p, std::ios::trunc) << content;
  fs::permissions(p, mode);
}

std::string rules_for(std::uint16_t redis_port, const fs::path& secret,
                      const std::string& upstream_url) {
  return "listen: 127.0.0.1:0\n"
         "admin: 127.0.0.1:0\n"
         "store: {type: redis, address: \"127.0.0.1:" +
         std::to_string(redis_port) + "\", timeout: 200ms, password_file: \"" + secret.string() +
         "\"}\n"
         "upstreams: {api: {url: \"" +
         upstream_url +
         "\"}}\n"
         "routes:\n"
         "  - name: items\n"
         "    match: {path_prefix: /v1/items}\n"
         "    upstream: api\n"
         "    on_store_failure: fail_closed\n"
         "    limits: [{name: items_ip, by: ip, rate: 2/1m, burst: 2}]\n";
}

TEST(store_secrets, the_password_comes_from_a_private_file_and_is_reread_on_reload) {
  redis_server redis({"--requirepass", password});
  upstream_server upstream;
  temp_dir dir("secret");
  const fs::path secret = dir.path / "redis.pass";
  write_private(secret, std::string(password) + "\n",
                fs::perms::owner_read | fs::perms::owner_write);

  runtime_fixture rt(rules_for(redis.port(), secret, upstream.url()));
  ASSERT_TRUE(rt.gateway().wait_for_store(std::chrono::seconds(5)));
  // fail_closed: without a working AUTH these would be 503; Redis decides them instead.
  EXPECT_EQ(get(rt.port(), "/v1/items/1").status, 200u);
  EXPECT_EQ(get(rt.port(), "/v1/items/2").header("X-RateLimit-Remaining"), "0");
  const auto refused = get(rt.port(), "/v1/items/3");
  EXPECT_EQ(refused.status, 429u);
  EXPECT_FALSE(redis.command({"KEYS", "sl:*"}).elements.empty());  // the buckets live there
  const auto config = rt.admin("/admin/config");
  EXPECT_EQ(config.status, 200u);
  EXPECT_EQ(config.body.find(password), std::string::npos);

  // Readable by others: the reload is refused naming the file, the rules in force stay.
  write_private(secret, std::string(password) + "\n",
                fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read |
                    fs::perms::others_read);
  const auto generation = rt.gateway().current().generation;
  auto reload = rt.admin("/admin/reload", "POST");
  EXPECT_EQ(reload.status, 400u);
  const auto answer = json::parse(reload.body).as_object();
  ASSERT_FALSE(answer.at("diagnostics").as_array().empty());
  const std::string first(answer.at("diagnostics").as_array().at(0).as_string());
  EXPECT_EQ(first, rt.file().string() + ":3: store.password_file: password file '" +
                       secret.string() +
                       "': readable by group or others (mode 0644); it holds a secret: make it "
                       "its owner's alone (chmod 600)");
  EXPECT_EQ(reload.body.find(password), std::string::npos);
  EXPECT_EQ(rt.gateway().current().generation, generation);
  EXPECT_EQ(get(rt.port(), "/v1/items/4").status, 429u);  // still decided by Redis

  // Gone: refused likewise.
  fs::remove(secret);
  reload = rt.admin("/admin/reload", "POST");
  EXPECT_EQ(reload.status, 400u);
  EXPECT_NE(reload.body.find("password file '" + secret.string() +
                             "': cannot read file: No such file or directory"),
            std::string::npos);

  // Private again (0400): the reload goes through.
  write_private(secret, std::string(password) + "\n", fs::perms::owner_read);
  reload = rt.admin("/admin/reload", "POST");
  EXPECT_EQ(reload.status, 200u) << reload.body;
  EXPECT_EQ(rt.gateway().current().generation, generation + 1);
}

// A wrong password in the file: AUTH is refused, the store never connects, and the route's
// failure policy answers (fail_closed: 503), as with a wrong password_env.
TEST(store_secrets, a_wrong_password_in_the_file_never_connects) {
  redis_server redis({"--requirepass", password});
  upstream_server upstream;
  temp_dir dir("secret");
  const fs::path secret = dir.path / "redis.pass";
  write_private(secret, "not-the-password\n", fs::perms::owner_read | fs::perms::owner_write);
  runtime_fixture rt(rules_for(redis.port(), secret, upstream.url()));
  EXPECT_FALSE(rt.gateway().wait_for_store(std::chrono::milliseconds(300)));
  EXPECT_EQ(get(rt.port(), "/v1/items/1").status, 503u);
  EXPECT_FALSE(rt.gateway().stats().store.connected);
}

}  // namespace
}  // namespace sluice::test
