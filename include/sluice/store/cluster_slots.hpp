// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// Redis Cluster slot routing: key → hash slot (CRC16 and hash tags), the slot map of a
/// cluster (built from a `CLUSTER SLOTS` or `CLUSTER SHARDS` reply), the `MOVED` / `ASK`
/// redirections, and the grouping of one request's keys by master and slot. Pure functions
/// and values: no I/O, no allocation on the lookup path, thread-compatible (a slot_map may be
/// read from several threads while none modifies it).
///
/// Rules follow the Redis Cluster specification ("Key distribution model", "Hash tags",
/// "Redirection and resharding") and the command docs of CLUSTER SLOTS and CLUSTER SHARDS.

#include "sluice/config/rules.hpp"
#include "sluice/store/lua_scripts.hpp"

#include <hiredis/hiredis.h>

#include <boost/system/result.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::store {

/// The number of hash slots of a Redis Cluster (the specification: 16384, slots 0..16383).
inline constexpr std::uint16_t cluster_slot_count = 16384;

/// CRC16 of `data` as the Redis Cluster specification defines it: the XMODEM variant
/// (polynomial 0x1021, initial value 0, no reflection, no final XOR). The specification's test
/// vector: crc16("123456789") == 0x31C3. O(n), table-driven.
std::uint16_t crc16(std::string_view data) noexcept;

/// The part of `key` that is hashed (the specification, "Hash tags"): if the key contains a
/// `{`, and a `}` follows it, and at least one byte lies between the first `{` and the first
/// `}` after it, those bytes; otherwise the whole key. So `{user1000}.following` hashes
/// `user1000`, `foo{}{bar}` hashes the whole key (the first tag is empty), `foo{{bar}}` hashes
/// `{bar`, and `foo{bar}{zap}` hashes `bar`. The view points into `key`.
std::string_view hash_tag(std::string_view key) noexcept;

/// The bucket keys of the `l.shards` shards of sharded limit `l` (`shards: S`, by: global):
/// shard i's key is limiter::bucket_key() of the first limiter::shard_value(i, variant)
/// whose Redis key under `layout` (lua::redis_key) has its slot in the middle quarter of the
/// i-th of min(S, 64) equal parts of the slot space (i mod 64 beyond), so on a cluster whose
/// masters hold equal contiguous slot ranges the shards spread over the masters as evenly as
/// their number allows (S >= masters: every master). Deterministic: every gateway computes
/// the same keys. About 4 × min(S, 64) tries per shard.
std::vector<std::string> spread_shard_keys(const config::limit& l, const lua::key_layout& layout);

/// The hash slot of `key`: crc16(hash_tag(key)) mod 16384 (the specification's
/// HASH_SLOT). Agrees with `CLUSTER KEYSLOT key`.
std::uint16_t key_hash_slot(std::string_view key) noexcept;

/// A node's client endpoint: a host (an IPv4 or IPv6 address without brackets, or a host
/// name) and a TCP port.
struct node_address {
  std::string host;
  std::uint16_t port = 0;

  /// `host:port`, or `[host]:port` when the host contains a `:` (an IPv6 address).
  std::string to_string() const;
  bool operator==(const node_address&) const = default;
};

/// Parses an endpoint `host:port`, `[v6]:port` or a bare IPv6 address with the port after its
/// last `:` (`::1:7000`, the form Redis itself prints in redirections). An empty host (`:7000`)
/// stands for `asked_host` (Redis prints it when the node's endpoint is unknown, meaning "the
/// host you sent the command to"). The port must be 1..65535 in decimal; the host may not
/// contain spaces, control bytes or brackets (other than the IPv6 pair). nullopt when `text`
/// is not such an endpoint.
std::optional<node_address> parse_node_address(std::string_view text,
                                               std::string_view asked_host = {});

/// One master of the slot map: its endpoint, its node id (40 hex characters, empty when the
/// reply had none) and the endpoints of its replicas (in the reply's order).
struct cluster_master {
  node_address address;
  std::string id;
  std::vector<node_address> replicas;
};

/// Why a topology reply could not be read: a message naming the part of the reply (for the
/// store's log line, e.g. `CLUSTER SLOTS: range 0-9: node 0 has no usable endpoint`).
struct topology_error {
  std::string message;
};

/// Lets `result<T, topology_error>::value()` throw (std::runtime_error with the message):
/// for start-up and tests; the data path checks has_value().
[[noreturn]] void throw_exception_from_error(const topology_error& e,
                                             const boost::source_location& loc);

/// Which master serves each of the 16384 slots. Built from a reply of the cluster (all slots
/// that the reply does not mention are "not covered"), then kept current with MOVED
/// (assign()). Lookups are O(1): one array of 16384 master indices (32 KiB).
class slot_map {
 public:
  /// The index of "no master" in master_index().
  static constexpr std::uint16_t no_master = 0xFFFF;

  /// An empty map: no slot covered, no master.
  slot_map();

  /// Builds the map from a `CLUSTER SLOTS` reply (Redis 3.0+; the RESP2 shape): an array of
  /// ranges, each `[first, last, master, replica...]`, each node `[endpoint, port, id?,
  /// metadata?]`. An endpoint that is nil or empty stands for `asked_host` (the docs: connect
  /// to the endpoint the command was sent to, with the node's port); `?` (a misconfigured
  /// preferred endpoint) is an error. Ranges may come in any order, with gaps; masters are
  /// told apart by their id (or, without one, by endpoint). Errors (a topology_error naming
  /// the range): a reply that is not an array of that shape, a slot outside 0..16383, a range
  /// whose first slot exceeds its last, a slot in two ranges, a bad port.
  static boost::system::result<slot_map, topology_error> from_cluster_slots(
      const redisReply& reply, std::string_view asked_host);

  /// Builds the map from a `CLUSTER SHARDS` reply (Redis 7.0+; RESP2): an array of shards,
  /// each a flat `[name, value, ...]` list with `slots` (a flat list of first, last pairs)
  /// and `nodes` (each a flat list with `id`, `endpoint` or `ip`, `port` or `tls-port`,
  /// `role` "master"/"replica", `health`). The node with role master serves the shard's
  /// slots; replicas whose health is `failed` are left out. A shard with slots and no master
  /// leaves them not covered. Endpoint and error rules as from_cluster_slots(). `tls`: the
  /// store speaks TLS, so a node's `tls-port` is taken before its `port` (a node serving
  /// both lists both).
  static boost::system::result<slot_map, topology_error> from_cluster_shards(
      const redisReply& reply, std::string_view asked_host, bool tls = false);

  /// The index in masters() of the master serving `slot`, or no_master (not covered, or
  /// slot >= 16384).
  std::uint16_t master_index(std::uint16_t slot) const noexcept {
    return slot < cluster_slot_count ? slots_[slot] : no_master;
  }
  /// The master serving `slot`, or nullptr when it is not covered.
  const cluster_master* master_of(std::uint16_t slot) const noexcept;
  /// The master serving `key`'s slot, or nullptr.
  const cluster_master* master_of_key(std::string_view key) const noexcept {
    return master_of(key_hash_slot(key));
  }

  /// Every master named by the reply or by assign(), in first-seen order. A master may serve
  /// no slot any more (after a reshard or failover moved them all away).
  const std::vector<cluster_master>& masters() const noexcept { return masters_; }
  /// How many slots have a master; 16384 when the whole key space is covered.
  std::size_t covered_slots() const noexcept { return covered_; }

  /// Records that `to` now serves `slot`: what a `MOVED` redirection tells a client to do
  /// with its map (the specification). `to` becomes a new master when no master has that
  /// endpoint (its id and replicas unknown until the next refresh). slot >= 16384 is
  /// ignored. Returns the master's index (no_master when 65535 masters are known already).
  std::uint16_t assign(std::uint16_t slot, const node_address& to);

 private:
  std::uint16_t add_master(cluster_master m);
  std::uint16_t find_master(const node_address& a) const noexcept;

  std::vector<cluster_master> masters_;
  std::vector<std::uint16_t> slots_;  // cluster_slot_count entries, master index or no_master
  std::size_t covered_ = 0;
};

/// A redirection error reply (the specification, "MOVED Redirection" and "ASK redirection").
struct redirect {
  enum class kind {
    moved,  ///< the slot is served by `to` from now on: update the map, retry there
    ask,    ///< this one query only: send `ASKING` then the command to `to`; map unchanged
  };
  kind type = kind::moved;
  std::uint16_t slot = 0;
  node_address to;

  bool operator==(const redirect&) const = default;
};

/// Parses the text of an error reply (hiredis's `str`, without the leading `-`):
/// `MOVED <slot> <endpoint>` or `ASK <slot> <endpoint>`, single spaces, the slot in decimal
/// 0..16383, the endpoint as parse_node_address() reads it (an empty host is `asked_host`).
/// nullopt for any other error (CROSSSLOT, TRYAGAIN, CLUSTERDOWN...) or a malformed one.
std::optional<redirect> parse_redirect(std::string_view error, std::string_view asked_host);

/// The keys of one request that share a slot: one script call (a script may touch keys of
/// one slot only, the specification's "multi-key operations"; keys of two slots on one master
/// are still refused with CROSSSLOT). `keys` are indices into the input, in input order.
struct slot_batch {
  std::uint16_t slot = 0;
  std::vector<std::size_t> keys;
};

/// The keys of one request that one master serves, by slot (slots in first-seen order).
struct master_batch {
  std::uint16_t master = slot_map::no_master;  ///< index in slot_map::masters()
  std::vector<slot_batch> slots;
};

/// A request's keys routed over the cluster: one batch per master (in first-seen order), and
/// the indices of the keys whose slot no master covers.
struct key_routing {
  std::vector<master_batch> masters;
  std::vector<std::size_t> uncovered;
};

/// Groups `keys` (one request's bucket keys) by the master serving their slot, then by slot.
/// O(keys × distinct slots); a request has a handful of keys.
key_routing route_keys(const slot_map& map, std::span<const std::string> keys);

}  // namespace sluice::store
