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
};

/// One route's counters in one worker (meanings: observability::route_counts).
struct route_counters {
  observability::owned_counter allowed, limited, unlimited, fail_open, fail_closed, local,
      shadow_limited, bad_gateway, gateway_timeout;
  /// The counters of the route's upstream in the snapshot the route was last indexed in
  /// (request_counters::of() sets it; null for a route of no snapshot in force).
  upstream_counters* upstream = nullptr;
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

  /// Counts a block (penalty box) started by limit `limit`. Worker thread; takes the mutex
  /// the scraper takes, which is fine for an event that happens at most once per caller and
  /// block duration.
  void block_started(const std::string& limit);
  /// Adds this worker's blocks started, by limit name, into `out`. Any thread.
  void add_blocks_to(std::map<std::string, std::uint64_t>& out) const;
  /// The near-limit warning crossings of limit `name` (`warn_at:`). Worker thread only; the
  /// mutex is taken only the first time the worker sees the name (a crossing is rare: once
  /// per key and threshold, never per request).
  observability::owned_counter& warnings_of(const std::string& name);
  /// Adds this worker's warning crossings by limit name into `out`. Any thread.
  void add_warnings_to(std::map<std::string, std::uint64_t>& out) const;

 private:
  route_counters& named(const std::string& name);              // mutex_ held
  upstream_counters& upstream_named(const std::string& name);  // mutex_ held

  mutable std::mutex mutex_;  // guards by_name_'s structure (never taken per request)
  std::map<std::string, std::unique_ptr<route_counters>> by_name_;
  std::map<std::string, std::unique_ptr<upstream_counters>> upstreams_;
  std::map<std::string, std::uint64_t> blocks_started_;  // by limit name; mutex_ held
  std::uint64_t generation_ = 0;                         // worker thread only
  std::vector<route_counters*> by_index_;                // rules.routes index -> counters
  std::map<std::string, std::unique_ptr<observability::owned_counter>> warnings_;  // by limit
  std::map<std::string, observability::owned_counter*> warned_index_;  // worker thread only
};

}  // namespace sluice::app
