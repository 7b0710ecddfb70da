// SPDX-License-Identifier: Apache-2.0
// sluice-test-support: gateway_fixture redis_cluster upstream_server http_client runtime_fixture
// The penalty box (`block:`) through the gateway: failed-login style `fixed_window 5/10m` +
// `block: 15m` on a route, two gateways (runtime with its admin listener) on one real
// redis-server, and on a real three-master Redis Cluster, whose wall clock the test steps
// (tests/preload/clock_step.cpp; every node of the cluster reads one offset file, and its
// cluster-node-timeout is longer than a step) instead of waiting minutes. The 6th request is a 429
// with Retry-After, X-RateLimit-Reset and RateLimit `t` of 900 s; the other gateway sees the same
// block; after the window would have reset
// (+10 min) the key is still refused with the block's remaining time; explain shows the block
// and its end, writing nothing; the admin call lifts it on every gateway; a reload carrying a
// bad `block:` keeps the running rules; blocks started are counted per limit.

#include "harness.hpp"
#include "support/redis_cluster.hpp"
#include "support/runtime_fixture.hpp"
#include "support/temp_dir.hpp"

#include <boost/json.hpp>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <regex>
#include <thread>

namespace sluice::test {
namespace {

namespace json = boost::json;
using namespace std::chrono_literals;

constexpr const char* rules_yaml = R"(
listen: 127.0.0.1:0
store: STORE
upstreams: {api: {url: UPSTREAM_URL}}
routes:
  - name: login
    match: {path_prefix: /login}
    upstream: api
    on_store_failure: fail_closed
    limits:
      - {name: failed_logins, by: ip, algorithm: fixed_window, rate: 5/10m, block: 15m}
)";

/// A store whose wall clock the test steps: one redis-server, or a three-master cluster
/// whose nodes all read one offset file.
struct stepped_store {
  temp_dir dir{"penalty-box"};
  std::string offset_file = (dir.path / "offset").string();
  long long offset = 0;
  std::unique_ptr<redis_server> server;
  std::unique_ptr<redis_cluster> cluster;

  explicit stepped_store(bool on_cluster) {
    step_to(0);
    std::vector<std::string> env{std::string("LD_PRELOAD=") + SLUICE_CLOCK_STEP_PRELOAD,
                                 "SLUICE_CLOCK_OFFSET_FILE=" + offset_file};
    if (on_cluster) {
      cluster = std::make_unique<redis_cluster>(redis_cluster::options{
          .replicas_per_master = 0, .node_timeout = std::chrono::hours(24), .env = env});
    } else {
      server = std::make_unique<redis_server>(std::vector<std::string>{}, env);
    }
  }
  void step_to(long long seconds) {
    offset = seconds;
    std::ofstream(offset_file, std::ios::trunc) << seconds << "\n";
  }
  /// The `store:` of the rules file.
  std::string yaml() const {
    if (cluster) return cluster->store_yaml("500ms");
    return "{type: redis, address: \"127.0.0.1:" + std::to_string(server->port()) +
           "\", timeout: 500ms}";
  }
  std::int64_t now_ms() const {
    const auto t = cluster ? cluster->command(0, {"TIME"}) : server->command({"TIME"});
    return std::stoll(t.elements.at(0).str) * 1000 + std::stoll(t.elements.at(1).str) / 1000;
  }
  /// The keys stored (on every node of a cluster).
  long long keys() const {
    if (!cluster) return server->command({"DBSIZE"}).integer;
    long long n = 0;
    for (std::size_t i = 0; i < cluster->size(); ++i) n += cluster->command(i, {"DBSIZE"}).integer;
    return n;
  }
};

/// The RateLimit field's `t` of the one limit, or -1.
long long ratelimit_t(const client_response& r) {
  std::smatch m;
  const std::string v = r.header("RateLimit");
  static const std::regex t(R"(;t=(\d+))");
  return std::regex_search(v, m, t) ? std::stoll(m[1]) : -1;
}

/// `sluice_blocks_started_total{limit="failed_logins"}` on `rt`'s /metrics, or -1.
long long blocks_started(const runtime_fixture& rt) {
  const auto body = rt.admin("/metrics").body;
  static const std::regex line(
      R"re(\nsluice_blocks_started_total\{limit="failed_logins"\} (\S+))re");
  std::smatch m;
  return std::regex_search(body, m, line) ? std::stoll(m[1]) : -1;
}

/// The case, on `redis` (one server or a cluster).
void failed_logins_blocked_for_15_minutes_across_gateways(stepped_store& redis) {
  upstream_server upstream;
  const std::string yaml =
      substitute(rules_yaml, {{"UPSTREAM_URL", upstream.url()}, {"STORE", redis.yaml()}});
  runtime_fixture a(yaml);
  runtime_fixture b(yaml);

  // Land the store's clock 1 s into a 10-minute window, so the window cannot end between
  // the requests (the offset file holds whole seconds).
  const std::int64_t now = redis.now_ms();
  const std::int64_t into = now % 600'000;
  redis.step_to((600'000 - into) / 1000 + 1);
  ASSERT_LT(redis.now_ms() % 600'000, 5'000) << "the server's clock did not step";

  for (int i = 0; i < 5; ++i) {
    const auto r = get(a.port(), "/login");
    ASSERT_EQ(r.status, 200u) << "request " << i + 1 << ": " << r.body;
    EXPECT_EQ(r.header("X-RateLimit-Remaining"), std::to_string(4 - i));
  }
  const auto sixth = get(a.port(), "/login");
  ASSERT_EQ(sixth.status, 429u) << sixth.body;
  EXPECT_EQ(sixth.header("Retry-After"), "900");
  EXPECT_EQ(sixth.header("X-RateLimit-Remaining"), "0");
  EXPECT_EQ(sixth.header("X-RateLimit-Reset"), "900");
  EXPECT_EQ(ratelimit_t(sixth), 900);
  EXPECT_EQ(blocks_started(a), 1);
  EXPECT_EQ(blocks_started(b), 0);  // present at 0 for a limit with a block

  // The other gateway sees the same block (within the second the check took).
  const auto other = get(b.port(), "/login");
  ASSERT_EQ(other.status, 429u);
  const long long other_retry = std::stoll(other.header("Retry-After"));
  EXPECT_GE(other_retry, 899);
  EXPECT_LE(other_retry, 900);
  EXPECT_EQ(blocks_started(b), 0);  // a refusal during the block starts none

  // +10 minutes: the fixed window has reset (it would admit 5 again), the block has not.
  // (Each gateway's over-limit cache answers the refusal it saw, counted on its own steady
  // clock, for up to limiter::refusal_cache::block_recheck: poll past it.)
  redis.step_to(redis.offset + 600);
  for (auto* gw : {&a, &b}) {
    client_response r;
    (void)eventually(
        [&] {
          r = get(gw->port(), "/login");
          return r.status != 429u || std::stoll(r.header("Retry-After")) <= 300;
        },
        3s);
    ASSERT_EQ(r.status, 429u) << r.body;
    const long long retry = std::stoll(r.header("Retry-After"));
    EXPECT_GE(retry, 295);  // 300 s less the seconds the test took since the block started
    EXPECT_LE(retry, 300);
    EXPECT_EQ(r.header("X-RateLimit-Reset"), r.header("Retry-After"));
    EXPECT_EQ(ratelimit_t(r), retry);
  }

  // Explain shows the block and its end, and writes nothing.
  const auto keys_before = redis.keys();
  const auto explained = a.admin("/admin/explain?path=/login&ip=127.0.0.1");
  ASSERT_EQ(explained.status, 200u) << explained.body;
  const json::object e = json::parse(explained.body).as_object();
  const json::object& limit = e.at("limits").as_array().at(0).as_object();
  const json::object& block = limit.at("now").as_object().at("block").as_object();
  const std::int64_t ends = block.at("ends_at_ms").to_number<std::int64_t>();
  const std::int64_t left = block.at("seconds_left").to_number<std::int64_t>();
  EXPECT_GE(left, 295);
  EXPECT_LE(left, 300);
  EXPECT_EQ(block.at("state").as_string(), "in force");
  EXPECT_NEAR(static_cast<double>(ends - redis.now_ms()), left * 1000.0, 2'000.0);
  EXPECT_NE(std::string(limit.at("stated_guarantee").as_string()).find("penalty box (block 15m)"),
            std::string::npos);
  EXPECT_EQ(e.at("outcome").as_object().at("status").to_number<int>(), 429);
  EXPECT_EQ(redis.keys(), keys_before) << "explaining wrote a key";

  // A reload carrying a bad block is refused; the running rules (and the block) stay.
  {
    std::ofstream(a.file(), std::ios::trunc) << substitute(yaml, {{"block: 15m", "block: 0"}});
    const auto reload = a.admin("/admin/reload", "POST");
    EXPECT_EQ(reload.status, 400u);
    EXPECT_NE(reload.body.find("routes[0].limits[0].block: block 0 is no block"), std::string::npos)
        << reload.body;
    EXPECT_EQ(get(a.port(), "/login").status, 429u);
  }

  // Bad queries, no such limit.
  EXPECT_EQ(a.admin("/admin/unblock?limit=failed_logins&ip=127.0.0.1").status, 405u);  // GET
  EXPECT_EQ(a.admin("/admin/unblock?ip=127.0.0.1", "POST").status, 400u);
  EXPECT_EQ(a.admin("/admin/unblock?limit=failed_logins&ip=nowhere", "POST").status, 400u);
  EXPECT_EQ(a.admin("/admin/unblock?limit=failed_logins&api_key=k", "POST").status, 400u);
  EXPECT_EQ(a.admin("/admin/unblock?limit=failed_logins", "POST").status, 400u);
  EXPECT_EQ(a.admin("/admin/unblock?limit=nope&ip=127.0.0.1", "POST").status, 404u);

  // The admin call lifts the block; it says what it lifted.
  const auto lifted = a.admin("/admin/unblock?limit=failed_logins&ip=127.0.0.1", "POST");
  ASSERT_EQ(lifted.status, 200u) << lifted.body;
  const json::object l = json::parse(lifted.body).as_object();
  EXPECT_EQ(l.at("lifted").as_bool(), true);
  EXPECT_EQ(l.at("limit").as_string(), "failed_logins");
  EXPECT_EQ(l.at("block_ended_at_ms").to_number<std::int64_t>(), ends);
  EXPECT_EQ(l.at("bucket").as_string(), "sl:{failed_logins|i|r127.0.0.1}");
  // Lifted on this gateway at once; the other's over-limit cache asks the store again
  // within limiter::refusal_cache::block_recheck (1 s): poll for it.
  EXPECT_EQ(get(a.port(), "/login").status, 200u);
  client_response r;
  (void)eventually([&] { return (r = get(b.port(), "/login")).status == 200u; }, 3s);
  EXPECT_EQ(r.status, 200u) << "the other gateway still refuses after the unblock";
  const auto again = a.admin("/admin/unblock?limit=failed_logins&ip=127.0.0.1", "POST");
  ASSERT_EQ(again.status, 200u);
  EXPECT_EQ(json::parse(again.body).as_object().at("lifted").as_bool(), false);
}

TEST(penalty_box, failed_logins_blocked_for_15_minutes_across_gateways) {
  stepped_store redis(false);
  failed_logins_blocked_for_15_minutes_across_gateways(redis);
}

TEST(penalty_box, failed_logins_blocked_for_15_minutes_across_gateways_on_a_cluster) {
  stepped_store cluster(true);
  failed_logins_blocked_for_15_minutes_across_gateways(cluster);
}

}  // namespace
}  // namespace sluice::test
