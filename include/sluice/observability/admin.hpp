#pragma once
/// @file
/// The admin listener (DESIGN.md, `admin:`): `GET /healthz`, `GET /readyz`,
/// `GET /admin/config`, `POST /admin/reload` and `GET /metrics`.
/// It runs on its own io_context and thread, away from the workers, so an admin request
/// (a reload parses and validates a whole file) never delays a client request.

#include "sluice/config/rules.hpp"

#include <boost/asio/ip/tcp.hpp>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace sluice::observability {

/// The outcome of a reload asked for by `POST /admin/reload`.
struct admin_reload_result {
  bool ok = false;                       ///< the new file was swapped in
  std::uint64_t generation = 0;          ///< the generation in force afterwards
  std::vector<std::string> diagnostics;  ///< `file:line: path: message` lines when refused
};

/// What the admin endpoints read and do; implemented by the app room (which knows the
/// gateway and the rules file). Called on the admin listener's thread, one request at a time.
class admin_backend {
 public:
  virtual ~admin_backend() = default;
  /// Whether the gateway can decide requests now (every worker's store is connected).
  virtual bool ready() = 0;
  /// The rules in force, their generation and the file they came from.
  struct config_view {
    std::shared_ptr<const sluice::config::rules> rules;
    std::uint64_t generation = 0;
    std::string source_file;
  };
  virtual config_view current_config() = 0;
  /// Reloads the rules file (same effect as a file event or SIGHUP).
  virtual admin_reload_result reload() = 0;
  /// Prometheus text exposition for `GET /metrics` (observability::exposition()); nullopt
  /// when the backend publishes no metrics (the endpoint then answers 404). May throw; the
  /// listener then answers 500.
  virtual std::optional<std::string> metrics() { return std::nullopt; }
};

/// The `GET /admin/config` body: generation, source file, store, header sets, plans, API key
/// count, upstreams, and every route with its limits and their parameters (rate as
/// `N/DURATION`, `burst`, per-plan overrides, algorithm, `by`, mode) and each limit's stated
/// guarantee. JSON, one object. Never throws for a validated snapshot.
std::string config_json(const config::rules& rules, std::uint64_t generation,
                        const std::string& source_file);

/// The admin HTTP listener. Endpoints (anything else: 404; a known path with another
/// method: 405 with `Allow`):
/// - `GET /healthz`: 200 `ok` while the process serves.
/// - `GET /readyz`: 200 `ready` when the backend is ready, else 503 `not ready`.
/// - `GET /admin/config`: 200, config_json().
/// - `POST /admin/reload`: 200 `{"reloaded":true,"generation":N}`, or 422
///   `{"reloaded":false,"generation":N,"diagnostics":[...]}` (the running config stays).
/// - `GET /metrics`: the backend's Prometheus exposition (text/plain; version=0.0.4), or 404
///   when the backend publishes none.
///
/// Threading: construct, start(), stop() and local_endpoint() from one controlling thread;
/// requests are served on the listener's own thread.
class admin_server {
 public:
  /// Binds `endpoint` (port 0 picks a free one). Throws boost::system::system_error when it
  /// cannot be bound.
  admin_server(boost::asio::ip::tcp::endpoint endpoint, std::shared_ptr<admin_backend> backend);
  ~admin_server();
  admin_server(const admin_server&) = delete;
  admin_server& operator=(const admin_server&) = delete;

  /// Starts the listener's thread.
  void start();
  /// Closes the listener and its connections and joins the thread. Idempotent.
  void stop();
  /// The bound endpoint.
  boost::asio::ip::tcp::endpoint local_endpoint() const;

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

}  // namespace sluice::observability
