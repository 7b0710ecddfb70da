// SPDX-License-Identifier: Apache-2.0
#include "sluice/store/cluster_slots.hpp"

#include "sluice/limiter/keys.hpp"

#include <gtest/gtest.h>
#include <hiredis/hiredis.h>

#include <memory>
#include <set>

// Slot routing against the Redis Cluster specification: CRC16 (its test vector), hash tags
// (its examples), the slot map from canned CLUSTER SLOTS / CLUSTER SHARDS replies, and the
// MOVED / ASK error replies, garbage included.

namespace sluice::store {
namespace {

// --- canned replies: RESP2 text, read by hiredis's own reader into a redisReply tree --------

std::string bulk(std::string_view s) {
  return "$" + std::to_string(s.size()) + "\r\n" + std::string(s) + "\r\n";
}
std::string num(long long v) {
  return ":" + std::to_string(v) + "\r\n";
}
std::string nil() {
  return "$-1\r\n";
}
std::string arr(std::initializer_list<std::string> items) {
  std::string out = "*" + std::to_string(items.size()) + "\r\n";
  for (const auto& i : items) out += i;
  return out;
}

using reply_ptr = std::unique_ptr<redisReply, void (*)(void*)>;

reply_ptr parse(const std::string& resp) {
  redisReader* reader = redisReaderCreate();
  redisReaderFeed(reader, resp.data(), resp.size());
  void* out = nullptr;
  const int rc = redisReaderGetReply(reader, &out);
  redisReaderFree(reader);
  if (rc != REDIS_OK || out == nullptr) throw std::runtime_error("canned reply does not parse");
  return reply_ptr(static_cast<redisReply*>(out), freeReplyObject);
}

const std::string id_a(40, 'a'), id_b(40, 'b'), id_c(40, 'c');

std::string slots_node(std::string host, long long port, const std::string& id) {
  return arr({bulk(host), num(port), bulk(id), arr({})});
}

// The three-master layout redis-cli --cluster create makes: 0-5460, 5461-10922, 10923-16383.
std::string three_masters() {
  return arr({
      arr({num(0), num(5460), slots_node("127.0.0.1", 7000, id_a),
           slots_node("127.0.0.1", 7003, std::string(40, 'd'))}),
      arr({num(5461), num(10922), slots_node("127.0.0.1", 7001, id_b),
           slots_node("127.0.0.1", 7004, std::string(40, 'e'))}),
      arr({num(10923), num(16383), slots_node("127.0.0.1", 7002, id_c),
           slots_node("127.0.0.1", 7005, std::string(40, 'f'))}),
  });
}

// --- CRC16 and key slots -----------------------------------------------------------------

TEST(cluster_slots, crc16_matches_the_specification_test_vector) {
  EXPECT_EQ(crc16("123456789"), 0x31C3);  // the specification's reference output
  EXPECT_EQ(crc16(""), 0);
  EXPECT_EQ(crc16(std::string_view("\0", 1)), 0);
  EXPECT_NE(crc16("123456788"), 0x31C3);
}

TEST(cluster_slots, key_slots_of_known_keys) {
  // Values that CLUSTER KEYSLOT answers (the integration test checks a larger table against a
  // real cluster).
  struct row {
    std::string_view key;
    std::uint16_t slot;
  };
  for (const row& r : {row{"somekey", 11058}, row{"foo{hash_tag}", 2515}, row{"foo", 12182},
                       row{"hello", 866}, row{"", 0}}) {
    EXPECT_EQ(key_hash_slot(r.key), r.slot) << r.key;
  }
  EXPECT_EQ(key_hash_slot("123456789"), 0x31C3 & 16383);
}

// The shards of a sharded global limit: one key each, in its own part of the slot space
// (under both layouts), the same on every call, and shard i's value is shard i's.
TEST(cluster_slots, shard_keys_spread_over_the_slot_space) {
  config::limit l;
  l.name = "all_traffic";
  l.by = config::identity_kind::global;
  for (const bool packed : {true, false}) {
    lua::key_layout layout;
    layout.packed = packed;
    for (const unsigned shards : {2u, 3u, 8u, 100u}) {
      l.shards = shards;
      const auto keys = spread_shard_keys(l, layout);
      ASSERT_EQ(keys.size(), shards);
      EXPECT_EQ(keys, spread_shard_keys(l, layout));
      const unsigned parts = std::min(shards, 64u);
      std::set<std::string> distinct(keys.begin(), keys.end());
      EXPECT_EQ(distinct.size(), shards);
      for (unsigned i = 0; i < shards; ++i) {
        limiter::limit_check probe;
        probe.key = keys[i];
        const unsigned slot = key_hash_slot(lua::redis_key(probe, layout));
        EXPECT_EQ(slot * parts / cluster_slot_count, i % parts) << shards << " shard " << i;
        const unsigned eighth = slot * parts * 8 / cluster_slot_count % 8;
        EXPECT_TRUE(eighth == 3 || eighth == 4) << "not in the middle of its part: " << slot;
        EXPECT_NE(keys[i].find("shard-" + std::to_string(i)), std::string::npos) << keys[i];
      }
    }
  }
}

TEST(cluster_slots, hash_tag_rules) {
  struct row {
    std::string_view key, hashed;
  };
  for (const row& r : {
           row{"{user1000}.following", "user1000"},
           row{"{user1000}.followers", "user1000"},
           row{"foo{}{bar}", "foo{}{bar}"},  // the first tag is empty: the whole key
           row{"foo{{bar}}zap", "{bar"},     // first '{', first '}' after it
           row{"foo{bar}{zap}", "bar"},      // only the first tag counts
           row{"plain", "plain"},
           row{"no{close", "no{close"},
           row{"}{x}", "x"},  // a '}' before the first '{' does not matter
           row{"{}", "{}"},
           row{"{", "{"},
           row{"a{b}", "b"},
           row{"sl:{search_key|k|rkey-a}", "search_key|k|rkey-a"},
       }) {
    EXPECT_EQ(hash_tag(r.key), r.hashed) << r.key;
    EXPECT_EQ(key_hash_slot(r.key), crc16(r.hashed) % 16384) << r.key;
  }
  EXPECT_EQ(key_hash_slot("{user1000}.following"), key_hash_slot("user1000"));
  EXPECT_NE(key_hash_slot("foo{}{bar}"), key_hash_slot("bar"));
}

// --- endpoints and redirections -------------------------------------------------------------

TEST(cluster_slots, node_address_parse_table) {
  struct row {
    std::string_view text;
    std::optional<node_address> want;
  };
  const auto a = [](std::string h, std::uint16_t p) { return node_address{std::move(h), p}; };
  for (const row& r : {
           row{"127.0.0.1:7000", a("127.0.0.1", 7000)},
           row{"[::1]:7000", a("::1", 7000)},
           row{"::1:7000", a("::1", 7000)},  // bare IPv6: the port is after the last ':'
           row{"[fe80::1:2]:65535", a("fe80::1:2", 65535)},
           row{"2001:db8::5:6379", a("2001:db8::5", 6379)},
           row{"redis-0.redis.svc:6379", a("redis-0.redis.svc", 6379)},
           row{":7001", a("10.0.0.9", 7001)},  // empty host: the node asked
           row{"127.0.0.1", std::nullopt},
           row{"127.0.0.1:", std::nullopt},
           row{"127.0.0.1:0", std::nullopt},
           row{"127.0.0.1:65536", std::nullopt},
           row{"127.0.0.1:-1", std::nullopt},
           row{"127.0.0.1:+80", std::nullopt},
           row{"127.0.0.1:80x", std::nullopt},
           row{"127.0.0.1:007000", std::nullopt},  // more than 5 digits
           row{"127.0.0.1:7000@17000", std::nullopt},
           row{"[::1]", std::nullopt},
           row{"[::1]7000", std::nullopt},
           row{"[::1:7000", std::nullopt},
           row{"[]:7000", std::nullopt},
           row{"[127.0.0.1]:7000", std::nullopt},  // brackets are for IPv6 only
           row{"a b:7000", std::nullopt},
           row{"?:7000", std::nullopt},
           row{"", std::nullopt},
           row{":", std::nullopt},
       }) {
    EXPECT_EQ(parse_node_address(r.text, "10.0.0.9"), r.want) << r.text;
  }
  EXPECT_EQ(parse_node_address(":7001"), std::nullopt) << "empty host and no asked host";
  EXPECT_EQ(a("::1", 7000).to_string(), "[::1]:7000");
  EXPECT_EQ(a("127.0.0.1", 7000).to_string(), "127.0.0.1:7000");
  EXPECT_EQ(parse_node_address(a("fe80::1", 1).to_string()), a("fe80::1", 1));
}

TEST(cluster_slots, redirect_parse_table) {
  using k = redirect::kind;
  struct row {
    std::string_view error;
    std::optional<redirect> want;
  };
  const auto r = [](k type, std::uint16_t slot, std::string h, std::uint16_t p) {
    return redirect{type, slot, node_address{std::move(h), p}};
  };
  for (const row& t : {
           row{"MOVED 3999 127.0.0.1:6381", r(k::moved, 3999, "127.0.0.1", 6381)},
           row{"ASK 3999 127.0.0.1:6381", r(k::ask, 3999, "127.0.0.1", 6381)},
           row{"MOVED 0 [::1]:7000", r(k::moved, 0, "::1", 7000)},
           row{"MOVED 16383 ::1:7000", r(k::moved, 16383, "::1", 7000)},
           row{"ASK 12 :7002", r(k::ask, 12, "192.0.2.1", 7002)},  // unknown endpoint
           row{"MOVED 3999 :6381", r(k::moved, 3999, "192.0.2.1", 6381)},
           row{"MOVED 5 node-2.cluster.test:6379", r(k::moved, 5, "node-2.cluster.test", 6379)},
           row{"MOVED 16384 127.0.0.1:6381", std::nullopt},  // no such slot
           row{"MOVED -1 127.0.0.1:6381", std::nullopt},
           row{"MOVED 39x9 127.0.0.1:6381", std::nullopt},
           row{"MOVED 3999", std::nullopt},
           row{"MOVED 3999 ", std::nullopt},
           row{"MOVED  3999 127.0.0.1:6381", std::nullopt},
           row{"MOVED 3999 127.0.0.1:6381 extra", std::nullopt},
           row{"MOVED 3999 127.0.0.1", std::nullopt},
           row{"MOVED 3999 127.0.0.1:99999", std::nullopt},
           row{"moved 3999 127.0.0.1:6381", std::nullopt},
           row{"-MOVED 3999 127.0.0.1:6381", std::nullopt},
           row{"MOVEDX 3999 127.0.0.1:6381", std::nullopt},
           row{"ASKING", std::nullopt},
           row{"TRYAGAIN Multiple keys request during rehashing of slot", std::nullopt},
           row{"CLUSTERDOWN The cluster is down", std::nullopt},
           row{"CROSSSLOT Keys in request don't hash to the same slot", std::nullopt},
           row{"", std::nullopt},
       }) {
    EXPECT_EQ(parse_redirect(t.error, "192.0.2.1"), t.want) << t.error;
  }
}

// --- the slot map -------------------------------------------------------------------------

TEST(cluster_slots, map_from_contiguous_cluster_slots) {
  auto reply = parse(three_masters());
  auto map = slot_map::from_cluster_slots(*reply, "127.0.0.1");
  ASSERT_TRUE(map.has_value()) << map.error().message;
  EXPECT_EQ(map->covered_slots(), 16384u);
  ASSERT_EQ(map->masters().size(), 3u);
  EXPECT_EQ(map->masters()[0].address, (node_address{"127.0.0.1", 7000}));
  EXPECT_EQ(map->masters()[0].id, id_a);
  ASSERT_EQ(map->masters()[0].replicas.size(), 1u);
  EXPECT_EQ(map->masters()[0].replicas[0], (node_address{"127.0.0.1", 7003}));
  struct row {
    std::uint16_t slot;
    std::uint16_t port;
  };
  for (const row& r : {row{0, 7000}, row{5460, 7000}, row{5461, 7001}, row{10922, 7001},
                       row{10923, 7002}, row{16383, 7002}}) {
    ASSERT_NE(map->master_of(r.slot), nullptr) << r.slot;
    EXPECT_EQ(map->master_of(r.slot)->address.port, r.port) << r.slot;
  }
  EXPECT_EQ(map->master_of(16384), nullptr);
  EXPECT_EQ(map->master_index(65535), slot_map::no_master);
  EXPECT_EQ(map->master_of_key("foo")->address.port, 7002);    // slot 12182
  EXPECT_EQ(map->master_of_key("hello")->address.port, 7000);  // slot 866
}

TEST(cluster_slots, map_with_gaps_and_split_ranges) {
  // One master serves two ranges (after a reshard); slots 100..199 and 1000..16383 have no
  // master; ranges come out of order.
  auto reply = parse(arr({
      arr({num(200), num(999), slots_node("127.0.0.1", 7001, id_b)}),
      arr({num(0), num(99), slots_node("127.0.0.1", 7000, id_a)}),
      arr({num(5), num(5), slots_node("127.0.0.1", 7001, id_b)}),
  }));
  // Slot 5 is in two ranges: an error.
  auto bad = slot_map::from_cluster_slots(*reply, "127.0.0.1");
  ASSERT_FALSE(bad.has_value());
  EXPECT_EQ(bad.error().message, "CLUSTER SLOTS: range 5-5: slot 5 is in two ranges");

  auto ok_reply = parse(arr({
      arr({num(200), num(999), slots_node("127.0.0.1", 7001, id_b)}),
      arr({num(0), num(99), slots_node("127.0.0.1", 7000, id_a)}),
      arr({num(1000), num(1000), slots_node("127.0.0.1", 7000, id_a)}),
  }));
  auto map = slot_map::from_cluster_slots(*ok_reply, "127.0.0.1");
  ASSERT_TRUE(map.has_value()) << map.error().message;
  EXPECT_EQ(map->covered_slots(), 100u + 800u + 1u);
  EXPECT_EQ(map->masters().size(), 2u) << "a master of two ranges is one master";
  EXPECT_EQ(map->master_of(99)->address.port, 7000);
  EXPECT_EQ(map->master_of(100), nullptr);
  EXPECT_EQ(map->master_of(199), nullptr);
  EXPECT_EQ(map->master_of(200)->address.port, 7001);
  EXPECT_EQ(map->master_of(999)->address.port, 7001);
  EXPECT_EQ(map->master_of(1000)->address.port, 7000);
  EXPECT_EQ(map->master_of(1001), nullptr);
  EXPECT_EQ(map->master_of(16383), nullptr);
}

TEST(cluster_slots, map_endpoints_nil_empty_unknown_and_ipv6) {
  auto reply = parse(arr({
      arr({num(0), num(9), arr({nil(), num(7000), bulk(id_a)})}),          // unknown: asked host
      arr({num(10), num(19), arr({bulk(""), num(7001), bulk(id_b)})}),     // not known yet
      arr({num(20), num(29), arr({bulk("::1"), num(7002), bulk(id_c)})}),  // IPv6
      arr({num(30), num(39), arr({bulk("node-4"), num(7003)})}),           // no id
  }));
  auto map = slot_map::from_cluster_slots(*reply, "10.1.2.3");
  ASSERT_TRUE(map.has_value()) << map.error().message;
  EXPECT_EQ(map->master_of(0)->address, (node_address{"10.1.2.3", 7000}));
  EXPECT_EQ(map->master_of(10)->address, (node_address{"10.1.2.3", 7001}));
  EXPECT_EQ(map->master_of(20)->address, (node_address{"::1", 7002}));
  EXPECT_EQ(map->master_of(20)->address.to_string(), "[::1]:7002");
  EXPECT_EQ(map->master_of(30)->address, (node_address{"node-4", 7003}));
  EXPECT_EQ(map->master_of(30)->id, "");
  EXPECT_EQ(map->covered_slots(), 40u);

  auto question = parse(arr({arr({num(0), num(9), arr({bulk("?"), num(7000)})})}));
  auto q = slot_map::from_cluster_slots(*question, "10.1.2.3");
  ASSERT_FALSE(q.has_value());
  EXPECT_EQ(q.error().message, "CLUSTER SLOTS: range 0-9: node 0 has no usable endpoint");
  auto unknown = parse(arr({arr({num(0), num(9), arr({nil(), num(7000)})})}));
  EXPECT_FALSE(slot_map::from_cluster_slots(*unknown, "").has_value())
      << "an unknown endpoint needs the asked host";
}

TEST(cluster_slots, map_refuses_malformed_cluster_slots) {
  struct row {
    std::string resp;
    std::string error;
  };
  for (const row& r : {
           row{bulk("nope"), "CLUSTER SLOTS: the reply is not an array"},
           row{arr({num(1)}), "CLUSTER SLOTS: entry 0 is not [first, last, master, ...]"},
           row{arr({arr({num(0), num(9)})}),
               "CLUSTER SLOTS: entry 0 is not [first, last, master, ...]"},
           row{arr({arr({bulk("0"), num(9), slots_node("h", 1, id_a)})}),
               "CLUSTER SLOTS: entry 0 is not [first, last, master, ...]"},
           row{arr({arr({num(9), num(0), slots_node("h", 1, id_a)})}),
               "CLUSTER SLOTS: range 9-0: not a range of slots 0..16383"},
           row{arr({arr({num(0), num(16384), slots_node("h", 1, id_a)})}),
               "CLUSTER SLOTS: range 0-16384: not a range of slots 0..16383"},
           row{arr({arr({num(-1), num(5), slots_node("h", 1, id_a)})}),
               "CLUSTER SLOTS: range -1-5: not a range of slots 0..16383"},
           row{arr({arr({num(0), num(5), slots_node("h", 0, id_a)})}),
               "CLUSTER SLOTS: range 0-5: node 0 has no usable endpoint"},
           row{arr({arr({num(0), num(5), slots_node("h", 70000, id_a)})}),
               "CLUSTER SLOTS: range 0-5: node 0 has no usable endpoint"},
           row{arr({arr({num(0), num(5), slots_node("h", 1, id_a), arr({bulk("r")})})}),
               "CLUSTER SLOTS: range 0-5: node 1 is not [endpoint, port, ...]"},
           row{arr({arr({num(0), num(5), num(7)})}),
               "CLUSTER SLOTS: range 0-5: node 0 is not [endpoint, port, ...]"},
       }) {
    auto reply = parse(r.resp);
    auto map = slot_map::from_cluster_slots(*reply, "127.0.0.1");
    ASSERT_FALSE(map.has_value()) << r.error;
    EXPECT_EQ(map.error().message, r.error);
  }
  auto empty = parse(arr({}));
  auto map = slot_map::from_cluster_slots(*empty, "127.0.0.1");
  ASSERT_TRUE(map.has_value()) << "a node that serves nothing yet";
  EXPECT_EQ(map->covered_slots(), 0u);
  EXPECT_EQ(map->master_of(0), nullptr);
}

std::string shard_node(std::string id, std::string ip, long long port, std::string role,
                       std::string health = "online") {
  return arr({bulk("id"), bulk(id), bulk("port"), num(port), bulk("ip"), bulk(ip), bulk("endpoint"),
              bulk(ip), bulk("role"), bulk(role), bulk("replication-offset"), num(42),
              bulk("health"), bulk(health)});
}

TEST(cluster_slots, map_from_cluster_shards) {
  auto reply = parse(arr({
      arr({bulk("slots"), arr({num(0), num(5460), num(16000), num(16383)}), bulk("nodes"),
           arr({shard_node(std::string(40, 'd'), "127.0.0.1", 7003, "replica"),
                shard_node(id_a, "127.0.0.1", 7000, "master")})}),
      arr({bulk("slots"), arr({num(5461), num(15999)}), bulk("nodes"),
           arr({shard_node(id_b, "::1", 7001, "master"),
                shard_node(std::string(40, 'e'), "127.0.0.1", 7004, "replica", "failed"),
                shard_node(std::string(40, 'f'), "127.0.0.1", 7005, "replica", "loading")})}),
      // A shard with no slots (a master just added) and one with slots but no master.
      arr({bulk("slots"), arr({}), bulk("nodes"), arr({shard_node(id_c, "h3", 7002, "master")})}),
      arr({bulk("slots"), arr({num(20), num(20)}), bulk("nodes"), arr({})}),
  }));
  // The masterless shard's slot 20 is also in 0-5460: skipped, so not "in two shards".
  auto built = slot_map::from_cluster_shards(*reply, "127.0.0.1");
  ASSERT_TRUE(built.has_value()) << built.error().message;
  const auto& map = *built;
  EXPECT_EQ(map.covered_slots(), 16384u);
  ASSERT_EQ(map.masters().size(), 3u);
  EXPECT_EQ(map.master_of(0)->id, id_a);
  EXPECT_EQ(map.master_of(0)->replicas, (std::vector<node_address>{{"127.0.0.1", 7003}}));
  EXPECT_EQ(map.master_of(16000)->address.port, 7000);
  EXPECT_EQ(map.master_of(15999)->address, (node_address{"::1", 7001}));
  EXPECT_EQ(map.master_of(5461)->replicas, (std::vector<node_address>{{"127.0.0.1", 7005}}))
      << "a failed replica is left out";
  EXPECT_EQ(map.masters()[2].id, id_c);

  auto two = parse(
      arr({arr({bulk("slots"), arr({num(0), num(1)}), bulk("nodes"),
                arr({shard_node(id_a, "h", 1, "master"), shard_node(id_b, "h", 2, "master")})})}));
  auto t = slot_map::from_cluster_shards(*two, "127.0.0.1");
  ASSERT_FALSE(t.has_value());
  EXPECT_EQ(t.error().message, "CLUSTER SHARDS: shard 0 has two masters");
  auto odd = parse(arr({arr({bulk("slots"), arr({num(0)}), bulk("nodes"), arr({})})}));
  ASSERT_FALSE(slot_map::from_cluster_shards(*odd, "127.0.0.1").has_value());
  auto overlap = parse(arr({
      arr({bulk("slots"), arr({num(0), num(10)}), bulk("nodes"),
           arr({shard_node(id_a, "h", 1, "master")})}),
      arr({bulk("slots"), arr({num(10), num(20)}), bulk("nodes"),
           arr({shard_node(id_b, "h", 2, "master")})}),
  }));
  auto o = slot_map::from_cluster_shards(*overlap, "127.0.0.1");
  ASSERT_FALSE(o.has_value());
  EXPECT_EQ(o.error().message, "CLUSTER SHARDS: shard 1: slot 10 is in two shards");
}

TEST(cluster_slots, moved_updates_the_map) {
  auto reply = parse(three_masters());
  auto map = slot_map::from_cluster_slots(*reply, "127.0.0.1").value();
  auto moved = parse_redirect("MOVED 866 127.0.0.1:7001", "127.0.0.1");
  ASSERT_TRUE(moved);
  const auto to = map.assign(moved->slot, moved->to);
  EXPECT_EQ(to, 1u) << "an existing master";
  EXPECT_EQ(map.master_of_key("hello")->address.port, 7001);
  EXPECT_EQ(map.master_of(865)->address.port, 7000) << "only that slot moved";
  EXPECT_EQ(map.covered_slots(), 16384u);
  // A node the map does not know (a new master) is added.
  const auto fresh = map.assign(867, node_address{"127.0.0.1", 7010});
  EXPECT_EQ(fresh, 3u);
  EXPECT_EQ(map.masters().size(), 4u);
  EXPECT_EQ(map.master_of(867)->address.port, 7010);
  // An uncovered slot becomes covered.
  slot_map empty;
  EXPECT_EQ(empty.covered_slots(), 0u);
  empty.assign(5, node_address{"127.0.0.1", 7000});
  EXPECT_EQ(empty.covered_slots(), 1u);
  empty.assign(5, node_address{"127.0.0.1", 7001});
  EXPECT_EQ(empty.covered_slots(), 1u);
  empty.assign(16384, node_address{"127.0.0.1", 7001});
  EXPECT_EQ(empty.covered_slots(), 1u) << "no such slot: ignored";
}

// --- grouping a request's keys --------------------------------------------------------------

TEST(cluster_slots, route_keys_groups_by_master_then_slot) {
  auto reply = parse(arr({
      arr({num(0), num(5460), slots_node("127.0.0.1", 7000, id_a)}),
      arr({num(5461), num(10922), slots_node("127.0.0.1", 7001, id_b)}),
      // 10923..16383 not covered (a master down, say)
  }));
  auto map = slot_map::from_cluster_slots(*reply, "127.0.0.1").value();
  // hello and {hello}x: slot 866 (7000); somekey: 11058 (not covered); foo{hash_tag}: 2515
  // (7000); x{b} and {b}y: 3300, the slot of "b" (7000); qux: 9995 (7001).
  const std::vector<std::string> keys = {"hello", "somekey", "{hello}x", "foo{hash_tag}",
                                         "x{b}",  "qux",     "{b}y"};
  ASSERT_EQ(key_hash_slot("x{b}"), key_hash_slot("{b}y"));
  auto routed = route_keys(map, keys);
  EXPECT_EQ(routed.uncovered, (std::vector<std::size_t>{1}));
  std::size_t seen = 0;
  std::set<std::uint16_t> masters;
  for (const auto& m : routed.masters) {
    EXPECT_TRUE(masters.insert(m.master).second) << "one batch per master";
    for (const auto& s : m.slots) {
      for (auto i : s.keys) {
        EXPECT_EQ(key_hash_slot(keys[i]), s.slot);
        EXPECT_EQ(map.master_index(s.slot), m.master);
        ++seen;
      }
    }
  }
  EXPECT_EQ(seen, keys.size() - routed.uncovered.size());
  // hello and {hello}x: one slot batch, in input order.
  const auto& first = routed.masters.front();
  EXPECT_EQ(first.master, map.master_index(866));
  EXPECT_EQ(first.slots.front().slot, 866);
  EXPECT_EQ(first.slots.front().keys, (std::vector<std::size_t>{0, 2}));
  ASSERT_EQ(routed.masters.size(), 2u);
  ASSERT_EQ(first.slots.size(), 3u);  // 866, 2515, 3300
  EXPECT_EQ(first.slots[2].slot, 3300);
  EXPECT_EQ(first.slots[2].keys, (std::vector<std::size_t>{4, 6}));
  EXPECT_EQ(routed.masters[1].master, map.master_index(9995));
  ASSERT_EQ(routed.masters[1].slots.size(), 1u);
  EXPECT_EQ(routed.masters[1].slots[0].keys, (std::vector<std::size_t>{5}));
  EXPECT_TRUE(route_keys(map, std::vector<std::string>{}).masters.empty());
}

TEST(cluster_slots, sluice_bucket_keys_hash_their_whole_bucket_identity) {
  // A bucket's key carries its own hash tag `{<limit>|<ns>|<enc>}` (key layout), or its group
  // hash's `{<limit>|<ns>|#<g>}` (hash layout): each bucket is one key in one slot, and two
  // limits of one caller usually land on different slots (one script call per slot).
  const auto k = limiter::bucket_key("search_key", limiter::key_namespace::api_key, "key-a");
  EXPECT_EQ(k, "sl:{search_key|k|rkey-a}");
  EXPECT_EQ(hash_tag(k), "search_key|k|rkey-a");
  const auto packed = limiter::packed_address(k, 65536);
  EXPECT_EQ(hash_tag(packed.key).substr(0, 13), "search_key|k|");
  EXPECT_EQ(packed.key.find('{'), 3u);
  const auto hashed = limiter::bucket_key("l", limiter::key_namespace::header, "a{b}c d");
  EXPECT_EQ(hash_tag(hashed).size(), std::string("l|h|x").size() + 32)
      << "a caller's braces never reach the key: " << hashed;
  std::set<std::uint16_t> slots;
  for (const char* limit : {"free_minute", "search_key", "global_search"}) {
    slots.insert(key_hash_slot(limiter::bucket_key(limit, limiter::key_namespace::api_key, "k")));
  }
  EXPECT_GT(slots.size(), 1u) << "one request's limits span slots";
}

}  // namespace
}  // namespace sluice::store
