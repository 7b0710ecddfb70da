// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// The counter store interface: decides a whole check_request atomically. Implementations:
/// memory (embedded, one instance, shared by all workers), Redis (one connection per worker,
/// hiredis async on the worker's io_context); Redis Cluster implements the same interface.

#include "sluice/limiter/check.hpp"
#include "sluice/store/store_counters.hpp"

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/system/result.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace sluice::store {

/// Breaker state of a store connection (see issue "When Redis is slow, down or restarted").
enum class breaker_state { closed, open, half_open };

/// The kinds of error reply a Redis store counts (sluice_store_error_replies_total{kind}):
/// the Redis error prefixes that matter to a check, and `other`.
/// Source: https://redis.io/docs/reference/protocol-spec/#simple-errors
enum class error_kind : std::uint8_t {
  readonly,    ///< READONLY: a replica (the node was demoted in a failover)
  loading,     ///< LOADING: the dataset is being loaded
  masterdown,  ///< MASTERDOWN: a replica that lost its primary
  oom,         ///< OOM: maxmemory reached
  busy,        ///< BUSY: another script runs too long
  noperm,      ///< NOPERM: an ACL refuses the command or key
  wrongtype,   ///< WRONGTYPE: a key of ours holds another type (a colliding key)
  noscript,    ///< NOSCRIPT: the script cache was flushed (loaded again, check re-sent)
  stale,       ///< STALE: a check the script refused as past its stale bound
  // Redis Cluster (the specification, "Redirection and resharding", "Multi-key operations",
  // and the cluster state section):
  moved,        ///< MOVED: the slot is served by another master (followed, map updated)
  ask,          ///< ASK: the slot is being migrated; this key is asked of the target
  crossslot,    ///< CROSSSLOT: keys of several slots in one command (never sent by sluice)
  tryagain,     ///< TRYAGAIN: a multi-key command during a slot's migration
  clusterdown,  ///< CLUSTERDOWN: the cluster cannot serve (cluster_state:fail, slot unbound)
  other,        ///< any other error reply
};
inline constexpr std::size_t error_kind_count = 15;

/// The label of an error kind ("READONLY", ..., "other").
std::string_view error_kind_name(error_kind k);

/// The kind of an error reply's text (its first word).
error_kind classify_error_reply(std::string_view text);

/// Whether an error reply says the node cannot serve checks at all — READONLY, LOADING,
/// MASTERDOWN: the connection reached the wrong node (a demoted primary behind a DNS name,
/// proxy or virtual IP that has moved on), so it is dropped and made again.
bool is_wrong_node(error_kind k);

/// Script calls of a Redis store counted by how many checks each decided: 1, 2, 3-4, 5-8,
/// 9-16, 17-32, 33-64, more (store_stats::batch_sizes).
inline constexpr std::size_t batch_size_buckets = 8;

/// The bucket of batch_sizes a call of `checks` checks (>= 1) counts in.
constexpr std::size_t batch_bucket(std::size_t checks) noexcept {
  std::size_t b = 0;
  for (std::size_t top = 1; b + 1 < batch_size_buckets && checks > top; top *= 2) ++b;
  return b;
}

/// Counts by error_kind (store_stats::error_replies).
using error_counts = std::array<std::uint64_t, error_kind_count>;
/// Script calls by batch_bucket() (store_stats::batch_sizes).
using batch_counts = std::array<std::uint64_t, batch_size_buckets>;

/// The label of error_replies' element `k`: error_kind_name() of kind `k`.
std::string_view error_kind_label(std::size_t k);

/// The label of batch_sizes' element `k`: the checks per call it counts ("1", "2", "3-4",
/// "5-8", "9-16", "17-32", "33-64", "65+").
std::string_view batch_size_label(std::size_t k);

/// Counters a store keeps for the metrics room: one member per row of SLUICE_STORE_COUNTERS
/// (store_counters.hpp, where each is described), then the gauges that do not add up.
/// Monotonic unless noted.
struct store_stats {
#define SLUICE_STORE_STATS_MEMBER(member, type, ...) type member{};
  SLUICE_STORE_COUNTERS(SLUICE_STORE_STATS_MEMBER)
#undef SLUICE_STORE_STATS_MEMBER
  bool connected = false;                         ///< gauge
  breaker_state breaker = breaker_state::closed;  ///< gauge

  /// Adds every counter of the list of `o` (and the bucket gauge) to these; `connected` and
  /// `breaker`, which do not add up, are left to the caller.
  void add_counts(const store_stats& o) noexcept;
};

/// A counter store as seen by one worker.
///
/// Thread-safety: a Redis store instance belongs to one worker's io_context and must be used
/// from it only; the memory store is one shared instance, safe from any thread.
class counter_store {
 public:
  virtual ~counter_store() = default;

  /// Decides every limit of `req` in one atomic operation (one round trip for Redis).
  /// On success: the outcome, one limit_outcome per limit_check, in order.
  /// Errors (never thrown): errc::store_unavailable, errc::store_timeout, errc::store_error,
  /// errc::store_protocol. The check never takes longer than the store's deadline.
  /// Completes on the caller's executor.
  virtual boost::asio::awaitable<boost::system::result<limiter::check_outcome>> check(
      limiter::check_request req) = 0;

  /// Settles after the fact: charges (limit_check::settle > 0) or refunds (< 0) each limit of
  /// `req` on the bucket its check used (the same key, algorithm and parameters), atomically
  /// per call — per slot on Redis Cluster, where a failure of one slot leaves the others
  /// settled — on the store's clock (or req.now_ms_override). A charge may leave a debt (a
  /// token bucket level below zero, a window count above its limit; at most one Limit deep)
  /// that later checks honour: refused until it is paid back, Remaining 0, Retry-After
  /// counting it. A refund never takes a balance above its capacity; a window's refund comes
  /// off the window the units were taken in (limit_check::taken_at_ms) and is dropped once
  /// that window has ended. Sets req.settle and decides it as check() does (decide_now() first;
  /// a limit's lease, refund and block are ignored: settle_now());
  /// the outcome describes each limit after settling for a request of its `cost`.
  /// Errors: those of check(); errc::store_error for a limit that cannot settle
  /// (limiter::can_settle: a sliding log, |settle| above the Limit). A settle that timed out
  /// may or may not have been applied (never re-sent). Completes on the caller's executor.
  boost::asio::awaitable<boost::system::result<limiter::check_outcome>> settle(
      limiter::check_request req);

  /// settle()'s steps that need no wait: prepares `req` as a settle (req.settle set; each
  /// limit's lease, refund and block cleared: a settle takes no lease and starts no block),
  /// then answers at once — errc::store_error for a limit that cannot settle, or the outcome
  /// on a store that decides in memory. nullopt on a store that needs a round trip: then
  /// settle(std::move(req)) (or check(), `req` being prepared).
  std::optional<boost::system::result<limiter::check_outcome>> settle_now(
      limiter::check_request& req);

  /// A store that decides in memory, without waiting (the memory store), decides here and
  /// returns true with `out` set; a store that needs a round trip returns false (then
  /// check() is the way). Saves a coroutine frame per request on the memory store.
  virtual bool decide_now(const limiter::check_request& req, limiter::check_outcome& out) {
    (void)req;
    (void)out;
    return false;
  }

  /// Whether decide_now() always decides (a store in memory): the request path then takes
  /// its steps without a coroutine frame. False by default.
  virtual bool decides_in_memory() const { return false; }

  /// Starts background work (connecting). Idempotent.
  virtual void start() {}

  /// Stops background work and closes connections; pending checks complete with an error.
  virtual void stop() {}

  /// A snapshot of the store's counters.
  virtual store_stats stats() const = 0;

  /// Changes whenever the store's connection is made again (a restarted server may have lost
  /// its state): what a worker remembers of the store's answers is valid for one epoch only.
  /// Cheap (one relaxed load); 0 for a store without connections.
  virtual std::uint64_t connection_epoch() const { return 0; }

  /// Why the store cannot serve now, for /readyz and the status page: the last failed
  /// connection attempt ("redis 10.0.0.5:6380: TLS handshake failed: certificate verify
  /// failed: ..."), "" while connected or for a store without connections. Any thread.
  virtual std::string failure() const { return {}; }
};

}  // namespace sluice::store
