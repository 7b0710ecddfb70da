// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// The admin listener (DESIGN.md, `admin:`): `GET /healthz`, `GET /readyz`,
/// `GET /admin/config`, `GET /admin/explain`, `POST /admin/reload` and `GET /metrics`.
/// It runs on its own io_context and thread, away from the workers, so an admin request
/// (a reload parses and validates a whole file) never delays a client request.

#include "sluice/config/rules.hpp"
#include "sluice/observability/metrics.hpp"
#include "sluice/observability/rate_history.hpp"
#include "sluice/observability/top_callers.hpp"

#include <boost/asio/ip/tcp.hpp>
#include <boost/json/object.hpp>

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

/// A request to explain (`GET /admin/explain`): the request as the gateway would see it.
struct explain_query {
  std::string method = "GET";  ///< `method=`
  std::string path;            ///< `path=`: origin-form target, query included (required)
  std::string api_key;         ///< `api_key=`: sent in the rules' API key header
  std::string ip;              ///< `ip=`: the TCP peer (default 127.0.0.1)
  /// `header.NAME=VALUE`, in order (Host, X-Forwarded-For, a `by: header:` field...).
  std::vector<std::pair<std::string, std::string>> headers;
};

/// A block to lift (`POST /admin/unblock`): the limit, and the caller whose block it is, named
/// as the limit counts callers (`by:`): `api_key=` (by: api_key), `ip=` (by: ip; by: api_key
/// for an anonymous caller; by: user or header:NAME for a caller without that value), `user=`
/// (by: user), `header=` (the value of a by: header:NAME limit's header); none for by: global.
struct unblock_query {
  std::string limit;    ///< `limit=`: the limit's name (required)
  std::string api_key;  ///< `api_key=`
  std::string ip;       ///< `ip=`
  std::string user;     ///< `user=`
  std::string header;   ///< `header=`
};

/// The answer to `POST /admin/unblock`: an HTTP status (200 lifted or nothing to lift, 400 a
/// query that does not fit the limit, 404 no such limit or one without `block:`, 503 store
/// unavailable) and a JSON object.
struct unblock_answer {
  unsigned status = 404;
  std::string json;
};

/// What the status page shows besides the rules (admin_backend::status()).
struct status_facts {
  std::int64_t uptime_ms = 0;  ///< since the gateway was built
  unsigned workers = 0;        ///< worker threads
  metrics_sample sample;       ///< the counters, as `GET /metrics` reports them
  bool rls_enabled = false;    ///< the rate limit service runs (sample.rls is its counters)
};

/// What the admin endpoints read and do; implemented by the app room (which knows the
/// gateway and the rules file). Called on the admin listener's thread, one request at a time.
class admin_backend {
 public:
  virtual ~admin_backend() = default;
  /// Whether the gateway can decide requests now (every worker's store is connected).
  virtual bool ready() = 0;
  /// Why it is not ready ("draining", or the store's failure), "" when unknown; /readyz
  /// prints it after "not ready: ".
  virtual std::string not_ready_reason() { return {}; }
  /// The rules in force, their generation and the file they came from.
  struct config_view {
    std::shared_ptr<const sluice::config::rules> rules;
    std::uint64_t generation = 0;
    std::string source_file;
    /// The first diagnostic of the last refused reload, "" when the last reload (or none) was
    /// refused since the rules in force were loaded.
    std::string last_reload_error;
  };
  virtual config_view current_config() = 0;
  /// Reloads the rules file (same effect as a file event or SIGHUP).
  virtual admin_reload_result reload() = 0;
  /// Prometheus text exposition for `GET /metrics` (observability::exposition()); nullopt
  /// when the backend publishes no metrics (the endpoint then answers 404). May throw; the
  /// listener then answers 500.
  virtual std::optional<std::string> metrics() { return std::nullopt; }
  /// The explanation of `q` as one JSON object (see the gateway's explain()), or nullopt when
  /// the backend cannot explain (the endpoint then answers 404, or 503 when it timed out: the
  /// error's text). Writes nothing to any store.
  struct explained {
    std::optional<std::string> json;
    std::string error;  ///< why not, when json is empty
  };
  virtual explained explain(const explain_query& q) {
    (void)q;
    return {std::nullopt, "not available"};
  }
  /// Lifts the block (`block:`, the penalty box) of the caller `q` names on limit `q.limit`,
  /// in the store, and says what it lifted.
  virtual unblock_answer unblock(const unblock_query& q) {
    (void)q;
    return {404, "{\"error\":\"not available\"}"};
  }
  /// The status page's facts (uptime, workers, counters); nullopt when the backend has none
  /// (the page then shows the rules only).
  virtual std::optional<status_facts> status() { return std::nullopt; }
  /// The `n` most limited callers (top_callers::top(); 0: the configured default), or
  /// nullopt when the backend keeps none (`GET /admin/top` then answers 404).
  virtual std::optional<top_callers::answer> top(std::size_t n) {
    (void)n;
    return std::nullopt;
  }
};

/// One limit as `GET /admin/config` shows it: name, by, algorithm, mode, rate and burst,
/// per-plan overrides with their guarantees, and its stated guarantee.
boost::json::object limit_json(const config::limit& l);

/// The `GET /admin/config` body: generation, source file, store, header sets, plans, API key
/// count, upstreams, and every route with its limits and their parameters (rate as
/// `N/DURATION`, `burst`, per-plan overrides, algorithm, `by`, mode) and each limit's stated
/// guarantee. JSON, one object. Never throws for a validated snapshot.
std::string config_json(const config::rules& rules, std::uint64_t generation,
                        const std::string& source_file, const std::string& last_reload_error = {});

/// The status page (`GET /[?n=K&path=P&method=M&api_key=K&ip=A]`, status_page.cpp): one
/// self-contained HTML document (no external assets) rendered on the server, complete with
/// scripts off: version, uptime, workers, generation and last reload error, store and
/// upstream health, responses by status class, decisions by route (zero rows left out),
/// every route with its own limits and the plan limits that apply there (with their stated
/// guarantees), the `n` most limited callers, and a form for /admin/explain (filled from the
/// query). Its script only refreshes it (/metrics every 2 s, /admin/top) and submits the form.
/// Every value from the query, the rules or the counters is HTML-escaped. Query errors are
/// shown in the page (never a failure): an n that is not a number, or over the bound (capped).
/// `rates`: the per-route rate graphs' data (null: no graphs are drawn).
std::string status_page_html(admin_backend& backend, std::string_view target,
                             const rate_history* rates = nullptr);

/// The `GET /admin/top?n=K` answer: 200 with top_json() (an n over the bound is capped and the
/// body says so), 400 for an n that is not a whole number or another parameter, 404 when the
/// backend keeps no top-N. {status, JSON body}.
std::pair<unsigned, std::string> top_answer(admin_backend& backend, std::string_view target);

/// The admin HTTP listener. Endpoints (anything else: 404; a known path with another
/// method: 405 with `Allow`):
/// - `GET /`: 200, status_page_html().
/// - `GET /admin/top?n=K`: top_answer(): the K most limited callers in the window, as JSON.
/// - `GET /healthz`: 200 `ok` while the process serves.
/// - `GET /readyz`: 200 `ready` when the backend is ready, else 503 `not ready`.
/// - `GET /admin/config`: 200, config_json().
/// - `POST /admin/reload`: 200 `{"reloaded":true,"generation":N}`, or 400
///   `{"reloaded":false,"generation":N,"diagnostics":[...]}` (the running config stays).
/// - `GET /admin/explain?path=P[&method=M][&api_key=K][&ip=A][&header.NAME=V...]`: 200 with
///   what a request would get now — route, caller, plan, each limit's state and the decision —
///   spending nothing (admin_backend::explain); 400 without `path` or with a bad parameter;
///   503 when the gateway did not answer within 2 s.
/// - `POST /admin/unblock?limit=NAME[&api_key=K|&ip=A|&user=U|&header=V]`: lifts that
///   caller's block on that limit (admin_backend::unblock): 200 with what was lifted, 400 for
///   a bad query, 404 for no such limit (or one without `block:`), 503 when the gateway or
///   its store did not answer.
/// - `GET /metrics`: the backend's Prometheus exposition (text/plain; version=0.0.4), or 404
///   when the backend publishes none.
///
/// With a token in the rules in force (config::admin_guard), every path but `/healthz` and
/// `/readyz` (and `/metrics` when `metrics_open`) first needs `Authorization: Bearer <token>`,
/// compared in constant time; otherwise 401 with a problem body and `WWW-Authenticate: Bearer`,
/// counted (auth_failures()) and logged at most once a second.
///
/// The status page's rate graphs: from start(), the listener's thread samples the backend's
/// route counters (admin_backend::status()) once every `status.graph_step` of the rules in
/// force at construction, keeping `status.graph` of rates (rate_history).
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
  /// Requests refused 401 for a missing or wrong bearer token since construction (any thread).
  std::uint64_t auth_failures() const;

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

}  // namespace sluice::observability
