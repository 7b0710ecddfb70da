// SPDX-License-Identifier: Apache-2.0
// sluice-test-support: gateway_fixture redis_server upstream_server http_client
// Hot reload (cases c16 and c05) and the admin listener, through real files, real HTTP, a real
// upstream and both stores. The rules file is delivered every way operators and platforms
// deliver it: in-place write, write-then-rename, a Kubernetes-style `..data` symlink swap,
// SIGHUP (to a real `sluice` child process) and POST /admin/reload.

#include "harness.hpp"
#include "support/temp_dir.hpp"

#include "sluice/app/runtime.hpp"
#include "sluice/config/loader.hpp"

#include <boost/json.hpp>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <regex>
#include <sstream>

namespace sluice::test {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using steady = std::chrono::steady_clock;

void write_in_place(const fs::path& p, const std::string& text) {
  std::ofstream out(p, std::ios::trunc);  // same inode when the file exists
  out << text;
}

void write_then_rename(const fs::path& p, const std::string& text) {
  auto tmp = p;
  tmp += ".tmp";
  write_in_place(tmp, text);
  fs::rename(tmp, p);
}

/// A config directory as Kubernetes mounts a ConfigMap: `rules.yaml` -> `..data/rules.yaml`,
/// `..data` -> `..<stamp>/`. Each deliver() writes a new `..<stamp>/`, renames a fresh
/// `..data` symlink over the old one, then removes the old directory (as the kubelet does).
class configmap_dir {
 public:
  explicit configmap_dir(fs::path dir) : dir_(std::move(dir)) {}
  fs::path file() const { return dir_ / "rules.yaml"; }

  void deliver(const std::string& text) {
    const std::string stamp = "..2026_" + std::to_string(++n_);
    fs::create_directory(dir_ / stamp);
    write_in_place(dir_ / stamp / "rules.yaml", text);
    fs::create_directory_symlink(stamp, dir_ / "..data_tmp");
    fs::rename(dir_ / "..data_tmp", dir_ / "..data");  // the atomic swap
    if (!fs::is_symlink(file())) fs::create_symlink("..data/rules.yaml", file());
    if (!previous_.empty()) fs::remove_all(dir_ / previous_);
    previous_ = stamp;
  }

 private:
  fs::path dir_;
  int n_ = 0;
  std::string previous_;
};

/// A test world with a file-backed runtime: upstream, optional redis-server, then (start())
/// the gateway and the admin listener on port 0 from the rules file at `file`.
struct live_world {
  explicit live_world(store_kind kind) : kind(kind) {
    if (kind == store_kind::redis) redis = std::make_unique<redis_server>();
  }

  /// Starts the runtime from the file already at `path` (write it with render()).
  void start(const fs::path& path, bool watch = true) {
    file = path;
    auto loaded = config::load_file(file.string());
    if (!loaded.ok())
      throw std::runtime_error("rules did not load: " + loaded.diagnostics.front().to_string());
    app::runtime_options options;
    options.gateway.listen = "127.0.0.1:0";
    options.gateway.admin = "127.0.0.1:0";
    options.gateway.workers = 2;
    options.watch = watch;
    rt = std::make_unique<app::runtime>(file.string(), loaded.value, options);
    rt->start();
  }

  /// `yaml` with UPSTREAM_URL and STORE substituted for this world.
  std::string render(const std::string& yaml) const {
    std::string store =
        kind == store_kind::redis
            ? "{type: redis, address: \"127.0.0.1:" + std::to_string(redis->port()) +
                  "\", timeout: 250ms}"
            : "{type: memory}";
    return substitute(yaml, {{"UPSTREAM_URL", upstream.url()}, {"STORE", store}});
  }

  std::uint16_t port() const { return rt->gateway().endpoint().port(); }
  std::uint16_t admin_port() const { return rt->admin_endpoint()->port(); }
  client_response get(const std::string& target, const header_list& headers = {}) const {
    return test::get(port(), target, headers);
  }
  client_response admin(const std::string& method, const std::string& target) const {
    http_connection c(admin_port());
    return c.request(method, target);
  }
  app::gateway_stats stats() const { return rt->gateway().stats(); }

  store_kind kind;
  upstream_server upstream;
  std::unique_ptr<redis_server> redis;
  fs::path file;
  std::unique_ptr<app::runtime> rt;
};

/// Waits until `generation()` reaches `want`; returns the milliseconds it took, or -1 after
/// `limit`.
template <typename F>
long long wait_for(F generation, std::uint64_t want, std::chrono::milliseconds budget = 2000ms) {
  // (A latency is reported: polled every 2 ms, not with eventually()'s backoff. The budget
  // is scaled by SLUICE_TEST_TIME_FACTOR.)
  const auto limit = scaled(budget);
  const auto start = steady::now();
  while (steady::now() - start < limit) {
    if (generation() >= want) {
      return std::chrono::duration_cast<std::chrono::milliseconds>(steady::now() - start).count();
    }
    std::this_thread::sleep_for(2ms);
  }
  return generation() >= want ? std::chrono::duration_cast<std::chrono::milliseconds>(limit).count()
                              : -1;
}

long long wait_generation(const live_world& w, std::uint64_t want,
                          std::chrono::milliseconds limit = 2000ms) {
  return wait_for([&] { return w.stats().generation; }, want, limit);
}

long long wait_failures(const live_world& w, std::uint64_t want,
                        std::chrono::milliseconds limit = 2000ms) {
  return wait_for([&] { return w.stats().reload_failures; }, want, limit);
}

void report_latency(const std::string& what, long long ms) {
  std::cout << "[ reload   ] " << what << ": seen after " << ms << " ms\n";
  testing::Test::RecordProperty(what, static_cast<int>(ms));
}

const header_list key_a = {{"X-API-Key", "key-a"}};
const header_list key_b = {{"X-API-Key", "key-b"}};
const header_list key_p = {{"X-API-Key", "key-p"}};

class reload_cases : public testing::TestWithParam<store_kind> {};

// ---------------------------------------------------------------------------------------------
// c16, token-bucket variant, delivered by `..data` symlink swaps.

std::string c16_tb(const std::string& items_limit, const std::string& other_rate = "10/1m") {
  return R"(store: STORE
identity: {api_key: {header: X-API-Key}}
plans: {free: {limits: []}}
api_keys: {key-a: free, key-b: free}
upstreams: {api: {url: UPSTREAM_URL}}
routes:
  - {name: items, match: {path_prefix: /v1/items}, upstream: api,
     limits: [)" +
         items_limit + R"(]}
  - {name: other, match: {path_prefix: /v1/other}, upstream: api,
     limits: [{name: other_key, by: api_key, rate: )" +
         other_rate + R"(}]}
)";
}

TEST_P(reload_cases, c16_token_bucket_symlink_swap_carries_and_caps_balances) {
  temp_dir dir;
  configmap_dir cm(dir.path);
  live_world w(GetParam());
  const auto v1 = w.render(c16_tb("{name: items_key, by: api_key, rate: 5/1m, burst: 5}"));
  const auto v2 = w.render(c16_tb("{name: items_key, by: api_key, rate: 10/1m, burst: 10}"));
  const auto v3 = w.render(c16_tb("{name: items_key, by: api_key, rate: 2/1m, burst: 2}"));
  cm.deliver(v1);
  w.start(cm.file());
  ASSERT_EQ(w.stats().generation, 1u);

  schedule s;
  // key-b spends 5 tokens at t = 0 ... 0.4; key-a spends 1 (it then holds 4).
  for (int i = 0; i < 5; ++i) {
    s.at(0.1 * i);
    expect_row(w.get("/v1/items", key_b), 200, 5, 4 - i, -1, -1,
               "key-b spend " + std::to_string(i + 1));
  }
  s.at(0.5);
  expect_row(w.get("/v1/items", key_a), 200, 5, 4, 12, -1, "key-a under v1");

  // t = 1: swap to rate 10/1m, burst 10.
  s.at(1.0);
  cm.deliver(v2);
  const auto seen = wait_generation(w, 2);
  ASSERT_GE(seen, 0) << "the ..data swap was not seen within 2 s";
  report_latency("symlink swap", seen);

  // t = 3: the balance of about 0.47 carried over; a refilled bucket would answer 200, 9.
  s.at(3.0);
  expect_row(w.get("/v1/items", key_b), 429, 10, 0, 58, 4, "key-b at t=3 under v2");

  // Lowering the burst caps the balance: key-a held 4 (+ refill), now at most 2.
  cm.deliver(v3);
  ASSERT_GE(wait_generation(w, 3), 0) << "the second swap was not seen within 2 s";
  expect_row(w.get("/v1/items", key_a), 200, 2, 1, -1, -1, "key-a after lowering to burst 2");

  // A byte-identical redelivery is a reload (generation + 1) and refills nothing.
  cm.deliver(v3);
  ASSERT_GE(wait_generation(w, 4), 0) << "the redelivery was not seen within 2 s";
  expect_row(w.get("/v1/items", key_a), 200, 2, 0, -1, -1, "key-a spends its last token");
  expect_row(w.get("/v1/items", key_a), 429, 2, 0, -1, -1, "key-a refused: nothing refilled");
  EXPECT_EQ(w.stats().reloads, 3u);
  EXPECT_EQ(w.stats().reload_failures, 0u);
  EXPECT_EQ(w.upstream.request_count(), 8u);
}

// c16's table (fixed window), delivered by `..data` symlink swaps. Every step happens inside
// one 60-s window of the store's clock (the host's real-time clock for both stores), so the
// test waits for a window that starts at most 4 s from now and runs on offsets into it.

/// Sleeps until `offset` seconds into a 60-s window of the real-time clock.
class window_schedule {
 public:
  window_schedule() {
    using namespace std::chrono;
    const auto now = duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count();
    auto start = now / 60000 * 60000;
    if (now - start > 4000) start += 60000;  // too late for offset 5.0 in this window
    start_ = system_clock::time_point(milliseconds(start));
  }
  void at(double offset) const {
    std::this_thread::sleep_until(start_ +
                                  std::chrono::microseconds(static_cast<long long>(offset * 1e6)));
  }

 private:
  std::chrono::system_clock::time_point start_;
};

std::string c16_fw(const std::string& items_rate, const std::string& other_rate = "10/1m") {
  return c16_tb("{name: items_key, by: api_key, algorithm: fixed_window, rate: " + items_rate + "}",
                other_rate);
}

TEST_P(reload_cases, c16_fixed_window_table) {
#if !__has_include("sluice/limiter/window.hpp")
  GTEST_SKIP() << "the fixed window is not in the stores yet";
#else
  temp_dir dir;
  configmap_dir cm(dir.path);
  live_world w(GetParam());
  const auto v1 = w.render(c16_fw("3/1m"));
  const auto v2 = w.render(c16_fw("5/1m"));
  const auto v2_other = w.render(c16_fw("5/1m", "20/1m"));
  const auto v3 = w.render(c16_fw("2/1m", "20/1m"));
  cm.deliver(v1);
  w.start(cm.file());

  window_schedule s;
  const double first[] = {5.0, 5.2, 5.4};
  for (int i = 0; i < 3; ++i) {
    s.at(first[i]);
    expect_row(w.get("/v1/items", key_a), 200, 3, 2 - i, 55, -1, "row " + std::to_string(i + 1));
  }
  s.at(5.6);
  expect_row(w.get("/v1/items", key_a), 429, 3, 0, -1, 55, "5.6");

  s.at(6.0);
  cm.deliver(v2);
  ASSERT_GE(wait_generation(w, 2), 0) << "swap to v2 not seen within 2 s";
  auto cfg = boost::json::parse(w.admin("GET", "/admin/config").body).as_object();
  EXPECT_EQ(cfg.at("generation").to_number<long long>(), 2);

  s.at(8.5);
  expect_row(w.get("/v1/items", key_a), 200, 5, 1, 52, -1, "8.5: the count of 3 carried over");
  s.at(8.7);
  expect_row(w.get("/v1/items", key_a), 200, 5, 0, -1, -1, "8.7");
  s.at(8.9);
  expect_row(w.get("/v1/items", key_a), 429, 5, 0, -1, 52, "8.9");

  s.at(10.0);
  cm.deliver(v2);  // the same bytes in a new directory
  ASSERT_GE(wait_generation(w, 3), 0) << "redelivery not seen within 2 s";
  cm.deliver(v2_other);  // an edit to other_key only
  ASSERT_GE(wait_generation(w, 4), 0) << "other_key edit not seen within 2 s";

  s.at(12.5);
  expect_row(w.get("/v1/items", key_a), 429, 5, 0, -1, 48, "12.5: a reload must not refill");

  s.at(13.0);
  cm.deliver(v3);
  ASSERT_GE(wait_generation(w, 5), 0) << "swap to v3 not seen within 2 s";
  s.at(15.5);
  expect_row(w.get("/v1/items", key_a), 429, 2, 0, -1, 45, "15.5");
  EXPECT_EQ(w.upstream.request_count(), 5u);
  EXPECT_EQ(w.stats().reload_failures, 0u);
#endif
}

// ---------------------------------------------------------------------------------------------
// c05: a zero limit reloaded into a running gateway is refused as a whole; v1 stays in force.

const char* const c05_v1 = R"(store: STORE
identity: {api_key: {header: X-API-Key}}
plans: {free: {limits: []}, pro: {limits: []}}
api_keys: {key-a: free, key-p: pro}
upstreams: {api: {url: UPSTREAM_URL}}
routes:
  - name: export
    match: {path_prefix: /v1/export}
    upstream: api
    limits:
      - name: export_key
        by: api_key
        rate: 2/1m
        burst: 2
        plans: {pro: {rate: 5/1m, burst: 5}}
)";

TEST_P(reload_cases, c05_zero_limit_reload_is_refused_and_v1_stays) {
  temp_dir dir;
  live_world w(GetParam());
  const fs::path file = dir.path / "rules.yaml";
  write_in_place(file, w.render(c05_v1));
  w.start(file, /*watch=*/false);  // the reload below is the admin's, and only that one

  schedule s;
  expect_row(w.get("/v1/export", key_a), 200, 2, 1, 30, -1, "t=0.0 key-a");

  s.at(1.0);
  std::string v2 = w.render(c05_v1);
  const std::string from = "plans: {pro: {rate: 5/1m, burst: 5}}";
  v2.replace(v2.find(from), from.size(),
             "plans: {pro: {rate: 5/1m, burst: 5}, free: {rate: 0/1m, burst: 0}}");
  write_in_place(file, v2);
  auto r = w.admin("POST", "/admin/reload");
  EXPECT_EQ(r.status, 400u) << r.body;
  EXPECT_EQ(r.header("Content-Type"), "application/json");
  auto body = boost::json::parse(r.body).as_object();
  EXPECT_EQ(body.at("reloaded").as_bool(), false);
  EXPECT_EQ(body.at("generation").to_number<long long>(), 1);
  const auto& diags = body.at("diagnostics").as_array();
  ASSERT_EQ(diags.size(), 2u) << r.body;
  EXPECT_EQ(diags[0].as_string(), file.string() +
                                      ":15: routes[0].limits[0].plans.free.rate: rate 0/1m "
                                      "never refills: the count must be at least 1");
  EXPECT_EQ(diags[1].as_string(), file.string() +
                                      ":15: routes[0].limits[0].plans.free.burst: cost 1 "
                                      "can never be admitted by burst 0");
  EXPECT_EQ(w.stats().reload_failures, 1u);
  EXPECT_EQ(w.stats().generation, 1u);

  s.at(2.5);
  expect_row(w.get("/v1/export", key_a), 200, 2, 0, 58, -1, "t=2.5 key-a: v1 still in force");
  s.at(3.0);
  expect_row(w.get("/v1/export", key_p), 200, 5, 4, 12, -1, "t=3.0 key-p");
  EXPECT_EQ(w.upstream.request_count(), 3u);
}

// ---------------------------------------------------------------------------------------------
// Every trigger is seen within 2 s and keeps every count: in-place write, write-then-rename,
// POST /admin/reload (the ..data swap is above, SIGHUP below).

std::string counting_rules(int burst) {
  return R"(store: STORE
identity: {api_key: {header: X-API-Key}}
plans: {free: {limits: []}}
api_keys: {key-a: free}
upstreams: {api: {url: UPSTREAM_URL}}
routes:
  - {name: items, match: {path_prefix: /v1/items}, upstream: api,
     limits: [{name: count_key, by: api_key, rate: 10/1h, burst: )" +
         std::to_string(burst) + R"(}]}
)";
}

TEST_P(reload_cases, each_trigger_is_seen_within_2s_and_keeps_counts) {
  temp_dir dir;
  live_world w(GetParam());
  const fs::path file = dir.path / "rules.yaml";
  write_in_place(file, w.render(counting_rules(10)));
  w.start(file);
  // Three spends under burst 10 (refill: one token per 6 min, nothing within the test).
  for (int i = 0; i < 3; ++i)
    expect_row(w.get("/v1/items", key_a), 200, 10, 9 - i, -1, -1, "spend");
  long long remaining = 7;

  struct step {
    std::string name;
    std::function<void(int burst)> deliver;
  };
  const std::vector<step> steps = {
      {"in-place write", [&](int b) { write_in_place(file, w.render(counting_rules(b))); }},
      {"write then rename", [&](int b) { write_then_rename(file, w.render(counting_rules(b))); }},
      // The admin reloads what is on disk: unchanged here, so no file event competes with it,
      // and a reload of the same bytes still installs a new generation.
      {"POST /admin/reload",
       [&](int) {
         auto r = w.admin("POST", "/admin/reload");
         EXPECT_EQ(r.status, 200u) << r.body;
       }},
  };
  int burst = 10;
  for (const auto& st : steps) {
    SCOPED_TRACE(st.name);
    if (st.name != "POST /admin/reload") burst += 10;
    const auto before = w.stats().generation;
    const auto t0 = steady::now();
    st.deliver(burst);
    ASSERT_GE(wait_generation(w, before + 1), 0) << st.name << " was not seen within 2 s";
    report_latency(
        st.name, std::chrono::duration_cast<std::chrono::milliseconds>(steady::now() - t0).count());
    // Let the burst settle: one delivery is one reload.
    std::this_thread::sleep_for(400ms);
    EXPECT_EQ(w.stats().generation, before + 1);
    --remaining;
    expect_row(w.get("/v1/items", key_a), 200, burst, remaining, -1, -1, st.name + ": count kept");
  }
  EXPECT_EQ(w.stats().generation, 4u);
  EXPECT_EQ(w.stats().reload_failures, 0u);
}

// ---------------------------------------------------------------------------------------------
// 200 requests over 4 s (50 per second) spanning three reloads: one valid change, one
// byte-identical, one invalid. No 5xx; each request decided wholly under one snapshot;
// counts carry over.

std::string traffic_rules(bool v2) {
  std::string limits =
      v2 ? "[{name: traffic_key, by: api_key, rate: 300/1h, burst: 300},\n"
           "              {name: traffic_ip, by: ip, rate: 100000/1h, burst: 100000}]"
         : "[{name: traffic_key, by: api_key, rate: 120/1h, burst: 120}]";
  return R"(store: STORE
identity: {api_key: {header: X-API-Key}}
plans: {free: {limits: []}}
api_keys: {key-a: free}
upstreams: {api: {url: UPSTREAM_URL}}
routes:
  - {name: items, match: {path_prefix: /v1/items}, upstream: api,
     limits: )" +
         limits + R"(}
)";
}

TEST_P(reload_cases, reload_under_traffic) {
  temp_dir dir;
  live_world w(GetParam());
  const fs::path file = dir.path / "rules.yaml";
  const std::string v1 = w.render(traffic_rules(false));
  const std::string v2 = w.render(traffic_rules(true));
  write_in_place(file, v1);
  w.start(file);

  std::thread reloads([&] {
    schedule s;
    s.at(1.0);
    write_then_rename(file, v2);  // a valid change
    s.at(2.0);
    write_in_place(file, v2);  // the same bytes again
    s.at(3.0);
    write_then_rename(file, v2 + "routes_typo: []\n");  // invalid: unknown key
  });

  std::vector<client_response> seen;
  seen.reserve(200);
  {
    http_connection c(w.port());  // one keep-alive connection across every swap
    schedule s;
    for (int i = 0; i < 200; ++i) {
      s.at(0.02 * i);
      seen.push_back(c.request("GET", "/v1/items", key_a));
    }
  }
  reloads.join();
  ASSERT_GE(wait_failures(w, 1), 0) << "the invalid file was not seen within 2 s";

  int admitted = 0, refused = 0, under_v1 = 0, under_v2 = 0;
  bool switched = false;
  for (std::size_t i = 0; i < seen.size(); ++i) {
    const auto& r = seen[i];
    SCOPED_TRACE("request " + std::to_string(i));
    ASSERT_TRUE(r.status == 200 || r.status == 429) << r.status << " " << r.body;
    const auto limit = r.header("X-RateLimit-Limit");
    const auto policy = r.header("RateLimit-Policy");
    // One snapshot decided the whole request: the limit, the policies listed and their
    // parameters all belong to the same version.
    if (limit == "120") {
      EXPECT_FALSE(switched) << "a v1 answer after a v2 answer";
      EXPECT_EQ(policy, "\"traffic_key\";q=120;w=3600");
      ++under_v1;
    } else {
      ASSERT_EQ(limit, "300");
      EXPECT_EQ(policy, "\"traffic_key\";q=300;w=3600, \"traffic_ip\";q=100000;w=3600");
      switched = true;
      ++under_v2;
    }
    if (r.status == 200) {
      ++admitted;
      // Counts carry over every reload: the n-th admission leaves 120 - n, whatever the burst.
      EXPECT_EQ(r.header("X-RateLimit-Remaining"), std::to_string(120 - admitted));
    } else {
      ++refused;
      EXPECT_EQ(r.header("X-RateLimit-Remaining"), "0");
    }
  }
  EXPECT_EQ(admitted, 120);  // a refilled bucket would have admitted all 200
  EXPECT_EQ(refused, 80);
  EXPECT_GE(under_v1, 40);
  EXPECT_LE(under_v1, 100);  // the valid change at t = 1 was in force within 2 s
  EXPECT_GE(under_v2, 100);
  const auto st = w.stats();
  EXPECT_EQ(st.generation, 3u);  // the change and the byte-identical redelivery
  EXPECT_EQ(st.reloads, 2u);
  EXPECT_EQ(st.reload_failures, 1u);
  EXPECT_EQ(st.upstream_errors, 0u);
  EXPECT_EQ(w.upstream.request_count(), 120u);
  // The invalid file left v2 in force.
  expect_row(w.get("/v1/items", key_a), 429, 300, 0, -1, -1, "after the invalid reload");
}

// ---------------------------------------------------------------------------------------------
// The admin listener.

// The admin listener is a lone socket: a second gateway given an admin address another
// process already listens on refuses to start (it must not share the port, which would send
// /metrics, /readyz and POST /admin/reload to either process at random).
TEST(admin_listener, refuses_an_admin_port_in_use) {
  temp_dir dir;
  live_world first(store_kind::memory);
  const fs::path file = dir.path / "rules.yaml";
  write_in_place(file, first.render(counting_rules(10)));
  first.start(file, false);
  auto loaded = config::load_file(file.string());
  ASSERT_TRUE(loaded.ok());
  app::runtime_options options;
  options.gateway.listen = "127.0.0.1:0";
  options.gateway.admin = "127.0.0.1:" + std::to_string(first.admin_port());
  options.gateway.workers = 1;
  options.watch = false;
  try {
    app::runtime second(file.string(), loaded.value, options);
    second.start();
    ADD_FAILURE() << "a second admin listener was started on port " << first.admin_port();
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("in use"), std::string::npos) << e.what();
  }
  EXPECT_EQ(first.admin("GET", "/healthz").status, 200u);
}

// Settings read only at start-up (listen, admin, workers, the store's connection and layout)
// do not change on reload: the rest of the new file goes into force, those keep their
// running values, and /admin/config shows what is in force.
TEST_P(reload_cases, start_up_settings_keep_their_running_values) {
  temp_dir dir;
  live_world w(GetParam());
  const fs::path file = dir.path / "rules.yaml";
  write_in_place(file, w.render(counting_rules(10)));
  w.start(file, false);
  auto before = boost::json::parse(w.admin("GET", "/admin/config").body).as_object();
  // A new burst (in force after the reload), and a new timeout, workers and layout (not).
  std::string next = "workers: 7\nclient: {header_timeout: 3s, max_connections: 9}\n" +
                     w.render(counting_rules(20));
  const auto store_at = next.find("timeout: 250ms");
  if (store_at != std::string::npos) next.replace(store_at, 14, "timeout: 900ms, layout: key");
  next =
      std::regex_replace(next, std::regex("\\{type: memory\\}"), "{type: memory, timeout: 900ms}");
  write_in_place(file, next);
  ASSERT_EQ(w.admin("POST", "/admin/reload").status, 200u);
  auto after = boost::json::parse(w.admin("GET", "/admin/config").body).as_object();
  EXPECT_EQ(after.at("generation").to_number<long long>(), 2);
  EXPECT_EQ(after.at("store"), before.at("store")) << boost::json::serialize(after.at("store"));
  EXPECT_EQ(after.at("workers"), before.at("workers"));  // 7 is not in force
  EXPECT_NE(after.at("workers").to_number<long long>(), 7);
  EXPECT_EQ(after.at("drain_timeout_ms").to_number<long long>(), 30000);
  EXPECT_EQ(after.at("client"), before.at("client"));  // read at start-up only
  EXPECT_EQ(after.at("client").at("header_timeout_ms").to_number<long long>(), 10000);
  EXPECT_EQ(after.at("client").at("max_connections"), "auto");
  EXPECT_EQ(after.at("store").at("timeout_ms").to_number<long long>(),
            GetParam() == store_kind::redis ? 250 : 5);
  expect_row(w.get("/v1/items", key_a), 200, 20, 19, -1, -1, "the new burst is in force");
}

TEST_P(reload_cases, admin_endpoints) {
  temp_dir dir;
  live_world w(GetParam());
  const fs::path file = dir.path / "rules.yaml";
  write_in_place(file, w.render(c05_v1));
  w.start(file, /*watch=*/false);

  auto health = w.admin("GET", "/healthz");
  EXPECT_EQ(health.status, 200u);
  EXPECT_EQ(health.body, "ok\n");
  auto ready = w.admin("GET", "/readyz");
  EXPECT_EQ(ready.status, 200u);
  EXPECT_EQ(ready.body, "ready\n");

  auto cfg = w.admin("GET", "/admin/config");
  ASSERT_EQ(cfg.status, 200u);
  EXPECT_EQ(cfg.header("Content-Type"), "application/json");
  auto o = boost::json::parse(cfg.body).as_object();
  EXPECT_EQ(o.at("generation").to_number<long long>(), 1);
  EXPECT_EQ(o.at("source").as_string(), file.string());
  EXPECT_EQ(o.at("store").at("type").as_string(),
            GetParam() == store_kind::redis ? "redis" : "memory");
  if (GetParam() == store_kind::redis) {
    EXPECT_EQ(o.at("store").at("layout").as_string(), "hash");
    EXPECT_EQ(o.at("store").at("hash_groups").to_number<long long>(), 65536);
  }
  EXPECT_EQ(o.at("api_keys").to_number<long long>(), 2);  // a count, never the keys
  EXPECT_EQ(cfg.body.find("key-a"), std::string::npos);
  const auto& route = o.at("routes").as_array().at(0).as_object();
  EXPECT_EQ(route.at("name").as_string(), "export");
  EXPECT_EQ(route.at("match").at("path_prefix").as_string(), "/v1/export");
  EXPECT_EQ(route.at("upstream").as_string(), "api");
  EXPECT_EQ(route.at("cost").to_number<long long>(), 1);
  const auto& limit = route.at("limits").as_array().at(0).as_object();
  EXPECT_EQ(limit.at("name").as_string(), "export_key");
  EXPECT_EQ(limit.at("by").as_string(), "api_key");
  EXPECT_EQ(limit.at("algorithm").as_string(), "token_bucket");
  EXPECT_EQ(limit.at("rate").as_string(), "2/1m");
  EXPECT_EQ(limit.at("burst").to_number<long long>(), 2);
  EXPECT_EQ(limit.at("plans").at("pro").at("rate").as_string(), "5/1m");
  EXPECT_EQ(limit.at("plans").at("pro").at("burst").to_number<long long>(), 5);
  // Each limit states its guarantee (in the limiter room's words), per plan override too.
  EXPECT_EQ(std::string(limit.at("guarantee").as_string()).rfind("exact:", 0), 0u) << cfg.body;
  EXPECT_EQ(std::string(limit.at("plans").at("pro").at("guarantee").as_string()).rfind("exact:", 0),
            0u);

  // A valid reload: 200 with the new generation, and /admin/config shows it.
  std::string v2 = w.render(c05_v1);
  v2.replace(v2.find("rate: 2/1m"), 10, "rate: 3/1m");
  write_in_place(file, v2);
  auto rel = w.admin("POST", "/admin/reload");
  EXPECT_EQ(rel.status, 200u) << rel.body;
  EXPECT_EQ(rel.body, "{\"reloaded\":true,\"generation\":2}\n");
  auto cfg2 = boost::json::parse(w.admin("GET", "/admin/config").body).as_object();
  EXPECT_EQ(cfg2.at("generation").to_number<long long>(), 2);
  EXPECT_EQ(cfg2.at("routes").at(0).at("limits").at(0).at("rate").as_string(), "3/1m");

  // An unreadable file is refused like an invalid one.
  fs::remove(file);
  auto gone = w.admin("POST", "/admin/reload");
  EXPECT_EQ(gone.status, 400u);
  EXPECT_NE(gone.body.find("cannot read file"), std::string::npos) << gone.body;
  EXPECT_EQ(w.stats().generation, 2u);
  EXPECT_EQ(w.stats().reload_failures, 1u);

  EXPECT_EQ(w.admin("GET", "/admin/reload").status, 405u);
  EXPECT_EQ(w.admin("POST", "/healthz").status, 405u);
  EXPECT_EQ(w.admin("GET", "/nope").status, 404u);
  auto metrics = w.admin("GET", "/metrics");  // its content: metrics_test.cpp
  EXPECT_EQ(metrics.status, 200u);
  EXPECT_EQ(metrics.header("Content-Type"), "text/plain; version=0.0.4");
  EXPECT_NE(metrics.body.find("\nsluice_config_generation 2\n"), std::string::npos) << metrics.body;

  if (GetParam() == store_kind::redis) {
    w.redis->kill();
    // The workers notice the lost connection on their next use or reconnect attempt.
    EXPECT_TRUE(eventually_that(
        "/readyz 503 once Redis is gone",
        [&] {
          (void)w.get("/v1/export", key_a);
          return w.admin("GET", "/readyz").status == 503u;
        },
        3s));
    EXPECT_EQ(w.admin("GET", "/healthz").status, 200u);  // alive, though not ready
  }
}

// ---------------------------------------------------------------------------------------------
// SIGHUP, delivered to a real `sluice --config FILE` child process.

/// `sluice` as a child process; stdout and stderr go to a log file read back by the test.
class sluice_process {
 public:
  sluice_process(const fs::path& config, const fs::path& log) : log_(log) {
    pid_ = ::fork();
    if (pid_ == 0) {
      std::FILE* out = std::fopen(log.c_str(), "w");
      if (out == nullptr) ::_exit(127);
      ::dup2(::fileno(out), 1);
      ::dup2(::fileno(out), 2);
      ::execl(SLUICE_BINARY, SLUICE_BINARY, "--config", config.c_str(), "--listen", "127.0.0.1:0",
              "--admin", "127.0.0.1:0", "--workers", "1", "--no-watch",
              static_cast<char*>(nullptr));
      ::_exit(127);
    }
  }
  ~sluice_process() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }

  std::string log() const {
    std::ifstream in(log_);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }

  /// Waits (10 s at most, scaled) for both "listening on" lines; false when they never came.
  bool wait_listening() {
    return eventually(
        [&] {
          const auto text = log();
          const std::string gw_mark = " listening on 127.0.0.1:";
          const std::string admin_mark = "admin listening on 127.0.0.1:";
          const auto a = text.find(admin_mark);
          const auto g = text.find(gw_mark);
          if (a == std::string::npos || g == std::string::npos || g >= a) return false;
          port = static_cast<std::uint16_t>(std::stoul(text.substr(g + gw_mark.size())));
          admin_port = static_cast<std::uint16_t>(std::stoul(text.substr(a + admin_mark.size())));
          return true;
        },
        10s);
  }

  void signal(int sig) const { ::kill(pid_, sig); }

  /// Waits for the process to end; its exit status, or -1.
  int wait_exit() {
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }

  std::uint16_t port = 0;
  std::uint16_t admin_port = 0;

 private:
  fs::path log_;
  pid_t pid_ = -1;
};

std::uint64_t admin_generation(std::uint16_t admin_port) {
  auto r = get(admin_port, "/admin/config");
  if (r.status != 200) return 0;
  return static_cast<std::uint64_t>(
      boost::json::parse(r.body).at("generation").to_number<long long>());
}

TEST_P(reload_cases, sighup_reloads_a_running_process_within_2s_and_keeps_counts) {
  temp_dir dir;
  live_world w(GetParam());  // for its upstream, redis and render(); its runtime is not started
  const fs::path file = dir.path / "rules.yaml";
  write_in_place(file, w.render(counting_rules(10)));
  sluice_process proc(file, dir.path / "sluice.log");
  ASSERT_TRUE(proc.wait_listening()) << proc.log();
  ASSERT_EQ(admin_generation(proc.admin_port), 1u);
  for (int i = 0; i < 3; ++i) {
    expect_row(get(proc.port, "/v1/items", key_a), 200, 10, 9 - i, -1, -1, "spend under v1");
  }

  write_in_place(file, w.render(counting_rules(20)));  // not watched (--no-watch): SIGHUP only
  std::this_thread::sleep_for(300ms);
  EXPECT_EQ(admin_generation(proc.admin_port), 1u);
  const auto t0 = steady::now();
  proc.signal(SIGHUP);
  const auto seen = wait_for([&] { return admin_generation(proc.admin_port); }, 2);
  ASSERT_GE(seen, 0) << "SIGHUP was not seen within 2 s\n" << proc.log();
  report_latency("SIGHUP",
                 std::chrono::duration_cast<std::chrono::milliseconds>(steady::now() - t0).count());
  expect_row(get(proc.port, "/v1/items", key_a), 200, 20, 6, -1, -1, "count kept after SIGHUP");

  // An invalid file on SIGHUP: refused, one log line, the config stays.
  write_in_place(file, w.render(counting_rules(0)));
  proc.signal(SIGHUP);
  EXPECT_EVENTUALLY(2s, proc.log().find("refused") != std::string::npos) << proc.log();
  const auto log = proc.log();
  EXPECT_NE(log.find("reload (SIGHUP): " + file.string() +
                     " refused, generation 2 stays in force: " + file.string() +
                     ":8: routes[0].limits[0].burst:"),
            std::string::npos)
      << log;
  EXPECT_EQ(admin_generation(proc.admin_port), 2u);
  expect_row(get(proc.port, "/v1/items", key_a), 200, 20, 5, -1, -1, "v2 still in force");

  proc.signal(SIGTERM);
  EXPECT_EQ(proc.wait_exit(), 0);
}

INSTANTIATE_TEST_SUITE_P(stores, reload_cases,
                         testing::Values(store_kind::memory, store_kind::redis), store_name);

}  // namespace
}  // namespace sluice::test
