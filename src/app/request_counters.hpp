// SPDX-License-Identifier: Apache-2.0
#pragma once
// One worker's request counters, per route and overall, for gateway_stats and the metrics
// room. Private to the app room.
//
// Why per worker: the workers share no cache line on the request path (DESIGN.md, "no locks
// on the hot path"). Each counter has one writer, its worker, and is read by the scraper with
// relaxed loads; the sums are formed at scrape time (gateway::sample(), gateway::stats()).

#include "sluice/config/rules.hpp"
#include "sluice/http/types.hpp"
#include "sluice/identity/identity.hpp"
#include "sluice/observability/metrics.hpp"

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace sluice::app {

/// One upstream's counters in one worker (meanings: observability::upstream_counts).
struct upstream_counters {
  observability::duration_histogram response;  ///< request head sent -> response head read
  std::array<observability::owned_counter, http::upstream_failure_count> failures;  ///< by kind
  /// Keeps `failure` and `what` as this upstream's last error, stamped with the wall clock.
  /// Takes a mutex: failed exchanges only. Worker thread.
  void note_failure(http::upstream_failure failure, std::string_view what);
  /// Writes the last error into `out` when it is newer than the one there. Any thread.
  void add_last_error_to(observability::upstream_counts& out) const;

 private:
  mutable std::mutex last_mutex_;
  std::string last_error_;          // guarded by last_mutex_
  std::int64_t last_error_ms_ = 0;  // Unix ms; guarded by last_mutex_
};

/// One route's client-facing exchanges in one worker (meanings: observability::exchange_counts).
struct exchange_counters {
  /// Durations by http::protocol, then by status class (indexed as code_classes).
  std::array<std::array<observability::duration_histogram, observability::code_classes.size()>,
             http::protocol_count>
      duration;
  observability::owned_counter bytes_in, bytes_out;
  /// Records one ended exchange of a client speaking `proto`: its duration under its protocol
  /// and status class, its bytes. Worker thread only.
  void record(const http::exchange_result& ex, http::protocol proto) noexcept;
  /// Adds these counts into `out`. Any thread.
  void add_to(observability::exchange_counts& out) const noexcept;
};

/// What one protocol's requests on a route came to in one worker (meanings:
/// observability::decision_counts).
struct decision_counters {
  observability::owned_counter allowed, limited, unlimited, fail_open, fail_closed;
};

/// One route's counters in one worker (meanings: observability::route_counts).
struct route_counters {
  /// The decisions by http::protocol (the `protocol` label of sluice_requests_total).
  std::array<decision_counters, http::protocol_count> decisions;
  observability::owned_counter local, shadow_limited, bad_gateway, gateway_timeout;
  /// The decision counters of requests whose client speaks `proto`: an array index, no
  /// allocation.
  decision_counters& of(http::protocol proto) noexcept {
    return decisions[static_cast<std::size_t>(proto)];
  }
  exchange_counters exchanges;  ///< what the route's clients saw: durations, bytes
  /// The counters of the route's upstream in the snapshot the route was last indexed in
  /// (request_counters::of() sets it; null for a route of no snapshot in force).
  upstream_counters* upstream = nullptr;
};

/// One worker's counters by limit name (names from the rules file: a bounded set), each with
/// one writer, the worker. of() finds a name's counter through a worker-only index and takes
/// the mutex the scraper takes only the first time the worker sees the name, never per
/// request; add_to() sums by name for the scraper (any thread).
class per_limit_counters {
 public:
  /// The counter of limit `name`. Worker thread only.
  observability::owned_counter& of(const std::string& name);
  /// Adds this worker's counts by limit name into `out`. Any thread.
  void add_to(std::map<std::string, std::uint64_t>& out) const;

 private:
  mutable std::mutex mutex_;  // guards counters_' structure
  std::map<std::string, std::unique_ptr<observability::owned_counter>> counters_;
  std::map<std::string, observability::owned_counter*> index_;  // worker thread only
};

/// One worker's counters. The owned_counter members and of() are used on the worker's thread
/// only; add_to() and the counters' value() from any thread.
class request_counters {
 public:
  observability::owned_counter requests;          ///< every request handled
  observability::owned_counter bad_requests;      ///< 400/401/404 before a decision
  observability::duration_histogram store_check;  ///< store check durations
  /// Requests keyed on a trusted proxy's own address, by identity::address_source (the
  /// `peer` and `forwarded` slots stay 0).
  std::array<observability::owned_counter, identity::address_source_count> client_fallbacks;
  /// Exchanges of requests no route matched (or refused before routing): route "".
  exchange_counters unrouted;

  /// The counters of `route`, an element of `rules.routes` of the snapshot numbered
  /// `generation`. Worker thread only. O(1) while the generation stays; the first call
  /// after a reload re-indexes the routes by name (counts follow a route's name across
  /// reloads), taking the mutex the scraper takes.
  route_counters& of(const config::rules& rules, std::uint64_t generation,
                     const config::route& route);

  /// Adds this worker's counts for every route name it has seen into `out`. Any thread.
  void add_to(std::map<std::string, observability::route_counts>& out) const;
  /// Adds this worker's counts for every upstream name it has seen into `out`. Any thread.
  void add_to(std::map<std::string, observability::upstream_counts>& out) const;
  /// Adds this worker's client-facing exchanges by route name ("" for unrouted) into `out`.
  /// Any thread.
  void add_to(std::map<std::string, observability::exchange_counts>& out) const;

  /// Blocks (penalty box, `block:`) started, by limit name.
  per_limit_counters blocks_started;
  /// Near-limit warning crossings (`warn_at:`), by limit name.
  per_limit_counters warnings;

 private:
  route_counters& named(const std::string& name);              // mutex_ held
  upstream_counters& upstream_named(const std::string& name);  // mutex_ held

  mutable std::mutex mutex_;  // guards by_name_'s structure (never taken per request)
  std::map<std::string, std::unique_ptr<route_counters>> by_name_;
  std::map<std::string, std::unique_ptr<upstream_counters>> upstreams_;
  std::uint64_t generation_ = 0;           // worker thread only
  std::vector<route_counters*> by_index_;  // rules.routes index -> counters
};

}  // namespace sluice::app
