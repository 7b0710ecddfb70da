// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// The Redis Cluster counter store (`store.type: redis-cluster`): the buckets sharded over a
/// cluster's masters by their hash slot, one redis_store connection per master per worker.
///
/// Rules from the Redis Cluster specification (https://redis.io/docs/reference/cluster-spec/:
/// "Key distribution model", "Redirection and resharding", "Multi-key operations") and the
/// command docs of CLUSTER SHARDS, CLUSTER SLOTS, ASKING and FCALL.

#include "sluice/store/cluster_slots.hpp"
#include "sluice/store/counter_store.hpp"
#include "sluice/store/redis_store.hpp"

#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

namespace sluice::store {

/// Settings of a cluster store.
struct redis_cluster_settings {
  /// Seed nodes (at least one): asked for the slot map in turn when no known master answers.
  std::vector<node_address> seeds;
  /// The settings of every master's connection (`host` and `port` are replaced by the
  /// master's). `command_timeout` is also the deadline of a whole cluster check, redirections
  /// and both steps of a check over several slots included.
  redis_settings node;
  /// Topology refresh period (`CLUSTER SHARDS`, `CLUSTER SLOTS` where SHARDS is refused);
  /// a refresh is also asked for at once after `MOVED`, `CLUSTERDOWN`, a slot no master
  /// covers or a failed check, at most once per `refresh_min_gap`.
  std::chrono::milliseconds refresh_every{5000};
  std::chrono::milliseconds refresh_min_gap{100};
  /// Deadline of one node's answer to a topology query (connect included).
  std::chrono::milliseconds topology_timeout{250};
  /// Redirections (`MOVED`, `ASK`) followed per call before it fails with store_error.
  unsigned max_redirects = 5;
};

/// Counters of the cluster store itself (the node connections' counters are in stats()).
struct cluster_stats {
  std::uint64_t topology_refreshes = 0;  ///< slot maps read from a node and applied
  std::uint64_t topology_failures = 0;   ///< refreshes where no node gave a slot map
  std::uint64_t moved = 0;               ///< `MOVED` replies followed
  std::uint64_t asks = 0;                ///< `ASK` replies followed (`ASKING`, then the call)
  std::uint64_t split_checks = 0;        ///< checks whose limits live in several slots
  /// Split checks admitted by every node's peek whose commit one node then refused (another
  /// request took the tokens in between): the other slots' limits were charged.
  std::uint64_t commit_refusals = 0;
  /// Split checks whose commit failed on a node (error, timeout) after another slot's commit
  /// went through: the route's failure policy answered, and the other slots were charged.
  std::uint64_t partial_commits = 0;
  std::uint64_t masters = 0;        ///< gauge: masters serving at least one slot
  std::uint64_t covered_slots = 0;  ///< gauge: slots with a master in the map (16384 = all)
};

/// A counter store over a Redis Cluster, bound to one executor (a worker's io_context).
///
/// Routing: each limit's Redis key (lua::redis_key) carries its bucket's hash tag, so one
/// bucket is one slot; a request's limits are grouped by slot (route_keys) and each group is
/// one FCALL on the master of its slot, since a function may only touch keys of one slot
/// (CROSSSLOT otherwise; the function's `allow-cross-slot-keys` flag would only let it reach
/// other slots of the same node, and sluice neither sets nor needs it).
///
/// One slot group: one call, exactly the single-Redis semantics (atomic, all-or-nothing).
/// Several groups are decided in two steps, the calls of each step sent in parallel:
/// first every group with an enforced limit in peek mode (decided, nothing written; a group
/// of shadow limits only is sent for real at once), then, only if every enforced limit
/// admits, the real calls of those groups. A refused request therefore charges no enforced
/// limit (its shadow limits that admit alone are charged, as in one call). What can still
/// happen between the two steps: another request may take the tokens one group needs, which
/// then refuses while the other groups are charged (cluster_stats::commit_refusals); a node
/// that fails or misses the deadline in the second step makes the route's failure policy
/// answer while the groups already committed stay charged (cluster_stats::partial_commits).
/// Refunds are not attempted (a refund could itself fail or overdraw a window).
///
/// Redirections: `MOVED` updates the slot map (slot_map::assign), asks for a refresh and
/// retries on the named master; `ASK` sends `ASKING` and the call to the named node once,
/// map unchanged; at most `max_redirects` of them per call, all inside the check's
/// deadline. `TRYAGAIN`, `CLUSTERDOWN`, `CROSSSLOT` and every other failure complete the check
/// with an error (the route's failure policy answers), never with a decision.
///
/// Topology: read at start() and then every `refresh_every`, and soon after any failure, from
/// the known masters first, then the seeds, each within `topology_timeout`, off nothing but
/// the worker's executor (names are resolved by Asio). A master that no longer serves a slot
/// has its connection closed; each master's connection loads the check function itself (and
/// again on `NOSCRIPT`/"Function not found"). No slot map yet: every check fails at once
/// with store_unavailable.
///
/// Thread-safety: check, start, stop, connection_epoch and the destructor on `ex`'s thread;
/// stats() and cluster() from any thread.
class redis_cluster_store final : public counter_store {
 public:
  /// Does not connect: call start().
  redis_cluster_store(boost::asio::any_io_executor ex, redis_cluster_settings settings);
  /// Stops (see stop()).
  ~redis_cluster_store() override;

  /// Decides `req` as described above. Errors: store_unavailable (no slot map, a slot not
  /// covered, a master not connected), store_timeout (the deadline passed), store_error (an
  /// error reply, too many redirections, a connection lost), store_protocol.
  boost::asio::awaitable<boost::system::result<limiter::check_outcome>> check(
      limiter::check_request req) override;
  void start() override;
  void stop() override;
  /// The sum over the master connections, past ones included; `connected` only while the
  /// map covers every slot and every master's connection is connected; `breaker` the worst.
  store_stats stats() const override;
  /// Changes whenever a master connection is made again, added or closed.
  std::uint64_t connection_epoch() const override;
  /// The last refresh that found no slot map, else the first master connection's failure.
  std::string failure() const override;

  /// The cluster store's own counters.
  cluster_stats cluster() const;

 private:
  struct impl;
  std::shared_ptr<impl> impl_;
};

}  // namespace sluice::store
