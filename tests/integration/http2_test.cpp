// SPDX-License-Identifier: Apache-2.0
// sluice-test-support: runtime_fixture upstream_server http_client test_ca
// HTTP/2 from clients (issue 26, item 1) with curl: h2c with prior knowledge on a plain
// listener and h2 by ALPN over TLS get the same statuses and rate-limit fields as HTTP/1.1 for
// a table of requests (allowed, 429, 404, 413, 400), each protocol with its own API key so the
// three run the same sequence of counts; many requests over one HTTP/2 connection are all
// answered (h2load). Skipped when curl, h2load or openssl is missing (scripts/setup installs
// them).

#include "support/child_process.hpp"
#include "support/runtime_fixture.hpp"
#include "support/temp_dir.hpp"
#include "support/test_ca.hpp"
#include "support/upstream_server.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <cctype>
#include <filesystem>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace sluice::test {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

const std::string curl_path = "/usr/bin/curl";

/// One curl run: its exit status and output.
struct ran {
  int status = -1;
  std::string out, err;
};

ran run(const std::vector<std::string>& argv, const fs::path& dir) {
  static std::atomic<int> n{0};
  const auto t = "curl-" + std::to_string(n++);
  child_process p(argv, dir / (t + ".out"), dir / (t + ".err"));
  ran r;
  r.status = p.wait_exit(20s).value_or(-1);
  r.out = p.out();
  r.err = p.err();
  return r;
}

/// A response as curl -i printed it: the status, the fields (names lowercased), the version.
struct answer {
  int status = 0;
  std::string version;  ///< curl's %{http_version}: 1.1 or 2
  std::map<std::string, std::string> fields;
};

answer parse(const std::string& out) {
  answer a;
  std::istringstream in(out);
  std::string line;
  bool head = true;
  while (std::getline(in, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.rfind("VERSION ", 0) == 0) a.version = line.substr(8);
    if (!head) continue;
    if (line.rfind("HTTP/", 0) == 0) {
      a.status = std::stoi(line.substr(line.find(' ') + 1, 3));
      continue;
    }
    if (line.empty()) {
      head = a.status == 0;
      continue;
    }
    const auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string name = line.substr(0, colon);
    for (auto& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    auto value = line.substr(colon + 1);
    while (!value.empty() && value.front() == ' ') value.erase(0, 1);
    a.fields[name] = value;
  }
  return a;
}

/// The rate-limit fields of an answer (the ones that must match across protocols).
std::map<std::string, std::string> quota_fields(const answer& a) {
  std::map<std::string, std::string> out;
  for (const auto& [k, v] : a.fields) {
    if (k.rfind("ratelimit", 0) == 0 || k.rfind("x-ratelimit", 0) == 0 || k == "retry-after")
      out[k] = v;
  }
  return out;
}

/// A CA and a certificate for a.test, an upstream, and the gateway's rules.
struct world {
  world() : ca(dir.path), a(ca.issue(cert_request("a.test").names({"DNS:a.test"}))) {}
  std::string rules(bool tls) const {
    std::string r =
        "store: {type: memory}\n"
        "http2: true\n"
        "identity: {api_key: {header: X-API-Key}}\n"
        "plans: {free: {limits: []}}\n"
        "api_keys: {k-h1: free, k-h2: free, k-h1-tls: free, k-h2-tls: free}\n"
        "upstreams: {api: {url: \"" +
        upstream.url() +
        "\"}}\n"
        "routes:\n"
        "  - name: api\n"
        "    match: {path_prefix: /api}\n"
        "    upstream: api\n"
        "    limits: [{name: per_key, by: api_key, rate: 2/1m, burst: 2}]\n"
        "  - {name: upload, match: {path_prefix: /upload}, upstream: api, max_request_body: 1KiB}\n"
        "  - {name: open, match: {path_prefix: /open}, upstream: api}\n";
    if (tls) {
      r += "tls:\n  certificates:\n    - {cert: " + a.cert.string() + ", key: " + a.key.string() +
           "}\n";
    }
    return r;
  }
  temp_dir dir{"http2"};
  test_ca ca;
  issued a;
  upstream_server upstream;
};

/// One row of the table: what is sent, and the status every protocol must get.
struct row {
  const char* what;
  std::vector<std::string> args;  ///< curl arguments before the URL
  std::string path;
  int status;
};

std::vector<answer> run_table(const world& w, const std::vector<row>& table,
                              const std::vector<std::string>& proto, const std::string& key,
                              const std::string& base) {
  std::vector<answer> got;
  for (const auto& r : table) {
    std::vector<std::string> argv = {curl_path,          "-sS", "-i", "--max-time", "10", "-H",
                                     "X-API-Key: " + key};
    argv.insert(argv.end(), proto.begin(), proto.end());
    argv.insert(argv.end(), r.args.begin(), r.args.end());
    argv.insert(argv.end(), {base + r.path, "-w", "\nVERSION %{http_version}\n"});
    const auto out = run(argv, w.dir.path);
    EXPECT_EQ(out.status, 0) << r.what << ": " << out.err;
    got.push_back(parse(out.out));
  }
  return got;
}

const std::vector<row> table = {
    {"allowed", {}, "/api/a", 200},
    {"allowed, the last of the burst", {}, "/api/a", 200},
    {"over the limit", {}, "/api/a", 429},
    {"no route", {}, "/nowhere", 404},
    {"a body over the route's limit", {"--data-binary", std::string(2000, 'x')}, "/upload", 413},
    {"a lower-case method", {"-X", "post"}, "/open", 400},
    {"a body within the limit", {"--data-binary", "hello"}, "/open", 200},
};

void expect_same(const std::vector<answer>& h1, const std::vector<answer>& h2,
                 const std::string& label) {
  ASSERT_EQ(h1.size(), table.size());
  ASSERT_EQ(h2.size(), table.size());
  for (std::size_t i = 0; i < table.size(); ++i) {
    EXPECT_EQ(h1[i].status, table[i].status) << label << " HTTP/1.1: " << table[i].what;
    EXPECT_EQ(h2[i].status, table[i].status) << label << " HTTP/2: " << table[i].what;
    EXPECT_EQ(h1[i].version, "1.1") << table[i].what;
    EXPECT_EQ(h2[i].version, "2") << table[i].what;
    EXPECT_EQ(quota_fields(h1[i]), quota_fields(h2[i])) << label << ": " << table[i].what;
  }
  // The 429 carries the fields at all (so the comparison above compares something).
  EXPECT_EQ(h2[2].fields.count("retry-after"), 1u);
  EXPECT_EQ(h2[2].fields.count("ratelimit-policy"), 1u);
}

TEST(http2, h2c_with_prior_knowledge_answers_as_http11_does) {
  if (!fs::exists(curl_path)) GTEST_SKIP() << "curl is missing (scripts/setup installs it)";
  world w;
  runtime_fixture gw(w.rules(false));
  const std::string base = "http://127.0.0.1:" + std::to_string(gw.port());
  const auto h1 = run_table(w, table, {"--http1.1"}, "k-h1", base);
  const auto h2 = run_table(w, table, {"--http2-prior-knowledge"}, "k-h2", base);
  expect_same(h1, h2, "h2c");
}

TEST(http2, h2_by_alpn_over_tls_answers_as_http11_does) {
  if (!fs::exists(curl_path)) GTEST_SKIP() << "curl is missing (scripts/setup installs it)";
  if (!have_openssl()) GTEST_SKIP() << "openssl is missing (scripts/setup installs it)";
  world w;
  runtime_fixture gw(w.rules(true));
  const std::string port = std::to_string(gw.port());
  const std::vector<std::string> tls = {"--cacert", w.ca.cert().string(), "--resolve",
                                        "a.test:" + port + ":127.0.0.1"};
  auto with = [&](const char* proto) {
    auto v = tls;
    v.push_back(proto);
    return v;
  };
  const std::string base = "https://a.test:" + port;
  const auto h1 = run_table(w, table, with("--http1.1"), "k-h1-tls", base);
  const auto h2 = run_table(w, table, with("--http2"), "k-h2-tls", base);
  expect_same(h1, h2, "h2 over TLS");
}

TEST(http2, twenty_requests_share_one_connection) {
  // h2load (Debian's nghttp2-client): one client, one connection, up to 10 streams at once.
  const std::string h2load = "/usr/bin/h2load";
  if (!fs::exists(h2load)) GTEST_SKIP() << "h2load is missing (scripts/setup installs it)";
  world w;
  runtime_fixture gw(w.rules(false));
  const std::string url = "http://127.0.0.1:" + std::to_string(gw.port()) + "/open/x";
  const auto r = run({h2load, "-n", "20", "-c", "1", "-m", "10", url}, w.dir.path);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("requests: 20 total, 20 started, 20 done, 20 succeeded"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("status codes: 20 2xx"), std::string::npos) << r.out;
  EXPECT_EQ(w.upstream.request_count(), 20u);
  EXPECT_LE(w.upstream.accepts(), 10u);  // at most one upstream connection per open stream
}

TEST(http2, rapid_reset_gets_goaway_enhance_your_calm) {
  // python3-h2 opens and cancels 500 streams at once (CVE-2023-44487).
  const std::string python = "/usr/bin/python3";
  if (!fs::exists(python)) GTEST_SKIP() << "Debian's python3 is missing";
  world w;
  runtime_fixture gw(w.rules(false));
  const auto r = run({"/usr/bin/timeout", "20", python,
                      std::string(SLUICE_SOURCE_DIR) + "/tests/integration/h2_attacks.py",
                      std::to_string(gw.port()), "rapid-reset"},
                     w.dir.path);
  if (r.err.find("No module named 'h2'") != std::string::npos)
    GTEST_SKIP() << "python3-h2 is missing (scripts/setup installs it)";
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, "goaway 11\n");  // ENHANCE_YOUR_CALM (RFC 9113 §7)
  // Other clients are still served.
  const auto ok = run({curl_path, "-sS", "--http2-prior-knowledge", "-o", "/dev/null", "-w",
                       "%{http_code}", "http://127.0.0.1:" + std::to_string(gw.port()) + "/open/y"},
                      w.dir.path);
  EXPECT_EQ(ok.out, "200");
}

}  // namespace
}  // namespace sluice::test
