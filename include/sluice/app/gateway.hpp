// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// The gateway process: N workers (one io_context and thread each, with its own store
/// connection and upstream pool), listening on one port with SO_REUSEPORT, deciding every
/// request under one immutable rules snapshot that can be swapped at any time.

#include "sluice/config/rules.hpp"
#include "sluice/http/tls_context.hpp"
#include "sluice/observability/admin.hpp"
#include "sluice/observability/metrics.hpp"
#include "sluice/store/counter_store.hpp"

#include <boost/asio/ip/tcp.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace sluice::app {

/// Process-wide counters, summed over the workers (for tests and logs; the metrics room reads
/// gateway::sample()). Monotonic.
struct gateway_stats {
  std::uint64_t requests = 0;           ///< requests handled (any status)
  std::uint64_t allowed = 0;            ///< limited requests admitted by the store
  std::uint64_t rejected = 0;           ///< 429s
  std::uint64_t unlimited = 0;          ///< requests on routes with no limit
  std::uint64_t fail_open = 0;          ///< store failures answered by forwarding
  std::uint64_t fail_closed = 0;        ///< store failures answered with 503
  std::uint64_t local = 0;              ///< store failures decided by the local limiter
  std::uint64_t shadow_rejections = 0;  ///< requests a shadow limit would have refused
  std::uint64_t bad_requests = 0;       ///< 400/401/404 answered by the gateway
  std::uint64_t upstream_errors = 0;    ///< 502/504
  std::uint64_t reloads = 0;            ///< snapshots swapped in after start
  std::uint64_t reload_failures = 0;    ///< reloads refused (invalid file); the config stayed
  std::uint64_t generation = 0;         ///< current config generation (starts at 1)
  store::store_stats store;             ///< summed over workers
};

/// Start-up options that override the rules file (command line, tests).
struct gateway_options {
  std::string listen;  ///< "host:port" overriding `listen:`; "" = from the file
  /// "host:port" overriding `admin:` for the admin listener (app::runtime starts it; port 0
  /// picks a free one); "" = from the file (none when the file has no `admin:`).
  std::string admin;
  unsigned workers = 0;  ///< overrides `workers:` when > 0
};

/// Raises the process's soft RLIMIT_NOFILE (open files) to its hard limit and returns the
/// soft limit then in force. Runs once per process (later calls return the first result) and
/// logs the value; a refused raise keeps the old limit, with a warning. Thread-safe.
std::uint64_t raise_file_limit();

/// What `client.max_connections: auto` means: client connections per worker such that
/// every worker's connections, each with one upstream connection, fit in `file_limit` open
/// files less a reserve of 64 + 8 per worker (listeners, store connections, the event
/// loop's own descriptors). At least 1.
std::size_t auto_max_connections(std::uint64_t file_limit, unsigned workers);

/// The running gateway.
class gateway {
 public:
  /// Builds the workers; nothing runs until start(). `tls`: the TLS contexts built from
  /// `rules` (http::build_tls); null builds them here when the rules need any. Whether the
  /// listener is TLS is decided here, once (`rules.tls`). Throws std::runtime_error when the
  /// listen address cannot be bound, or naming each bad file when TLS cannot be built.
  gateway(std::shared_ptr<const config::rules> rules, gateway_options options = {},
          std::shared_ptr<const http::tls_bundle> tls = nullptr);
  ~gateway();

  /// Starts the workers' threads and the store connections.
  void start();

  /// Waits until every worker's store is ready — connected, and its breaker not open (checks
  /// are answered, not failing: a connection to a demoted primary is connected but useless);
  /// always true for the memory store — at most `limit`. start() calls it with 2 s: until
  /// then checks get the routes' failure policy; /readyz calls it with 0. Returns whether
  /// every store is ready.
  bool wait_for_store(std::chrono::milliseconds limit);
  /// The first worker store's failure (counter_store::failure()), "" when none says one.
  std::string store_failure() const;

  /// Stops accepting, closes connections and joins the threads. Idempotent.
  void stop();

  /// Graceful stop, first half: every worker stops accepting and closes its idle keep-alive
  /// connections; requests in flight (and tunnels) go on, their responses carry
  /// `Connection: close`. Waits until no connection is left, `deadline` has passed, or
  /// `*abort` becomes true. Returns how many connections were still busy then (0: all done);
  /// stop() afterwards cuts them. Thread-safe; never on a worker's thread.
  std::size_t drain(std::chrono::milliseconds deadline, const std::atomic<bool>* abort = nullptr);

  /// Whether drain() has begun (readiness then reports 503). Thread-safe.
  bool draining() const;

  /// The bound listen endpoint (with the real port when 0 was asked).
  boost::asio::ip::tcp::endpoint endpoint() const;

  /// Swaps in a new rules snapshot atomically: requests already being decided finish under
  /// the old one, new requests use the new one. Bucket state is untouched (it is keyed by
  /// limit name and caller, never by generation). Listen, workers and store settings are
  /// read at start-up only. `tls` as for the constructor (built here when null and needed;
  /// std::runtime_error, with nothing swapped, when that fails): connections accepted from
  /// now on use its listener contexts (a listener that started plain stays plain; one that
  /// started with TLS keeps its contexts when `tls` has none), requests forwarded from now
  /// on its upstream contexts; open connections keep theirs. Thread-safe.
  void reload(std::shared_ptr<const config::rules> rules,
              std::shared_ptr<const http::tls_bundle> tls = nullptr);

  /// Counts a refused reload (the caller found the new file invalid and kept this config).
  /// Thread-safe.
  void note_reload_failure();

  /// A snapshot of the counters. Thread-safe.
  gateway_stats stats() const;

  /// Everything `GET /metrics` reports, summed over the workers at the time of the call:
  /// per-route request counts (every route of the rules in force, at 0 if unused, and every
  /// route name seen since start), store, upstream, reload and plan cache counters. Per-worker
  /// store and plan cache counters are read on each worker's thread (a worker that does not
  /// answer within 1 s contributes its previous values). Thread-safe; concurrent calls are
  /// serialised. Never on a worker's thread (it would wait for itself).
  observability::metrics_sample sample() const;

  /// `GET /admin/explain`: gateway_handler::explain() of `q`, run on the first worker (whose
  /// store connection decides it, spending nothing); nullopt when the worker did not answer
  /// within 2 s (a store that hangs is bounded by its own deadline, below that). Never on a
  /// worker's thread.
  std::optional<std::string> explain(const observability::explain_query& q) const;

  /// One store check for the rate limit service (src/rls/): `req` is decided by the store of
  /// a worker (round robin over the workers, on that worker's thread, since a Redis
  /// connection belongs to its worker) and `done` is called there exactly once with the
  /// outcome or the store's error (errc::store_unavailable when the gateway is stopped or
  /// was not started). Thread-safe.
  void decide(limiter::check_request req,
              std::function<void(boost::system::result<limiter::check_outcome>)> done) const;

  /// `POST /admin/unblock`: gateway_handler::unblock() of `q`, run on the first worker;
  /// nullopt when it did not answer within 2 s. Never on a worker's thread.
  std::optional<observability::unblock_answer> unblock(const observability::unblock_query& q) const;

  /// The `n` callers refused most in the last `status.window` (observability::top_callers;
  /// n 0: `status.top`). Thread-safe.
  std::optional<observability::top_callers::answer> top(std::size_t n) const;
  /// Milliseconds since the gateway was built. Thread-safe.
  std::int64_t uptime_ms() const;
  /// Worker threads. Thread-safe.
  unsigned workers() const;

  /// Reopens the access log's file before its next line (SIGUSR1; no effect without one).
  void reopen_logs();
  /// Lines the access log dropped because its queue was full (0 without one).
  std::uint64_t access_log_drops() const;

  /// The rules in force and their generation, read together from one snapshot (the admin
  /// endpoint's view). Thread-safe.
  struct current_rules {
    std::shared_ptr<const config::rules> rules;
    std::uint64_t generation = 0;
  };
  current_rules current() const;

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

}  // namespace sluice::app
