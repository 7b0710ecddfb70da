// sluice-test-support: gateway_fixture upstream_server http_client runtime_fixture
// The access log through real sockets: a gateway with `access_log:` (JSON lines, then plain)
// and a real upstream; each request is one line with its decision, deciding limit, Remaining,
// upstream status and timing, byte counts and the API key only as a hash; a 404 and an
// unlimited route have their own lines; after the file is moved and SIGUSR1's reopen, the next
// lines go to a new file.

#include "harness.hpp"
#include "support/runtime_fixture.hpp"
#include "support/temp_dir.hpp"

#include <boost/json.hpp>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

namespace sluice::test {
namespace {

namespace fs = std::filesystem;
namespace json = boost::json;

constexpr const char* rules_yaml = R"(
listen: 127.0.0.1:0
access_log: {path: LOG, format: FORMAT}
store: {type: memory}
identity: {api_key: {header: X-API-Key}}
plans: {free: {limits: []}}
api_keys: {key-a: free}
upstreams: {api: {url: UPSTREAM_URL}}
routes:
  - name: items
    match: {path_prefix: /v1/items}
    upstream: api
    limits:
      - {name: items_key, by: api_key, rate: 2/1m, burst: 2}
  - name: open
    match: {path_prefix: /open}
    upstream: api
)";

/// The file's lines once it has `n` (the logging thread writes them), within 5 s.
std::vector<std::string> wait_lines(const fs::path& file, std::size_t n) {
  std::vector<std::string> lines;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  do {
    lines.clear();
    std::ifstream in(file);
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    if (lines.size() >= n) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  } while (std::chrono::steady_clock::now() < deadline);
  return lines;
}

std::string text(const json::value& v) {
  return v.is_null() ? "null" : std::string(v.as_string());
}

TEST(access_log_http, one_json_line_per_request) {
  temp_dir dir("access");
  const fs::path log = dir.path / "access.log";
  upstream_server upstream;
  runtime_fixture rt(substitute(
      rules_yaml, {{"LOG", log.string()}, {"FORMAT", "json"}, {"UPSTREAM_URL", upstream.url()}}));
  const header_list key{{"X-API-Key", "key-a"}};
  for (int i = 0; i < 3; ++i) get(rt.port(), "/v1/items/1?x=y", key);  // 200, 200, 429
  get(rt.port(), "/nowhere");
  get(rt.port(), "/open/a");
  const auto lines = wait_lines(log, 5);
  ASSERT_EQ(lines.size(), 5u);
  std::vector<json::object> l;
  for (const auto& line : lines) l.push_back(json::parse(line).as_object());

  EXPECT_EQ(text(l[0].at("method")), "GET");
  EXPECT_EQ(text(l[0].at("target")), "/v1/items/1?x=y");
  EXPECT_EQ(text(l[0].at("client")), "127.0.0.1");
  EXPECT_EQ(l[0].at("status").as_int64(), 200);
  EXPECT_EQ(text(l[0].at("route")), "items");
  EXPECT_EQ(text(l[0].at("decision")), "allowed");
  EXPECT_EQ(l[0].at("remaining").as_int64(), 1);
  EXPECT_EQ(text(l[0].at("upstream")), "api");
  EXPECT_EQ(l[0].at("upstream_status").as_int64(), 200);
  EXPECT_GE(l[0].at("upstream_ms").as_double(), 0.0);
  EXPECT_GE(l[0].at("total_ms").as_double(), l[0].at("upstream_ms").as_double());
  EXPECT_GT(l[0].at("bytes_out").as_int64(), 0);
  // The key only as its 12-hex hash, the same for every line of the caller.
  const std::string hash = text(l[0].at("key"));
  EXPECT_EQ(hash.size(), 12u);
  EXPECT_EQ(lines[0].find("key-a"), std::string::npos);
  EXPECT_EQ(text(l[2].at("key")), hash);

  EXPECT_EQ(l[1].at("remaining").as_int64(), 0);
  EXPECT_EQ(l[2].at("status").as_int64(), 429);
  EXPECT_EQ(text(l[2].at("decision")), "limited");
  EXPECT_EQ(text(l[2].at("limit")), "items_key");
  EXPECT_TRUE(l[2].at("upstream").is_null());
  EXPECT_TRUE(l[2].at("upstream_status").is_null());

  EXPECT_EQ(l[3].at("status").as_int64(), 404);
  EXPECT_TRUE(l[3].at("route").is_null());
  EXPECT_TRUE(l[3].at("decision").is_null());
  EXPECT_EQ(text(l[4].at("decision")), "unlimited");
  EXPECT_EQ(text(l[4].at("route")), "open");
  EXPECT_EQ(l[4].at("upstream_status").as_int64(), 200);
}

TEST(access_log_http, plain_lines_and_reopen_after_a_move) {
  temp_dir dir("access");
  const fs::path log = dir.path / "access.log";
  upstream_server upstream;
  runtime_fixture rt(substitute(
      rules_yaml, {{"LOG", log.string()}, {"FORMAT", "plain"}, {"UPSTREAM_URL", upstream.url()}}));
  get(rt.port(), "/open/1");
  ASSERT_EQ(wait_lines(log, 1).size(), 1u);
  EXPECT_NE(wait_lines(log, 1)[0].find("\"GET /open/1\" 200 route=open decision=unlimited"),
            std::string::npos)
      << wait_lines(log, 1)[0];
  fs::rename(log, dir.path / "access.log.1");  // logrotate's move
  get(rt.port(), "/open/2");                   // still into the moved file
  ASSERT_EQ(wait_lines(dir.path / "access.log.1", 2).size(), 2u);
  rt.gateway().reopen_logs();  // what SIGUSR1 does
  get(rt.port(), "/open/3");
  const auto fresh = wait_lines(log, 1);
  ASSERT_EQ(fresh.size(), 1u);
  EXPECT_NE(fresh[0].find("/open/3"), std::string::npos);
  EXPECT_EQ(rt.gateway().access_log_drops(), 0u);
}

TEST(access_log_http, a_bad_setting_is_a_config_error_with_its_path) {
  upstream_server upstream;
  for (const auto& [section, expected] : std::vector<std::pair<std::string, std::string>>{
           {"access_log: {path: x.log, format: xml}", "access_log.format"},
           {"access_log: {format: json}", "access_log.path"},
           {"access_log: {path: \"\"}", "access_log.path"}}) {
    std::string yaml = substitute(rules_yaml, {{"UPSTREAM_URL", upstream.url()}});
    yaml.replace(yaml.find("access_log: {path: LOG, format: FORMAT}"),
                 std::string("access_log: {path: LOG, format: FORMAT}").size(), section);
    EXPECT_THROW(
        {
          try {
            runtime_fixture rt(yaml);
          } catch (const std::runtime_error& e) {
            EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
            throw;
          }
        },
        std::runtime_error)
        << section;
  }
}

}  // namespace
}  // namespace sluice::test
