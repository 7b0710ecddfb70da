// SPDX-License-Identifier: Apache-2.0
// sluice-test-support: http_client
// `admin:` as a mapping: the admin listener's bearer token (from an environment variable or an
// owner-only file) and `metrics_open`, with the exact diagnostics of each bad form.

#include "sluice/config/loader.hpp"

#include "support/temp_dir.hpp"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

namespace sluice::config {
namespace {

const std::string up = "upstreams: {api: {url: \"http://127.0.0.1:8081\"}}\n";

std::vector<std::string> diags(const std::string& yaml) {
  const load_result r = load_string(yaml, "rules.yaml");
  std::vector<std::string> out;
  for (const auto& d : r.diagnostics) out.push_back(d.to_string());
  EXPECT_EQ(r.ok(), out.empty());
  return out;
}

std::shared_ptr<const rules> load_ok(const std::string& yaml) {
  const load_result r = load_string(yaml, "rules.yaml");
  for (const auto& d : r.diagnostics) ADD_FAILURE() << d.to_string();
  return r.value;
}

/// Writes `content` to `name` in `d` with permission bits `mode`; returns its path.
std::string write(const test::temp_dir& d, const std::string& name, const std::string& content,
                  mode_t mode) {
  const auto p = d.path / name;
  std::ofstream(p, std::ios::trunc) << content;
  ::chmod(p.c_str(), mode);
  return p.string();
}

TEST(admin_config, an_address_alone_asks_for_no_token) {
  auto r = load_ok(up + "admin: \"127.0.0.1:9090\"\n");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->admin_host, "127.0.0.1");
  EXPECT_EQ(r->admin_port, 9090);
  EXPECT_EQ(r->admin.token, "");
  EXPECT_FALSE(r->admin.metrics_open);
}

TEST(admin_config, the_token_comes_from_an_environment_variable) {
  ::setenv("SLUICE_TEST_ADMIN_TOKEN", "s3cret-Token_1.~+/==", 1);
  auto r = load_ok(up +
                   "admin: {listen: \"0.0.0.0:9090\", token_env: SLUICE_TEST_ADMIN_TOKEN, "
                   "metrics_open: true}\n");
  ::unsetenv("SLUICE_TEST_ADMIN_TOKEN");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->admin_host, "0.0.0.0");
  EXPECT_EQ(r->admin_port, 9090);
  EXPECT_EQ(r->admin.token, "s3cret-Token_1.~+/==");
  EXPECT_EQ(r->admin.token_env, "SLUICE_TEST_ADMIN_TOKEN");
  EXPECT_TRUE(r->admin.metrics_open);
}

TEST(admin_config, the_token_comes_from_an_owner_only_file_without_its_newline) {
  test::temp_dir d("admin-token");
  for (mode_t mode : {0600, 0400}) {
    const auto file = write(d, "token", "abc123\n", mode);
    auto r = load_ok(up + "admin:\n  listen: \"127.0.0.1:0\"\n  token_file: \"" + file + "\"\n");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->admin.token, "abc123");
    EXPECT_EQ(r->admin.token_file, file);
    EXPECT_FALSE(r->admin.metrics_open);
    ::unlink(file.c_str());
  }
}

TEST(admin_config, a_token_file_others_may_read_is_refused_naming_it) {
  test::temp_dir d("admin-token");
  for (mode_t mode : {0644, 0640, 0604}) {
    const auto file = write(d, "token", "abc123\n", mode);
    char m[8];
    std::snprintf(m, sizeof m, "%04o", static_cast<unsigned>(mode));
    EXPECT_EQ(diags(up + "admin:\n  listen: \"127.0.0.1:0\"\n  token_file: \"" + file + "\"\n"),
              std::vector<std::string>{"rules.yaml:4: admin.token_file: token file '" + file +
                                       "': readable by group or others (mode " + m +
                                       "); it holds a secret: make it its owner's alone "
                                       "(chmod 600)"});
  }
}

TEST(admin_config, an_empty_missing_or_odd_token_is_an_error_that_never_shows_it) {
  test::temp_dir d("admin-token");
  const auto empty = write(d, "empty", "\n", 0600);
  const auto spaced = write(d, "spaced", "two words\n", 0600);
  const auto missing = (d.path / "missing").string();
  const auto admin = [](const std::string& field) {
    return up + "admin: {listen: \"127.0.0.1:0\", " + field + "}\n";
  };
  EXPECT_EQ(diags(admin("token_file: \"" + empty + "\"")),
            std::vector<std::string>{"rules.yaml:2: admin.token_file: token file '" + empty +
                                     "': the file is empty"});
  EXPECT_EQ(diags(admin("token_file: \"" + missing + "\"")),
            std::vector<std::string>{"rules.yaml:2: admin.token_file: token file '" + missing +
                                     "': cannot read file: No such file or directory"});
  EXPECT_EQ(diags(admin("token_file: \"" + spaced + "\"")),
            std::vector<std::string>{
                "rules.yaml:2: admin.token_file: the token has characters a client cannot send "
                "after 'Bearer ' (RFC 6750 b64token: letters, digits, - . _ ~ + /, then = "
                "padding)"});

  ::unsetenv("SLUICE_TEST_NO_SUCH_TOKEN");
  EXPECT_EQ(diags(admin("token_env: SLUICE_TEST_NO_SUCH_TOKEN")),
            std::vector<std::string>{"rules.yaml:2: admin.token_env: the environment variable "
                                     "SLUICE_TEST_NO_SUCH_TOKEN is not set"});
  ::setenv("SLUICE_TEST_EMPTY_TOKEN", "", 1);
  EXPECT_EQ(diags(admin("token_env: SLUICE_TEST_EMPTY_TOKEN")),
            std::vector<std::string>{"rules.yaml:2: admin.token_env: the environment variable "
                                     "SLUICE_TEST_EMPTY_TOKEN is empty"});
  ::unsetenv("SLUICE_TEST_EMPTY_TOKEN");
  EXPECT_EQ(diags(admin("token_env: \"A-B\"")),
            std::vector<std::string>{"rules.yaml:2: admin.token_env: invalid environment "
                                     "variable name 'A-B': expected [A-Za-z_][A-Za-z0-9_]*"});
}

TEST(admin_config, contradictions_and_missing_fields_are_named) {
  ::setenv("SLUICE_TEST_ADMIN_TOKEN", "abc", 1);
  EXPECT_EQ(diags(up + "admin:\n  listen: \"127.0.0.1:0\"\n  token_env: SLUICE_TEST_ADMIN_TOKEN\n"
                       "  token_file: token\n"),
            std::vector<std::string>{"rules.yaml:5: admin.token_file: token_env and token_file "
                                     "both give the token: keep one"});
  ::unsetenv("SLUICE_TEST_ADMIN_TOKEN");
  EXPECT_EQ(diags(up + "admin: {listen: \"127.0.0.1:0\", metrics_open: true}\n"),
            std::vector<std::string>{"rules.yaml:2: admin.metrics_open: applies only with "
                                     "token_env or token_file (without a token every path is "
                                     "open)"});
  EXPECT_EQ(diags(up + "admin: {metrics_open: false}\n"),
            std::vector<std::string>{"rules.yaml:2: admin: missing required key 'listen' (the "
                                     "admin listener's host:port)"});
  EXPECT_EQ(diags(up + "admin: {listen: \"127.0.0.1:0\", metrics_open: yes}\n"),
            std::vector<std::string>{
                "rules.yaml:2: admin.metrics_open: expected true or false, got 'yes'"});
  EXPECT_EQ(diags(up + "admin: {listen: \"127.0.0.1:0\", token: abc}\n"),
            std::vector<std::string>{"rules.yaml:2: admin.token: unknown key 'token'; expected "
                                     "one of listen, token_env, token_file, metrics_open"});
}

}  // namespace
}  // namespace sluice::config
