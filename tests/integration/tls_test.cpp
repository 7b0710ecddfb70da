// SPDX-License-Identifier: Apache-2.0
// sluice-test-support: runtime_fixture upstream_server http_client test_ca
// TLS (issue 12, item 4) against real clients and servers: a CA made in the test with
// Debian's openssl command, curl --cacert and Python's ssl module against the gateway (SNI
// between two certificates, ALPN, TLS 1.1 refused, client certificates), certificates
// swapped and refused at reload, and https upstreams (Python's http.server wrapped in ssl)
// verified and refused. The request path over TLS: pipelining, bodies streamed both ways,
// a WebSocket tunnel, a slow head and a stalled handshake, the close_notify that ends an idle
// connection and a drained one.
//
// Every child process (openssl, curl, python) runs under a deadline and is stopped by its
// pid. Skipped when openssl, curl or Debian's python3 is missing (scripts/setup installs them).

#include "support/child_process.hpp"
#include "support/eventually.hpp"
#include "support/runtime_fixture.hpp"
#include "support/temp_dir.hpp"
#include "support/test_ca.hpp"
#include "support/upstream_server.hpp"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <boost/json.hpp>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <optional>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace sluice::test {
namespace {

namespace fs = std::filesystem;
namespace json = boost::json;
using namespace std::chrono_literals;
using steady = std::chrono::steady_clock;

const std::string python = "/usr/bin/python3";
const std::string curl_path = "/usr/bin/curl";
const std::string timeout_tool = "/usr/bin/timeout";
const std::string support_dir = std::string(SLUICE_SOURCE_DIR) + "/tests/support/";

/// Why the tools these tests drive are missing, or "".
std::string missing_tools() {
  if (!have_openssl()) return "Debian's openssl is missing (scripts/setup installs it)";
  if (!fs::exists(curl_path)) return "curl is missing (scripts/setup installs it)";
  if (!fs::exists(python)) return "Debian's python3 is missing";
  return "";
}

#define SKIP_WITHOUT_TOOLS()                                           \
  do {                                                                 \
    if (auto why = missing_tools(); !why.empty()) GTEST_SKIP() << why; \
  } while (0)

std::string tag(const std::string& base) {
  static std::atomic<int> n{0};
  return base + "-" + std::to_string(n++);
}

/// Runs argv to its end (`limit` at most): exit status (-1 when killed) and its output.
struct ran {
  int status = -1;
  std::string out, err;
};
ran run(const std::vector<std::string>& argv, const fs::path& dir,
        std::chrono::seconds limit = 20s) {
  const auto t = tag("run");
  child_process p(argv, dir / (t + ".out"), dir / (t + ".err"));
  ran r;
  r.status = p.wait_exit(limit).value_or(-1);
  r.out = p.out();
  r.err = p.err();
  return r;
}

/// tests/support/tls_client.py with `args`: its JSON result (`ok` false with the reason in
/// `error` when it failed, or "no output" when it printed nothing).
json::object py_client(const fs::path& dir, const std::vector<std::string>& args) {
  std::vector<std::string> argv = {timeout_tool, "20", python, support_dir + "tls_client.py"};
  argv.insert(argv.end(), args.begin(), args.end());
  const auto r = run(argv, dir, 25s);
  std::istringstream lines(r.out);
  std::string line, last;
  while (std::getline(lines, line))
    if (!line.empty() && line.front() == '{') last = line;
  if (last.empty()) return json::object{{"ok", false}, {"error", "no output: " + r.err}};
  return json::parse(last).as_object();
}

std::string str(const json::object& o, const char* key) {
  const auto* v = o.if_contains(key);
  return v && v->is_string() ? std::string(v->as_string()) : std::string();
}

/// The `i`th response of a py_client result.
json::object response(const json::object& o, std::size_t i) {
  const auto& rs = o.at("responses").as_array();
  if (i >= rs.size()) return {};
  return rs[i].as_object();
}

std::int64_t status_of(const json::object& o, std::size_t i) {
  auto r = response(o, i);
  return r.contains("status") ? r.at("status").as_int64() : 0;
}

/// The value of the sample `series` (name and labels exactly as exposed) in a scrape.
std::optional<double> metric(const std::string& text, const std::string& series) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.size() > series.size() && line.compare(0, series.size(), series) == 0 &&
        line[series.size()] == ' ')
      return std::stod(line.substr(series.size() + 1));
  }
  return std::nullopt;
}

std::string failures(const std::string& side, const std::string& reason) {
  return "sluice_tls_handshake_failures_total{side=\"" + side + "\",reason=\"" + reason + "\"}";
}

void write_file(const fs::path& p, const std::string& text) {
  std::ofstream(p, std::ios::trunc) << text;
}

std::string read_file(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

/// `s` as a regular expression matching itself.
std::string quoted(const std::string& s) {
  return std::regex_replace(s, std::regex(R"([.^$|()\[\]{}*+?\\])"), R"(\$&)");
}

/// Copies a certificate and key over the files the rules name (a renewal in place).
void install(const issued& from, const issued& to) {
  fs::copy_file(from.cert, to.cert, fs::copy_options::overwrite_existing);
  fs::copy_file(from.key, to.key, fs::copy_options::overwrite_existing);
}

/// The HTTPS upstream (tests/support/https_upstream.py), stopped by its pid at the end.
class https_upstream {
 public:
  https_upstream(const fs::path& dir, const issued& cert)
      : child_({timeout_tool, "60", python, support_dir + "https_upstream.py", "--cert",
                cert.cert.string(), "--key", cert.key.string()},
               dir / (tag("https-upstream") + ".out"), dir / (tag("https-upstream") + ".err")) {
    static const std::regex line(R"(port (\d+))");
    (void)eventually(
        [&] {
          std::smatch m;
          const auto out = child_.out();
          if (std::regex_search(out, m, line)) {
            port = static_cast<std::uint16_t>(std::stoul(m[1]));
            return true;
          }
          return !child_.running();
        },
        10s);
    if (port != 0) return;
    throw std::runtime_error("https_upstream.py did not start: " + child_.err());
  }
  std::uint16_t port = 0;

 private:
  child_process child_;
};

/// A CA, two server certificates (a.test and b.test with *.b.test), an upstream, and the
/// rules text that serves them.
struct tls_world {
  tls_world()
      : ca(dir.path),
        a(ca.issue(cert_request("a.test").names({"DNS:a.test", "IP:127.0.0.1"}).org("first"))),
        b(ca.issue(cert_request("b.test").names({"DNS:b.test", "DNS:*.b.test"}))) {}

  /// Rules with `tls:` serving `a` then `b`, and `extra` lines inside the tls block.
  std::string rules(const std::string& extra = "", const std::string& top = "") const {
    return "store: {type: memory}\n" + top +
           "tls:\n"
           "  certificates:\n"
           "    - {cert: " +
           a.cert.string() + ", key: " + a.key.string() +
           "}\n"
           "    - {cert: " +
           b.cert.string() + ", key: " + b.key.string() + "}\n" + extra +
           "upstreams: {api: {url: \"" + upstream.url() +
           "\"}}\n"
           "routes:\n"
           "  - {name: all, match: {path_prefix: /}, upstream: api}\n";
  }

  /// py_client against port `port` trusting the CA, with SNI `name` (and `args`).
  json::object connect(std::uint16_t port, const std::string& name,
                       std::vector<std::string> args = {}) const {
    std::vector<std::string> argv = {"--port", std::to_string(port), "--cafile",
                                     ca.cert().string()};
    if (!name.empty()) argv.insert(argv.end(), {"--servername", name});
    argv.insert(argv.end(), args.begin(), args.end());
    return py_client(dir.path, argv);
  }

  temp_dir dir{"tls"};
  test_ca ca;
  issued a, b;
  upstream_server upstream;
};

// --- the listener ------------------------------------------------------------------------

TEST(tls, curl_with_the_test_ca_reaches_the_upstream_over_https) {
  SKIP_WITHOUT_TOOLS();
  tls_world w;
  runtime_fixture gw(w.rules());
  const std::string port = std::to_string(gw.port());
  const auto r =
      run({curl_path, "-sS", "--max-time", "10", "--cacert", w.ca.cert().string(), "--resolve",
           "a.test:" + port + ":127.0.0.1", "https://a.test:" + port + "/v1/items?x=1", "-w",
           "\n%{http_code} %{http_version} %{ssl_verify_result}"},
          w.dir.path);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("\"target\":\"/v1/items?x=1\""), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\n200 1.1 0"), std::string::npos) << r.out;
  ASSERT_EQ(w.upstream.request_count(), 1u);

  // Without the CA the same request is refused by curl: the certificate is really checked.
  const auto untrusted = run({curl_path, "-sS", "--max-time", "10", "--resolve",
                              "a.test:" + port + ":127.0.0.1", "https://a.test:" + port + "/"},
                             w.dir.path);
  EXPECT_EQ(untrusted.status, 60) << untrusted.err;  // CURLE_PEER_FAILED_VERIFICATION
  EXPECT_EQ(w.upstream.request_count(), 1u);

  // /admin/config names the files in force.
  const auto config = json::parse(gw.admin("/admin/config").body).as_object();
  const auto& tls = config.at("tls").as_object();
  EXPECT_EQ(str(tls.at("certificates").as_array().at(1).as_object(), "cert"), w.b.cert.string());
  EXPECT_EQ(str(tls, "verify_client"), "off");
}

TEST(tls, python_ssl_speaks_tls13_and_tls12_with_alpn_http11) {
  SKIP_WITHOUT_TOOLS();
  tls_world w;
  runtime_fixture gw(w.rules());
  const auto v13 = w.connect(gw.port(), "a.test", {"--alpn", "h2,http/1.1", "--path", "/v1/a"});
  ASSERT_TRUE(v13.at("ok").as_bool()) << str(v13, "error");
  EXPECT_EQ(str(v13, "version"), "TLSv1.3");
  EXPECT_EQ(str(v13, "alpn"), "http/1.1");
  EXPECT_EQ(status_of(v13, 0), 200);

  const auto v12 = w.connect(gw.port(), "a.test", {"--max", "1.2", "--path", "/v1/b"});
  ASSERT_TRUE(v12.at("ok").as_bool()) << str(v12, "error");
  EXPECT_EQ(str(v12, "version"), "TLSv1.2");
  EXPECT_EQ(str(v12, "alpn"), "");  // none offered: HTTP/1.1 all the same
  EXPECT_EQ(status_of(v12, 0), 200);

  const auto m = gw.admin("/metrics").body;
  EXPECT_EQ(metric(m, "sluice_tls_handshakes_total{side=\"listener\"}"), 2.0) << m;
}

TEST(tls, sni_chooses_the_certificate_that_names_the_host) {
  SKIP_WITHOUT_TOOLS();
  tls_world w;
  runtime_fixture gw(w.rules());
  struct row {
    std::string sni, subject;
    std::vector<std::string> args;
  };
  const std::vector<row> rows = {
      {"a.test", "CN=a.test,O=first", {}},
      {"b.test", "CN=b.test", {}},
      {"x.b.test", "CN=b.test", {}},                       // the wildcard of the second certificate
      {"c.test", "CN=a.test,O=first", {"--no-hostname"}},  // no certificate names it: default
      {"", "CN=a.test,O=first", {}},                       // no SNI at all: the default
  };
  for (const auto& r : rows) {
    auto args = r.args;
    args.insert(args.end(), {"--path", "/"});
    const auto got = w.connect(gw.port(), r.sni, args);
    ASSERT_TRUE(got.at("ok").as_bool()) << r.sni << ": " << str(got, "error");
    EXPECT_EQ(str(got, "subject"), r.subject) << "SNI '" << r.sni << "'";
    EXPECT_EQ(status_of(got, 0), 200) << r.sni;
  }
}

TEST(tls, alpn_without_http11_fails_the_handshake) {
  SKIP_WITHOUT_TOOLS();
  tls_world w;
  runtime_fixture gw(w.rules());
  const auto got = w.connect(gw.port(), "a.test", {"--alpn", "h2", "--path", "/"});
  EXPECT_FALSE(got.at("ok").as_bool());
  EXPECT_NE(str(got, "error").find("alert no application protocol"), std::string::npos)
      << str(got, "error");
  const auto m = gw.admin("/metrics").body;
  EXPECT_EQ(metric(m, failures("listener", "no_application_protocol")), 1.0) << m;
  EXPECT_EQ(w.upstream.request_count(), 0u);
}

TEST(tls, tls11_is_refused_by_the_gateway) {
  SKIP_WITHOUT_TOOLS();
  tls_world w;
  runtime_fixture gw(w.rules());
  // The client lowers its own security level so that it offers TLS 1.1; the gateway, which
  // takes 1.2 and 1.3 only, refuses it (and counts why).
  const auto got = w.connect(gw.port(), "a.test", {"--min", "1.1", "--max", "1.1", "--path", "/"});
  EXPECT_FALSE(got.at("ok").as_bool());
  EXPECT_NE(str(got, "error").find("PROTOCOL_VERSION"), std::string::npos) << str(got, "error");
  const auto m = gw.admin("/metrics").body;
  EXPECT_EQ(metric(m, failures("listener", "protocol_version")), 1.0) << m;
  EXPECT_EQ(metric(m, "sluice_tls_handshakes_total{side=\"listener\"}"), 0.0) << m;
}

TEST(tls, plain_http_on_the_tls_port_is_closed_and_counted) {
  SKIP_WITHOUT_TOOLS();
  tls_world w;
  runtime_fixture gw(w.rules());
  http_connection c(gw.port());
  c.send_raw("GET / HTTP/1.1\r\nHost: a.test\r\n\r\n");
  EXPECT_TRUE(c.closed_by_peer(3000ms));
  const auto m = gw.admin("/metrics").body;
  EXPECT_EQ(metric(m, failures("listener", "not_tls")), 1.0) << m;
  EXPECT_EQ(w.upstream.request_count(), 0u);
}

// --- reloads -------------------------------------------------------------------------------

TEST(tls, a_reload_swaps_the_certificate_for_new_connections_and_keeps_open_ones) {
  SKIP_WITHOUT_TOOLS();
  tls_world w;
  runtime_fixture gw(w.rules());
  const auto renewed =
      w.ca.issue(cert_request("a.test").names({"DNS:a.test", "IP:127.0.0.1"}).org("second"));

  // A keep-alive connection made before the reload: one request, then another after it.
  const auto flag = w.dir.path / "go";
  const auto t = tag("held");
  child_process held(
      {timeout_tool, "20", python, support_dir + "tls_client.py", "--port",
       std::to_string(gw.port()), "--cafile", w.ca.cert().string(), "--servername", "a.test",
       "--path", "/before", "--path", "/after", "--wait-for", flag.string()},
      w.dir.path / (t + ".out"), w.dir.path / (t + ".err"));
  ASSERT_EVENTUALLY(10s, held.out().find("first") != std::string::npos) << held.err();

  install(renewed, w.a);
  const auto reload = gw.admin("/admin/reload", "POST");
  ASSERT_EQ(reload.status, 200u) << reload.body;
  EXPECT_NE(reload.body.find("\"reloaded\":true"), std::string::npos) << reload.body;

  write_file(flag, "go");
  ASSERT_EQ(held.wait_exit(15s), 0);
  std::string last;
  std::istringstream lines(held.out());
  for (std::string line; std::getline(lines, line);)
    if (!line.empty() && line.front() == '{') last = line;
  const auto old = json::parse(last).as_object();
  ASSERT_TRUE(old.at("ok").as_bool()) << str(old, "error");
  EXPECT_EQ(str(old, "subject"), "CN=a.test,O=first");  // the open connection kept its own
  EXPECT_EQ(status_of(old, 0), 200);
  EXPECT_EQ(status_of(old, 1), 200);  // and was not dropped by the reload

  const auto fresh = w.connect(gw.port(), "a.test", {"--path", "/new"});
  ASSERT_TRUE(fresh.at("ok").as_bool()) << str(fresh, "error");
  EXPECT_EQ(str(fresh, "subject"), "CN=a.test,O=second");
  // The other certificate is served as before.
  EXPECT_EQ(str(w.connect(gw.port(), "b.test", {"--path", "/"}), "subject"), "CN=b.test");
}

TEST(tls, a_bad_certificate_at_reload_is_refused_and_the_running_one_stays) {
  SKIP_WITHOUT_TOOLS();
  tls_world w;
  runtime_fixture gw(w.rules());
  const std::string file = gw.file().string();
  const std::string cert = w.a.cert.string(), key = w.a.key.string();
  const issued good{w.dir.path / "good.pem", w.dir.path / "good.key"};
  fs::copy_file(w.a.cert, good.cert);
  fs::copy_file(w.a.key, good.key);
  const auto expired =
      w.ca.issue(cert_request("a.test").names({"DNS:a.test"}).org("expired").already_expired());
  const auto other = w.ca.issue(cert_request("a.test").names({"DNS:a.test"}).org("other"));

  struct row {
    std::string what;
    std::function<void()> spoil;
    std::string expected;  // a regular expression for the first diagnostic
  };
  const std::string at_cert = quoted(file + ":4: tls.certificates[0].cert: ");
  const std::string at_key = quoted(file + ":4: tls.certificates[0].key: ");
  const std::vector<row> rows = {
      {"garbage", [&] { write_file(w.a.cert, "not a certificate\n"); },
       at_cert + quoted(cert) + ": holds no PEM certificate"},
      {"missing", [&] { fs::remove(w.a.cert); },
       at_cert + quoted(cert) + ": cannot read file: No such file or directory"},
      {"expired", [&] { install(expired, w.a); },
       at_cert + quoted(cert) +
           ": the certificate expired on \\d{4}-\\d\\d-\\d\\dT\\d\\d:\\d\\d:\\d\\dZ"},
      {"mismatched key",
       [&] { fs::copy_file(other.key, w.a.key, fs::copy_options::overwrite_existing); },
       at_key + quoted(key) + ": the key does not match the certificate in " + quoted(cert)},
  };
  for (const auto& r : rows) {
    r.spoil();
    const auto reload = gw.admin("/admin/reload", "POST");
    EXPECT_NE(reload.body.find("\"reloaded\":false"), std::string::npos) << r.what << reload.body;
    const auto config = json::parse(gw.admin("/admin/config").body).as_object();
    const std::string error = str(config, "last_reload_error");
    EXPECT_TRUE(std::regex_match(error, std::regex(r.expected)))
        << r.what << ": " << error << "\n  expected " << r.expected;
    // New connections still get the certificate in force.
    const auto got = w.connect(gw.port(), "a.test", {"--path", "/"});
    ASSERT_TRUE(got.at("ok").as_bool()) << r.what << ": " << str(got, "error");
    EXPECT_EQ(str(got, "subject"), "CN=a.test,O=first") << r.what;
    EXPECT_EQ(status_of(got, 0), 200) << r.what;
    install(good, w.a);
  }
  const auto reload = gw.admin("/admin/reload", "POST");
  EXPECT_NE(reload.body.find("\"reloaded\":true"), std::string::npos) << reload.body;
}

// --- certificates refused at start (the binary, as an operator runs it) -------------------

TEST(tls, bad_certificate_files_are_config_errors_naming_the_file) {
  SKIP_WITHOUT_TOOLS();
  tls_world w;
  const auto expired = w.ca.issue(cert_request("a.test").names({"DNS:a.test"}).already_expired());
  const auto other = w.ca.issue(cert_request("other.test").names({"DNS:other.test"}));
  const auto encrypted = w.dir.path / "encrypted.key";
  test_ca::encrypt_key(w.a.key, "correct horse", encrypted);
  const auto pass_file = w.dir.path / "pass.txt";
  write_file(pass_file, "correct horse\n");
  const auto rules = w.dir.path / "rules.yaml";
  auto rules_with = [&](const std::string& cert, const std::string& key,
                        const std::string& extra = "") {
    write_file(rules,
               "upstreams: {api: {url: \"http://127.0.0.1:1\"}}\n"
               "routes: [{name: all, match: {path_prefix: /}, upstream: api}]\n"
               "tls:\n"
               "  certificates:\n"
               "    - {cert: " +
                   cert + ", key: " + key + "}\n" + extra);
  };
  auto check = [&](const std::string& flag) {
    return run({SLUICE_BINARY, flag, rules.string()}, w.dir.path);
  };
  const std::string at = rules.string() + ":5: tls.certificates[0].";

  rules_with(expired.cert.string(), expired.key.string());
  auto r = check("--check-config");
  EXPECT_EQ(r.status, 1);
  EXPECT_TRUE(std::regex_search(r.err, std::regex(quoted(at + "cert: " + expired.cert.string()) +
                                                  ": the certificate expired on \\d{4}-")))
      << r.err;
  r = check("--config");  // not started either
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("expired on"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(rules.string() + ": not started: 1 error(s)"), std::string::npos) << r.err;

  rules_with(w.a.cert.string(), other.key.string());
  r = check("--check-config");
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(r.err, at + "key: " + other.key.string() +
                       ": the key does not match the certificate in " + w.a.cert.string() + "\n" +
                       rules.string() + ": 1 error(s)\n");

  rules_with(w.a.cert.string(), (w.dir.path / "nowhere.key").string());
  r = check("--check-config");
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(r.err, at + "key: " + (w.dir.path / "nowhere.key").string() +
                       ": cannot read file: No such file or directory\n" + rules.string() +
                       ": 1 error(s)\n");

  rules_with(w.a.cert.string(), encrypted.string());
  r = check("--check-config");
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(r.err, at + "key: " + encrypted.string() +
                       ": the key is encrypted: give its passphrase with tls.key_passphrase_env "
                       "or tls.key_passphrase_file\n" +
                       rules.string() + ": 1 error(s)\n");

  // The passphrase file must be its owner's alone.
  ::chmod(pass_file.c_str(), 0644);
  rules_with(w.a.cert.string(), encrypted.string(),
             "  key_passphrase_file: " + pass_file.string() + "\n");
  r = check("--check-config");
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(r.err, rules.string() + ":6: tls.key_passphrase_file: " + pass_file.string() +
                       ": group or others may access it (mode 0644): it must be readable by "
                       "its owner only (chmod 600)\n" +
                       rules.string() + ": 1 error(s)\n");
  ::chmod(pass_file.c_str(), 0600);
  r = check("--check-config");
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("TLS with 1 certificate"), std::string::npos) << r.out;

  // The wrong passphrase, and one from an environment variable that is not set.
  write_file(pass_file, "wrong\n");
  r = check("--check-config");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find(at + "key: " + encrypted.string() +
                       ": the key cannot be decrypted with the passphrase given"),
            std::string::npos)
      << r.err;
  rules_with(w.a.cert.string(), encrypted.string(),
             "  key_passphrase_env: SLUICE_TEST_NO_SUCH_PASSPHRASE\n");
  r = check("--check-config");
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(r.err, rules.string() +
                       ":6: tls.key_passphrase_env: the environment variable "
                       "SLUICE_TEST_NO_SUCH_PASSPHRASE is not set\n" +
                       rules.string() + ": 1 error(s)\n");
}

TEST(tls, an_encrypted_key_is_read_with_its_passphrase_from_the_environment) {
  SKIP_WITHOUT_TOOLS();
  tls_world w;
  const auto encrypted = w.dir.path / "a-encrypted.key";
  test_ca::encrypt_key(w.a.key, "s3cret passphrase", encrypted);
  ::setenv("SLUICE_TEST_TLS_PASSPHRASE", "s3cret passphrase", 1);
  const std::string text =
      "store: {type: memory}\n"
      "tls:\n"
      "  certificates: [{cert: " +
      w.a.cert.string() + ", key: " + encrypted.string() +
      "}]\n"
      "  key_passphrase_env: SLUICE_TEST_TLS_PASSPHRASE\n"
      "upstreams: {api: {url: \"" +
      w.upstream.url() + "\"}}\nroutes: [{name: all, match: {path_prefix: /}, upstream: api}]\n";
  runtime_fixture gw(text);
  ::unsetenv("SLUICE_TEST_TLS_PASSPHRASE");
  const auto got = w.connect(gw.port(), "a.test", {"--path", "/"});
  ASSERT_TRUE(got.at("ok").as_bool()) << str(got, "error");
  EXPECT_EQ(status_of(got, 0), 200);
}

// --- client certificates -------------------------------------------------------------------

TEST(tls, a_required_client_certificate_admits_only_clients_that_have_one) {
  SKIP_WITHOUT_TOOLS();
  tls_world w;
  test_ca stranger(w.dir.path, "another CA");
  const auto client = w.ca.issue(cert_request("client one").for_client());
  const auto forged = stranger.issue(cert_request("client one").for_client());
  runtime_fixture gw(
      w.rules("  client_ca: " + w.ca.cert().string() + "\n  verify_client: require\n"));

  const auto without = w.connect(gw.port(), "a.test", {"--path", "/"});
  EXPECT_FALSE(without.at("ok").as_bool());
  EXPECT_NE(str(without, "error").find("CERTIFICATE_REQUIRED"), std::string::npos)
      << str(without, "error");

  const auto with =
      w.connect(gw.port(), "a.test",
                {"--cert", client.cert.string(), "--key", client.key.string(), "--path", "/v1/x"});
  ASSERT_TRUE(with.at("ok").as_bool()) << str(with, "error");
  EXPECT_EQ(status_of(with, 0), 200);

  const auto bad =
      w.connect(gw.port(), "a.test",
                {"--cert", forged.cert.string(), "--key", forged.key.string(), "--path", "/"});
  EXPECT_FALSE(bad.at("ok").as_bool());

  EXPECT_EQ(w.upstream.request_count(), 1u);
  const auto m = gw.admin("/metrics").body;
  EXPECT_EQ(metric(m, failures("listener", "no_certificate")), 1.0) << m;
  EXPECT_EQ(metric(m, failures("listener", "bad_certificate")), 1.0) << m;
}

TEST(tls, an_optional_client_certificate_is_verified_when_sent) {
  SKIP_WITHOUT_TOOLS();
  tls_world w;
  test_ca stranger(w.dir.path, "another CA");
  const auto forged = stranger.issue(cert_request("client two").for_client());
  runtime_fixture gw(
      w.rules("  client_ca: " + w.ca.cert().string() + "\n  verify_client: optional\n"));
  const auto without = w.connect(gw.port(), "a.test", {"--path", "/"});
  ASSERT_TRUE(without.at("ok").as_bool()) << str(without, "error");
  EXPECT_EQ(status_of(without, 0), 200);
  const auto bad =
      w.connect(gw.port(), "a.test",
                {"--cert", forged.cert.string(), "--key", forged.key.string(), "--path", "/"});
  EXPECT_FALSE(bad.at("ok").as_bool());
  EXPECT_EQ(w.upstream.request_count(), 1u);
}

// --- https upstreams -----------------------------------------------------------------------

/// A plain listener in front of an https upstream at `url` (with `extra` upstream fields).
std::string upstream_rules(const std::string& url, const std::string& extra) {
  return "store: {type: memory}\n"
         "upstreams:\n"
         "  api: {url: \"" +
         url + "\"" + extra +
         "}\n"
         "routes: [{name: all, match: {path_prefix: /}, upstream: api}]\n";
}

TEST(tls, an_https_upstream_is_verified_against_its_ca_file_and_pooled) {
  SKIP_WITHOUT_TOOLS();
  tls_world w;
  const auto cert = w.ca.issue(cert_request("localhost").names({"DNS:localhost", "IP:127.0.0.1"}));
  https_upstream up(w.dir.path, cert);
  for (const std::string host : {"localhost", "127.0.0.1"}) {  // a name, then an address
    runtime_fixture gw(upstream_rules("https://" + host + ":" + std::to_string(up.port),
                                      ", ca_file: " + w.ca.cert().string()));
    http_connection c(gw.port());
    std::string first;
    for (int i = 0; i < 3; ++i) {
      const auto r = c.request("GET", "/v1/items/" + std::to_string(i));
      ASSERT_EQ(r.status, 200u) << host << ": " << r.body;
      EXPECT_EQ(r.body.rfind("https upstream: GET /v1/items/" + std::to_string(i), 0), 0u)
          << r.body;
      // One TLS connection carries them all (pooled).
      const auto at = r.body.find("connection=");
      if (i == 0) first = r.body.substr(at);
      EXPECT_EQ(r.body.substr(at), first) << host;
    }
    const auto m = gw.admin("/metrics").body;
    EXPECT_EQ(metric(m, "sluice_tls_handshakes_total{side=\"upstream\"}"), 1.0) << m;
    const auto config = json::parse(gw.admin("/admin/config").body).as_object();
    const auto& api = config.at("upstreams").as_object().at("api").as_object();
    EXPECT_EQ(str(api, "ca_file"), w.ca.cert().string());
    EXPECT_TRUE(api.at("verify").as_bool());
  }
}

TEST(tls, an_https_upstream_whose_certificate_does_not_match_is_502_saying_why) {
  SKIP_WITHOUT_TOOLS();
  tls_world w;
  test_ca stranger(w.dir.path, "another CA");
  const auto wrong_name = w.ca.issue(cert_request("other.test").names({"DNS:other.test"}));
  const auto right_name =
      w.ca.issue(cert_request("localhost").names({"DNS:localhost", "IP:127.0.0.1"}));
  https_upstream mismatched(w.dir.path, wrong_name);
  https_upstream trusted(w.dir.path, right_name);
  struct row {
    std::string url, extra, detail, reason;
  };
  const std::string ca = ", ca_file: " + w.ca.cert().string();
  const std::string m_port = std::to_string(mismatched.port), t_port = std::to_string(trusted.port);
  const std::vector<row> rows = {
      {"https://localhost:" + m_port, ca, "hostname mismatch", "name_mismatch"},
      {"https://127.0.0.1:" + m_port, ca, "IP address mismatch", "name_mismatch"},
      {"https://localhost:" + t_port, ", ca_file: " + stranger.cert().string(),
       "unable to get local issuer certificate", "bad_certificate"},
      // No ca_file: the system's store, which does not know the test CA.
      {"https://localhost:" + t_port, "", "unable to get local issuer certificate",
       "bad_certificate"},
  };
  for (const auto& r : rows) {
    runtime_fixture gw(upstream_rules(r.url, r.extra));
    http_connection c(gw.port());
    const auto res = c.request("GET", "/v1/items");
    EXPECT_EQ(res.status, 502u) << r.url;
    EXPECT_NE(res.body.find("\"detail\":\"the TLS handshake with the upstream failed: its "
                            "certificate was not accepted: " +
                            r.detail + "\""),
              std::string::npos)
        << r.url << r.extra << ": " << res.body;
    const auto m = gw.admin("/metrics").body;
    EXPECT_EQ(metric(m, failures("upstream", r.reason)), 1.0) << r.url << "\n" << m;
    EXPECT_EQ(metric(m, "sluice_upstream_failures_total{upstream=\"api\",cause=\"tls\"}"), 1.0)
        << r.url;
    EXPECT_EQ(metric(m, "sluice_tls_handshakes_total{side=\"upstream\"}"), 0.0) << r.url;
  }
}

TEST(tls, verify_false_accepts_any_upstream_certificate_and_warns) {
  SKIP_WITHOUT_TOOLS();
  tls_world w;
  const auto wrong_name = w.ca.issue(cert_request("other.test").names({"DNS:other.test"}));
  https_upstream up(w.dir.path, wrong_name);
  const auto rules = w.dir.path / "rules.yaml";
  write_file(rules,
             "admin: 127.0.0.1:0\n" +
                 upstream_rules("https://localhost:" + std::to_string(up.port), ", verify: false"));
  sluice_process gw(rules, w.dir.path, 1);
  ASSERT_TRUE(gw.wait_listening()) << gw.log();
  http_connection c(gw.port);
  const auto r = c.request("GET", "/v1/items");
  EXPECT_EQ(r.status, 200u) << r.body;
  EXPECT_EQ(r.body.rfind("https upstream: GET /v1/items", 0), 0u) << r.body;
  EXPECT_NE(gw.log().find("upstream api (https://localhost:" + std::to_string(up.port) +
                          "): verify: false"),
            std::string::npos)
      << gw.log();
}

// --- the request path over TLS -------------------------------------------------------------

TEST(tls, pipelined_requests_are_answered_in_order_over_tls) {
  SKIP_WITHOUT_TOOLS();
  tls_world w;
  runtime_fixture gw(w.rules());
  const auto got = w.connect(
      gw.port(), "a.test", {"--pipeline", "--path", "/one", "--path", "/two", "--path", "/three"});
  ASSERT_TRUE(got.at("ok").as_bool()) << str(got, "error");
  const char* paths[] = {"/one", "/two", "/three"};
  for (std::size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(status_of(got, i), 200);
    EXPECT_NE(str(response(got, i), "body").find(std::string("\"target\":\"") + paths[i] + "\""),
              std::string::npos)
        << str(response(got, i), "body");
  }
}

TEST(tls, bodies_stream_both_ways_over_tls) {
  SKIP_WITHOUT_TOOLS();
  tls_world w;
  runtime_fixture gw(w.rules());
  const std::string port = std::to_string(gw.port());
  // Up: 3 MiB chunked through curl; the echo upstream answers with what it received.
  const auto upload = w.dir.path / "upload.txt";
  std::string body;
  for (int i = 0; body.size() < 3u * 1024 * 1024; ++i) body += "line " + std::to_string(i) + "\n";
  write_file(upload, body);
  auto r = run({curl_path, "-sS", "--max-time", "20", "--cacert", w.ca.cert().string(), "--resolve",
                "a.test:" + port + ":127.0.0.1", "-H", "Transfer-Encoding: chunked",
                "--data-binary", "@" + upload.string(), "https://a.test:" + port + "/upload", "-o",
                (w.dir.path / "echo.json").string(), "-w", "%{http_code}"},
               w.dir.path, 25s);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, "200");
  ASSERT_EQ(w.upstream.request_count(), 1u);
  EXPECT_EQ(w.upstream.requests().front().body, body);

  // Down: 8 MiB from the upstream, streamed to the client.
  std::string big(8u * 1024 * 1024, 'x');
  for (std::size_t i = 0; i < big.size(); i += 4096)
    big[i] = static_cast<char>('a' + i / 4096 % 26);
  canned_response res;
  res.body = big;
  w.upstream.set_response(res);
  const auto out = w.dir.path / "download.bin";
  r = run({curl_path, "-sS", "--max-time", "20", "--cacert", w.ca.cert().string(), "--resolve",
           "a.test:" + port + ":127.0.0.1", "https://a.test:" + port + "/download", "-o",
           out.string(), "-w", "%{http_code}"},
          w.dir.path, 25s);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, "200");
  EXPECT_TRUE(read_file(out) == big) << "downloaded " << fs::file_size(out) << " bytes";
}

TEST(tls, a_websocket_upgrade_is_tunnelled_over_tls) {
  SKIP_WITHOUT_TOOLS();
  tls_world w;
  {
    const auto probe = run({python, "-c", "import websockets"}, w.dir.path);
    if (probe.status != 0) GTEST_SKIP() << "Debian's python3-websockets is missing";
  }
  const auto t = tag("ws-echo");
  child_process echo({timeout_tool, "60", python, support_dir + "ws_echo.py", "--count-file",
                      (w.dir.path / "counts").string(), "--lifetime", "55"},
                     w.dir.path / (t + ".out"), w.dir.path / (t + ".err"));
  std::uint16_t echo_port = 0;
  static const std::regex line(R"(port (\d+))");
  (void)eventually(
      [&] {
        std::smatch m;
        const auto text = echo.out();
        if (std::regex_search(text, m, line))
          echo_port = static_cast<std::uint16_t>(std::stoul(m[1]));
        return echo_port != 0;
      },
      10s);
  ASSERT_NE(echo_port, 0) << echo.err();
  std::string text = w.rules();
  text.replace(text.find(w.upstream.url()), w.upstream.url().size(),
               "http://127.0.0.1:" + std::to_string(echo_port));
  runtime_fixture gw(text);
  const auto r = run({timeout_tool, "20", python, support_dir + "ws_client.py", "--url",
                      "wss://127.0.0.1:" + std::to_string(gw.port()) + "/ws", "--cafile",
                      w.ca.cert().string(), "--texts", "3", "--binary", "1048576"},
                     w.dir.path, 25s);
  EXPECT_EQ(r.status, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("ok status=101"), std::string::npos) << r.out << r.err;
  EXPECT_NE(r.out.find("binary=1048576"), std::string::npos) << r.out;
}

TEST(tls, a_slow_head_over_tls_gets_408_and_a_stalled_handshake_is_cut) {
  SKIP_WITHOUT_TOOLS();
  tls_world w;
  runtime_fixture gw(w.rules("", "client: {header_timeout: 1s}\n"));
  const auto began = steady::now();
  const auto got = w.connect(gw.port(), "a.test", {"--partial", "GET / HTTP/1.1\\r\\nHost: a"});
  ASSERT_TRUE(got.at("ok").as_bool()) << str(got, "error");
  EXPECT_EQ(status_of(got, 0), 408);
  EXPECT_LT(steady::now() - began, 8s);

  // A connection that never starts its handshake is closed at header_timeout, counted.
  http_connection c(gw.port());
  EXPECT_TRUE(c.closed_by_peer(5000ms));
  const auto m = gw.admin("/metrics").body;
  EXPECT_EQ(metric(m, failures("listener", "timeout")), 1.0) << m;
  EXPECT_EQ(metric(m, "sluice_client_timeouts_total{phase=\"header\"}"), 1.0) << m;
  EXPECT_EQ(w.upstream.request_count(), 0u);
}

TEST(tls, an_idle_keep_alive_connection_is_closed_with_close_notify) {
  SKIP_WITHOUT_TOOLS();
  tls_world w;
  runtime_fixture gw(w.rules("", "client: {keepalive_timeout: 500ms}\n"));
  const auto got = w.connect(gw.port(), "a.test", {"--path", "/", "--read-close"});
  ASSERT_TRUE(got.at("ok").as_bool()) << str(got, "error");
  EXPECT_EQ(status_of(got, 0), 200);
  EXPECT_EQ(str(got, "close"), "close_notify");
}

TEST(tls, a_drain_lets_the_request_in_flight_finish_then_closes_with_close_notify) {
  SKIP_WITHOUT_TOOLS();
  tls_world w;
  runtime_fixture gw(w.rules());
  canned_response slow;
  slow.delay = 800ms;
  w.upstream.set_response(slow);
  auto client = std::async(std::launch::async, [&] {
    return w.connect(gw.port(), "a.test", {"--path", "/slow", "--read-close"});
  });
  ASSERT_EVENTUALLY(5s, w.upstream.request_count() != 0u);
  ASSERT_EQ(w.upstream.request_count(), 1u);
  EXPECT_EQ(gw.gateway().drain(5s), 0u);
  const auto got = client.get();
  ASSERT_TRUE(got.at("ok").as_bool()) << str(got, "error");
  EXPECT_EQ(status_of(got, 0), 200);
  EXPECT_EQ(str(response(got, 0).at("headers").as_object(), "connection"), "close");
  EXPECT_EQ(str(got, "close"), "close_notify");
}

}  // namespace
}  // namespace sluice::test
