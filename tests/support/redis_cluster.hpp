// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// Test fixture: a real Redis Cluster on free loopback ports (by default three masters with
/// one replica each), made with `redis-cli --cluster create`, every node a redis_server
/// started and stopped by pid. Each node has its own cluster config file in its own temporary
/// directory and its own `cluster-port` (the bus port, picked free like the client port, so
/// port + 10000 need not be free). Construction returns once every node reports
/// `cluster_state:ok`, knows every other node and every master's replicas and agrees on the
/// slot table, and every replica's link to its master is up; it throws std::runtime_error otherwise
/// (within about 30 s).
///
/// Nodes are named by index (0..size()-1, the order of `redis-cli --cluster create`); which
/// ones are masters is read from the cluster, never assumed. Every wait has a deadline.

#include "support/redis_server.hpp"

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace sluice::test {

class redis_cluster {
 public:
  struct options {
    unsigned masters = 3;
    unsigned replicas_per_master = 1;
    /// `cluster-node-timeout`: how long a node may be unreachable before it is failed over.
    std::chrono::milliseconds node_timeout{1000};
    /// Added to every node's environment ("NAME=VALUE", as redis_server takes it): e.g. the
    /// clock-step preload (tests/preload/clock_step.cpp) with one offset file for all nodes,
    /// so the cluster's clock steps as one.
    std::vector<std::string> env;
    /// TLS (unset: none): the redis-server arguments that serve TLS on the port given
    /// (redis_tls_material::server_args). Every node then also listens for TLS on a port of its
    /// own, the cluster bus and replication use TLS (`tls-cluster`, `tls-replication`), and
    /// the nodes name their TLS ports to TLS clients; the plain ports stay for the fixture.
    std::function<std::vector<std::string>(std::uint16_t tls_port)> tls_args;
  };

  redis_cluster() : redis_cluster(options{}) {}
  explicit redis_cluster(options opts);
  /// Stops every node by pid (redis_server's destructor).
  ~redis_cluster();

  redis_cluster(const redis_cluster&) = delete;
  redis_cluster& operator=(const redis_cluster&) = delete;

  std::size_t size() const { return nodes_.size(); }
  /// Node `i`'s client port (loopback).
  std::uint16_t port(std::size_t i) const { return nodes_.at(i)->port(); }
  /// Every node's client port: a seed list.
  std::vector<std::uint16_t> ports() const;
  /// Every node's TLS port (options::tls_args), in node order; empty without TLS.
  const std::vector<std::uint16_t>& tls_ports() const { return tls_ports_; }
  /// The `store:` value of a rules file for a gateway on this cluster: `{type: redis-cluster,
  /// nodes: [every node], timeout: <timeout>}`.
  std::string store_yaml(const std::string& timeout = "250ms") const;
  /// Node `i`'s cluster node id (`CLUSTER MYID`, 40 hex characters).
  const std::string& node_id(std::size_t i) const { return ids_.at(i); }
  /// The node with client port `port`, if it is one of ours.
  std::optional<std::size_t> index_of_port(std::uint16_t port) const;
  /// Whether node `i` runs (not stopped by stop_node()).
  bool running(std::size_t i) const { return nodes_.at(i)->pid() > 0; }
  redis_server& node(std::size_t i) { return *nodes_.at(i); }

  /// Runs one command on node `i` (redis_server::command: fresh connection, 1 s timeout).
  redis_reply command(std::size_t i, const std::vector<std::string>& argv) const;

  /// The node serving `slot` as master, as the first running node's `CLUSTER SLOTS` says.
  std::optional<std::size_t> master_of_slot(std::uint16_t slot) const;
  /// The masters that serve at least one slot, as the first running node's `CLUSTER SLOTS`
  /// says (ascending indices).
  std::vector<std::size_t> masters() const;
  /// The running replicas of master `m` (`ROLE` of each running node).
  std::vector<std::size_t> replicas_of(std::size_t m) const;

  /// SIGKILLs node `i` (no failover is waited for).
  void stop_node(std::size_t i);
  /// Starts node `i` again on its port and cluster config file (it rejoins the cluster; a
  /// failed-over master comes back as a replica).
  void restart_node(std::size_t i);
  /// Stops master `m` and waits until one of its replicas serves every slot it served, on
  /// every running node's view, and every running node reports `cluster_state:ok`. Returns
  /// the new master's index; throws std::runtime_error after `limit`.
  std::size_t fail_over_master(std::size_t m,
                               std::chrono::milliseconds limit = std::chrono::seconds(20));

  /// Moves `slot` with its keys from its master to master `to` (the resharding steps of the
  /// Redis Cluster specification: `CLUSTER SETSLOT <slot> IMPORTING` on the target,
  /// `MIGRATING` on the source, `MIGRATE` of every key, then `SETSLOT <slot> NODE` on the
  /// target, the source and the other masters) and waits until every running node agrees.
  /// Throws std::runtime_error on an error reply or after 10 s.
  void move_slot(std::uint16_t slot, std::size_t to);
  /// The first half of move_slot(): the slot is MIGRATING on its master and IMPORTING on `to`,
  /// and no key moved yet; the source then answers `ASK` for a key of the slot it does not
  /// hold. Returns the source's index.
  std::size_t begin_slot_migration(std::uint16_t slot, std::size_t to);
  /// The second half: migrates the slot's keys from `from` and assigns the slot to `to`.
  void finish_slot_migration(std::uint16_t slot, std::size_t from, std::size_t to);

  /// Waits until every running node reports `cluster_state:ok` and the same master for every
  /// slot; false after `limit`.
  bool wait_consistent(std::chrono::milliseconds limit) const;

  /// The text of node `i`'s log (for failure messages).
  std::string log(std::size_t i) const;

 private:
  void create_cluster();
  std::optional<std::size_t> first_running() const;
  // Slot → master port for all 16384 slots from node i's CLUSTER SLOTS (0 = not covered);
  // empty on an error.
  std::vector<std::uint16_t> slot_owners(std::size_t i) const;

  options opts_;
  std::vector<std::uint16_t> tls_ports_;
  std::vector<std::unique_ptr<redis_server>> nodes_;
  std::vector<std::string> ids_;
};

}  // namespace sluice::test
