// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// The gRPC server of the Envoy rate limit service (`envoy.service.ratelimit.v3.
/// RateLimitService`), with `grpc.health.v1` health checking, on a listener of its own
/// (`rate_limit_service.listen`), on grpc++'s callback API: each call is mapped
/// (rls/plan.hpp) under the rules in force on a gRPC thread, which hands its one store check
/// to a gateway worker (the `decide` function) and returns; the check's answer finishes the
/// call. No thread waits for a store.

#include "sluice/config/rules.hpp"
#include "sluice/limiter/check.hpp"
#include "sluice/observability/metrics.hpp"

#include <boost/system/result.hpp>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace sluice::rls {

/// Runs one check on the counter store and calls its argument's callback exactly once, on
/// any thread, with the outcome or the store's error.
using decide_fn = std::function<void(
    limiter::check_request, std::function<void(boost::system::result<limiter::check_outcome>)>)>;

/// The rules in force (a snapshot; never null).
using rules_fn = std::function<std::shared_ptr<const config::rules>()>;

/// Counters of the service since start. Thread-safe (relaxed atomics; any gRPC thread
/// writes).
struct counters {
  std::atomic<std::uint64_t> ok{0};                   ///< answered OK
  std::atomic<std::uint64_t> over_limit{0};           ///< answered OVER_LIMIT
  std::atomic<std::uint64_t> invalid{0};              ///< refused with INVALID_ARGUMENT
  std::atomic<std::uint64_t> unavailable{0};          ///< refused UNAVAILABLE (fail_closed)
  std::atomic<std::uint64_t> descriptors_decided{0};  ///< descriptors the store decided
  std::atomic<std::uint64_t> unknown{0};         ///< descriptors that matched no limit (allowed)
  std::atomic<std::uint64_t> fail_open{0};       ///< store failures answered OK (fail_open)
  std::atomic<std::uint64_t> fail_closed{0};     ///< store failures answered UNAVAILABLE
  std::atomic<std::uint64_t> shadow_limited{0};  ///< decided calls a shadow limit would refuse
  observability::shared_duration_histogram duration;  ///< every call, read to answer ready

  /// The counters as the metrics exposition reports them.
  observability::rls_counts read() const noexcept;
};

/// The service and its listener.
class server {
 public:
  /// Binds `host:port` (port 0: any free port) at start().
  server(std::string host, std::uint16_t port, rules_fn rules, decide_fn decide);
  ~server();
  server(const server&) = delete;
  server& operator=(const server&) = delete;

  /// Builds and starts the gRPC server. Throws std::runtime_error when the address cannot
  /// be bound.
  void start();
  /// Stops accepting calls, lets calls in flight finish (at most 1 s), then returns.
  /// Idempotent.
  void stop();
  /// The bound port (after start()).
  std::uint16_t port() const;
  const counters& stats() const;

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

}  // namespace sluice::rls
