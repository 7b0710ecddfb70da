// SPDX-License-Identifier: Apache-2.0
#pragma once
// The gateway's request path, private to the app room: a rules snapshot compiled once for
// the requests it decides, and the handler that decides each request on its head in named
// steps — route → identify → decide → respond (429, 503...) or forward.

#include "charge_hook.hpp"
#include "request_counters.hpp"
#include "slot_keeper.hpp"
#include "store_step.hpp"

#include "sluice/http/router.hpp"
#include "sluice/http/tls_context.hpp"
#include "sluice/http/types.hpp"
#include "sluice/identity/identity.hpp"
#include "sluice/identity/plan_cache.hpp"
#include "sluice/limiter/check.hpp"
#include "sluice/limiter/decision.hpp"
#include "sluice/limiter/lease_book.hpp"
#include "sluice/limiter/refusal_cache.hpp"
#include "sluice/observability/access_log.hpp"
#include "sluice/observability/log.hpp"
#include "sluice/observability/top_callers.hpp"
#include "sluice/store/counter_store.hpp"
#include "sluice/store/lua_scripts.hpp"
#include "sluice/store/memory_store.hpp"
#include "sluice/store/redis_directory.hpp"

#include <atomic>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

namespace sluice::observability {
struct explain_query;
struct unblock_query;
struct unblock_answer;
}  // namespace sluice::observability

namespace sluice::app {

/// What one route needs per request, prepared once per snapshot.
struct compiled_route {
  const config::route* route = nullptr;
  std::shared_ptr<const config::upstream> upstream;      ///< resolved once, not by name
  std::shared_ptr<const http::client_tls> upstream_tls;  ///< an https upstream's; else null
  /// The limits a caller of each plan gets on this route (the plan's, then the route's, one
  /// per name: bucket scope) with their bucket parameters: parallel to the check's limits.
  struct plan_limits {
    std::vector<const config::limit*> limits;
    std::vector<limiter::applied_limit> applied;
    /// Token leasing: whether any of the limits leases, and each one's lease time.
    bool leases = false;
    std::vector<std::chrono::milliseconds> lease_time;
    /// Costs known after the response (`charge:`): whether any of the limits has one, and
    /// (parallel, filled only then) where each settled cost is read (null: none).
    bool charges = false;
    std::vector<std::shared_ptr<const limiter::usage_source>> usage;
    /// Whether any of the limits is a concurrency limit: the request then takes a slot.
    bool concurrent = false;
    /// Whether any of the limits has a near-limit warning (`warn_at:`): only then are the
    /// crossings counted.
    bool warns = false;
    /// Whether the over-limit cache may answer for these limits: not with a charged limit (a
    /// refund after a response may end a refusal before its Retry-After) nor a concurrency
    /// limit (a slot may free at any moment). Also store.over_limit_cache must be on.
    bool cacheable() const { return !charges && !concurrent; }
  };
  std::unordered_map<std::string, plan_limits> by_plan;
  /// The limits a CORS preflight is charged to: the anonymous plan's and the route's that
  /// say `preflight: true` (by default those by ip and global).
  plan_limits preflight;
  /// The route's CORS policy, else the top-level one; null = none.
  const config::cors_policy* cors = nullptr;
  plan_limits none;  ///< for a plan the snapshot does not define (never used by callers)

  const plan_limits& for_plan(const std::string& plan) const {
    auto it = by_plan.find(plan);
    return it == by_plan.end() ? none : it->second;
  }
};

/// An immutable rules snapshot with everything compiled from it: the router, the upstreams
/// and, per route and plan, the limit lists.
struct snapshot {
  /// `t`: the TLS contexts built from `r` (http::build_tls); null when `r` has no TLS.
  snapshot(std::shared_ptr<const config::rules> r, std::uint64_t g,
           std::shared_ptr<const http::tls_bundle> t = nullptr);
  std::shared_ptr<const config::rules> rules;
  std::shared_ptr<const http::tls_bundle> tls;  ///< may be null
  http::router router;
  std::uint64_t generation;
  std::vector<compiled_route> routes;  ///< parallel to rules->routes
  /// The bucket keys of each sharded limit's shards (`shards: S`), by limit name: shard i's
  /// key lands in the i-th of min(S, 64) equal parts of the Redis Cluster slot space (under
  /// the store's layout), so the shards spread over the masters of an evenly split cluster.
  std::unordered_map<std::string, std::vector<std::string>> shard_keys;

  const compiled_route& compiled(const config::route& r) const {
    return routes[static_cast<std::size_t>(&r - rules->routes.data())];
  }
};

// Process-wide counters that no request touches; per-request counts are each worker's own
// (request_counters), summed when read.
struct counters {
  std::atomic<std::uint64_t> reloads{0}, reload_failures{0};
  std::atomic<std::int64_t> loaded_unix_ms{0};  // when the snapshot in force was installed
};

/// State shared by every worker: the current snapshot, counters, the local fallback store.
struct shared_state {
  std::atomic<std::shared_ptr<const snapshot>> current;
  counters count;
  store::memory_store local_store;  // `on_store_failure: local`: per-instance buckets
  observability::log_throttle store_failure_log;
  /// `access_log:` (null: none), made at start-up; and the secret of its key hashes.
  std::unique_ptr<observability::access_log> access;
  std::string access_key;
  /// Charged units of this gateway's admitted requests not yet settled, per bucket (explain).
  std::shared_ptr<reservation_ledger> reservations = std::make_shared<reservation_ledger>();
  /// The most limited callers (`status:`), made at start-up; null: none kept.
  std::unique_ptr<observability::top_callers> top;
};

/// What a decided outcome says of the request as a whole, in the words the access log and
/// `GET /admin/explain` use.
struct outcome_summary {
  const char* decision = "allowed";  ///< allowed, limited or shadow-limited
  /// The refusing enforced limit that frees up last (the first of equals); when the request
  /// is shadow-limited, the refusing shadow limit that frees up last; npos when none.
  std::size_t deciding = static_cast<std::size_t>(-1);
  std::int64_t retry_after_ms = 0;  ///< the deciding limit's Retry-After (shadow: would-be)
  std::int64_t remaining = -1;      ///< the least Remaining of the enforced limits (-1: none)
};
/// How the rules' store lays buckets out in Redis (`store.layout`, `store.hash_groups`): the
/// layout the store client writes with, and explain and the shard keys read with.
lua::key_layout key_layout_of(const config::store_settings& store);

/// Summarizes `out` for the limits `applied` (parallel to it; their shadow flags).
outcome_summary summarize(const limiter::check_outcome& out,
                          const std::vector<limiter::applied_limit>& applied);

/// The gateway's request handler, one per worker.
class gateway_handler final : public http::request_handler {
 public:
  /// `executor`: the worker's (settlements after a response and the concurrency slots'
  /// releases and renewals run on it; none: slots are released only on a store that decides in
  /// memory, and never renewed); `slot_prefix`: unique across the gateways sharing the store
  /// (instance id and worker).
  gateway_handler(shared_state& shared, std::shared_ptr<store::counter_store> store,
                  std::shared_ptr<store::redis_directory> directory = nullptr,
                  boost::asio::any_io_executor executor = {}, std::string slot_prefix = "0")
      : shared_(shared),
        store_(store, counters_),
        slots_(std::make_shared<slot_keeper>(executor, std::move(store), shared.local_store,
                                             std::move(slot_prefix))),
        directory_(std::move(directory)),
        executor_(std::move(executor)) {}

  boost::asio::awaitable<http::verdict> decide(http::request_head& head,
                                               const http::request_context& ctx) override;
  /// decide()'s steps without a suspension, on a store that decides in memory (the memory
  /// store) with no plan directory: true with the verdict in `out`. False, having done
  /// nothing, on the Redis store or with a directory (their round trips wait): then the
  /// session calls decide().
  bool decide_now(http::request_head& head, const http::request_context& ctx,
                  http::verdict& out) override;

  /// `GET /admin/explain` (src/app/explain.cpp): what a request described by `q` would get
  /// now — its route, caller and plan, each limit with its stated guarantee and the state a
  /// request would see, and the decision — as one JSON object. The store decides with
  /// check_request::peek: nothing is written or spent, the over-limit cache is neither read
  /// nor filled. A request refused before any limit (404, 401, 400) says so. Worker thread.
  /// (`q` by value: the coroutine owns its copy, whoever started it.)
  boost::asio::awaitable<std::string> explain(observability::explain_query q);

  /// `POST /admin/unblock` (src/app/unblock.cpp): deletes the block of the caller `q` names
  /// on limit `q.limit` from the store (a check with check_request::peek and ::lift_blocks:
  /// nothing else is written) and answers what it lifted; every worker's over-limit cache
  /// forgets its refusals (limiter::note_block_lift()). Worker thread.
  boost::asio::awaitable<observability::unblock_answer> unblock(observability::unblock_query q);

  /// The access log: whether sessions call record(), and the line of one exchange.
  bool records() const override;
  void record(const http::request_head& head, const http::request_context& ctx,
              const http::verdict& v, const http::exchange_result& ex) noexcept override;

  /// This worker's request counters (any thread may read them).
  const request_counters& counters() const { return counters_; }
  /// Refusals answered from the over-limit cache, without a store round trip. Worker thread.
  std::uint64_t cached_refusals() const { return store_.refusals().hits(); }
  /// This worker's token leases (lease: N). Worker thread.
  const limiter::lease_book& leases() const { return store_.leases(); }
  /// This worker's settlements of costs known after the response (any thread may read them).
  const settle_counters& settlements() const { return *settlements_; }
  /// This worker's concurrency slots. Worker thread.
  slot_keeper& slots() { return *slots_; }
  const slot_keeper& slots() const { return *slots_; }
  /// This worker's plan directory cache counters. Worker thread only.
  identity::plan_cache::counters plan_cache_stats() const {
    return cache_ ? cache_->stats() : identity::plan_cache::counters{};
  }

 private:
  /// Step 1's result: the route and the canonical target.
  struct routed {
    const compiled_route* route = nullptr;
    http::canonical_target target;
    bool websocket = false;  ///< a WebSocket handshake the route allows: tunnel after 101
    /// A CORS preflight (OPTIONS with Origin and Access-Control-Request-Method): never
    /// authenticated, charged only to compiled_route::preflight; answered or forwarded per
    /// the route's CORS policy, forwarded as it is when the route has none.
    bool preflight = false;
  };
  /// Step 2's result: who is calling (or the directory could not say).
  struct identified {
    identity::caller who;
    bool directory_down = false;
    /// The route's limits for the caller's plan: looked up once, in decide().
    const compiled_route::plan_limits* limits = nullptr;
  };
  /// What the directory says of a key.
  struct directory_answer {
    std::optional<std::string> plan;  ///< the key's plan; nullopt: not in the directory
    bool unavailable = false;         ///< the directory could not be read (nothing cached)
  };

  /// Step 1: canonical target, route, and what the route allows of the head (body size,
  /// upgrade). An absolute-form target is routed by its authority (RFC 9112 §3.2.2).
  /// `cors` is set to the matched route's CORS policy (unchanged when none matches).
  std::variant<routed, http::verdict> route(const snapshot& snap, http::request_head& head,
                                            const config::cors_policy*& cors);
  /// What a request presents for identification, before any directory lookup.
  struct presented {
    boost::asio::ip::address client;  ///< client_address(): the peer or the XFF entry
    std::string_view client_text;     ///< its text when it is the peer's (else "")
    std::string key;                  ///< the API key ("" when none)
    std::optional<std::string> plan;  ///< its plan from the snapshot or the directory
    bool directory_down = false;      ///< the store-backed directory could not be read
  };
  /// What decide() knows of a request as it goes (null: not reached), for the access log's
  /// note, and the CORS policy its answers carry.
  struct progress {
    const config::cors_policy* cors = nullptr;
    const routed* r = nullptr;
    const presented* p = nullptr;
    const identified* id = nullptr;
    const boost::system::result<limiter::check_outcome>* decided = nullptr;
    bool store_failed = false;
    route_counters* counted = nullptr;  ///< the matched route's (its exchange is counted there)
  };
  /// Every verdict's last step: the access log's note (with an access log) and the CORS
  /// fields of `at.cors` (Fetch §3.2.3).
  void finish(http::verdict& v, const progress& at, http::request_head& head,
              const http::request_context& ctx) const;
  /// One request as decide(), decide_now() and explain() take it through the steps (not movable:
  /// `at` points into it).
  struct pending {
    progress at;
    std::optional<routed> r;
    presented p;
    identified id;
    limiter::check_request check;
    /// The limits with a `charge:` (empty for every other route): their checks as sent, for
    /// the charge hook an admitted request carries.
    std::vector<charged_limit> charged;
    /// The request's slot id when its limits include a concurrency limit ("" otherwise), and
    /// the check as sent to the store (decide() hands the store `check` itself).
    std::string slot;
    limiter::check_request sent;
  };
  /// Step 3's end for a limit list with a concurrency limit: the check stamped with a new
  /// slot id (into `q.slot`).
  void stamp_slot(pending& q);
  /// Step 4's end for a request with a slot: the slots the outcome took are held, and the
  /// verdict's watch gives them back when the exchange ends (a forward), or when the answer
  /// is sent (a 429 that took a shadow limit's slot, a preflight the gateway answers).
  /// `on_local`: decided by `on_store_failure: local`.
  void hold_slots(pending& q, const store_result& decided, bool on_local, http::verdict& out);
  /// Steps 1 and 2a (start(), present()) into `q`; or the answer that ends the request.
  std::optional<http::verdict> front(const snapshot& snap, http::request_head& head,
                                     const http::request_context& ctx, pending& q);
  /// Steps 2b and 3 (identify_caller(), prepare_check()) into `q`, after the directory when
  /// it was needed; or the answer that ends the request (a refusal, an unlimited forward).
  std::optional<http::verdict> back(const snapshot& snap, http::request_head& head,
                                    const http::request_context& ctx, pending& q);
  /// Step 4's end, once the store step decided (or failed): respond() and finish() into
  /// `out`.
  void conclude(const snapshot& snap, http::request_head& head, const http::request_context& ctx,
                pending& q, store_result& decided, http::verdict& out);
  /// Whether the plan of the presented key must be read from the store-backed directory.
  static bool needs_directory(const snapshot& snap, const routed& r, const presented& p);
  /// Step 1 with its CORS bookkeeping: route() into `routed_slot` and `at`, or its answer.
  std::optional<http::verdict> start(const snapshot& snap, http::request_head& head, progress& at,
                                     std::optional<routed>& routed_slot);

  /// Step 2a: the client address and the presented key with its plan from the snapshot
  /// (inline keys, key file). A refusal (400) when the key is ambiguous.
  std::optional<http::verdict> present(const snapshot& snap, const http::request_head& head,
                                       const http::request_context& ctx, const routed& r,
                                       presented& p);
  /// The plan directory's answer for `p.key` into `p` (its plan, or that it could not be
  /// read): the round trip decide() and explain() make for a key the snapshot does not know.
  boost::asio::awaitable<void> look_up_plan(const snapshot& snap, presented& p);
  /// Step 2's end (after the directory, when it was needed): for a preflight the anonymous
  /// caller and the route's preflight limits, else identify() and the caller's limits, into
  /// `id`; or identify()'s refusal.
  std::optional<http::verdict> identify_caller(const snapshot& snap, const http::request_head& head,
                                               const routed& r, presented& p, identified& id);
  /// Step 2b (after the directory, when decide() needed it): the caller into `out`, or a
  /// refusal (401 unknown key under `unknown_key: reject`, 400).
  std::optional<http::verdict> identify(const snapshot& snap, const http::request_head& head,
                                        presented& p, identified& out);
  /// Step 3: every limit that applies, as one store check into `check`; or the verdict when
  /// nothing is to be checked (forward unlimited) or an identity header is ambiguous (400).
  /// A limit with `charge:` is charged its reservation (`settle`: a fixed one, or read from
  /// a request header and capped — not a number: 400 naming the header) and copied into
  /// `charged`.
  std::optional<http::verdict> prepare_check(const snapshot& snap, http::request_head& head,
                                             const http::request_context& ctx, const routed& r,
                                             const identified& id, limiter::check_request& check,
                                             std::vector<charged_limit>& charged);
  /// Step 4: answers from the decided outcome (429 with the quota fields, or forward), or
  /// from the failure policy when the store could not decide, into `out` (a fresh verdict).
  void respond(const snapshot& snap, http::request_head& head, const http::request_context& ctx,
               const routed& r, const identified& id, limiter::check_request& check,
               boost::system::result<limiter::check_outcome>& decided, http::verdict& out);
  /// Counts, per limit, the near-limit warnings this decided check crossed (`warn_at:`,
  /// limiter::crossed_warning) in `sluice_quota_warnings_total`: `prepared`'s limits, with
  /// `applied` (parallel), what each took of the request (`cost`: the route's; `head`: for a
  /// reservation read from a request header) and the outcome.
  void count_warnings(const compiled_route::plan_limits& prepared,
                      const std::vector<limiter::applied_limit>& applied, std::int64_t cost,
                      const http::request_head& head, const limiter::check_outcome& outcome);
  /// The one place a store failure is handled: the route's `on_store_failure`. Returns the
  /// verdict for fail_open (forward, no quota fields) and fail_closed (503); for `local`,
  /// nullopt with `decided` set by the per-instance store (scaled by store.local_share) and
  /// `applied` rescaled to match.
  std::optional<http::verdict> apply_failure_policy(
      const snapshot& snap, const http::request_head& head, const routed& r, const identified& id,
      const boost::system::error_code& ec, const http::request_context& ctx,
      limiter::check_request& check, std::vector<limiter::applied_limit>& applied,
      boost::system::result<limiter::check_outcome>& decided, route_counters& counted);
  /// Makes `v` (a fresh verdict) the forward verdict carrying `quota_lines`
  /// (limiter::append_quota_lines); for a preflight the policy answers, the 204 preflight
  /// answer with those fields.
  void forward(const routed& r, const http::request_head& head, const http::request_context& ctx,
               bool limited, std::string quota_lines, route_counters& counted,
               http::verdict& v) const;
  boost::asio::awaitable<directory_answer> directory_plan(config::directory_settings d,
                                                          std::string key);
  http::verdict bad_request(unsigned version, std::string_view detail);
  /// Fills `v.access` (the access log's note) from what decide() knew when it made `v`:
  /// route, client, key hash, and from the outcome the decision, the deciding limit and the
  /// Remaining sent. Null pointers: not reached.
  void note(http::verdict& v, const http::request_context& ctx, const routed* r, const presented* p,
            const identified* id, const boost::system::result<limiter::check_outcome>* decided,
            bool store_failed) const;
  void log_store_failure(const boost::system::error_code& ec, const std::string& route,
                         const char* policy);

  shared_state& shared_;
  request_counters counters_;           // this worker's; summed by gateway::stats() and sample()
  store_step store_;                    // step 4: the store, with this worker's leases and refusals
  std::shared_ptr<slot_keeper> slots_;  // this worker's concurrency slots
  std::mt19937_64 jitter_{std::random_device{}()};     // Retry-After jitter; this worker's only
  std::shared_ptr<store::redis_directory> directory_;  // null without a redis store
  std::unique_ptr<identity::plan_cache> cache_;        // this worker's directory cache
  std::string cache_hash_;                             // the hash cache_ holds entries of
  boost::asio::any_io_executor executor_;              // the worker's (settlements)
  std::shared_ptr<settle_counters> settlements_ = std::make_shared<settle_counters>();
};

}  // namespace sluice::app
