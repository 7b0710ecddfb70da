// SPDX-License-Identifier: Apache-2.0
// sluice-test-support: redis_cluster redis_server
#include "sluice/limiter/block.hpp"

#include "sluice/store/cluster_slots.hpp"
#include "sluice/store/lua_scripts.hpp"
#include "sluice/store/memory_store.hpp"
#include "sluice/store/redis_cluster_store.hpp"
#include "sluice/store/redis_store.hpp"
#include "support/bucket_view.hpp"
#include "support/redis_cluster.hpp"
#include "support/redis_server.hpp"

#include <gtest/gtest.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <chrono>
#include <cstring>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

// The penalty box (`block:`, limiter/block.hpp) as one table of cases, decided by the memory
// store, by the Redis store (a key per bucket, and buckets packed into hashes) on a real
// redis-server, and by the cluster store on a real three-master Redis Cluster — every store
// must give the same outcomes, to the millisecond, and the same block ends and events. Time is
// the store's, set per step through check_request::now_ms_override.

namespace sluice {
namespace {

namespace asio = boost::asio;
using config::algorithm;
using limiter::check_outcome;
using limiter::check_request;
using limiter::limit_outcome;
using event = limiter::limit_outcome::block_event;
using test::packed;
using test::per_key;

struct limit_spec {
  std::string name;
  algorithm algo;
  std::int64_t n;          // units per period (window limit; token-bucket rate)
  std::int64_t period_ms;  // window length; token-bucket period
  std::int64_t burst = 0;  // token bucket only
  std::int64_t block_ms = 0;
  bool shadow = false;

  limiter::bucket_params params() const {
    config::limit_params p;
    p.rate.count = n;
    p.rate.period = std::chrono::milliseconds(period_ms);
    p.burst = burst;
    return limiter::bucket_params::from(p);
  }
};

struct expect {
  bool admits;
  std::int64_t remaining, reset_ms, retry_after_ms, next_ms;
  std::int64_t block_end = 0;  // ms after the case's epoch; 0: none
  event ev = event::none;
};

struct step {
  std::int64_t t_ms;  // store time since the case's epoch
  bool allowed;
  std::vector<expect> limits;
  bool peek = false;  // decided as if (GET /admin/explain)
  bool lift = false;  // POST /admin/unblock (with peek)
};

struct table_case {
  std::string name;
  std::vector<limit_spec> limits;
  std::vector<step> steps;
};

// 2023-11-14T22:20:00Z: a multiple of 10 minutes, so t is an offset in a 10-minute window.
constexpr std::int64_t epoch_ms = 1'700'000'400'000;
constexpr auto fw = algorithm::fixed_window;
constexpr auto sl = algorithm::sliding_log;
constexpr auto tb = algorithm::token_bucket;
constexpr std::int64_t m15 = 900'000;

const std::vector<table_case>& table() {
  static const std::vector<table_case> cases = {
      // Failed logins: fixed_window 5/10m with block 15m. The 6th request is refused and
      // starts the block: Retry-After, Reset and the next-unit time are the block's 900 s
      // (the window's own 595 s are shorter). When the window resets (t = 10 min) the key is
      // still refused — the refusal does not lengthen the block — until its last
      // millisecond (1 ms left: Retry-After 1 s); at the block's end it is admitted.
      {"fw_failed_logins",
       {{"logins", fw, 5, 600'000, 0, m15}},
       {{0, true, {{true, 4, 600'000, 0, 600'000}}},
        {1'000, true, {{true, 3, 599'000, 0, 599'000}}},
        {2'000, true, {{true, 2, 598'000, 0, 598'000}}},
        {3'000, true, {{true, 1, 597'000, 0, 597'000}}},
        {4'000, true, {{true, 0, 596'000, 0, 596'000}}},
        {5'000, false, {{false, 0, m15, m15, m15, 905'000, event::started}}},
        {600'000, false, {{false, 0, 305'000, 305'000, 305'000, 905'000}}},
        {904'999, false, {{false, 0, 1, 1, 1, 905'000}}},
        {905'000, true, {{true, 4, 295'000, 0, 295'000}}}}},
      // A block on one limit debits no other limit: the token bucket admits alone on the
      // refused request (t = 2) and keeps its 8 tokens; blocked (t = 10 min), it is full.
      {"block_debits_no_other_limit",
       {{"tokens", tb, 10, 3'600'000, 10}, {"logins", fw, 2, 600'000, 0, m15}},
       {{0, true, {{true, 9, 360'000, 0, 360'000}, {true, 1, 600'000, 0, 600'000}}},
        {1, true, {{true, 8, 719'999, 0, 359'999}, {true, 0, 599'999, 0, 599'999}}},
        {2,
         false,
         {{true, 8, 719'998, 0, 359'998}, {false, 0, m15, m15, m15, 900'002, event::started}}},
        {700'000,
         false,
         {{true, 9, 20'000, 0, 20'000}, {false, 0, 200'002, 200'002, 200'002, 900'002}}}}},
      // Two limits with blocks: only the one that refused is blocked (b admits alone and is
      // neither debited nor blocked).
      {"two_limits_one_blocked",
       {{"a", fw, 1, 600'000, 0, m15}, {"b", fw, 5, 600'000, 0, m15}},
       {{0, true, {{true, 0, 600'000, 0, 600'000}, {true, 4, 600'000, 0, 600'000}}},
        {1,
         false,
         {{false, 0, m15, m15, m15, 900'001, event::started}, {true, 4, 599'999, 0, 599'999}}},
        {2,
         false,
         {{false, 0, 899'999, 899'999, 899'999, 900'001}, {true, 4, 599'998, 0, 599'998}}}}},
      // The block outlasts the bucket's refill: token bucket 1/1m (burst 1), block 5m. At
      // t = 1 min the bucket is full again, and the key is still refused until t = 5.5 min.
      {"block_outlasts_refill",
       {{"tb", tb, 1, 60'000, 1, 300'000}},
       {{0, true, {{true, 0, 60'000, 0, 60'000}}},
        {30'000, false, {{false, 0, 300'000, 300'000, 300'000, 330'000, event::started}}},
        {60'000, false, {{false, 0, 270'000, 270'000, 270'000, 330'000}}},
        {329'999, false, {{false, 0, 1, 1, 1, 330'000}}},
        {330'000, true, {{true, 0, 60'000, 0, 60'000}}}}},
      // A shadow limit never blocks (the store ignores a block on it; the rules refuse one):
      // it would refuse twice and is never blocked, and never refuses the request.
      {"shadow_never_blocks",
       {{"tokens", tb, 10, 3'600'000, 10}, {"shadow", fw, 1, 600'000, 0, m15, true}},
       {{0, true, {{true, 9, 360'000, 0, 360'000}, {true, 0, 600'000, 0, 600'000}}},
        {1, true, {{true, 8, 719'999, 0, 359'999}, {false, 0, 599'999, 599'999, 599'999}}},
        {2, true, {{true, 7, 1'079'998, 0, 359'998}, {false, 0, 599'998, 599'998, 599'998}}}}},
      // A sliding log (a list of its own, never packed: its block is the key `<key>:block`).
      {"sliding_log",
       {{"log", sl, 2, 10'000, 0, 60'000}},
       {{0, true, {{true, 1, 10'000, 0, 10'000}}},
        {1'000, true, {{true, 0, 10'000, 0, 9'000}}},
        {2'000, false, {{false, 0, 60'000, 60'000, 60'000, 62'000, event::started}}},
        {20'000, false, {{false, 0, 42'000, 42'000, 42'000, 62'000}}},
        {62'000, true, {{true, 1, 10'000, 0, 10'000}}}}},
      // Peek (explain) shows the block a refusal would start and writes none; a real refusal
      // starts it; a lift (admin unblock) deletes it, says when it would have ended, and
      // decides as if it was not there (refused by the window, no block started); the next
      // refusal starts a new block.
      {"peek_and_lift",
       {{"logins", fw, 1, 600'000, 0, m15}},
       {{0, true, {{true, 0, 600'000, 0, 600'000}}},
        {1, false, {{false, 0, m15, m15, m15, 900'001, event::started}}, true},
        {2, false, {{false, 0, m15, m15, m15, 900'002, event::started}}},
        {3, false, {{false, 0, 899'999, 899'999, 899'999, 900'002}}, true},
        {4, false, {{false, 0, 599'996, 599'996, 599'996, 900'002, event::lifted}}, true, true},
        {5, false, {{false, 0, 599'995, 599'995, 599'995}}, true, true},
        {6, false, {{false, 0, m15, m15, m15, 900'006, event::started}}}}},
  };
  return cases;
}

check_request make_request(const table_case& c, const step& st, const std::string& prefix) {
  check_request req;
  for (const auto& l : c.limits) {
    limiter::limit_check lc;
    lc.key = limiter::bucket_key(l.name, limiter::key_namespace::global, prefix + "." + c.name);
    lc.algorithm = l.algo;
    lc.bucket = l.params();
    lc.shadow = l.shadow;
    lc.block_ms = l.block_ms;
    req.limits.push_back(lc);
  }
  req.now_ms_override = epoch_ms + st.t_ms;
  req.peek = st.peek;
  req.lift_blocks = st.lift;
  return req;
}

// `split`: the cluster store decided a refused request over several hash slots (a peek on
// each, then nothing written): an enforced limit that admitted reports its peek's Reset and
// next-unit time, which count the debit the request did not make (the documented cluster
// caveat, limiter::cluster_caveat); its Remaining is exact. Everything else is compared.
void expect_step(const table_case& c, std::size_t s, const std::string& backend,
                 const check_outcome& got, bool split = false) {
  const step& st = c.steps[s];
  SCOPED_TRACE(backend + " " + c.name + " step " + std::to_string(s) +
               " t=" + std::to_string(st.t_ms));
  EXPECT_EQ(got.allowed, st.allowed);
  EXPECT_EQ(got.now_ms, epoch_ms + st.t_ms);
  ASSERT_EQ(got.limits.size(), c.limits.size());
  for (std::size_t i = 0; i < c.limits.size(); ++i) {
    SCOPED_TRACE("limit " + c.limits[i].name);
    const expect& e = st.limits[i];
    const limit_outcome& g = got.limits[i];
    EXPECT_EQ(g.admits, e.admits);
    EXPECT_EQ(g.remaining, e.remaining);
    EXPECT_EQ(g.retry_after_ms, e.retry_after_ms);
    if (!(split && !st.allowed && e.admits && !c.limits[i].shadow)) {
      EXPECT_EQ(g.reset_ms, e.reset_ms);
      EXPECT_EQ(g.next_ms, e.next_ms);
    }
    EXPECT_EQ(g.block_end_ms, e.block_end > 0 ? epoch_ms + e.block_end : 0);
    EXPECT_EQ(static_cast<int>(g.block), static_cast<int>(e.ev));
  }
}

template <class T>
T run(asio::io_context& ioc, asio::awaitable<T> a) {
  std::optional<T> out;
  std::exception_ptr ex;
  asio::co_spawn(ioc, std::move(a), [&](std::exception_ptr e, T v) {
    ex = e;
    out.emplace(std::move(v));
  });
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!out && std::chrono::steady_clock::now() < deadline) {
    if (ioc.stopped()) ioc.restart();
    ioc.run_one_for(std::chrono::milliseconds(10));
  }
  if (ex) std::rethrow_exception(ex);
  if (!out) throw std::runtime_error("awaitable did not complete in 10 s");
  return std::move(*out);
}

template <class Store>
bool wait_connected(asio::io_context& ioc, Store& s) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!s.stats().connected && std::chrono::steady_clock::now() < deadline) {
    if (ioc.stopped()) ioc.restart();
    ioc.run_one_for(std::chrono::milliseconds(5));
  }
  return s.stats().connected;
}

class block_table : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { server_ = new test::redis_server(); }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }
  static test::redis_server* server_;
};
test::redis_server* block_table::server_ = nullptr;

TEST_F(block_table, memory_store) {
  for (const auto& c : table()) {
    store::memory_store mem([] { return std::int64_t{0}; });
    for (std::size_t s = 0; s < c.steps.size(); ++s)
      expect_step(c, s, "memory", mem.decide(make_request(c, c.steps[s], "mem")));
  }
}

TEST_F(block_table, redis_store) {
  for (const auto& layout : {per_key, packed}) {
    asio::io_context ioc;
    store::redis_settings settings;
    settings.port = server_->port();
    settings.command_timeout = std::chrono::milliseconds(1000);
    settings.layout = layout;
    store::redis_store rs(ioc.get_executor(), settings);
    rs.start();
    ASSERT_TRUE(wait_connected(ioc, rs));
    const std::string name = "rs-" + test::layout_name(layout);
    for (const auto& c : table()) {
      for (std::size_t s = 0; s < c.steps.size(); ++s) {
        auto got = run(ioc, rs.check(make_request(c, c.steps[s], name)));
        ASSERT_TRUE(got.has_value()) << c.name << " step " << s << ": " << got.error().message();
        expect_step(c, s, name, *got);
      }
    }
    rs.stop();
  }
}

// The block lives beside its bucket: `<bucket key>:block` (a key of its own, expiring with the
// block on Redis's clock) or the field `<field>:block` of the bucket's hash — either way in the
// bucket's hash slot — holding the block's end.
TEST_F(block_table, block_is_stored_beside_its_bucket_in_its_slot) {
  const table_case& c = table().front();  // fw_failed_logins
  for (const auto& layout : {per_key, packed}) {
    asio::io_context ioc;
    store::redis_settings settings;
    settings.port = server_->port();
    settings.command_timeout = std::chrono::milliseconds(1000);
    settings.layout = layout;
    store::redis_store rs(ioc.get_executor(), settings);
    rs.start();
    ASSERT_TRUE(wait_connected(ioc, rs));
    const std::string name = "place-" + test::layout_name(layout);
    for (std::size_t s = 0; s <= 5; ++s) {
      auto got = run(ioc, rs.check(make_request(c, c.steps[s], name)));
      ASSERT_TRUE(got.has_value());
    }
    const std::string bucket = make_request(c, c.steps[0], name).limits[0].key;
    const auto home = test::bucket_view{*server_, layout}.where(bucket);
    const auto at = limiter::block_address(home);
    EXPECT_EQ(store::key_hash_slot(at.key), store::key_hash_slot(home.key));
    test::redis_reply raw = at.field.empty() ? server_->command({"GET", at.key})
                                             : server_->command({"HGET", at.key, at.field});
    ASSERT_EQ(raw.type, test::redis_reply::kind::string) << test::layout_name(layout);
    ASSERT_EQ(raw.str.size(), 8u);
    double end = 0;
    std::memcpy(&end, raw.str.data(), 8);
    EXPECT_EQ(static_cast<std::int64_t>(end), epoch_ms + 905'000);
    const auto pttl = server_->command({"PTTL", at.key});
    EXPECT_GT(pttl.integer, m15 - 60'000);  // (the hash's own expiry may carry up to 500 ms
    EXPECT_LE(pttl.integer, m15 + 500);     // of slack, lua/common.lua's arm())
    rs.stop();
  }
}

TEST(block_cluster, three_masters_decide_the_same_table) {
  test::redis_cluster cluster;
  for (const bool hash : {false, true}) {
    asio::io_context ioc;
    store::redis_cluster_settings settings;
    for (const auto p : cluster.ports()) settings.seeds.push_back({"127.0.0.1", p});
    settings.node.command_timeout = std::chrono::milliseconds(500);
    settings.node.layout.packed = hash;
    store::redis_cluster_store cs(ioc.get_executor(), settings);
    cs.start();
    ASSERT_TRUE(wait_connected(ioc, cs)) << "the cluster store did not connect";
    const std::string name = std::string("cl-") + (hash ? "hash" : "key");
    for (const auto& c : table()) {
      for (std::size_t s = 0; s < c.steps.size(); ++s) {
        const check_request req = make_request(c, c.steps[s], name);
        std::set<std::uint16_t> slots;
        for (const auto& l : req.limits)
          slots.insert(store::key_hash_slot(lua::redis_key(l, settings.node.layout)));
        auto got = run(ioc, cs.check(req));
        ASSERT_TRUE(got.has_value()) << c.name << " step " << s << ": " << got.error().message();
        expect_step(c, s, name, *got, slots.size() > 1);
      }
    }
    cs.stop();
    ioc.poll();
  }
}

}  // namespace
}  // namespace sluice
