// SPDX-License-Identifier: Apache-2.0
// sluice-test-support: redis_cluster redis_server
// The slot routing units (sluice/store/cluster_slots.hpp) against a real Redis Cluster of three
// masters and three replicas: key slots agree with CLUSTER KEYSLOT, the map built from the real
// CLUSTER SLOTS (and CLUSTER SHARDS) reply routes every key to the master that takes it, and
// the MOVED / ASK replies of a resharded slot and a failed-over master read as they should.
#include "sluice/store/cluster_slots.hpp"

#include "sluice/limiter/keys.hpp"
#include "support/eventually.hpp"
#include "support/redis_cluster.hpp"

#include <gtest/gtest.h>
#include <hiredis/hiredis.h>

#include <chrono>
#include <memory>
#include <set>
#include <thread>

namespace sluice::store {
namespace {

using test::redis_cluster;
using reply_ptr = std::unique_ptr<redisReply, void (*)(void*)>;

// A synchronous hiredis connection to 127.0.0.1:port (1 s timeouts).
class connection {
 public:
  explicit connection(std::uint16_t port) {
    timeval tv{1, 0};
    c_ = redisConnectWithTimeout("127.0.0.1", port, tv);
    if (c_ == nullptr || c_->err) throw std::runtime_error("cannot connect to the node");
    redisSetTimeout(c_, tv);
  }
  ~connection() { redisFree(c_); }
  connection(const connection&) = delete;
  connection& operator=(const connection&) = delete;

  reply_ptr run(const std::vector<std::string>& argv) {
    std::vector<const char*> ptrs;
    std::vector<std::size_t> lens;
    for (const auto& a : argv) {
      ptrs.push_back(a.data());
      lens.push_back(a.size());
    }
    void* r = redisCommandArgv(c_, static_cast<int>(argv.size()), ptrs.data(), lens.data());
    if (r == nullptr) throw std::runtime_error(std::string("I/O error: ") + c_->errstr);
    return reply_ptr(static_cast<redisReply*>(r), freeReplyObject);
  }

 private:
  redisContext* c_ = nullptr;
};

reply_ptr run(std::uint16_t port, const std::vector<std::string>& argv) {
  connection c(port);
  return c.run(argv);
}

std::string text(const redisReply& r) {
  return {r.str, r.len};
}

slot_map map_from(std::uint16_t port, const char* command = "SLOTS") {
  auto reply = run(port, {"CLUSTER", command});
  auto map = std::string(command) == "SLOTS" ? slot_map::from_cluster_slots(*reply, "127.0.0.1")
                                             : slot_map::from_cluster_shards(*reply, "127.0.0.1");
  if (!map) throw std::runtime_error(map.error().message);
  return std::move(*map);
}

// Keys of every shape: plain, hash tags by the specification's rules, sluice's bucket keys in
// both layouts, bytes outside ASCII, a long key.
std::vector<std::string> key_table() {
  std::vector<std::string> keys = {
      "somekey",
      "foo",
      "hello",
      "{user1000}.following",
      "{user1000}.x",
      "foo{}{bar}",
      "foo{{bar}}zap",
      "foo{bar}{zap}",
      "no{close",
      "}{x}",
      "{}",
      "{",
      "a{b}",
      "123456789",
      "\xff\xfe{\x01}",
      std::string("nul\0in{it}", 10),
      std::string(300, 'k'),
  };
  using ns = limiter::key_namespace;
  for (int i = 1; i <= 20; ++i) {
    const auto id = "key-" + std::string(i < 10 ? "0" : "") + std::to_string(i);
    keys.push_back(limiter::bucket_key("cluster_tb", ns::api_key, id));
    keys.push_back(limiter::bucket_key("cluster_sw", ns::api_key, id));
    keys.push_back(limiter::packed_address(keys.back(), 65536).key);
  }
  keys.push_back(limiter::bucket_key("global", ns::global, ""));
  keys.push_back(limiter::bucket_key("per_ip", ns::ip, "2001:db8::/64"));
  return keys;
}

TEST(redis_cluster, key_slots_and_the_slot_map_agree_with_the_cluster) {
  std::vector<std::uint16_t> stopped_ports;
  {
    redis_cluster cluster;
    ASSERT_EQ(cluster.size(), 6u);
    const auto masters = cluster.masters();
    ASSERT_EQ(masters.size(), 3u);

    // CLUSTER KEYSLOT agrees with key_hash_slot for every key.
    const auto keys = key_table();
    for (const auto& key : keys) {
      auto r = run(cluster.port(0), {"CLUSTER", "KEYSLOT", key});
      ASSERT_EQ(r->type, REDIS_REPLY_INTEGER) << text(*r);
      EXPECT_EQ(r->integer, key_hash_slot(key)) << key;
    }

    // The map from the real CLUSTER SLOTS reply: three masters, one replica each.
    const auto map = map_from(cluster.port(0));
    EXPECT_EQ(map.covered_slots(), 16384u);
    ASSERT_EQ(map.masters().size(), 3u);
    std::set<std::uint16_t> master_ports;
    for (const auto& m : map.masters()) {
      EXPECT_EQ(m.address.host, "127.0.0.1");
      master_ports.insert(m.address.port);
      ASSERT_EQ(m.replicas.size(), 1u);
      const auto mi = cluster.index_of_port(m.address.port);
      const auto ri = cluster.index_of_port(m.replicas[0].port);
      ASSERT_TRUE(mi && ri);
      EXPECT_EQ(m.id, cluster.node_id(*mi));
      EXPECT_EQ(cluster.replicas_of(*mi), std::vector<std::size_t>{*ri});
    }
    std::set<std::uint16_t> fixture_ports;
    for (auto m : masters) fixture_ports.insert(cluster.port(m));
    EXPECT_EQ(master_ports, fixture_ports);

    // CLUSTER SHARDS gives the same map.
    const auto shards = map_from(cluster.port(3), "SHARDS");
    EXPECT_EQ(shards.covered_slots(), 16384u);
    for (std::uint16_t s = 0; s < cluster_slot_count; ++s) {
      ASSERT_EQ(shards.master_of(s)->address, map.master_of(s)->address) << s;
    }
    for (const auto& m : shards.masters()) EXPECT_EQ(m.replicas.size(), 1u);

    // Each key goes to the master the map names, which takes a SET without a redirection; any
    // other master answers MOVED to that master, as parse_redirect() reads it.
    std::set<std::uint16_t> used;
    for (const auto& key : keys) {
      const auto* m = map.master_of_key(key);
      ASSERT_NE(m, nullptr) << key;
      used.insert(m->address.port);
      auto ok = run(m->address.port, {"SET", key, "v"});
      EXPECT_EQ(ok->type, REDIS_REPLY_STATUS) << key << ": " << text(*ok);
      for (auto other : master_ports) {
        if (other == m->address.port) continue;
        auto moved = run(other, {"GET", key});
        ASSERT_EQ(moved->type, REDIS_REPLY_ERROR) << key;
        const auto redirect = parse_redirect(text(*moved), "127.0.0.1");
        ASSERT_TRUE(redirect) << text(*moved);
        EXPECT_EQ(redirect->type, redirect::kind::moved);
        EXPECT_EQ(redirect->slot, key_hash_slot(key));
        EXPECT_EQ(redirect->to, m->address) << text(*moved);
      }
    }
    EXPECT_EQ(used.size(), 3u) << "the table spreads over every master";

    // Two slots on one master: one script touching both is refused (CROSSSLOT), so a request's
    // keys are batched by slot, not only by master; each slot batch runs.
    std::vector<std::string> pair;
    for (int i = 0; pair.size() < 2 && i < 1000; ++i) {
      const auto k = "k" + std::to_string(i);
      if (map.master_of_key(k) != map.master_of(0)) continue;
      if (pair.empty() || key_hash_slot(pair[0]) != key_hash_slot(k)) pair.push_back(k);
    }
    ASSERT_EQ(pair.size(), 2u);
    const auto port0 = map.master_of(0)->address.port;
    auto cross = run(port0, {"EVAL", "return 1", "2", pair[0], pair[1]});
    ASSERT_EQ(cross->type, REDIS_REPLY_ERROR);
    EXPECT_TRUE(text(*cross).starts_with("CROSSSLOT")) << text(*cross);
    const auto routed = route_keys(map, pair);
    ASSERT_EQ(routed.masters.size(), 1u);
    ASSERT_EQ(routed.masters[0].slots.size(), 2u);
    for (const auto& batch : routed.masters[0].slots) {
      auto one = run(port0, {"EVAL", "return 1", "1", pair[batch.keys.at(0)]});
      EXPECT_EQ(one->type, REDIS_REPLY_INTEGER) << text(*one);
    }

    // move_slot() carries a slot's keys to another master.
    const auto& moved_key = keys.front();
    const auto slot = key_hash_slot(moved_key);
    const auto from = cluster.master_of_slot(slot);
    ASSERT_TRUE(from);
    const auto to = cluster.masters()[(*from == cluster.masters()[0]) ? 1 : 0];
    cluster.move_slot(slot, to);
    EXPECT_EQ(cluster.master_of_slot(slot), to);
    EXPECT_EQ(map_from(cluster.port(to)).master_of(slot)->address.port, cluster.port(to));
    auto value = run(cluster.port(to), {"GET", moved_key});
    ASSERT_EQ(value->type, REDIS_REPLY_STRING) << text(*value);
    EXPECT_EQ(text(*value), "v");
    stopped_ports = cluster.ports();
  }
  // The fixture stopped every node.
  for (auto port : stopped_ports) {
    EXPECT_EQ(test::redis_command(port, {"PING"}).type, test::redis_reply::kind::io_error);
  }
}

TEST(redis_cluster, a_migrating_slot_answers_ask_and_a_moved_one_moved) {
  redis_cluster cluster;
  auto map = map_from(cluster.port(0));
  // The bucket of c09's first identity, and another key of its slot (same hash tag).
  const auto key = limiter::bucket_key("cluster_tb", limiter::key_namespace::api_key, "key-01");
  const auto absent = key + ":absent";
  const auto slot = key_hash_slot(key);
  ASSERT_EQ(key_hash_slot(absent), slot);
  const auto from = cluster.master_of_slot(slot);
  ASSERT_TRUE(from);
  ASSERT_EQ(map.master_of(slot)->address.port, cluster.port(*from));
  std::size_t to = *from;
  for (auto m : cluster.masters()) {
    if (m != *from) to = m;
  }
  ASSERT_NE(to, *from);
  ASSERT_EQ(run(cluster.port(*from), {"SET", key, "balance"})->type, REDIS_REPLY_STATUS);

  // Migrating: the source still serves the keys it holds, and answers ASK for the others.
  ASSERT_EQ(cluster.begin_slot_migration(slot, to), *from);
  auto held = run(cluster.port(*from), {"GET", key});
  ASSERT_EQ(held->type, REDIS_REPLY_STRING) << text(*held);
  auto ask = run(cluster.port(*from), {"GET", absent});
  ASSERT_EQ(ask->type, REDIS_REPLY_ERROR);
  const auto a = parse_redirect(text(*ask), "127.0.0.1");
  ASSERT_TRUE(a) << text(*ask);
  EXPECT_EQ(a->type, redirect::kind::ask);
  EXPECT_EQ(a->slot, slot);
  EXPECT_EQ(a->to, (node_address{"127.0.0.1", cluster.port(to)}));
  {
    // The target takes the query after ASKING on the same connection, and only then.
    connection target(a->to.port);
    auto without = target.run({"GET", absent});
    ASSERT_EQ(without->type, REDIS_REPLY_ERROR);
    const auto back = parse_redirect(text(*without), "127.0.0.1");
    ASSERT_TRUE(back) << text(*without);
    EXPECT_EQ(back->type, redirect::kind::moved);
    EXPECT_EQ(back->to.port, cluster.port(*from));
    EXPECT_EQ(target.run({"ASKING"})->type, REDIS_REPLY_STATUS);
    EXPECT_EQ(target.run({"GET", absent})->type, REDIS_REPLY_NIL);
  }
  EXPECT_EQ(map.master_of(slot)->address.port, cluster.port(*from)) << "ASK changes no map";

  // Moved: the old node answers MOVED; the map follows it and the key moved with its slot.
  cluster.finish_slot_migration(slot, *from, to);
  auto moved = run(cluster.port(*from), {"GET", key});
  ASSERT_EQ(moved->type, REDIS_REPLY_ERROR);
  const auto m = parse_redirect(text(*moved), "127.0.0.1");
  ASSERT_TRUE(m) << text(*moved);
  EXPECT_EQ(m->type, redirect::kind::moved);
  EXPECT_EQ(m->slot, slot);
  EXPECT_EQ(m->to, (node_address{"127.0.0.1", cluster.port(to)}));
  map.assign(m->slot, m->to);
  ASSERT_EQ(map.master_of_key(key)->address.port, cluster.port(to));
  auto value = run(map.master_of_key(key)->address.port, {"GET", key});
  ASSERT_EQ(value->type, REDIS_REPLY_STRING) << text(*value);
  EXPECT_EQ(text(*value), "balance");
  // A fresh map from any node agrees, the neighbouring slots stayed.
  const auto fresh = map_from(cluster.port(*from));
  EXPECT_EQ(fresh.master_of(slot)->address.port, cluster.port(to));
  if (slot > 0) {
    EXPECT_EQ(fresh.master_of(slot - 1)->address.port, cluster.port(*from));
  }
  EXPECT_EQ(fresh.covered_slots(), 16384u);
}

TEST(redis_cluster, a_failed_master_is_replaced_by_its_replica) {
  redis_cluster cluster;
  const auto key = limiter::bucket_key("cluster_tb", limiter::key_namespace::api_key, "key-02");
  const auto old_master = cluster.master_of_slot(key_hash_slot(key));
  ASSERT_TRUE(old_master);
  const auto replicas = cluster.replicas_of(*old_master);
  ASSERT_EQ(replicas.size(), 1u);
  ASSERT_EQ(run(cluster.port(*old_master), {"SET", key, "kept"})->type, REDIS_REPLY_STATUS);
  auto acked = run(cluster.port(*old_master), {"WAIT", "1", "2000"});
  ASSERT_EQ(acked->type, REDIS_REPLY_INTEGER);
  ASSERT_EQ(acked->integer, 1) << "the replica has the write";

  const auto promoted = cluster.fail_over_master(*old_master);
  EXPECT_EQ(promoted, replicas[0]);
  EXPECT_FALSE(cluster.running(*old_master));
  const auto map = map_from(cluster.port(promoted));
  EXPECT_EQ(map.covered_slots(), 16384u);
  ASSERT_EQ(map.master_of_key(key)->address.port, cluster.port(promoted));
  auto value = run(cluster.port(promoted), {"GET", key});
  ASSERT_EQ(value->type, REDIS_REPLY_STRING) << text(*value);
  EXPECT_EQ(text(*value), "kept");

  // The old master comes back as a replica of the promoted one.
  cluster.restart_node(*old_master);
  EXPECT_EVENTUALLY(std::chrono::seconds(10),
                    cluster.replicas_of(promoted) == std::vector<std::size_t>{*old_master})
      << cluster.log(*old_master);
}

}  // namespace
}  // namespace sluice::store
