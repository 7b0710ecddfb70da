// The command line: --version, --check-config, and --config refusing a bad file.
// sluice-test-support: gateway_fixture

#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <sys/wait.h>

namespace {

struct run_result {
  int exit_code = -1;
  std::string output;  // stdout and stderr
};

run_result run(const std::string& args) {
  run_result r;
  const std::string cmd = std::string(SLUICE_BINARY) + " " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return r;
  std::array<char, 4096> buf{};
  while (auto n = fread(buf.data(), 1, buf.size(), p)) r.output.append(buf.data(), n);
  const int status = pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

std::string write_temp(const std::string& name, const std::string& text) {
  auto dir = std::filesystem::temp_directory_path() / ("sluice-cli-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  auto path = dir / name;
  std::ofstream(path) << text;
  return path.string();
}

TEST(cli, version) {
  auto r = run("--version");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.output, "sluice " SLUICE_VERSION "\n");
}

TEST(cli, check_config_accepts_the_default_rules) {
  auto r = run("--check-config " SLUICE_SOURCE_DIR "/config/sluice.yaml");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find(": OK: 3 routes"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("; store: redis 127.0.0.1:6379, buckets in 65536 hashes per limit\n"),
            std::string::npos)
      << r.output;
}

// Case c04/c05: a cost that no burst can admit is a config error with file:line: path.
TEST(cli, check_config_and_config_refuse_a_bad_file) {
  const std::string bad = write_temp("rules.yaml", R"(store: {type: memory}
identity: {api_key: {header: X-API-Key}}
plans: {free: {limits: []}, pro: {limits: []}}
api_keys: {key-a: free, key-p: pro}
upstreams: {api: {url: "http://127.0.0.1:8081"}}
routes:
  - name: export
    match: {path_prefix: /v1/export}
    upstream: api
    limits:
      - name: export_key
        by: api_key
        rate: 2/1m
        burst: 2
        plans: {pro: {rate: 5/1m, burst: 5}, free: {rate: 0/1m, burst: 0}}
)");
  auto check = run("--check-config " + bad);
  EXPECT_NE(check.exit_code, 0);
  EXPECT_NE(check.output.find(bad + ":15: routes[0].limits[0].plans.free.burst: cost 1 can never be admitted by burst 0"),
            std::string::npos)
      << check.output;
  auto start = run("--config " + bad + " --listen 127.0.0.1:0");
  EXPECT_NE(start.exit_code, 0);
  EXPECT_EQ(start.output.find("listening"), std::string::npos) << start.output;
}

TEST(cli, unreadable_file) {
  auto r = run("--check-config /nonexistent/rules.yaml");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("/nonexistent/rules.yaml"), std::string::npos) << r.output;
}

}  // namespace
