// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// The Redis counter store: one connection per worker (plain TCP or TLS, on the worker's
/// io_context), running the embedded check function with FCALL (EVALSHA before Redis 7).

#include "sluice/store/counter_store.hpp"
#include "sluice/store/lua_scripts.hpp"
#include "sluice/store/redis_tls.hpp"

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace sluice::store {

/// Where a Redis store finds its master when it is run by Redis Sentinel
/// (`store.type: redis-sentinel`). Rules from the Redis Sentinel documentation
/// (https://redis.io/docs/management/sentinel/) and its client guidelines
/// (https://redis.io/docs/reference/sentinel-clients/): the Sentinels are asked in turn
/// (`SENTINEL GET-MASTER-ADDR-BY-NAME`), each under `timeout`, the first one that answers moves
/// to the front of the list; a nil answer means that Sentinel does not know the name (the next
/// one is asked); the node named is checked with `ROLE` before it serves checks; `+switch-master`
/// is followed on a subscription to every Sentinel.
struct sentinel_settings {
  struct address {
    std::string host;  ///< an IP address or a name (resolved off the worker's thread)
    std::uint16_t port = 26379;
  };
  std::vector<address> sentinels;          ///< at least one
  std::string master_name;                 ///< the name the Sentinels monitor the master under
  std::string password;                    ///< the Sentinels' own password ("" = no AUTH to them)
  std::string username;                    ///< their ACL user ("" = the default user)
  redis_tls tls;                           ///< TLS to the Sentinels (the store's own)
  std::chrono::milliseconds timeout{200};  ///< deadline of one Sentinel's answer (connect included)
};

/// Settings of one Redis connection.
struct redis_settings {
  std::string host = "127.0.0.1";
  std::uint16_t port = 6379;
  std::chrono::milliseconds command_timeout{5};    ///< deadline of one check
  std::chrono::milliseconds connect_timeout{250};  ///< deadline of one connection attempt
  std::string password;                            ///< "" = no AUTH
  /// The ACL user (`AUTH username password`, Redis 6+); "" = `AUTH password` (the default
  /// user).
  std::string username;
  /// TLS to the server (no context: plain TCP).
  redis_tls tls;
  /// Consecutive failed checks (deadline missed, connection lost mid-check, an error reply that
  /// says the server cannot serve: READONLY, OOM, BUSY, LOADING...) that open the breaker;
  /// 0 = never open it.
  unsigned breaker_failures = 5;
  /// How long the breaker stays open before it lets one probe check through.
  std::chrono::milliseconds breaker_cool_down{500};
  /// How buckets are laid out in Redis (hash groups by default; lua_scripts.hpp).
  lua::key_layout layout;
  /// Load the check script at each connect (SCRIPT LOAD, the connection is ready once it is
  /// loaded). false for a connection that only reads (the plan directory): its set-up is a
  /// PING, and check() is never called on it.
  bool load_script = true;
  /// Checks sent in one script call at most (lua_scripts.hpp, check(): a batch). Checks
  /// started in one turn of the executor's loop are sent together after it; 1 sends each
  /// check at once, alone.
  std::size_t max_batch = 64;
  /// A node of a Redis Cluster (redis_cluster_store): a batch may hold checks of several of
  /// its slots, so it names its keys as arguments (none declared; the check function is
  /// registered allow-cross-slot-keys); a batch the node refuses because a key is no longer
  /// served there (a slot moving) wrote nothing and is sent again one check per call, each
  /// with its keys declared, whose MOVED or ASK the cluster store follows. With EVALSHA
  /// (functions refused) a node sends each check alone.
  bool cluster_node = false;
  /// Set: the master's address comes from these Sentinels before every connection attempt
  /// (`host` and `port` are then ignored), and a `+switch-master` for the master drops the
  /// connection so the next one goes to the new master.
  std::optional<sentinel_settings> sentinel;
};

/// A Redis store bound to one executor (a worker's io_context).
///
/// Protocol: the script is loaded with SCRIPT LOAD
/// after each connect and called with EVALSHA; a NOSCRIPT reply triggers one SCRIPT LOAD and
/// one retry. A check that times out or whose connection drops is never replayed (the
/// script may have run). Each command has its own deadline timer; a late reply is dropped.
/// Concurrent checks are pipelined on the one connection. Reconnects with jittered backoff
/// (50 ms doubling to 500 ms) after a failed attempt or a lost connection. A connection attempt
/// (name resolution, TCP connect, AUTH, SCRIPT LOAD) is bounded by `connect_timeout`; host
/// names are resolved off the worker's thread.
///
/// Circuit breaker: after `breaker_failures` consecutive failed checks the breaker opens and
/// every check fails at once with store_unavailable (costing no deadline) for
/// `breaker_cool_down`; then it is half-open: one check goes through as a probe while the others
/// still fail at once; the probe's success closes the breaker, its failure opens it again. When
/// the breaker opens on a missed deadline the connection is torn down and a new one is made (a
/// stalled peer — SIGSTOP, CLIENT PAUSE, a black hole — may never answer on the old one); a
/// connection made ready while the breaker is open makes it half-open at once. Each state change
/// is logged once (warn on open, info on close, debug for the probes in between); connection
/// failures are logged once per distinct reason until the next success.
///
/// With `settings.sentinel`, "where to connect" is asked of the Sentinels before every attempt
/// (after a lost connection, a wrong-node reply, a `+switch-master`): no Sentinel answering, or
/// none knowing the master name, leaves the store not connected (checks fail at once with
/// store_unavailable, the routes' failure policy answers), logged once per change of state and
/// counted in store_stats::sentinel_unreachable / sentinel_unknown_master; a node that is not a
/// master (`ROLE`) is a failed attempt. See sentinel_settings.
///
/// check() errors: store_unavailable at once while not connected (before start(), while
/// (re)connecting, after stop()); store_timeout when `command_timeout` passes (the late reply
/// is dropped and counted in store_stats::late_replies); store_error for an error reply
/// (READONLY, OOM, BUSY, WRONGTYPE, a second NOSCRIPT...) or a connection lost mid-check;
/// store_protocol for a reply of the wrong shape.
///
/// Thread-safety: check, start, stop and the destructor are called on `ex`'s thread, and the
/// store is destroyed before its io_context; stats() may be called from any thread (the
/// counters are atomic; a snapshot is not taken atomically across fields).
class redis_store final : public counter_store {
 public:
  /// `ex`: the worker's executor, on which the connection runs and checks complete. Does not
  /// connect: call start(). `settings.host` is an address or a name (resolved by Asio, off the
  /// worker's thread, before every connection attempt).
  redis_store(boost::asio::any_io_executor ex, redis_settings settings);
  /// Stops (see stop()).
  ~redis_store() override;

  boost::asio::awaitable<boost::system::result<limiter::check_outcome>> check(
      limiter::check_request req) override;

  /// How the cluster store (redis_cluster_store) sends one check to this node.
  struct routed_options {
    /// Send `ASKING` right before the check (an `ASK` redirection: the Redis Cluster
    /// specification, "ASK redirection"; the flag lasts one command, so a re-sent check gets
    /// it again).
    bool asking = false;
    /// The check fails with store_timeout at this time if it is earlier than
    /// `command_timeout` from now: what is left of the cluster check's own deadline.
    std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max();
  };
  /// A check's result with the server's error text: `ec` and `outcome` as check() gives them;
  /// `error_reply` holds the error reply (at most 200 bytes) when the server answered one
  /// (`MOVED 3999 127.0.0.1:7002`, `TRYAGAIN ...`), else is empty. `MOVED` and `ASK` replies fail
  /// the check with store_error but count as answered for the breaker and are not logged here.
  struct routed_result {
    boost::system::error_code ec;
    limiter::check_outcome outcome;
    std::string error_reply;
  };
  /// check() with routed_options, for a node of a Redis Cluster. Never throws.
  boost::asio::awaitable<routed_result> check_routed(limiter::check_request req,
                                                     routed_options how);

  /// `HGET hash field` on this connection, under the same deadline (`command_timeout`),
  /// breaker and reconnection as the checks: the value, or nullopt when the hash has no
  /// such field. Errors as check()'s (store_unavailable, store_timeout, store_error,
  /// store_protocol for a reply that is neither a bulk string nor nil).
  boost::asio::awaitable<boost::system::result<std::optional<std::string>>> hget(std::string hash,
                                                                                 std::string field);
  void start() override;
  void stop() override;
  store_stats stats() const override;
  /// The connections made so far (a new one starts a new epoch).
  std::uint64_t connection_epoch() const override;
  /// The last failed connection attempt ("redis host:port: why"), "" once connected.
  std::string failure() const override;

 private:
  struct impl;
  std::shared_ptr<impl> impl_;
};

}  // namespace sluice::store
