// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// The running process around a gateway: the rules file it came from, hot reload (file
/// watcher, SIGHUP through reload(), `POST /admin/reload`) and the admin listener. `sluice
/// --config FILE` is one runtime; tests start one with ports 0.

#include "sluice/app/config_watcher.hpp"
#include "sluice/app/gateway.hpp"
#include "sluice/config/rules.hpp"

#include <boost/asio/ip/tcp.hpp>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::app {

/// Start-up options of a runtime.
struct runtime_options {
  gateway_options gateway;  ///< listen / admin / workers overrides
  bool watch = true;        ///< watch the rules file and reload when it changes
  watch_settings watching;  ///< debounce and stat fallback of the watcher
};

/// The outcome of one reload attempt.
struct reload_outcome {
  bool ok = false;                       ///< the file was valid and is now in force
  std::uint64_t generation = 0;          ///< the generation in force after the attempt
  std::vector<std::string> diagnostics;  ///< `file:line: path: message` when refused
};

/// A gateway, its rules file and its admin listener.
///
/// Every reload trigger (file event, SIGHUP, admin) ends in reload(): the file is read,
/// parsed and validated on the caller's thread (never a worker's), then either swapped in
/// with gateway::reload (generation + 1; bucket state untouched, so counts carry over) or
/// refused as a whole: the running config stays, one log line says why, and
/// gateway_stats::reload_failures counts it. Attempts are serialised, so generations are
/// installed in the order they were numbered.
///
/// `listen:`, `admin:`, `workers:` and `store:` are read at start-up only, and so is whether
/// the listener is TLS (`tls:`); the certificates and CA files are read again by every
/// reload, and a bad one refuses the reload like any other config error.
class runtime {
 public:
  /// Builds the gateway from `rules` (already loaded from `config_file`) and binds the
  /// listeners. `tls`: the TLS contexts built from `rules` (http::build_tls), or null to
  /// build them here. Throws std::runtime_error / boost::system::system_error when an
  /// address cannot be bound or TLS cannot be set up (naming each bad file).
  runtime(std::string config_file, std::shared_ptr<const config::rules> rules,
          runtime_options options = {}, std::shared_ptr<const http::tls_bundle> tls = nullptr);
  ~runtime();
  runtime(const runtime&) = delete;
  runtime& operator=(const runtime&) = delete;

  /// Starts the gateway (waiting up to 2 s for its store), the admin listener and the file
  /// watcher. A watcher that cannot be set up is logged; the other triggers still work.
  void start();

  /// Stops the watcher, the admin listener and the gateway. Idempotent.
  void stop();

  /// Graceful stop (SIGTERM): /readyz answers 503 from now on, then gateway::drain() for the
  /// rules' `drain_timeout` (or until `*abort`), then stop(). Returns the number of
  /// connections still busy when the drain ended (cut by the stop).
  std::size_t drain_and_stop(const std::atomic<bool>* abort = nullptr);

  /// Reloads the rules file now; `trigger` names the cause in the log line ("SIGHUP",
  /// "file change", "admin"). Thread-safe; blocks while another attempt runs.
  reload_outcome reload(std::string_view trigger);

  /// The gateway (stats, current rules, endpoint).
  app::gateway& gateway();

  /// The admin listener's bound endpoint, or nullopt when there is none.
  std::optional<boost::asio::ip::tcp::endpoint> admin_endpoint() const;

  /// The rate limit service's bound port (`rate_limit_service.listen`, after start()), or
  /// nullopt when the rules file has no `rate_limit_service:`.
  std::optional<std::uint16_t> rate_limit_service_port() const;

  /// The rules file path as given.
  const std::string& config_file() const;

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

}  // namespace sluice::app
