// SPDX-License-Identifier: Apache-2.0
// The access log's line formats, its keyed hash (RFC 4231 test vector), and its file: lines
// written by the logging thread, a reopen after the file was moved (logrotate), and a full
// queue dropping lines without blocking the writer.
#include "sluice/observability/access_log.hpp"

#include <gtest/gtest.h>

#include <boost/json.hpp>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <unistd.h>

namespace sluice::observability {
namespace {

namespace fs = std::filesystem;

std::vector<std::string> lines_of(const fs::path& p) {
  std::ifstream in(p);
  std::vector<std::string> out;
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

access_record sample() {
  access_record r;
  r.unix_ms = 1'796'131'718'816;  // 2026-12-01T13:28:38.816Z
  r.client = "192.0.2.7";
  r.method = "GET";
  r.target = "/v1/items?q=a b";
  r.status = 429;
  r.route = "items";
  r.decision = "limited";
  r.limit = "items_key";
  r.remaining = 0;
  r.total_ms = 0.25;
  r.key_hash = "5bdcc146bf60";
  return r;
}

TEST(access_log, plain_line) {
  EXPECT_EQ(format_access_line(sample(), access_format::plain),
            "2026-12-01T13:28:38.816Z 192.0.2.7 \"GET /v1/items?q=a_b\" 429 route=items "
            "decision=limited limit=items_key remaining=0 upstream=- upstream_status=- "
            "upstream_ms=- total_ms=0.250 in=0 out=0 key=5bdcc146bf60");
  access_record forwarded = sample();
  forwarded.status = 200;
  forwarded.decision = "allowed";
  forwarded.limit = {};
  forwarded.remaining = 4;
  forwarded.upstream = "api";
  forwarded.upstream_status = 200;
  forwarded.upstream_ms = 1.5;
  forwarded.bytes_in = 10;
  forwarded.bytes_out = 120;
  forwarded.key_hash = {};
  forwarded.protocol = "HTTP/2.0";
  EXPECT_EQ(format_access_line(forwarded, access_format::plain),
            "2026-12-01T13:28:38.816Z 192.0.2.7 \"GET /v1/items?q=a_b HTTP/2.0\" 200 route=items "
            "decision=allowed limit=- remaining=4 upstream=api upstream_status=200 "
            "upstream_ms=1.500 total_ms=0.250 in=10 out=120 key=-");
}

TEST(access_log, json_line) {
  access_record r = sample();
  r.target = "/v1/\"x\"\n";
  const auto v = boost::json::parse(format_access_line(r, access_format::json)).as_object();
  EXPECT_EQ(std::string(v.at("time").as_string()), "2026-12-01T13:28:38.816Z");
  EXPECT_EQ(std::string(v.at("target").as_string()), "/v1/\"x\"\n");  // escaped, read back as sent
  EXPECT_EQ(v.at("status").as_int64(), 429);
  EXPECT_FALSE(v.contains("protocol"));  // none known: left out
  r.protocol = "HTTP/1.1";
  const auto w = boost::json::parse(format_access_line(r, access_format::json)).as_object();
  EXPECT_EQ(std::string(w.at("protocol").as_string()), "HTTP/1.1");
  EXPECT_EQ(std::string(v.at("decision").as_string()), "limited");
  EXPECT_EQ(std::string(v.at("limit").as_string()), "items_key");
  EXPECT_EQ(v.at("remaining").as_int64(), 0);
  EXPECT_TRUE(v.at("upstream").is_null());
  EXPECT_TRUE(v.at("upstream_ms").is_null());
  EXPECT_EQ(std::string(v.at("key").as_string()), "5bdcc146bf60");
}

// A client may send any byte above 0x7F in its target (the parser lets obs-text through):
// the JSON line stays JSON (found by fuzzing, fuzz/regressions/request_head). The target's
// ill-formed bytes read as the URI escapes they stand for; well-formed UTF-8 is kept.
TEST(access_log, json_line_is_json_whatever_the_target_bytes) {
  access_record r = sample();
  r.target = "/caf\xC3\xA9/\xFF\xC0?q=\xE2\x82";
  r.route = "r\xFF";
  const auto line = format_access_line(r, access_format::json);
  boost::system::error_code ec;
  const auto v = boost::json::parse(line, ec);
  ASSERT_FALSE(ec) << line;
  EXPECT_EQ(std::string(v.at("target").as_string()), "/caf\xC3\xA9/%FF%C0?q=%E2%82");
  EXPECT_EQ(std::string(v.at("route").as_string()), "r\xEF\xBF\xBD");
  // The plain format keeps the bytes (a line of text, split on spaces).
  EXPECT_NE(format_access_line(r, access_format::plain).find("/caf\xC3\xA9/\xFF\xC0?q="),
            std::string::npos);
}

TEST(access_log, key_hash_is_a_truncated_hmac_sha256) {
  // RFC 4231 test case 2: HMAC-SHA256("Jefe", "what do ya want for nothing?") = 5bdcc146bf60...
  EXPECT_EQ(key_hash("what do ya want for nothing?", "Jefe"), "5bdcc146bf60");
  EXPECT_EQ(key_hash("key-a", "s1"), key_hash("key-a", "s1"));
  EXPECT_NE(key_hash("key-a", "s1"), key_hash("key-a", "s2"));
  EXPECT_NE(key_hash("key-a", "s1"), key_hash("key-b", "s1"));
  EXPECT_EQ(key_hash("key-a", "s1").size(), 12u);
}

TEST(access_log, file_lines_and_reopen_after_a_move) {
  const fs::path dir = fs::temp_directory_path() / ("sluice-access-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const fs::path file = dir / "access.log";
  {
    access_log log(file.string(), access_format::plain);
    for (int i = 0; i < 3; ++i) log.write(sample());
    log.flush();
    EXPECT_EQ(lines_of(file).size(), 3u);
    fs::rename(file, dir / "access.log.1");  // logrotate's move
    log.write(sample());                     // still into the moved file
    log.flush();
    log.reopen();  // postrotate: kill -USR1
    log.write(sample());
    log.write(sample());
    log.flush();
    EXPECT_EQ(lines_of(dir / "access.log.1").size(), 4u);
    EXPECT_EQ(lines_of(file).size(), 2u);
    EXPECT_EQ(log.dropped(), 0u);
  }
  EXPECT_THROW(access_log((dir / "missing" / "x.log").string(), access_format::json),
               std::runtime_error);
  fs::remove_all(dir);
}

TEST(access_log, a_full_queue_drops_the_oldest_without_blocking) {
  const fs::path dir =
      fs::temp_directory_path() / ("sluice-access-q-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const fs::path file = dir / "access.log";
  {
    access_log log(file.string(), access_format::json, 16);
    const auto began = std::chrono::steady_clock::now();
    for (int i = 0; i < 20'000; ++i) log.write(sample());
    const auto took = std::chrono::steady_clock::now() - began;
    log.flush();
    EXPECT_LT(took, std::chrono::seconds(5));
    EXPECT_EQ(lines_of(file).size() + log.dropped(), 20'000u);
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace sluice::observability
