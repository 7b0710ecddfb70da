// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// Test fixture: a real Redis Sentinel group on free loopback ports: a primary and a replica
/// (redis_server, the replica started with `--replicaof`) and three Sentinels (Debian's
/// `redis-sentinel`, each with its own config file in its own temporary directory, since a
/// Sentinel rewrites its config), all started and stopped by pid and killed with the test
/// process. Construction returns once every Sentinel names the primary for the master name,
/// knows the replica and the other Sentinels, and the replica's link is up; it throws
/// std::runtime_error otherwise (within about 20 s). Every wait has a deadline.

#include "support/redis_server.hpp"

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace sluice::test {

class redis_sentinel_group {
 public:
  struct options {
    std::string master_name = "sluice-primary";
    unsigned sentinels = 3;
    unsigned quorum = 2;
    /// `sentinel down-after-milliseconds`: how long the primary may be silent before a
    /// Sentinel considers it down.
    std::chrono::milliseconds down_after{1000};
    /// TLS (unset: none): the redis-server arguments that serve TLS on the port given
    /// (redis_tls_material::server_args). Each data node and Sentinel then also listens for
    /// TLS on a port of its own, replication and the Sentinels' links use TLS
    /// (`tls-replication yes`), and the Sentinels monitor and name the TLS ports; the plain
    /// ports stay for the fixture's own commands.
    std::function<std::vector<std::string>(std::uint16_t tls_port)> tls_args;
  };

  redis_sentinel_group() : redis_sentinel_group(options{}) {}
  explicit redis_sentinel_group(options opts);
  /// Stops the Sentinels, then the data nodes, by pid.
  ~redis_sentinel_group();

  redis_sentinel_group(const redis_sentinel_group&) = delete;
  redis_sentinel_group& operator=(const redis_sentinel_group&) = delete;

  const std::string& master_name() const { return opts_.master_name; }
  /// The data node started as the primary, and the one started as its replica (their roles
  /// swap after a failover; these names do not).
  redis_server& primary() { return *primary_; }
  redis_server& replica() { return *replica_; }

  /// The port clients use for a data node: its TLS port with options::tls_args, else its
  /// port. What the Sentinels name.
  std::uint16_t data_port(const redis_server& node) const;

  std::size_t sentinels() const { return sentinel_ports_.size(); }
  /// Sentinel `i`'s TLS port (0 without options::tls_args).
  std::uint16_t sentinel_tls_port(std::size_t i) const {
    return i < sentinel_tls_ports_.size() ? sentinel_tls_ports_[i] : 0;
  }
  /// Sentinel `i`'s port (loopback).
  std::uint16_t sentinel_port(std::size_t i) const { return sentinel_ports_.at(i); }
  /// Runs one command on Sentinel `i` (fresh connection, 1 s timeout).
  redis_reply sentinel_command(std::size_t i, const std::vector<std::string>& argv) const;
  /// The master's port by `SENTINEL GET-MASTER-ADDR-BY-NAME` on Sentinel `i` (nullopt when it
  /// answers nil or an error).
  std::optional<std::uint16_t> master_port(std::size_t i) const;

  /// Waits until every Sentinel names the node on `port` as the master; false after `limit`.
  bool wait_master(std::uint16_t port, std::chrono::milliseconds limit) const;
  /// `SENTINEL FAILOVER <name>` on Sentinel 0, then waits until every Sentinel names the other
  /// data node and that node's `ROLE` is master. Returns the new master's port; throws
  /// std::runtime_error after `limit`.
  std::uint16_t failover(std::chrono::milliseconds limit = std::chrono::seconds(20));

  /// SIGKILLs Sentinel `i` (its port stops answering).
  void stop_sentinel(std::size_t i);

 private:
  void spawn_sentinel(std::size_t i);
  bool ready() const;

  options opts_;
  std::unique_ptr<redis_server> primary_, replica_;
  std::vector<std::string> dirs_;
  std::vector<std::uint16_t> sentinel_ports_;
  std::vector<std::uint16_t> sentinel_tls_ports_;
  std::uint16_t primary_tls_ = 0, replica_tls_ = 0;
  std::vector<pid_t> pids_;
};

}  // namespace sluice::test
