// SPDX-License-Identifier: Apache-2.0
// sluice-test-support: redis_cluster redis_server redis_tls test_ca
// sluice-test-serial
// The cluster store against a real Redis Cluster (three masters, three replicas): a request
// whose three limits live on three masters is decided all or nothing (a refused limit leaves
// the others uncharged); the slot of a hot bucket resharded during traffic keeps its state and
// every check is decided (MOVED and ASK followed); a master stopped and its replica promoted
// is followed within the failover time plus 1 s, with the failed checks and forgotten counts
// reported.
#include "sluice/store/redis_cluster_store.hpp"

#include "sluice/errc.hpp"
#include "support/eventually.hpp"
#include "support/redis_cluster.hpp"
#include "support/redis_tls.hpp"
#include "support/temp_dir.hpp"

#include <gtest/gtest.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace sluice {
namespace {

namespace asio = boost::asio;
using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;
using result_type = boost::system::result<limiter::check_outcome>;
using ms = std::chrono::milliseconds;
using test::redis_cluster;

// A token bucket of `burst` tokens refilled at 1 per hour: the remaining count says exactly
// how many checks the bucket has taken.
limiter::limit_check limit(const std::string& key, std::int64_t burst, bool shadow = false) {
  config::limit_params p;
  p.rate.count = 1;
  p.rate.period = std::chrono::hours(1);
  p.burst = burst;
  limiter::limit_check lc;
  lc.key = key;
  lc.bucket = limiter::bucket_params::from(p);
  lc.shadow = shadow;
  return lc;
}

limiter::check_request request(std::vector<limiter::limit_check> limits) {
  limiter::check_request r;
  r.limits = std::move(limits);
  return r;
}

store::redis_cluster_settings settings_for(const redis_cluster& c) {
  store::redis_cluster_settings s;
  for (const auto p : c.ports()) s.seeds.push_back({"127.0.0.1", p});
  s.node.command_timeout = 200ms;  // a shared two-core machine: no deadline flakes
  s.node.layout.packed = false;    // one key per bucket: the key's slot is the bucket's
  return s;
}

template <class Pred>
bool run_until(asio::io_context& ioc, Pred done, ms limit) {
  const auto deadline = clock_type::now() + limit;
  while (!done() && clock_type::now() < deadline) {
    if (ioc.stopped()) ioc.restart();
    ioc.run_one_for(5ms);
  }
  return done();
}

std::optional<result_type> check_once(asio::io_context& ioc, store::redis_cluster_store& s,
                                      limiter::check_request req) {
  std::optional<result_type> out;
  asio::co_spawn(ioc, s.check(std::move(req)), [&](std::exception_ptr e, result_type r) {
    if (!e) out.emplace(std::move(r));
  });
  run_until(
      ioc, [&] { return out.has_value(); }, 3000ms);
  return out;
}

// A fresh bucket key (`sl:{<name>|k|r1}`) whose slot is served by a master not in `avoid`.
std::string key_on_new_master(const redis_cluster& c, const std::string& name,
                              std::set<std::size_t>& avoid) {
  for (int i = 0; i < 200; ++i) {
    std::string key = "sl:{" + name + std::to_string(i) + "|k|r1}";
    const auto m = c.master_of_slot(store::key_hash_slot(key));
    if (m && !avoid.contains(*m)) {
      avoid.insert(*m);
      return key;
    }
  }
  throw std::runtime_error("no key on another master");
}

class cluster_store : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { cluster_ = new redis_cluster(); }
  static void TearDownTestSuite() {
    delete cluster_;
    cluster_ = nullptr;
  }
  void SetUp() override { start_store(settings_for(*cluster_)); }
  /// A store on `s` in place of the fixture's (connected to every master).
  void start_store(const store::redis_cluster_settings& s) {
    if (store_) {
      store_->stop();
      store_.reset();
      ioc_.poll();
    }
    store_ = std::make_unique<store::redis_cluster_store>(ioc_.get_executor(), s);
    store_->start();
    ASSERT_TRUE(run_until(
        ioc_, [&] { return store_->stats().connected; }, 5000ms))
        << "the cluster store did not connect to every master";
  }
  void TearDown() override {
    store_->stop();
    store_.reset();
    ioc_.poll();
  }

  static redis_cluster* cluster_;
  asio::io_context ioc_;
  std::unique_ptr<store::redis_cluster_store> store_;
};
redis_cluster* cluster_store::cluster_ = nullptr;

TEST_F(cluster_store, discovers_every_master_and_decides_a_single_slot_check) {
  EXPECT_EQ(store_->cluster().masters, 3u);
  EXPECT_EQ(store_->cluster().covered_slots, 16384u);
  auto r = check_once(ioc_, *store_, request({limit("sl:{one|k|r1}", 2)}));
  ASSERT_TRUE(r && *r) << (r ? r->error().message() : "no answer");
  EXPECT_TRUE((*r)->allowed);
  EXPECT_EQ((*r)->limits.at(0).remaining, 1);
  EXPECT_EQ(store_->cluster().split_checks, 0u);  // one slot: one call, no two steps
}

TEST_F(cluster_store, three_limits_on_three_masters_are_all_or_nothing) {
  std::set<std::size_t> used;
  const auto a = key_on_new_master(*cluster_, "three_a", used);
  const auto b = key_on_new_master(*cluster_, "three_b", used);
  const auto c = key_on_new_master(*cluster_, "three_c", used);
  ASSERT_EQ(used.size(), 3u);
  auto all = [&] { return request({limit(a, 5), limit(b, 5), limit(c, 1)}); };

  auto first = check_once(ioc_, *store_, all());
  ASSERT_TRUE(first && *first) << (first ? first->error().message() : "no answer");
  EXPECT_TRUE((*first)->allowed);
  EXPECT_EQ((*first)->limits.at(0).remaining, 4);
  EXPECT_EQ((*first)->limits.at(1).remaining, 4);
  EXPECT_EQ((*first)->limits.at(2).remaining, 0);

  // c is spent: refused, and a and b are not charged.
  auto second = check_once(ioc_, *store_, all());
  ASSERT_TRUE(second && *second);
  EXPECT_FALSE((*second)->allowed);
  EXPECT_TRUE((*second)->limits.at(0).admits);
  EXPECT_EQ((*second)->limits.at(0).remaining, 4);  // as one refused call reports it
  EXPECT_EQ((*second)->limits.at(1).remaining, 4);
  EXPECT_FALSE((*second)->limits.at(2).admits);
  EXPECT_GT((*second)->limits.at(2).retry_after_ms, 0);
  for (const auto& key : {a, b}) {
    auto alone = check_once(ioc_, *store_, request({limit(key, 5)}));
    ASSERT_TRUE(alone && *alone);
    EXPECT_EQ((*alone)->limits.at(0).remaining, 3) << key << " was charged by a refused request";
  }
  const auto st = store_->stats();
  EXPECT_EQ(st.error_replies[static_cast<std::size_t>(store::error_kind::crossslot)], 0u);
  EXPECT_EQ(st.errors, 0u);
  EXPECT_EQ(store_->cluster().split_checks, 2u);
  EXPECT_EQ(store_->cluster().commit_refusals, 0u);
}

TEST_F(cluster_store, a_shadow_limit_on_another_slot_is_charged_alone_as_in_one_call) {
  std::set<std::size_t> used;
  const auto enforced = key_on_new_master(*cluster_, "sh_e", used);
  const auto shadow = key_on_new_master(*cluster_, "sh_s", used);
  const auto other = key_on_new_master(*cluster_, "sh_o", used);
  auto req = [&] { return request({limit(enforced, 1), limit(shadow, 5, true), limit(other, 5)}); };
  auto r1 = check_once(ioc_, *store_, req());
  ASSERT_TRUE(r1 && *r1);
  EXPECT_TRUE((*r1)->allowed);
  auto r2 = check_once(ioc_, *store_, req());  // refused by `enforced`
  ASSERT_TRUE(r2 && *r2);
  EXPECT_FALSE((*r2)->allowed);
  EXPECT_EQ((*r2)->limits.at(1).remaining, 3);  // the shadow limit admitted alone: charged
  EXPECT_EQ((*r2)->limits.at(2).remaining, 4);  // the enforced one: not charged
}

// c10 on the cluster: FUNCTION FLUSH on every master; the next check over three masters is
// decided from the stored state (each connection loads the function again and re-sends).
TEST_F(cluster_store, a_function_flush_on_every_master_is_reloaded_and_decided) {
  std::set<std::size_t> used;
  const auto a = key_on_new_master(*cluster_, "flush_a", used);
  const auto b = key_on_new_master(*cluster_, "flush_b", used);
  const auto c = key_on_new_master(*cluster_, "flush_c", used);
  auto all = [&] { return request({limit(a, 5), limit(b, 5), limit(c, 5)}); };
  auto first = check_once(ioc_, *store_, all());
  ASSERT_TRUE(first && *first);
  const auto loads = store_->stats().script_loads;
  for (auto m : cluster_->masters()) {
    const auto r = cluster_->command(m, {"FUNCTION", "FLUSH"});
    ASSERT_FALSE(r.is_error()) << r.str;
  }
  auto second = check_once(ioc_, *store_, all());
  ASSERT_TRUE(second && *second) << (second ? second->error().message() : "no answer");
  EXPECT_TRUE((*second)->allowed);
  for (std::size_t i = 0; i < 3; ++i) EXPECT_EQ((*second)->limits.at(i).remaining, 3);
  EXPECT_GE(store_->stats().script_loads, loads + 3);
}

// A hot bucket's slot moves to another master while checks run on another thread: every check
// is decided, on the state that moved with the slot (the remaining count never jumps back).
TEST_F(cluster_store, resharding_the_slot_of_a_hot_bucket_keeps_its_state) {
  const std::string key = "sl:{hot_reshard|k|r1}";
  const auto slot = store::key_hash_slot(key);
  const auto from = cluster_->master_of_slot(slot);
  ASSERT_TRUE(from);
  std::size_t to = 0;
  for (auto m : cluster_->masters())
    if (m != *from) to = m;
  constexpr std::int64_t burst = 100000;

  std::atomic<bool> stop{false};
  std::atomic<int> done{0};
  std::vector<result_type> results;
  std::mutex results_mutex;
  asio::co_spawn(
      ioc_,
      [&]() -> asio::awaitable<void> {
        asio::steady_timer pause(ioc_);
        for (int i = 0; i < 5000 && !stop; ++i) {
          // (a local: GCC 12 rejects a braced list inside a co_await expression)
          limiter::check_request req = request({limit(key, burst)});
          auto r = co_await store_->check(std::move(req));
          {
            std::lock_guard lock(results_mutex);
            results.push_back(std::move(r));
          }
          ++done;
          pause.expires_after(1ms);
          co_await pause.async_wait(asio::use_awaitable);
        }
      },
      asio::detached);
  std::thread runner([&] {
    const auto limit = clock_type::now() + 60s;
    while (!stop && clock_type::now() < limit) {
      if (ioc_.stopped()) ioc_.restart();
      ioc_.run_for(20ms);
    }
    ioc_.run_for(300ms);  // the last check in flight completes
  });
  auto wait_for = [&](int n) { (void)test::eventually([&] { return done.load() >= n; }, 10s); };
  wait_for(50);
  const int before = done.load();
  cluster_->move_slot(slot, to);
  wait_for(done.load() + 50);
  stop = true;
  runner.join();
  EXPECT_EQ(cluster_->master_of_slot(slot), to);

  std::lock_guard lock(results_mutex);
  ASSERT_GE(results.size(), 100u);
  std::size_t failed = 0;
  for (std::size_t i = 0; i < results.size(); ++i) {
    if (!results[i]) {
      ++failed;
      continue;
    }
    EXPECT_TRUE(results[i]->allowed);
    EXPECT_EQ(results[i]->limits.at(0).remaining, burst - 1 - static_cast<std::int64_t>(i))
        << "check " << i << " of " << results.size() << " (the move began after " << before << ")";
  }
  EXPECT_EQ(failed, 0u) << "checks failed while the slot moved";
  EXPECT_GE(store_->cluster().moved, 1u);
  std::printf(
      "[ measure ] reshard: %zu checks, %d before the move, MOVED followed %llu, ASK %llu\n",
      results.size(), before, static_cast<unsigned long long>(store_->cluster().moved),
      static_cast<unsigned long long>(store_->cluster().asks));
}

// Checks started together go to each master as one call (store.max_batch): six checks of six
// slots, two on each master, are three calls of two, each check decided as alone.
TEST_F(cluster_store, a_batch_is_split_across_three_masters) {
  std::vector<std::string> keys;
  for (const auto m : cluster_->masters()) {
    std::set<std::uint16_t> slots;
    for (int i = 0; i < 2000 && slots.size() < 2; ++i) {
      std::string key = "sl:{split3_" + std::to_string(i) + "|k|r1}";
      const auto slot = store::key_hash_slot(key);
      if (cluster_->master_of_slot(slot) == m && slots.insert(slot).second) keys.push_back(key);
    }
  }
  ASSERT_EQ(keys.size(), 6u);
  const auto calls_before = store_->stats().batch_sizes;
  std::vector<std::optional<result_type>> slots(keys.size() * 2);
  for (std::size_t i = 0; i < slots.size(); ++i) {
    asio::co_spawn(ioc_, store_->check(request({limit(keys[i % keys.size()], 2)})),
                   [&slots, i](std::exception_ptr, result_type r) { slots[i].emplace(r); });
  }
  ASSERT_TRUE(run_until(
      ioc_,
      [&] {
        for (const auto& s : slots)
          if (!s) return false;
        return true;
      },
      5000ms));
  for (std::size_t i = 0; i < slots.size(); ++i) {
    ASSERT_TRUE(*slots[i]) << slots[i]->error().message();
    // Each key twice: the second check of a key saw the first.
    EXPECT_EQ((*slots[i])->limits.at(0).remaining, i < keys.size() ? 1 : 0) << keys[i % 6];
  }
  const auto calls = store_->stats().batch_sizes;
  EXPECT_EQ(calls[store::batch_bucket(4)] - calls_before[store::batch_bucket(4)], 3u)
      << "one call of four checks (two keys of two slots, twice) per master";
  EXPECT_EQ(calls[0] - calls_before[0], 0u);
}

// A batch on a master whose one slot moves away under it: the node refuses the batch (a key no
// longer local) having written nothing; each check goes again alone and the moved one follows
// MOVED or ASK, so both buckets count every check exactly once.
TEST_F(cluster_store, a_batch_with_a_moving_slot_is_decided_check_by_check) {
  // Every check must be decided (this counts them): a deadline the slot's move cannot make a
  // loaded machine miss (the move's redirections and map refresh take their round trips).
  auto s = settings_for(*cluster_);
  s.node.command_timeout = 2000ms;
  start_store(s);
  const std::string moving = "sl:{batch_moving|k|r1}";
  const auto slot = store::key_hash_slot(moving);
  const auto from = cluster_->master_of_slot(slot);
  ASSERT_TRUE(from);
  std::string staying;
  for (int i = 0; i < 2000 && staying.empty(); ++i) {
    std::string key = "sl:{batch_staying" + std::to_string(i) + "|k|r1}";
    const auto s = store::key_hash_slot(key);
    if (s != slot && cluster_->master_of_slot(s) == from) staying = key;
  }
  ASSERT_FALSE(staying.empty());
  std::size_t to = 0;
  for (auto m : cluster_->masters())
    if (m != *from) to = m;
  constexpr std::int64_t burst = 100000;

  std::atomic<bool> stop{false};
  std::atomic<int> done{0};
  std::vector<std::pair<result_type, result_type>> results;
  std::mutex results_mutex;
  asio::co_spawn(
      ioc_,
      [&]() -> asio::awaitable<void> {
        asio::steady_timer pause(ioc_);
        for (int i = 0; i < 5000 && !stop; ++i) {
          // Both started in one turn of the loop: one call to their master.
          std::optional<result_type> a, b;
          asio::co_spawn(ioc_, store_->check(request({limit(moving, burst)})),
                         [&a](std::exception_ptr, result_type r) { a.emplace(r); });
          asio::co_spawn(ioc_, store_->check(request({limit(staying, burst)})),
                         [&b](std::exception_ptr, result_type r) { b.emplace(r); });
          while (!a || !b) {
            pause.expires_after(1ms);
            co_await pause.async_wait(asio::use_awaitable);
          }
          {
            std::lock_guard lock(results_mutex);
            results.emplace_back(*a, *b);
          }
          ++done;
        }
      },
      asio::detached);
  std::thread runner([&] {
    const auto limit = clock_type::now() + 60s;
    while (!stop && clock_type::now() < limit) {
      if (ioc_.stopped()) ioc_.restart();
      ioc_.run_for(20ms);
    }
    ioc_.run_for(300ms);  // the last checks in flight complete
  });
  auto wait_for = [&](int n) { (void)test::eventually([&] { return done.load() >= n; }, 10s); };
  wait_for(30);
  cluster_->move_slot(slot, to);
  wait_for(done.load() + 30);
  stop = true;
  runner.join();
  EXPECT_EQ(cluster_->master_of_slot(slot), to);

  std::lock_guard lock(results_mutex);
  ASSERT_GE(results.size(), 60u);
  for (std::size_t i = 0; i < results.size(); ++i) {
    const auto& [a, b] = results[i];
    ASSERT_TRUE(a) << "check " << i << ": " << a.error().message();
    ASSERT_TRUE(b) << "check " << i << ": " << b.error().message();
    const auto left = burst - 1 - static_cast<std::int64_t>(i);
    EXPECT_EQ(a->limits.at(0).remaining, left) << "the moving bucket, check " << i;
    EXPECT_EQ(b->limits.at(0).remaining, left) << "the staying bucket, check " << i;
  }
  EXPECT_GE(store_->stats().batch_sizes[store::batch_bucket(2)], 1u);
  EXPECT_GE(store_->cluster().moved + store_->cluster().asks, 1u);
}

// During a migration a bucket not yet on the source is asked of the target (ASK: ASKING, then
// the check), and the map is not changed; once the slot moved, MOVED updates it.
TEST_F(cluster_store, a_migrating_slot_is_followed_with_ask_then_moved) {
  const std::string key = "sl:{ask_me|k|r1}";
  const auto slot = store::key_hash_slot(key);
  const auto from = cluster_->master_of_slot(slot);
  ASSERT_TRUE(from);
  std::size_t to = 0;
  for (auto m : cluster_->masters())
    if (m != *from) to = m;
  const auto source = cluster_->begin_slot_migration(slot, to);
  auto r1 = check_once(ioc_, *store_, request({limit(key, 3)}));
  ASSERT_TRUE(r1 && *r1) << (r1 ? r1->error().message() : "no answer");
  EXPECT_EQ((*r1)->limits.at(0).remaining, 2);
  EXPECT_GE(store_->cluster().asks, 1u);
  cluster_->finish_slot_migration(slot, source, to);
  auto r2 = check_once(ioc_, *store_, request({limit(key, 3)}));
  ASSERT_TRUE(r2 && *r2) << (r2 ? r2->error().message() : "no answer");
  EXPECT_EQ((*r2)->limits.at(0).remaining, 1);  // the bucket written under ASK, moved with it
  EXPECT_GE(store_->cluster().moved, 1u);
}

// The same store over TLS: every node serves TLS with client certificates required (the
// cluster bus and replication too), the seeds are TLS ports, and the slot map's masters are
// reached on the TLS ports the nodes name (CLUSTER SHARDS' tls-port), as the ACL user.
TEST(cluster_store_tls, discovers_every_master_over_tls_and_decides_all_or_nothing) {
  test::temp_dir dir("cluster-tls");
  test::redis_tls_material tls(dir.path);
  redis_cluster::options o;
  o.replicas_per_master = 0;
  o.tls_args = [&tls](std::uint16_t port) {
    auto a = tls.server_args(port, true);
    for (auto& x : test::acl_args("sluice", "cluster-secret")) a.push_back(std::move(x));
    return a;
  };
  redis_cluster cluster(o);
  store::redis_cluster_settings s;
  for (const auto p : cluster.tls_ports()) s.seeds.push_back({"127.0.0.1", p});
  s.node.command_timeout = 500ms;
  s.node.connect_timeout = 1000ms;
  s.node.layout.packed = false;
  s.node.username = "sluice";
  s.node.password = "cluster-secret";
  s.node.tls.context = store::make_redis_tls_context(
      {tls.ca.cert().string(), true, tls.client.cert.string(), tls.client.key.string()});
  asio::io_context ioc;
  store::redis_cluster_store store(ioc.get_executor(), s);
  store.start();
  ASSERT_TRUE(run_until(
      ioc, [&] { return store.stats().connected; }, 10000ms))
      << "not connected: " << store.failure();
  EXPECT_EQ(store.cluster().masters, 3u);
  EXPECT_EQ(store.cluster().covered_slots, 16384u);

  std::set<std::size_t> used;
  const auto a = key_on_new_master(cluster, "tls_a", used);
  const auto b = key_on_new_master(cluster, "tls_b", used);
  const auto c = key_on_new_master(cluster, "tls_c", used);
  auto all = [&] { return request({limit(a, 5), limit(b, 5), limit(c, 1)}); };
  auto first = check_once(ioc, store, all());
  ASSERT_TRUE(first && *first) << (first ? first->error().message() : "no answer");
  EXPECT_TRUE((*first)->allowed);
  auto second = check_once(ioc, store, all());
  ASSERT_TRUE(second && *second);
  EXPECT_FALSE((*second)->allowed);
  for (const auto& key : {a, b}) {
    auto alone = check_once(ioc, store, request({limit(key, 5)}));
    ASSERT_TRUE(alone && *alone);
    EXPECT_EQ((*alone)->limits.at(0).remaining, 3) << key << " was charged by a refused request";
  }
  // Every master decided some of it, over its TLS port.
  for (std::size_t i = 0; i < cluster.size(); ++i) {
    const auto info = cluster.command(i, {"INFO", "commandstats"}).str;
    EXPECT_NE(info.find("cmdstat_fcall:"), std::string::npos) << "node " << i;
  }
  store.stop();
}

TEST(cluster_store_seeds, no_seed_answering_leaves_checks_failing_at_once) {
  asio::io_context ioc;
  store::redis_cluster_settings s;
  s.seeds.push_back({"127.0.0.1", test::free_loopback_port()});
  store::redis_cluster_store store(ioc.get_executor(), s);
  store.start();
  run_until(
      ioc, [&] { return store.cluster().topology_failures >= 1; }, 3000ms);
  EXPECT_GE(store.cluster().topology_failures, 1u);
  const auto t0 = clock_type::now();
  auto r = check_once(ioc, store, request({limit("sl:{x|k|r1}", 3)}));
  ASSERT_TRUE(r);
  ASSERT_FALSE(*r);  // never "allowed"
  EXPECT_EQ(r->error(), errc::store_unavailable);
  EXPECT_LT(clock_type::now() - t0, 100ms);
  EXPECT_FALSE(store.stats().connected);
  store.stop();
}

TEST(cluster_store_seeds, a_node_not_in_cluster_mode_gives_no_map) {
  test::redis_server plain;
  asio::io_context ioc;
  store::redis_cluster_settings s;
  s.seeds.push_back({"127.0.0.1", plain.port()});
  store::redis_cluster_store store(ioc.get_executor(), s);
  store.start();
  run_until(
      ioc, [&] { return store.cluster().topology_failures >= 1; }, 3000ms);
  EXPECT_GE(store.cluster().topology_failures, 1u);
  auto r = check_once(ioc, store, request({limit("sl:{x|k|r1}", 3)}));
  ASSERT_TRUE(r);
  EXPECT_FALSE(*r);
  store.stop();
}

// A master is killed during traffic; its replica is promoted. The store follows it within the
// failover time plus 1 s; the checks in between fail (the route's failure policy would answer)
// and are counted, and so are the counts the promotion forgot.
TEST(cluster_store_failover, a_promoted_replica_is_followed_within_a_second) {
  redis_cluster cluster;
  asio::io_context ioc;
  store::redis_cluster_store store(ioc.get_executor(), settings_for(cluster));
  store.start();
  ASSERT_TRUE(run_until(
      ioc, [&] { return store.stats().connected; }, 5000ms));
  const std::string key = "sl:{hot_failover|k|r1}";
  const auto master = cluster.master_of_slot(store::key_hash_slot(key));
  ASSERT_TRUE(master);
  constexpr std::int64_t burst = 100000;

  struct sample {
    clock_type::time_point at;
    result_type r;
  };
  std::vector<sample> samples;
  std::mutex m;
  std::atomic<bool> stop{false};
  std::atomic<int> done{0};
  asio::co_spawn(
      ioc,
      [&]() -> asio::awaitable<void> {
        asio::steady_timer pause(ioc);
        for (int i = 0; i < 20000 && !stop; ++i) {
          limiter::check_request req = request({limit(key, burst)});
          auto r = co_await store.check(std::move(req));
          {
            std::lock_guard lock(m);
            samples.push_back({clock_type::now(), std::move(r)});
          }
          ++done;
          pause.expires_after(2ms);
          co_await pause.async_wait(asio::use_awaitable);
        }
      },
      asio::detached);
  std::thread runner([&] {
    const auto limit = clock_type::now() + 60s;
    while (!stop && clock_type::now() < limit) ioc.run_for(20ms);
    ioc.run_for(500ms);
  });
  const auto wait_for = [&](int n) {
    (void)test::eventually([&] { return done.load() >= n; }, 10s);
  };
  wait_for(100);
  const auto killed = clock_type::now();
  const auto promoted = cluster.fail_over_master(*master);
  const auto promoted_at = clock_type::now();
  std::this_thread::sleep_for(1500ms);
  stop = true;
  runner.join();
  EXPECT_NE(cluster.master_of_slot(store::key_hash_slot(key)), master);
  EXPECT_EQ(cluster.master_of_slot(store::key_hash_slot(key)), promoted);

  std::lock_guard lock(m);
  // The k-th decided check should see burst - 1 - k; after the switch, a larger remaining
  // count is what the promotion forgot.
  std::int64_t decided = 0, failed = 0, failed_late = 0;
  std::optional<clock_type::time_point> last_failure;
  for (const auto& s : samples) {
    if (s.r) continue;
    ++failed;  // an error, never a decision
    last_failure = s.at;
    if (s.at > promoted_at) ++failed_late;
  }
  ASSERT_TRUE(last_failure) << "no check failed: the master was not the one stopped?";
  std::optional<clock_type::time_point> first_after;
  std::int64_t forgotten = 0;
  for (const auto& s : samples) {
    if (!s.r) continue;
    if (!first_after && s.at > *last_failure) {
      first_after = s.at;
      forgotten = s.r->limits.at(0).remaining - (burst - 1 - decided);
    }
    ++decided;
  }
  ASSERT_TRUE(first_after) << "no check decided after the failover";
  // Followed: no check fails later than 1 s after the promotion is complete (every node
  // agrees on the new master), and checks are decided from then on.
  const auto followed = std::chrono::duration_cast<ms>(*last_failure - promoted_at);
  const auto failover = std::chrono::duration_cast<ms>(promoted_at - killed);
  std::printf(
      "[ measure ] failover: %lld ms to promote, last failed check %lld ms after that (%lld "
      "failed after it), %lld checks failed in all (fail-open decisions on a fail_open "
      "route), %lld counts forgotten\n",
      static_cast<long long>(failover.count()), static_cast<long long>(followed.count()),
      static_cast<long long>(failed_late), static_cast<long long>(failed),
      static_cast<long long>(forgotten));
  // -1: the one check in flight when the master died (checks go one at a time) ran and was
  // replicated, but its reply was lost, so it counted as failed here and charged all the
  // same (c10: a check whose reply never came may have counted). Never more than that.
  EXPECT_GE(forgotten, -1);
  EXPECT_LE(forgotten, 5);  // replication was healthy: at most what was in flight
}

}  // namespace
}  // namespace sluice
