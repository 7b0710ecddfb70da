// SPDX-License-Identifier: Apache-2.0
// sluice-test-support: gateway_fixture upstream_server http_client runtime_fixture redis_server
// The access log through real sockets: a gateway with `access_log:` (JSON lines, then plain)
// and a real upstream; each request is one line with its decision, deciding limit, Remaining,
// upstream status and timing, byte counts and the API key only as a hash; a 404 and an
// unlimited route have their own lines; after the file is moved and SIGUSR1's reopen, the next
// lines go to a new file.

#include "harness.hpp"
#include "support/runtime_fixture.hpp"
#include "support/temp_dir.hpp"

#include <boost/json.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
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
  - name: shadowed
    match: {path_prefix: /v1/shadowed}
    upstream: api
    limits:
      - {name: shadow_key, by: api_key, rate: 1/1m, burst: 1, mode: shadow}
  - name: open
    match: {path_prefix: /open}
    upstream: api
)";

/// The file's lines once it has `n` (the logging thread writes them), within 5 s.
std::vector<std::string> wait_lines(const fs::path& file, std::size_t n) {
  std::vector<std::string> lines;
  (void)eventually(
      [&] {
        lines.clear();
        std::ifstream in(file);
        for (std::string line; std::getline(in, line);) lines.push_back(line);
        return lines.size() >= n;
      },
      std::chrono::seconds(5));
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

// Every decision kind in its own JSON line, with the fields that kind has: allowed, limited
// (the refusing limit), shadow-limited (forwarded; the shadow limit named) and unlimited on a
// working store; fail_open, fail_closed and local on a Redis store nobody listens on.
TEST(access_log_http, every_decision_kind_with_its_fields) {
  temp_dir dir("access");
  upstream_server upstream;
  const fs::path log = dir.path / "working.log";
  {
    runtime_fixture rt(substitute(
        rules_yaml, {{"LOG", log.string()}, {"FORMAT", "json"}, {"UPSTREAM_URL", upstream.url()}}));
    const header_list key{{"X-API-Key", "key-a"}};
    EXPECT_EQ(get(rt.port(), "/v1/items", key).status, 200u);
    EXPECT_EQ(get(rt.port(), "/v1/items", key).status, 200u);
    EXPECT_EQ(get(rt.port(), "/v1/items", key).status, 429u);
    EXPECT_EQ(get(rt.port(), "/v1/shadowed", key).status, 200u);
    EXPECT_EQ(get(rt.port(), "/v1/shadowed", key).status, 200u);  // the shadow limit refuses
    EXPECT_EQ(get(rt.port(), "/open", key).status, 200u);
    const auto lines = wait_lines(log, 6);
    ASSERT_EQ(lines.size(), 6u);
    std::vector<json::object> l;
    for (const auto& line : lines) l.push_back(json::parse(line).as_object());
    l.erase(l.begin());  // the first of the two admitted (Remaining 1)
    EXPECT_EQ(text(l[0].at("decision")), "allowed");
    EXPECT_EQ(l[0].at("remaining").as_int64(), 0);
    EXPECT_TRUE(l[0].at("limit").is_null());
    EXPECT_EQ(text(l[1].at("decision")), "limited");
    EXPECT_EQ(text(l[1].at("limit")), "items_key");
    EXPECT_EQ(l[1].at("status").as_int64(), 429);
    EXPECT_TRUE(l[1].at("upstream").is_null());
    EXPECT_EQ(text(l[2].at("decision")), "allowed");
    EXPECT_EQ(text(l[3].at("decision")), "shadow-limited");
    EXPECT_EQ(text(l[3].at("limit")), "shadow_key");
    EXPECT_EQ(l[3].at("status").as_int64(), 200);
    EXPECT_EQ(text(l[3].at("upstream")), "api");
    EXPECT_EQ(l[3].at("upstream_status").as_int64(), 200);
    EXPECT_EQ(text(l[4].at("decision")), "unlimited");
    EXPECT_TRUE(l[4].at("limit").is_null());
    for (const auto& o : l) EXPECT_EQ(text(o.at("key")).size(), 12u);
  }
  const fs::path failing = dir.path / "failing.log";
  runtime_fixture rt(substitute(R"(
listen: 127.0.0.1:0
access_log: {path: LOG, format: json}
store: {type: redis, address: "127.0.0.1:PORT", timeout: 50ms}
identity: {api_key: {header: X-API-Key}}
plans: {free: {limits: []}}
api_keys: {key-a: free}
upstreams: {api: {url: UPSTREAM_URL}}
routes:
  - name: fo
    match: {path_prefix: /fo}
    upstream: api
    on_store_failure: fail_open
    limits: [{name: fo_key, by: api_key, rate: 9/1m, burst: 9}]
  - name: fc
    match: {path_prefix: /fc}
    upstream: api
    on_store_failure: fail_closed
    limits: [{name: fc_key, by: api_key, rate: 9/1m, burst: 9}]
  - name: lo
    match: {path_prefix: /lo}
    upstream: api
    on_store_failure: local
    limits: [{name: lo_key, by: api_key, rate: 9/1m, burst: 9}]
)",
                                {{"LOG", failing.string()},
                                 {"PORT", std::to_string(free_loopback_port())},
                                 {"UPSTREAM_URL", upstream.url()}}));
  const header_list key{{"X-API-Key", "key-a"}};
  EXPECT_EQ(get(rt.port(), "/fo", key).status, 200u);
  EXPECT_EQ(get(rt.port(), "/fc", key).status, 503u);
  EXPECT_EQ(get(rt.port(), "/lo", key).status, 200u);
  const auto lines = wait_lines(failing, 3);
  ASSERT_EQ(lines.size(), 3u);
  std::vector<json::object> l;
  for (const auto& line : lines) l.push_back(json::parse(line).as_object());
  EXPECT_EQ(text(l[0].at("decision")), "fail_open");
  EXPECT_EQ(text(l[0].at("upstream")), "api");
  EXPECT_EQ(l[0].at("upstream_status").as_int64(), 200);
  EXPECT_EQ(text(l[1].at("decision")), "fail_closed");
  EXPECT_EQ(l[1].at("status").as_int64(), 503);
  EXPECT_TRUE(l[1].at("upstream").is_null());
  EXPECT_EQ(text(l[2].at("decision")), "local");
  EXPECT_EQ(l[2].at("status").as_int64(), 200);
  EXPECT_EQ(l[2].at("remaining").as_int64(), 8);  // the local limiter's own bucket
}

// A log file that blocks: a FIFO that is open for reading but never read. Once the pipe and
// the queue are full, lines are dropped (and counted); requests are served all the while, at
// no cost to their answers. The test then drains the FIFO so that the gateway can stop.
TEST(access_log_http, a_blocked_log_file_drops_lines_and_never_requests) {
  temp_dir dir("access");
  const fs::path fifo = dir.path / "access.fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  // A reader that never reads (yet): the gateway's open() for writing does not block.
  const int reader = ::open(fifo.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  ASSERT_GE(reader, 0);
  upstream_server upstream;
  auto rt = std::make_unique<runtime_fixture>(substitute(
      rules_yaml, {{"LOG", fifo.string()}, {"FORMAT", "json"}, {"UPSTREAM_URL", upstream.url()}}));
  // A pipe holds 64 KiB (about 300 lines) and the queue 8,192 lines: 12,000 requests, 100
  // pipelined at a time on one connection, overflow both.
  http_connection c(rt->port(), std::chrono::seconds(10));
  std::string batch;
  for (int i = 0; i < 100; ++i) batch += "GET /open/x HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
  int ok = 0;
  const auto started = std::chrono::steady_clock::now();
  for (int round = 0; round < 120; ++round) {
    c.send_raw(batch);
    for (int i = 0; i < 100; ++i) ok += c.read_response().status == 200 ? 1 : 0;
    if (std::chrono::steady_clock::now() - started > std::chrono::seconds(60)) break;
  }
  EXPECT_EQ(ok, 12'000);
  // The last lines are queued after their responses went out: a few more may be dropped
  // while the test reads.
  const auto dropped = rt->gateway().access_log_drops();
  EXPECT_GT(dropped, 0u);
  const auto m = rt->admin("/metrics");
  const auto at = m.body.find("\nsluice_access_log_dropped_total ");
  ASSERT_NE(at, std::string::npos) << m.body;
  const auto scraped = std::stoull(m.body.substr(at + 33));
  EXPECT_GE(scraped, dropped);
  EXPECT_LE(scraped, rt->gateway().access_log_drops());
  EXPECT_LE(scraped, 12'000u);
  // Drain while the gateway stops (its logger writes what is queued).
  std::atomic<bool> stop{false};
  std::thread drain([&] {
    char buf[65536];
    while (!stop.load()) {
      if (::read(reader, buf, sizeof buf) <= 0)
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  });
  rt.reset();
  stop = true;
  drain.join();
  ::close(reader);
}

TEST(access_log_http, plain_lines_and_reopen_after_a_move) {
  temp_dir dir("access");
  const fs::path log = dir.path / "access.log";
  upstream_server upstream;
  runtime_fixture rt(substitute(
      rules_yaml, {{"LOG", log.string()}, {"FORMAT", "plain"}, {"UPSTREAM_URL", upstream.url()}}));
  get(rt.port(), "/open/1");
  ASSERT_EQ(wait_lines(log, 1).size(), 1u);
  EXPECT_NE(
      wait_lines(log, 1)[0].find("\"GET /open/1 HTTP/1.1\" 200 route=open decision=unlimited"),
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

// A path that cannot be opened is a start-up error naming it; a reload that moves the log
// elsewhere (here: somewhere it cannot be opened) is taken, with the access log left where it
// was (read at start-up only, logged as such) and its lines still written there.
TEST(access_log_http, an_unopenable_path_fails_the_start_and_a_reload_keeps_the_old_log) {
  temp_dir dir("access");
  upstream_server upstream;
  const std::string missing = (dir.path / "no-such-dir" / "access.log").string();
  try {
    runtime_fixture rt(substitute(
        rules_yaml, {{"LOG", missing}, {"FORMAT", "json"}, {"UPSTREAM_URL", upstream.url()}}));
    ADD_FAILURE() << "the gateway started with an access log it cannot open";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find(missing), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("cannot be opened"), std::string::npos) << e.what();
  }
  const fs::path log = dir.path / "access.log";
  runtime_fixture rt(substitute(
      rules_yaml, {{"LOG", log.string()}, {"FORMAT", "json"}, {"UPSTREAM_URL", upstream.url()}}));
  get(rt.port(), "/open/1");
  ASSERT_EQ(wait_lines(log, 1).size(), 1u);
  std::ofstream(rt.file()) << substitute(
      rules_yaml, {{"LOG", missing}, {"FORMAT", "plain"}, {"UPSTREAM_URL", upstream.url()}});
  EXPECT_EQ(rt.admin("/admin/reload", "POST").status, 200u);
  get(rt.port(), "/open/2");
  const auto lines = wait_lines(log, 2);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[1].front(), '{');  // still JSON: the format is pinned too
  EXPECT_NE(lines[1].find("/open/2"), std::string::npos);
}

}  // namespace
}  // namespace sluice::test
