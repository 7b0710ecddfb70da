#pragma once
/// @file
/// Per-worker keep-alive connection pool to upstreams.

#include "sluice/config/rules.hpp"
#include "sluice/http/types.hpp"

#include <boost/asio/any_io_executor.hpp>
#include <boost/system/result.hpp>

#include <cstddef>
#include <memory>

namespace sluice::http {

/// Counters of a pool (for metrics and tests).
struct pool_stats {
  std::uint64_t connects = 0;   ///< TCP connections opened
  std::uint64_t reuses = 0;     ///< requests sent on an idle pooled connection
  std::uint64_t failures = 0;   ///< requests that ended in 502/504
};

/// A pool of idle keep-alive connections per upstream, owned by one worker (no locks).
class upstream_pool {
 public:
  explicit upstream_pool(boost::asio::any_io_executor ex, std::size_t max_idle_per_upstream = 64);
  ~upstream_pool();

  /// Sends `req` (already prepared by headers::prepare_upstream_request) to `up` and reads
  /// its response. Reuses an idle connection when one is open; a reused connection that
  /// fails before any response byte is retried once on a new connection (only for requests
  /// whose method is idempotent).
  /// Errors: errc::upstream_unreachable (connect failed: 502), errc::upstream_timeout (504),
  /// errc::upstream_protocol (malformed response: 502).
  boost::asio::awaitable<boost::system::result<response>> send(const config::upstream& up,
                                                                request req);

  pool_stats stats() const;

 private:
  struct impl;
  std::shared_ptr<impl> impl_;
};

}  // namespace sluice::http
