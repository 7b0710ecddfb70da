// SPDX-License-Identifier: Apache-2.0
// sluice-test-support: runtime_fixture http_client
// The admin listener's bearer token (`admin: {listen, token_env | token_file, metrics_open}`),
// through the whole runtime over real HTTP: every admin path refuses a request without the
// token (401, a problem body, `WWW-Authenticate: Bearer`) and answers it with the token;
// /healthz and /readyz stay open; /metrics is open only when the rules say so; refusals are
// counted; a reload rotates the token, and a reload whose token cannot be read keeps the
// running rules and their token.

#include "support/http_client.hpp"
#include "support/runtime_fixture.hpp"

#include <gtest/gtest.h>
#include <boost/json.hpp>

#include <cstdlib>
#include <fstream>
#include <regex>
#include <string>

namespace sluice::test {
namespace {

namespace json = boost::json;

std::string rules_yaml(const std::string& admin) {
  return "listen: 127.0.0.1:0\n"
         "admin: " +
         admin +
         "\n"
         "store: {type: memory}\n"
         "upstreams: {api: {url: \"http://127.0.0.1:9\"}}\n"
         "routes:\n"
         "  - name: login\n"
         "    match: {path_prefix: /login}\n"
         "    upstream: api\n"
         "    limits:\n"
         "      - {name: failed_logins, by: ip, algorithm: fixed_window, rate: 5/10m, block: "
         "15m}\n";
}

const std::string guarded = "{listen: \"127.0.0.1:0\", token_env: SLUICE_TEST_ADMIN_TOKEN}";

/// One admin request on a fresh connection, with `authorization` as the Authorization field
/// ("" = none).
client_response ask(const runtime_fixture& rt, const std::string& method, const std::string& target,
                    const std::string& authorization = {}) {
  http_connection c(rt.admin_port());
  header_list h;
  if (!authorization.empty()) h.emplace_back("Authorization", authorization);
  return c.request(method, target, h);
}

/// `sluice_admin_auth_failures_total`'s value in an exposition.
double auth_failures(const std::string& exposition) {
  std::smatch m;
  static const std::regex line(R"(\nsluice_admin_auth_failures_total ([0-9.e+]+)\n)");
  if (!std::regex_search(exposition, m, line)) return -1;
  return std::stod(m[1]);
}

struct admin_path {
  const char* method;
  const char* target;
};

// Every admin path there is (GET / is the status page); an unknown one is refused too, so the
// listener does not tell which paths exist.
const admin_path guarded_paths[] = {
    {"GET", "/"},
    {"GET", "/admin/config"},
    {"POST", "/admin/reload"},
    {"GET", "/admin/explain?path=/login"},
    {"POST", "/admin/unblock?limit=failed_logins&ip=127.0.0.1"},
    {"GET", "/metrics"},
};

class admin_auth : public ::testing::Test {
 protected:
  void SetUp() override { ::setenv("SLUICE_TEST_ADMIN_TOKEN", "t0ken-A", 1); }
  void TearDown() override { ::unsetenv("SLUICE_TEST_ADMIN_TOKEN"); }
};

TEST_F(admin_auth, every_admin_path_needs_the_token_but_the_probes) {
  runtime_fixture rt(rules_yaml(guarded));
  for (const auto& p : guarded_paths) {
    SCOPED_TRACE(std::string(p.method) + " " + p.target);
    auto none = ask(rt, p.method, p.target);
    EXPECT_EQ(none.status, 401u);
    EXPECT_EQ(none.header("WWW-Authenticate"), R"(Bearer realm="sluice admin")");
    EXPECT_EQ(none.count("WWW-Authenticate"), 2u) << "and Basic, so that a browser prompts";
    EXPECT_EQ(none.header("Content-Type"), "application/problem+json");
    auto problem = json::parse(none.body).as_object();
    EXPECT_EQ(problem["status"], 401);
    EXPECT_EQ(problem["title"], "Unauthorized");
    EXPECT_EQ(problem["detail"], "this admin path needs Authorization: Bearer <token>");

    auto wrong = ask(rt, p.method, p.target, "Bearer t0ken-B");
    EXPECT_EQ(wrong.status, 401u);
    EXPECT_EQ(wrong.header("WWW-Authenticate"),
              R"(Bearer realm="sluice admin", error="invalid_token")");
    EXPECT_EQ(ask(rt, p.method, p.target, "Basic dDBrZW4tQQ==").status, 401u);  // no user:
    EXPECT_EQ(ask(rt, p.method, p.target, "Basic YWRtaW46dDBrZW4tQg==").status, 401u);
    EXPECT_EQ(ask(rt, p.method, p.target, "Bearer t0ken-A-and-more").status, 401u);
    EXPECT_EQ(ask(rt, p.method, p.target, "Bearer t0ken-").status, 401u);

    EXPECT_EQ(ask(rt, p.method, p.target, "Bearer t0ken-A").status, 200u);
    EXPECT_EQ(ask(rt, p.method, p.target, "bearer  t0ken-A").status, 200u);  // any case, spaces
    // A browser's login: any user, the token as the password (RFC 7617).
    EXPECT_EQ(ask(rt, p.method, p.target, "Basic YWRtaW46dDBrZW4tQQ==").status, 200u);
  }
  EXPECT_EQ(ask(rt, "GET", "/nowhere").status, 401u);
  EXPECT_EQ(ask(rt, "GET", "/nowhere", "Bearer t0ken-A").status, 404u);
  for (const char* probe : {"/healthz", "/readyz"}) {
    EXPECT_EQ(ask(rt, "GET", probe).status, 200u) << probe;
    EXPECT_EQ(ask(rt, "GET", probe, "Bearer wrong").status, 200u) << probe;
  }
  // Refusals are counted: 6 per path (none, wrong, two Basic, two near misses) and /nowhere.
  const auto metrics = ask(rt, "GET", "/metrics", "Bearer t0ken-A");
  EXPECT_EQ(auth_failures(metrics.body), static_cast<double>(std::size(guarded_paths) * 6 + 1));
  // /admin/config says where the token comes from, never the token.
  const auto config = ask(rt, "GET", "/admin/config", "Bearer t0ken-A").body;
  EXPECT_EQ(config.find("t0ken-A"), std::string::npos);
  EXPECT_EQ(json::parse(config).at("admin_auth"),
            json::parse(R"({"token_env":"SLUICE_TEST_ADMIN_TOKEN","metrics_open":false})"));
}

TEST_F(admin_auth, metrics_are_open_only_when_the_rules_say_so) {
  runtime_fixture rt(rules_yaml(
      "{listen: \"127.0.0.1:0\", token_env: SLUICE_TEST_ADMIN_TOKEN, metrics_open: true}"));
  const auto m = ask(rt, "GET", "/metrics");
  EXPECT_EQ(m.status, 200u);
  EXPECT_EQ(auth_failures(m.body), 0);
  for (const auto& p : guarded_paths) {
    if (std::string_view(p.target) == "/metrics") continue;
    EXPECT_EQ(ask(rt, p.method, p.target).status, 401u) << p.target;
  }
  EXPECT_EQ(auth_failures(ask(rt, "GET", "/metrics").body),
            static_cast<double>(std::size(guarded_paths) - 1));
}

TEST_F(admin_auth, without_a_token_every_path_is_open_as_before) {
  runtime_fixture rt(rules_yaml("\"127.0.0.1:0\""));
  for (const auto& p : guarded_paths)
    EXPECT_EQ(ask(rt, p.method, p.target).status, 200u) << p.target;
}

TEST_F(admin_auth, a_reload_rotates_the_token_and_one_that_cannot_read_it_keeps_the_running_one) {
  runtime_fixture rt(rules_yaml(guarded));
  const auto reload = [&](const std::string& token) {
    return ask(rt, "POST", "/admin/reload", "Bearer " + token);
  };

  // The variable unset: the reload is refused, naming the field; the running token stays.
  ::unsetenv("SLUICE_TEST_ADMIN_TOKEN");
  auto refused = reload("t0ken-A");
  EXPECT_EQ(refused.status, 400u);
  auto body = json::parse(refused.body).as_object();
  EXPECT_EQ(body["reloaded"], false);
  EXPECT_EQ(body["generation"], 1);
  EXPECT_EQ(std::string(body["diagnostics"].as_array().at(0).as_string()),
            rt.file().string() +
                ":2: admin.token_env: the environment variable SLUICE_TEST_ADMIN_TOKEN is not set");
  EXPECT_EQ(ask(rt, "GET", "/admin/config", "Bearer t0ken-A").status, 200u);

  // A token file others may read: refused the same way.
  const auto token_file = rt.file().parent_path() / "admin.token";
  std::ofstream(token_file) << "t0ken-F\n";
  std::filesystem::permissions(token_file, std::filesystem::perms::owner_read |
                                               std::filesystem::perms::owner_write |
                                               std::filesystem::perms::others_read);
  std::ofstream(rt.file(), std::ios::trunc)
      << rules_yaml("{listen: \"127.0.0.1:0\", token_file: admin.token}");
  refused = reload("t0ken-A");
  EXPECT_EQ(refused.status, 400u);
  body = json::parse(refused.body).as_object();
  EXPECT_EQ(std::string(body["diagnostics"].as_array().at(0).as_string()),
            rt.file().string() + ":2: admin.token_file: token file '" + token_file.string() +
                "': readable by group or others (mode 0604); it holds a secret: make it its "
                "owner's alone (chmod 600)");
  EXPECT_EQ(ask(rt, "GET", "/admin/config", "Bearer t0ken-F").status, 401u);
  EXPECT_EQ(ask(rt, "GET", "/admin/config", "Bearer t0ken-A").status, 200u);

  // Made the owner's alone: the reload goes through and the file's token replaces the old one.
  std::filesystem::permissions(
      token_file, std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
  auto ok = reload("t0ken-A");
  EXPECT_EQ(ok.status, 200u) << ok.body;
  EXPECT_EQ(ask(rt, "GET", "/admin/config", "Bearer t0ken-A").status, 401u);
  EXPECT_EQ(ask(rt, "GET", "/admin/config", "Bearer t0ken-F").status, 200u);
}

}  // namespace
}  // namespace sluice::test
