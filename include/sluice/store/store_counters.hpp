// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// The counters every counter store keeps, declared once: SLUICE_STORE_COUNTERS is the list
/// (an X-macro) from which store_stats (counter_store.hpp), its atomic mirror
/// (store_stats_mirror, written on a Redis store's worker and read from any thread), the sums
/// (store_stats::add_counts: a cluster over its nodes, the gateway over its workers) and the
/// store families of /metrics (observability/metrics.cpp) are made. A new counter is one row.

#include <cstdint>

namespace sluice::store {

/// How a row of SLUICE_STORE_COUNTERS is shown on /metrics.
enum class exposed_as : std::uint8_t {
  counter,  ///< a counter sample of the member's value
  gauge,    ///< a gauge sample of the member's value (still summed over connections)
  /// A counter sample of the member's value plus the value of the row above it: the
  /// breaker's transitions to open are those from closed (breaker_opens, the row above) and
  /// those from half-open (breaker_reopens).
  counter_plus_above,
};

}  // namespace sluice::store

/// The store's counters, in the order of their families on /metrics. Each row is
///
///     X(member, type, exposed, family, label, value, help)
///
/// - member: the field of store_stats (and of its atomic mirror);
/// - type: std::uint64_t, or an array of counts by a label's value (store::error_counts,
///   store::batch_counts);
/// - exposed: an enumerator of store::exposed_as;
/// - family: the metric family's name (a `sluice_` string literal);
/// - label: the label's name, "" for a family without labels;
/// - value: the label's value for this member ("" without a label), or for an array a
///   function of the index giving each element's (store::error_kind_label,
///   store::batch_size_label);
/// - help: the family's HELP text; "" on a row that adds a sample to the family of the row
///   above (the same family name).
///
/// Every member is monotonic and summed over connections except `buckets`, a gauge (also
/// summed: the memory store counts once). The gauges that do not add up (connected, the
/// breaker's state) are store_stats' own members, outside the list.
// clang-format off
#define SLUICE_STORE_COUNTERS(X)                                                                   \
  X(checks, std::uint64_t, counter, "sluice_store_checks_total", "", "",                           \
    "Checks decided by the counter store.")                                                        \
  X(timeouts, std::uint64_t, counter, "sluice_store_timeouts_total", "", "",                       \
    "Store checks that missed their deadline (store.timeout).")                                    \
  X(errors, std::uint64_t, counter, "sluice_store_errors_total", "", "",                           \
    "Store checks that failed with an error reply, a protocol error or a disconnection.")          \
  X(unavailable, std::uint64_t, counter, "sluice_store_unavailable_total", "", "",                 \
    "Store checks refused at once (not connected, or the breaker is open).")                       \
  X(late_replies, std::uint64_t, counter, "sluice_store_late_replies_total", "", "",               \
    "Store replies that arrived after their check's deadline (dropped).")                          \
  X(reconnects, std::uint64_t, counter, "sluice_store_reconnects_total", "", "",                   \
    "Store connections established after the first one.")                                          \
  X(idle_stalls, std::uint64_t, counter, "sluice_store_idle_stalls_total", "", "",                 \
    "Store connections whose idle PING went unanswered within store.timeout (not ready until "     \
    "the server answers again).")                                                                  \
  /* connect_failures: attempts refused, timed out, of a name not resolved, or whose */            \
  /* AUTH or SCRIPT LOAD was refused */                                                            \
  X(connect_failures, std::uint64_t, counter, "sluice_store_connect_failures_total", "", "",       \
    "Store connection attempts that failed.")                                                      \
  X(script_loads, std::uint64_t, counter, "sluice_store_script_loads_total", "", "",               \
    "SCRIPT LOADs sent (at connection and after NOSCRIPT).")                                       \
  X(breaker_opens, std::uint64_t, counter, "sluice_store_breaker_opens_total", "", "",             \
    "Times a store connection's circuit breaker opened from closed.")                              \
  /* half-open -> open (the probe failed); shown with the row above as {to="open"} */              \
  X(breaker_reopens, std::uint64_t, counter_plus_above,                                            \
    "sluice_store_breaker_transitions_total", "to", "open",                                        \
    "Circuit breaker state changes of the store connections, by the state entered (open: "         \
    "from closed or after a failed probe; half_open: the cool-down ended; closed: the probe "      \
    "was answered).")                                                                              \
  X(breaker_half_opens, std::uint64_t, counter, "sluice_store_breaker_transitions_total",          \
    "to", "half_open", "")                                                                         \
  X(breaker_closes, std::uint64_t, counter, "sluice_store_breaker_transitions_total", "to",        \
    "closed", "")                                                                                  \
  X(buckets, std::uint64_t, gauge, "sluice_store_buckets", "", "",                                 \
    "Bucket entries the memory store holds (at most store.max_buckets; 0 on Redis).")              \
  X(evictions, std::uint64_t, counter, "sluice_store_evictions_total", "", "",                     \
    "Live buckets the memory store evicted at store.max_buckets (expired ones are dropped "        \
    "first and not counted).")                                                                     \
  X(error_replies, ::sluice::store::error_counts, counter, "sluice_store_error_replies_total",     \
    "kind", ::sluice::store::error_kind_label,                                                     \
    "Error replies from the store, by kind (the Redis error prefix).")                             \
  X(wrong_node_drops, std::uint64_t, counter, "sluice_store_wrong_node_drops_total", "", "",       \
    "Store connections dropped and made again after READONLY, LOADING or MASTERDOWN (the "         \
    "address may lead to a new primary).")                                                         \
  X(sentinel_unreachable, std::uint64_t, counter,                                                  \
    "sluice_store_sentinel_lookup_failures_total", "reason", "unreachable",                        \
    "Master lookups through Redis Sentinel that found no master, by reason (unreachable: no "      \
    "Sentinel answered; unknown_master: those that answered do not know the master name).")        \
  X(sentinel_unknown_master, std::uint64_t, counter,                                               \
    "sluice_store_sentinel_lookup_failures_total", "reason", "unknown_master", "")                 \
  X(master_switches, std::uint64_t, counter, "sluice_store_master_switches_total", "", "",         \
    "+switch-master announcements of the store's master received from Redis Sentinel (the "        \
    "connection then moves to the new master).")                                                   \
  X(sentinels_learned, std::uint64_t, counter, "sluice_store_sentinels_learned_total", "", "",     \
    "redis-sentinel: Sentinels learned through SENTINEL SENTINELS beyond the configured ones "     \
    "(each worker learns them; summed over workers).")                                             \
  X(topology_refreshes, std::uint64_t, counter,                                                    \
    "sluice_store_cluster_topology_refreshes_total", "result", "ok",                               \
    "redis-cluster: slot map refreshes, by result (ok: a node gave the map; failed: no node "      \
    "did).")                                                                                       \
  X(topology_failures, std::uint64_t, counter,                                                     \
    "sluice_store_cluster_topology_refreshes_total", "result", "failed", "")                       \
  X(split_checks, std::uint64_t, counter, "sluice_store_split_checks_total", "", "",               \
    "redis-cluster: checks whose limits live in several hash slots, decided in two steps "         \
    "(peek on every slot, then commit).")                                                          \
  /* split checks that left a slot charged for a request not admitted: a commit refused */         \
  /* after every peek admitted (a race), or a commit failed on a node after another slot's */      \
  /* went through */                                                                               \
  X(split_commit_refusals, std::uint64_t, counter,                                                 \
    "sluice_store_split_charged_unadmitted_total", "reason", "commit_refused",                     \
    "redis-cluster: split checks that left a slot charged for a request not admitted, by "         \
    "reason (commit_refused: another request took the tokens between the steps; "                  \
    "commit_failed: a node failed in the second step).")                                           \
  X(split_partial_commits, std::uint64_t, counter,                                                 \
    "sluice_store_split_charged_unadmitted_total", "reason", "commit_failed", "")                  \
  X(clock_resends, std::uint64_t, counter, "sluice_store_clock_resends_total", "", "",             \
    "Checks re-sent once after a STALE answer to a timely check (the store's clock moved).")       \
  X(batch_sizes, ::sluice::store::batch_counts, counter, "sluice_store_script_calls_total",        \
    "checks", ::sluice::store::batch_size_label,                                                   \
    "Script calls sent to Redis, by the checks each decided (a batch: the checks started in "      \
    "one turn of a worker's loop, at most store.max_batch).")
// clang-format on
