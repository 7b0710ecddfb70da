// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// Prometheus metrics (DESIGN.md, observability room): the per-worker recording primitives
/// the request path holds, the sample the gateway assembles at scrape time, and its text
/// exposition for `GET /metrics`.
///
/// Nothing here is shared between workers on the request path: each worker owns its
/// counters and histogram (single writer, no locked instruction), and a scrape sums them.
/// The exposition is built from a fresh sample on every scrape (prometheus-cpp's
/// MetricFamily and TextSerializer), so no Prometheus object is touched per request.

#include "sluice/http/tls_failure.hpp"
#include "sluice/http/upstream_pool.hpp"
#include "sluice/store/counter_store.hpp"

#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::observability {

/// The Content-Type of the text exposition (Prometheus text format 0.0.4).
inline constexpr std::string_view exposition_content_type = "text/plain; version=0.0.4";

/// A monotonic counter with one writer thread and any number of readers.
///
/// add() is a relaxed load and store (no locked read-modify-write): it must only be called
/// from the thread that owns the counter (a worker's). value() is safe from any thread and
/// sees every add() of that thread eventually.
class owned_counter {
 public:
  /// Adds `n`. Owner thread only.
  void add(std::uint64_t n = 1) noexcept {
    v_.store(v_.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
  }
  /// The current value. Any thread.
  std::uint64_t value() const noexcept { return v_.load(std::memory_order_relaxed); }

 private:
  std::atomic<std::uint64_t> v_{0};
};

/// Upper bounds, in seconds, of every duration histogram's buckets (then +Inf): the store
/// check's and the upstream response head's. From 100 µs (a loopback Redis round trip)
/// through the usual few-ms store deadlines to 10 s (a slow upstream).
inline constexpr std::array<double, 15> duration_bounds_seconds = {
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0, 2.5, 5, 10};

/// A histogram's counts, read from one or summed over several recorders.
struct histogram_counts {
  /// Observations per bucket, not cumulative: buckets[i] counts values in
  /// (bounds[i-1], bounds[i]]; the last element counts values above every bound.
  std::array<std::uint64_t, duration_bounds_seconds.size() + 1> buckets{};
  double sum_seconds = 0;  ///< sum of the observed values, seconds

  /// Observations in every bucket.
  std::uint64_t count() const noexcept;
  /// Adds `other`'s counts and sum.
  void add(const histogram_counts& other) noexcept;
};

/// A duration histogram with the fixed buckets of duration_bounds_seconds, one writer
/// thread (observe()) and readers on any thread (read()). An observation costs a short scan
/// of 12 bounds and two owned_counter adds.
class duration_histogram {
 public:
  /// Records one duration (negative counts as 0). Owner thread only.
  void observe(std::chrono::nanoseconds d) noexcept;
  /// The counts so far. Any thread; a read racing an observe() may miss its sum or its
  /// bucket, never count one twice.
  histogram_counts read() const noexcept;

 private:
  std::array<owned_counter, duration_bounds_seconds.size() + 1> buckets_;
  owned_counter sum_ns_;
};

/// A duration histogram with the buckets of duration_bounds_seconds that any number of
/// threads may observe into (locked adds: for a thread pool such as gRPC's, not for the
/// workers' request path, which keeps duration_histogram).
class shared_duration_histogram {
 public:
  /// Records one duration (negative counts as 0). Any thread.
  void observe(std::chrono::nanoseconds d) noexcept;
  /// The counts so far. Any thread.
  histogram_counts read() const noexcept;

 private:
  std::array<std::atomic<std::uint64_t>, duration_bounds_seconds.size() + 1> buckets_{};
  std::atomic<std::uint64_t> sum_ns_{0};
};

/// The Envoy rate limit service's calls (`rate_limit_service:`, rls::server), since start;
/// all 0 without one.
struct rls_counts {
  std::uint64_t ok = 0;                   ///< answered OK
  std::uint64_t over_limit = 0;           ///< answered OVER_LIMIT
  std::uint64_t invalid_argument = 0;     ///< refused INVALID_ARGUMENT (no counter touched)
  std::uint64_t unavailable = 0;          ///< refused UNAVAILABLE (store failed, fail_closed)
  std::uint64_t descriptors_decided = 0;  ///< descriptors whose limits the store decided
  std::uint64_t unknown_descriptors = 0;  ///< descriptors that matched no limit (allowed)
  std::uint64_t fail_open = 0;            ///< store failures answered OK (fail_open)
  std::uint64_t fail_closed = 0;          ///< store failures answered UNAVAILABLE (fail_closed)
  std::uint64_t shadow_limited = 0;       ///< decided calls a shadow limit would have refused
  histogram_counts duration;              ///< ShouldRateLimit, request read to answer ready
};

/// What one protocol's requests on one route came to (the `decision` label of
/// sluice_requests_total; meanings as route_counts' fields of the same names).
struct decision_counts {
  std::uint64_t allowed = 0, limited = 0, unlimited = 0, fail_open = 0, fail_closed = 0;
};

/// What one route's requests came to, summed over workers. Route names come from the rules
/// file, so the label set is bounded by the operator, never by callers.
struct route_counts {
  std::string route;  ///< the route's `name:`
  /// allowed .. fail_closed by http::protocol (the fields below are their sums).
  std::array<decision_counts, http::protocol_count> by_protocol{};
  std::uint64_t allowed = 0;      ///< admitted by a decision (the store's, or the local limiter's)
  std::uint64_t limited = 0;      ///< refused with 429 (store or local limiter)
  std::uint64_t unlimited = 0;    ///< forwarded with no limit applying
  std::uint64_t fail_open = 0;    ///< store failed, forwarded undecided (`fail_open`)
  std::uint64_t fail_closed = 0;  ///< store failed, answered 503 (`fail_closed`)
  std::uint64_t local = 0;        ///< store failed, decided by the local limiter (`local`)
  std::uint64_t shadow_limited = 0;   ///< a shadow limit would have refused (decision unchanged)
  std::uint64_t bad_gateway = 0;      ///< upstream unreachable or malformed: 502
  std::uint64_t gateway_timeout = 0;  ///< upstream did not answer in time: 504
};

/// The status classes of client-facing exchanges (`code_class` label): index 0 is an exchange
/// that ended before any status was written (`none`), 1..5 are 1xx..5xx.
inline constexpr std::array<const char*, 6> code_classes = {"none", "1xx", "2xx",
                                                            "3xx",  "4xx", "5xx"};

/// Index in code_classes of HTTP status `status` (0 for 0 or anything outside 100..599).
constexpr std::size_t code_class_of(unsigned status) noexcept {
  return status >= 100 && status < 600 ? status / 100 : 0;
}

/// What one route's client-facing exchanges came to (from the request head read to the last
/// response byte written), summed over workers: route "" holds the requests no route matched
/// or refused before routing (a bounded label set: the rules file's route names and "").
struct exchange_counts {
  std::string route;
  /// Exchange durations by http::protocol, then by status class (indexed as code_classes).
  std::array<std::array<histogram_counts, code_classes.size()>, http::protocol_count> duration{};
  std::uint64_t bytes_in = 0;   ///< request body bytes read from clients
  std::uint64_t bytes_out = 0;  ///< bytes written to clients (heads and bodies)
};

/// The process itself, read from /proc/self (Linux) at scrape time; what prometheus-cpp's
/// process collector would give (Debian's prometheus-cpp 1.0 has none). 0 when unreadable.
struct process_stats {
  double cpu_seconds = 0;         ///< user + system CPU time (/proc/self/stat utime, stime)
  double resident_bytes = 0;      ///< resident set size (rss pages x page size)
  double virtual_bytes = 0;       ///< virtual memory size (vsize)
  double open_fds = 0;            ///< entries of /proc/self/fd
  double max_fds = 0;             ///< RLIMIT_NOFILE's soft limit
  double start_time_seconds = 0;  ///< Unix time the process started (btime + starttime)
};

/// Reads the calling process's process_stats from /proc (proc(5)): /proc/self/stat fields 14,
/// 15 (utime, stime), 22 (starttime), 23 (vsize) and 24 (rss), /proc/stat's `btime`,
/// /proc/self/fd and getrlimit(RLIMIT_NOFILE). A field it cannot read stays 0. Never throws.
process_stats read_process_stats() noexcept;

/// What one upstream's exchanges came to, summed over workers (upstream names come from the
/// rules file: a bounded label set).
struct upstream_counts {
  std::string upstream;  ///< the upstream's name in `upstreams:`
  /// Request head sent to response head read, per exchange that got a head (nginx's
  /// $upstream_header_time).
  histogram_counts response;
  /// Failed exchanges by kind, indexed by http::upstream_failure.
  std::array<std::uint64_t, http::upstream_failure_count> failures{};
  /// The newest failure over the workers: its kind and what went wrong (`timeout: ...`), and
  /// when (Unix time, milliseconds); "" and 0 when none since start. Not exported to
  /// Prometheus (text is not a metric); the status page shows it.
  std::string last_error;
  std::int64_t last_error_unix_ms = 0;
};

/// The client side of the gateway's listener, summed over workers (http::connection_stats).
struct client_counts {
  std::int64_t open = 0;              ///< client connections open now
  std::uint64_t max_connections = 0;  ///< the caps, summed (0: no cap)
  std::uint64_t rejected = 0;         ///< accepted over the cap and reset at once
  std::uint64_t header_timeouts = 0;  ///< 408: a partial head ran out of header_timeout
  std::uint64_t idle_closed = 0;      ///< closed silent: idle keep-alive or nothing sent
  std::uint64_t body_timeouts = 0;    ///< a request body stalled past body_timeout
  std::uint64_t too_large_heads = 0;  ///< 431: head over max_header_size or max_headers
  std::uint64_t too_long_uris = 0;    ///< 414: target over max_uri_length
};

/// TLS handshakes of one side (the client listener, or connections to upstreams), summed
/// over workers (http::tls_counters).
struct tls_handshake_counts {
  std::uint64_t completed = 0;
  std::array<std::uint64_t, http::tls_failure_count> failed{};  ///< by http::tls_failure

  /// Adds one worker's counters.
  void add(const http::tls_counters& c) noexcept;
};

/// Everything `GET /metrics` reports, sampled at scrape time (app::gateway::sample()).
struct metrics_sample {
  std::vector<route_counts> routes;  ///< every route name seen since start, sorted by name
  /// Client-facing exchanges by route (every route of the rules in force, at 0 if need be,
  /// and "" for the unrouted), sorted by name.
  std::vector<exchange_counts> exchanges;
  process_stats process;           ///< the process (read_process_stats(), at scrape time)
  std::uint64_t bad_requests = 0;  ///< 400/401/404 answered by the gateway before a decision
  /// Requests keyed on a trusted proxy's own address, by reason (`no_header`, `all_trusted`,
  /// `unreadable`, `syntax_error`, `unknown`, `obfuscated`: identity::address_source), each
  /// reason present even at 0.
  std::vector<std::pair<std::string, std::uint64_t>> client_address_fallbacks;
  store::store_stats store;        ///< counters summed over the store connections
  unsigned store_connections = 0;  ///< store connections sampled (one per worker; memory: 1)
  unsigned store_connected = 0;    ///< of those, connected now
  /// Store connections per breaker state, indexed by store::breaker_state.
  std::array<unsigned, 3> breaker{};
  histogram_counts store_check;            ///< duration of every store check, any outcome
  http::pool_stats upstream;               ///< upstream pools, summed over workers
  std::vector<upstream_counts> upstreams;  ///< every upstream name seen since start, by name
  std::int64_t tunnels_open = 0;           ///< upgraded connections being tunnelled now
  std::uint64_t tunnels_total = 0;         ///< upgrades relayed since start
  client_counts clients;                   ///< client connections: open, capped, timed out
  tls_handshake_counts tls_listener;       ///< TLS handshakes of client connections
  tls_handshake_counts tls_upstream;       ///< TLS handshakes with https upstreams
  std::uint64_t reloads = 0;               ///< rules snapshots swapped in after start
  std::uint64_t reload_failures = 0;       ///< reloads refused (the running rules stayed)
  std::uint64_t access_log_dropped = 0;    ///< access log lines dropped (its queue was full)
  /// Admin requests refused 401 for a missing or wrong bearer token (admin_server, filled in
  /// by the runtime that owns it; 0 without an admin listener).
  std::uint64_t admin_auth_failures = 0;
  std::uint64_t generation = 0;  ///< generation of the rules in force (1 at start)
  /// When the rules in force were swapped in (or loaded at start): Unix time, milliseconds.
  std::int64_t config_loaded_unix_ms = 0;
  /// Plan directory caches (`identity.directory`), summed over workers.
  std::uint64_t plan_cache_hits = 0, plan_cache_negative_hits = 0, plan_cache_misses = 0,
                plan_cache_evictions = 0;
  /// Refusals answered by the workers' over-limit caches (limiter::refusal_cache).
  std::uint64_t cached_refusals = 0;
  /// Token leases (`lease:`), summed over workers (limiter::lease_book): requests decided
  /// from leases alone (no store round trip), leases taken, tokens taken in leases beyond
  /// the requests' costs, and tokens of ended leases returned to their buckets.
  std::uint64_t leased_decisions = 0, lease_grants = 0, tokens_leased = 0, tokens_returned = 0;
  /// Blocks (penalty box, `block:`) started, by limit name: every limit of the rules in force
  /// with a block (at 0 if none started) and every limit name seen since start, by name.
  std::vector<std::pair<std::string, std::uint64_t>> blocks_started;
  /// Near-limit warnings (`warn_at:`): requests that took a limit from below its threshold to
  /// at or above it, by limit name (names from the rules file: a bounded label set), sorted
  /// by name; every limit with a `warn_at` in the rules in force is present, at 0 if need be.
  std::vector<std::pair<std::string, std::uint64_t>> quota_warnings;
  /// Settlements of costs known after the response (`charge:`), by outcome label (every
  /// label, at 0 if none: settled, refunded, charged, fallback and each usage failure), and
  /// settle calls the store did not confirm.
  std::vector<std::pair<std::string, std::uint64_t>> settlements;
  std::uint64_t settle_failures = 0;
  /// Concurrency slots (`algorithm: concurrency`), summed over workers: held now by limit
  /// name (every concurrency limit of the rules in force, at 0 if none is held); requests
  /// whose slots were released, by how their exchange ended (http::exchange_end_name, every
  /// end present); slots a renewal found expired; release calls the store did not answer.
  std::vector<std::pair<std::string, std::int64_t>> slots_held;
  std::vector<std::pair<std::string, std::uint64_t>> slot_releases;
  std::uint64_t slots_lost = 0, slot_release_failures = 0;
  /// The rate limit service (filled in by the runtime that owns it; 0 without one).
  rls_counts rls;
};

/// The Prometheus text exposition (format 0.0.4, exposition_content_type) of `sample`:
///
/// - `sluice_http_request_duration_seconds{route,code_class,protocol}` (histogram: head read to
///   the last response byte written, by status class none, 1xx..5xx, and client protocol
///   `http/1.1` or `h2`: http::protocol_label), `sluice_http_received_bytes_total
///   {route}` and `sluice_http_sent_bytes_total{route}` (route "": no route matched);
/// - `process_cpu_seconds_total`, `process_resident_memory_bytes`,
///   `process_virtual_memory_bytes`, `process_open_fds`, `process_max_fds`,
///   `process_start_time_seconds` (the standard names of Prometheus client libraries);
/// - `sluice_requests_total{route,decision,protocol}` — decision: allowed, limited, unlimited,
///   fail_open, fail_closed (a `local` decision counts as allowed or limited); protocol:
///   `http/1.1`, `h2`;
/// - `sluice_failure_policy_applied_total{route,policy}` — policy: fail_open, fail_closed,
///   local (store checks that failed and the route's policy answered);
/// - `sluice_blocks_started_total{limit}` (penalty boxes started by a refusal);
/// - `sluice_quota_warnings_total{limit}` (requests that crossed a limit's `warn_at`);
/// - `sluice_settlements_total{outcome}` (charged limits settled after the response: settled,
///   refunded, charged, fallback, or the usage failure that made it fall back) and
///   `sluice_settle_failures_total` (settle calls the store did not confirm);
/// - `sluice_concurrency_slots_held{limit}` (gauge), `sluice_concurrency_releases_total{reason}`
///   (reason: how the exchange ended), `sluice_concurrency_slots_lost_total`,
///   `sluice_concurrency_release_failures_total`;
/// - `sluice_shadow_limited_total{route}`, `sluice_bad_requests_total`,
///   `sluice_client_address_fallbacks_total{reason}`;
/// - `sluice_client_connections_open` (gauge), `sluice_client_connections_max` (gauge, the
///   caps summed), `sluice_client_connections_rejected_total` (over the cap),
///   `sluice_client_timeouts_total{phase}` (header: 408; idle: closed without an answer;
///   body: a stalled request body), `sluice_client_heads_refused_total{status}` (414, 431);
/// - `sluice_tls_handshakes_total{side}` (side: listener, upstream) and
///   `sluice_tls_handshake_failures_total{side,reason}` (reason: http::tls_failure's labels,
///   every one present);
/// - `sluice_upstream_errors_total{route,status}` (status 502, 504),
///   `sluice_upstream_response_duration_seconds{upstream}` (histogram: request head sent to
///   response head read), `sluice_upstream_failures_total{upstream,cause}` (cause:
///   http::upstream_failure_name), `sluice_upstream_idle_connections` (gauge),
///   `sluice_upstream_connections_opened_total`, `sluice_upstream_connection_reuses_total`,
///   `sluice_upstream_retries_total{reason}`, `sluice_upstream_stale_failures_total`,
///   `sluice_upstream_idle_dropped_total{reason}`;
/// - `sluice_store_checks_total`, `sluice_store_timeouts_total`, `sluice_store_errors_total`,
///   `sluice_store_unavailable_total`, `sluice_store_late_replies_total`,
///   `sluice_store_reconnects_total`, `sluice_store_connect_failures_total`,
///   `sluice_store_script_loads_total`, `sluice_store_breaker_opens_total`,
///   `sluice_store_breaker_transitions_total{to}` (open, half_open, closed),
///   `sluice_store_buckets` (gauge), `sluice_store_evictions_total` (memory store),
///   `sluice_store_error_replies_total{kind}` (READONLY, LOADING, MASTERDOWN, OOM, BUSY,
///   NOPERM, WRONGTYPE, NOSCRIPT, STALE, MOVED, ASK, CROSSSLOT, TRYAGAIN, CLUSTERDOWN, other),
///   `sluice_store_wrong_node_drops_total`,
///   `sluice_store_sentinel_lookup_failures_total{reason}` (unreachable, unknown_master),
///   `sluice_store_master_switches_total`,
///   `sluice_store_cluster_topology_refreshes_total{result}` (ok, failed),
///   `sluice_store_split_checks_total`, `sluice_store_split_charged_unadmitted_total{reason}`
///   (commit_refused, commit_failed), `sluice_store_clock_resends_total`,
///   `sluice_store_cached_refusals_total`, `sluice_lease_decisions_total`,
///   `sluice_lease_grants_total`, `sluice_lease_tokens_total{kind}`, `sluice_store_connected`,
///   `sluice_store_breaker_state{state}` (closed, open, half_open: connections in that state),
///   `sluice_store_check_duration_seconds` (histogram);
/// - `sluice_config_reloads_total{result}` (ok, failed), `sluice_config_generation`,
///   `sluice_config_last_reload_success_timestamp_seconds`;
/// - `sluice_admin_auth_failures_total` (admin requests refused for their bearer token);
/// - `sluice_access_log_dropped_total` (lines dropped from the access log's full queue);
/// - `sluice_plan_cache_lookups_total{result}` (hit, negative_hit, miss),
///   `sluice_plan_cache_evictions_total`;
/// - `sluice_rls_calls_total{result}` (ok, over_limit, invalid_argument, unavailable),
///   `sluice_rls_descriptors_total{kind}` (decided, unknown),
///   `sluice_rls_failure_policy_applied_total{policy}` (fail_open, fail_closed),
///   `sluice_rls_shadow_limited_total`, `sluice_rls_request_duration_seconds` (histogram);
/// - `sluice_build_info{version, revision}` (always 1).
///
/// Every family is present even at zero (a counter that exists from the start rates
/// correctly). Throws only std::bad_alloc.
std::string exposition(const metrics_sample& sample);

}  // namespace sluice::observability
