// SPDX-License-Identifier: Apache-2.0
#pragma once
// Private to the store room: finds a Redis master through Redis Sentinel and watches for its
// switches, on one executor (a worker's), over redis_connection (plain or TLS, AUTH as configured).
//
// Rules (the Sentinel client guidelines, https://redis.io/docs/reference/sentinel-clients/):
// - lookup: the Sentinels are tried in turn, each on a short-lived connection bounded by the
//   Sentinel timeout (name resolution, connect, AUTH and the answer included); the first one
//   that answers an address moves to the front of the list, so the next lookup asks it first;
//   a nil answer means that Sentinel does not know the master name: the next one is asked.
// - switches: a connection to each Sentinel subscribed to `+switch-master`, whose messages read
//   `<master-name> <old-ip> <old-port> <new-ip> <new-port>`; a message for our name is reported
//   (once per switch, however many Sentinels announce it) and remembered, so the next lookup
//   (within a few seconds) returns the new address without asking (the Sentinel that sent it
//   has switched already; another one may still name the old master for a while). Each
//   subscription is made again, with backoff, when it is lost.
// - discovery: each lookup also asks `SENTINEL SENTINELS <master>` (pipelined, no extra round
//   trip); Sentinels named for the first time join the list (asked after the known ones, and
//   watched); a learned Sentinel a later answer does not name is set aside (neither asked nor
//   watched) until one names it again. The configured Sentinels (the seeds) always stay. At
//   most 16 Sentinels are kept.
// Everything runs on the executor given at construction; nothing locks.

#include "sluice/store/redis_store.hpp"

#include <boost/asio/any_io_executor.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace sluice::store::detail {

class sentinel_locator {
 public:
  /// The outcome of one lookup.
  struct located {
    enum class kind {
      found,           ///< `host`:`port` is the master, as a Sentinel (or a switch) named it
      unknown_master,  ///< every Sentinel that answered does not know the master name
      unreachable,     ///< no Sentinel answered within its timeout
      stopped,         ///< stop() was called
    };
    kind what = kind::unreachable;
    std::string host;
    std::uint16_t port = 0;
    std::string sentinel;  ///< found: the Sentinel that named it ("host:port", or "+switch-master")
    std::string detail;    ///< not found: what each Sentinel did, for the log
  };
  using locate_handler = std::function<void(located)>;
  /// Called (posted, never inline) for each `+switch-master` of our master: the new address.
  using switch_handler = std::function<void(std::string host, std::uint16_t port)>;
  /// Called (on the executor) with the number of Sentinels just learned, when a Sentinel names
  /// ones not known before.
  using learned_handler = std::function<void(std::size_t added)>;

  /// `settings.sentinels` must not be empty. Does nothing until locate() or watch().
  sentinel_locator(boost::asio::any_io_executor ex, sentinel_settings settings,
                   switch_handler on_switch, learned_handler on_learned = {});
  /// Stops (see stop()).
  ~sentinel_locator();
  sentinel_locator(const sentinel_locator&) = delete;
  sentinel_locator& operator=(const sentinel_locator&) = delete;

  /// Looks the master up; `h` is posted once with the outcome, after at most `timeout` per
  /// Sentinel. One lookup at a time: a call while one runs (or after stop()) has `h` posted
  /// with `stopped`. Each change of outcome (found after a failure, a new address, unknown
  /// master, none answering) is logged once.
  void locate(locate_handler h);
  /// Starts the `+switch-master` subscriptions, one per Sentinel (idempotent).
  void watch();
  /// Closes every connection; a lookup in flight completes with `stopped`.
  void stop();
  /// How many Sentinels are asked and watched now (the configured ones and the learned ones not
  /// set aside).
  std::size_t known() const;
  /// How many of the subscriptions are up now.
  std::size_t watching() const;

 private:
  struct impl;
  std::shared_ptr<impl> impl_;
};

}  // namespace sluice::store::detail
