// The gateway: wires config, identity, limiter, store and http together.
//
// Request path (DESIGN.md): canonical target -> route -> caller -> every applicable limit
// (plan limits first, then route limits) decided in one store round trip -> 429, the route's
// failure policy, or forwarding through the worker's upstream pool, with the rate-limit
// fields rendered from the one decided outcome.

#include "sluice/app/gateway.hpp"

#include "request_counters.hpp"
#include "sluice/errc.hpp"

#include "sluice/http/headers.hpp"
#include "sluice/http/router.hpp"
#include "sluice/http/server.hpp"
#include "sluice/http/upstream_pool.hpp"
#include "sluice/config/key_file.hpp"
#include "sluice/identity/identity.hpp"
#include "sluice/identity/plan_cache.hpp"
#include "sluice/store/redis_directory.hpp"
#include "sluice/limiter/decision.hpp"
#include "sluice/limiter/keys.hpp"
#include "sluice/observability/log.hpp"
#include "sluice/store/memory_store.hpp"
#include "sluice/store/redis_store.hpp"

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <condition_variable>
#include <future>
#include <map>
#include <mutex>
#include <stdexcept>
#include <random>
#include <thread>
#include <vector>

namespace sluice::app {
namespace {

namespace asio = boost::asio;
namespace bhttp = boost::beast::http;
using http::request;
using http::response;

/// An immutable rules snapshot with its compiled router.
struct snapshot {
  snapshot(std::shared_ptr<const config::rules> r, std::uint64_t g)
      : rules(std::move(r)), router(*rules), generation(g) {}
  std::shared_ptr<const config::rules> rules;
  http::router router;
  std::uint64_t generation;
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
};

response make_response(unsigned version, bhttp::status status, std::string body,
                       std::string_view content_type) {
  response res{status, version};
  res.set(bhttp::field::server, "sluice");
  if (!body.empty()) res.set(bhttp::field::content_type, content_type);
  res.body() = std::move(body);
  return res;
}

response problem(unsigned version, bhttp::status status, std::string_view title,
                 std::string_view detail) {
  return make_response(version, status,
                       limiter::problem_body(static_cast<int>(status), title, detail),
                       "application/problem+json");
}

void add_fields(response& res, const std::vector<limiter::header_field>& fields) {
  for (const auto& [name, value] : fields) res.set(name, value);
}

/// The `local` failure policy's share of a limit: burst and rate scaled by `share`, never
/// below the request's cost (a limit that could never admit would lie).
limiter::bucket_params scaled(const config::limit_params& p, double share, std::int64_t cost) {
  config::limit_params q = p;
  q.burst = std::max<std::int64_t>(cost, static_cast<std::int64_t>(std::floor(p.burst * share)));
  q.rate.count = std::max<std::int64_t>(1, static_cast<std::int64_t>(std::floor(p.rate.count * share)));
  return limiter::bucket_params::from(q);
}

class gateway_handler final : public http::request_handler {
 public:
  gateway_handler(shared_state& shared, std::shared_ptr<store::counter_store> store,
                  asio::any_io_executor ex,
                  std::shared_ptr<store::redis_directory> directory = nullptr)
      : shared_(shared), store_(std::move(store)), pool_(ex), directory_(std::move(directory)) {}

  asio::awaitable<response> handle(request req, http::request_context ctx) override {
    counters_.requests.add();
    // One snapshot decides the whole request, whatever reloads happen meanwhile.
    const std::shared_ptr<const snapshot> snap = shared_.current.load();
    const config::rules& rules = *snap->rules;
    const unsigned version = req.version();

    // Methods are case-sensitive (RFC 9110 §9.1): `post` is not POST, and letting it fall
    // through to another route would skip the POST route's limits. Refuse it instead.
    if (std::any_of(req.method_string().begin(), req.method_string().end(),
                    [](char c) { return c >= 'a' && c <= 'z'; })) {
      counters_.bad_requests.add();
      co_return problem(version, bhttp::status::bad_request, "Bad Request",
                        "method names are case-sensitive and sluice routes upper-case methods");
    }
    auto target = http::canonicalize(req.target());
    if (!target) {
      counters_.bad_requests.add();
      co_return problem(version, bhttp::status::bad_request, "Bad Request",
                        "the request target cannot be made canonical");
    }
    const config::route* route = snap->router.match(req.method_string(), req[bhttp::field::host], target->path);
    if (route == nullptr) {
      counters_.bad_requests.add();
      co_return problem(version, bhttp::status::not_found, "Not Found", "no route matches");
    }
    route_counters& counted = counters_.of(rules, snap->generation, *route);

    const auto peer = ctx.peer.address();
    const auto client = identity::client_address(peer, req, rules.identity.trusted_proxies);
    // API key → plan: inline map, key file, then the store-backed directory (cached).
    auto presented = identity::presented_key(rules, req, target->query);
    if (const auto* err = std::get_if<identity::caller_error>(&presented)) {
      counters_.bad_requests.add();
      co_return problem(version, bhttp::status::bad_request, "Bad Request",
                        identity::describe(*err));
    }
    std::string key = std::move(std::get<std::string>(presented));
    auto plan = identity::static_plan(rules, key);
    bool directory_down = false;
    if (!plan && !key.empty() && rules.identity.directory.enabled) {
      auto looked = co_await directory_plan(rules.identity.directory, key);
      directory_down = looked.unavailable;
      plan = std::move(looked.plan);
    }
    // A directory that cannot be read is a store failure, never "unknown key": the route's
    // policy applies below, as for a failed check; under `local` the caller is limited as
    // anonymous (by client address: an unverified key must not buy a bucket of its own).
    auto identified = directory_down
                          ? std::variant<identity::caller, identity::caller_error>(
                                identity::anonymous_caller(rules, client))
                          : identity::make_caller(rules, std::move(key), std::move(plan), client);
    if (auto* err = std::get_if<identity::caller_error>(&identified)) {
      counters_.bad_requests.add();
      if (*err == identity::caller_error::unknown_key) {
        co_return problem(version, bhttp::status::unauthorized, "Unauthorized",
                          identity::describe(*err));
      }
      co_return problem(version, bhttp::status::bad_request, "Bad Request",
                        identity::describe(*err));
    }
    const auto& who = std::get<identity::caller>(identified);

    // The shadow marker and the decision time are the gateway's to set: a client's copy never
    // reaches the upstream.
    if (!rules.shadow_header.empty()) req.erase(rules.shadow_header);
    if (!rules.decision_time_header.empty()) req.erase(rules.decision_time_header);

    // Plan limits first, then route limits, each in declaration order.
    std::vector<const config::limit*> limits;
    if (auto plan = rules.plans.find(who.plan); plan != rules.plans.end()) {
      for (const auto& l : plan->second.limits) {
        if (l.applies_to(who.plan)) limits.push_back(&l);
      }
    }
    // A limit written only as per-plan overrides does not apply to other plans.
    for (const auto& l : route->limits) {
      if (l.applies_to(who.plan)) limits.push_back(&l);
    }
    // One bucket per limit name (case c15): a limit named by the plan and the route is
    // charged once, at its first position.
    for (std::size_t i = 1; i < limits.size(); ++i) {
      for (std::size_t j = 0; j < i; ++j) {
        if (limits[j]->name == limits[i]->name) {
          limits.erase(limits.begin() + static_cast<std::ptrdiff_t>(i--));
          break;
        }
      }
    }

    limiter::check_request check;
    std::vector<limiter::applied_limit> applied;
    check.limits.reserve(limits.size());
    applied.reserve(limits.size());
    for (const config::limit* l : limits) {
      auto id = identity::limit_identity(*l, who, rules, req);
      if (!id) {
        counters_.bad_requests.add();
        co_return problem(version, bhttp::status::bad_request, "Bad Request",
                          identity::describe(identity::caller_error::conflicting_values));
      }
      const auto bucket = limiter::bucket_params::from(*l->find_params(who.plan));
      const bool shadow = l->mode == config::limit_mode::shadow;
      check.limits.push_back({limiter::bucket_key(l->name, id->first, id->second), l->algorithm,
                              bucket, route->cost, shadow});
      applied.push_back({l->name, l->algorithm, bucket, shadow});
    }

    const config::upstream& up = rules.upstreams.at(route->upstream);
    const bool policy_decides =
        directory_down && route->on_store_failure != config::failure_policy::local;
    if (check.limits.empty() && !policy_decides) {
      counted.unlimited.add();
      co_return co_await forward(std::move(req), *target, up, peer, false, {}, &counted);
    }

    boost::system::result<limiter::check_outcome> decided{make_error_code(sluice::errc::store_unavailable)};
    if (!directory_down) {  // (down: the store is known to be failing)
      const auto asked = std::chrono::steady_clock::now();
      // The request is needed again only for a local decision after a failure. (A named
      // local, not a conditional temporary inside co_await: GCC 12 miscompiles that.)
      limiter::check_request sent = route->on_store_failure == config::failure_policy::local
                                        ? check
                                        : std::move(check);
      decided = co_await store_->check(std::move(sent));
      counters_.store_check.observe(std::chrono::steady_clock::now() - asked);
    }
    if (!decided) {
      switch (route->on_store_failure) {
        case config::failure_policy::fail_open: {
          counted.fail_open.add();
          log_store_failure(decided.error(), route->name, "fail_open");
          // Nothing true can be said about the quota: no quota fields.
          co_return co_await forward(std::move(req), *target, up, peer, true, {}, &counted);
        }
        case config::failure_policy::fail_closed: {
          counted.fail_closed.add();
          log_store_failure(decided.error(), route->name, "fail_closed");
          auto res = problem(version, bhttp::status::service_unavailable,
                             "Rate Limiter Unavailable",
                             "the rate limiter cannot decide this request right now; retry later");
          res.set(bhttp::field::retry_after, "1");
          co_return res;
        }
        case config::failure_policy::local: {
          counted.local.add();
          log_store_failure(decided.error(), route->name, "local");
          for (std::size_t i = 0; i < check.limits.size(); ++i) {
            check.limits[i].bucket = scaled(*limits[i]->find_params(who.plan),
                                            rules.store.local_share, route->cost);
            applied[i].bucket = check.limits[i].bucket;
          }
          decided = shared_.local_store.decide(check);
          break;
        }
      }
    }

    const limiter::check_outcome& outcome = *decided;
    // Shadow limits (DESIGN.md): each was decided as if alone; a would-be refusal is counted
    // and, with `shadow_header:`, named to the upstream, and changes nothing else.
    if (!rules.decision_time_header.empty() && outcome.now_ms > 0)
      req.set(rules.decision_time_header, std::to_string(outcome.now_ms));
    const auto shadow_hits = limiter::shadow_violations(applied, outcome);
    if (!shadow_hits.empty()) {
      counted.shadow_limited.add();
      if (!rules.shadow_header.empty()) {
        std::string names;
        for (const auto& n : shadow_hits) names += (names.empty() ? "" : ", ") + n;
        req.set(rules.shadow_header, names);
      }
    }
    auto fields = limiter::quota_headers(applied, outcome, rules.headers);
    if (!outcome.allowed) {
      counted.limited.add();
      // `retry_after_jitter:` only ever adds to the honest wait.
      const auto retry = limiter::jittered_retry_after(
          limiter::retry_after_seconds(applied, outcome), rules.retry_after_jitter, jitter_());
      auto violated = limiter::violated_policies(applied, outcome);
      auto res = make_response(version, bhttp::status::too_many_requests,
                               limiter::quota_exceeded_body(violated, retry),
                               "application/problem+json");
      add_fields(res, fields);
      res.set(bhttp::field::retry_after, std::to_string(retry));
      co_return res;
    }
    counted.allowed.add();
    co_return co_await forward(std::move(req), *target, up, peer, true, std::move(fields),
                               &counted);
  }

  /// This worker's request counters (any thread may read them).
  const request_counters& counters() const { return counters_; }
  /// This worker's upstream pool (its stats() may be read from any thread).
  const http::upstream_pool& pool() const { return pool_; }
  /// This worker's plan directory cache counters. Worker thread only.
  identity::plan_cache::counters plan_cache_stats() const {
    return cache_ ? cache_->stats() : identity::plan_cache::counters{};
  }

 private:
  /// What the store-backed directory says of a key.
  struct directory_answer {
    std::optional<std::string> plan;  ///< the key's plan; nullopt: not in the directory
    bool unavailable = false;         ///< the directory could not be read (nothing cached)
  };

  /// The plan of `key` in the store-backed directory: from this worker's cache when fresh
  /// (no round trip), else one HGET on this worker's directory connection, cached for
  /// `cache_ttl` (found) or `negative_ttl` (absent). A failed read (store down, timeout,
  /// error reply) is `unavailable` for this request only: the route's failure policy applies.
  asio::awaitable<directory_answer> directory_plan(config::directory_settings d, std::string key) {
    // Keys longer than this are never looked up: real keys are short, and a bound keeps the
    // cache's memory bounded by cache_size × this.
    constexpr std::size_t max_directory_key = 256;
    if (key.size() > max_directory_key) co_return directory_answer{};
    if (!cache_ || cache_hash_ != d.hash || cache_->capacity() != d.cache_size) {
      if (cache_) cache_->reset(d.cache_size);
      else cache_ = std::make_unique<identity::plan_cache>(d.cache_size);
      cache_hash_ = d.hash;
    }
    std::string plan;
    switch (cache_->get(key, identity::plan_cache::clock::now(), plan)) {
      case identity::cache_state::found:
        co_return directory_answer{std::move(plan)};
      case identity::cache_state::not_found:
        co_return directory_answer{};
      case identity::cache_state::miss:
        break;
    }
    if (!directory_) co_return directory_answer{std::nullopt, true};
    auto found = co_await directory_->hget(d.hash, key);
    if (!found) {
      std::uint64_t suppressed = 0;
      if (shared_.store_failure_log.admit(suppressed))
        spdlog::warn("plan directory lookup failed ({}); the route's store failure policy "
                     "applies ({} similar lines suppressed)",
                     found.error().message(), suppressed);
      co_return directory_answer{std::nullopt, true};
    }
    // The hash may have changed while we waited: the cache was reset for the new one.
    if (cache_hash_ == d.hash)
      cache_->put(key, *found, identity::plan_cache::clock::now(),
                  *found ? d.cache_ttl : d.negative_ttl);
    co_return directory_answer{std::move(*found)};
  }


  asio::awaitable<response> forward(request req, http::canonical_target target,
                                    const config::upstream& up, asio::ip::address peer,
                                    bool limited, std::vector<limiter::header_field> fields,
                                    route_counters* counted) {
    const unsigned version = req.version();
    std::string path = up.base_path + target.path;
    if (!target.query.empty()) path += "?" + target.query;
    const auto peer_text = identity::normalise(peer).to_string();
    http::prepare_upstream_request(req, path, peer_text);
    auto sent = co_await pool_.send(up, std::move(req));
    if (!sent) {
      const bool timeout = sent.error() == sluice::errc::upstream_timeout;
      (timeout ? counted->gateway_timeout : counted->bad_gateway).add();
      auto res = problem(version,
                         timeout ? bhttp::status::gateway_timeout : bhttp::status::bad_gateway,
                         timeout ? "Gateway Timeout" : "Bad Gateway",
                         timeout ? "the upstream did not answer in time"
                                 : "the upstream could not be reached");
      add_fields(res, fields);
      co_return res;
    }
    response res = std::move(*sent);
    http::prepare_client_response(res, limited);
    res.version(version);
    add_fields(res, fields);
    co_return res;
  }

  void log_store_failure(const boost::system::error_code& ec, const std::string& route,
                         const char* policy) {
    std::uint64_t suppressed = 0;
    if (shared_.store_failure_log.admit(suppressed)) {
      spdlog::warn("store check failed ({}); route {} applies {} ({} similar lines suppressed)",
                   ec.message(), route, policy, suppressed);
    }
  }

  shared_state& shared_;
  std::shared_ptr<store::counter_store> store_;
  http::upstream_pool pool_;
  request_counters counters_;  // this worker's; summed by gateway::stats() and sample()
  std::mt19937_64 jitter_{std::random_device{}()};  // Retry-After jitter; this worker's only
  std::shared_ptr<store::redis_directory> directory_;  // null without a redis store
  std::unique_ptr<identity::plan_cache> cache_;        // this worker's directory cache
  std::string cache_hash_;                             // the hash cache_ holds entries of
};

std::int64_t unix_ms_now() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch()).count();
}

std::pair<std::string, std::uint16_t> split_host_port(const std::string& text) {
  auto colon = text.rfind(':');
  if (colon == std::string::npos) throw std::runtime_error("bad listen address: " + text);
  std::string host = text.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  return {host, static_cast<std::uint16_t>(std::stoul(text.substr(colon + 1)))};
}

}  // namespace

struct gateway::impl {
  struct worker {
    asio::io_context ioc{1};
    std::shared_ptr<store::counter_store> store;
    std::shared_ptr<store::redis_directory> directory;  // redis store only
    std::shared_ptr<gateway_handler> handler;
    std::unique_ptr<http::server> server;
    std::unique_ptr<asio::executor_work_guard<asio::io_context::executor_type>> guard;
    std::thread thread;
  };

  shared_state shared;
  std::vector<std::unique_ptr<worker>> workers;
  std::shared_ptr<store::memory_store> memory;  // store.type: memory, shared by workers
  std::atomic<std::uint64_t> generation{1};
  std::atomic<bool> started{false};
  std::atomic<bool> stopped{false};

  // `api_keys_file:` is polled once a second off the workers' threads (a reload of half a
  // million keys must not stall requests); the snapshot's file object swaps its own map.
  std::thread key_file_poller;
  std::mutex poller_mutex;
  std::condition_variable poller_wake;

  void poll_key_files() {
    std::unique_lock lock(poller_mutex);
    while (!poller_wake.wait_for(lock, std::chrono::seconds(1), [this] { return stopped.load(); })) {
      const auto snap = shared.current.load();
      if (!snap->rules->api_keys_file) continue;
      lock.unlock();
      auto problems = snap->rules->api_keys_file->poll();
      if (!problems.empty()) {
        spdlog::warn("api_keys_file {} not reloaded, the last good keys stay: {}",
                     snap->rules->api_keys_file->path(), problems.front().to_string());
      }
      lock.lock();
    }
  }

  /// A worker's store counters, read on the worker's own thread while it runs (a Redis
  /// store belongs to its io_context), directly otherwise.
  store::store_stats store_stats_of(worker& w) {
    if (!started || stopped || memory) return w.store->stats();
    auto shared = std::make_shared<std::promise<store::store_stats>>();
    auto answer = shared->get_future();
    asio::post(w.ioc, [shared, st = w.store.get()] { shared->set_value(st->stats()); });
    // A worker stopping meanwhile never runs the read: give up rather than hang.
    if (answer.wait_for(std::chrono::seconds(1)) != std::future_status::ready) return {};
    return answer.get();
  }

  /// What a scrape reads on a worker's own thread: its store's counters and its plan
  /// directory cache's (plain counters, owned by the worker).
  struct worker_sample {
    store::store_stats store;
    identity::plan_cache::counters plan_cache;
  };
  std::mutex sample_mutex;                  // one scrape at a time; guards last_samples
  std::vector<worker_sample> last_samples;  // per worker: the last read (counters never go back)

  /// Worker `i`'s sample, read on its thread while it runs. A worker that does not answer
  /// within 1 s (or one stopping) gets its last sample again. sample_mutex held.
  worker_sample sample_of(std::size_t i) {
    worker& w = *workers[i];
    if (last_samples.size() < workers.size()) last_samples.resize(workers.size());
    if (!started) return last_samples[i] = {w.store->stats(), w.handler->plan_cache_stats()};
    if (stopped) return last_samples[i];
    auto shared = std::make_shared<std::promise<worker_sample>>();
    auto answer = shared->get_future();
    asio::post(w.ioc, [shared, wp = &w] {
      shared->set_value({wp->store->stats(), wp->handler->plan_cache_stats()});
    });
    if (answer.wait_for(std::chrono::seconds(1)) != std::future_status::ready) return last_samples[i];
    return last_samples[i] = answer.get();
  }
};

gateway::gateway(std::shared_ptr<const config::rules> rules, gateway_options options)
    : impl_(std::make_unique<impl>()) {
  impl_->shared.current.store(std::make_shared<const snapshot>(rules, 1));
  impl_->shared.count.loaded_unix_ms = unix_ms_now();

  unsigned n = options.workers ? options.workers : rules->workers;
  if (n == 0) n = std::max(1u, std::thread::hardware_concurrency());

  std::string host = rules->listen_host;
  std::uint16_t port = rules->listen_port;
  if (!options.listen.empty()) std::tie(host, port) = split_host_port(options.listen);
  asio::ip::tcp::endpoint endpoint{asio::ip::make_address(host), port};

  store::redis_settings redis;
  if (rules->store.type == config::store_settings::kind::redis) {
    redis.host = rules->store.host;
    redis.port = rules->store.port;
    redis.command_timeout = rules->store.timeout;
    redis.layout.packed = rules->store.layout == config::store_settings::layout_kind::hash;
    redis.layout.hash_groups = rules->store.hash_groups;
    if (!rules->store.password_env.empty()) {
      if (const char* pw = std::getenv(rules->store.password_env.c_str())) redis.password = pw;
    }
  } else {
    impl_->memory = std::make_shared<store::memory_store>();
  }

  if (endpoint.port() != 0) {
    // Workers share the port with SO_REUSEPORT, which would also let this process join a
    // port another process already listens on (the kernel would then split connections
    // between two gateways). Probe with a plain bind first so that is "address in use".
    asio::io_context probe_ioc;
    asio::ip::tcp::acceptor probe(probe_ioc);
    boost::system::error_code ec;
    probe.open(endpoint.protocol(), ec);
    if (!ec) probe.set_option(asio::socket_base::reuse_address(true), ec);
    if (!ec) probe.bind(endpoint, ec);
    if (ec) {
      throw std::runtime_error("cannot listen on " + endpoint.address().to_string() + ":" +
                               std::to_string(endpoint.port()) + ": " + ec.message());
    }
  }
  for (unsigned i = 0; i < n; ++i) {
    auto w = std::make_unique<impl::worker>();
    if (impl_->memory) {
      w->store = impl_->memory;
    } else {
      w->store = std::make_shared<store::redis_store>(w->ioc.get_executor(), redis);
    }
    if (!impl_->memory) {
      // The plan directory's own connection (made even when no directory is configured yet,
      // so that a reload can enable one).
      store::redis_directory_settings ds;
      ds.host = redis.host;
      ds.port = redis.port;
      ds.password = redis.password;
      ds.command_timeout = std::max(redis.command_timeout, std::chrono::milliseconds(50));
      w->directory = std::make_shared<store::redis_directory>(w->ioc.get_executor(), ds);
    }
    w->handler = std::make_shared<gateway_handler>(impl_->shared, w->store, w->ioc.get_executor(),
                                                   w->directory);
    w->server = std::make_unique<http::server>(w->ioc, endpoint, w->handler,
                                               http::session_limits{}, i);
    endpoint = w->server->local_endpoint();  // later workers share the port actually bound
    impl_->workers.push_back(std::move(w));
  }
}

gateway::~gateway() { stop(); }

void gateway::start() {
  if (impl_->started) return;
  impl_->started = true;
  for (auto& w : impl_->workers) {
    w->guard = std::make_unique<asio::executor_work_guard<asio::io_context::executor_type>>(
        w->ioc.get_executor());
    w->store->start();
    if (w->directory) w->directory->start();
    w->server->start();
    w->thread = std::thread([ioc = &w->ioc] { ioc->run(); });
  }
  impl_->key_file_poller = std::thread([i = impl_.get()] { i->poll_key_files(); });
  wait_for_store(std::chrono::seconds(2));
}

bool gateway::wait_for_store(std::chrono::milliseconds limit) {
  // A store belongs to its worker's thread: read its state there.
  const auto deadline = std::chrono::steady_clock::now() + limit;
  for (auto& w : impl_->workers) {
    while (true) {
      if (impl_->store_stats_of(*w).connected) break;
      if (std::chrono::steady_clock::now() >= deadline) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }
  return true;
}

void gateway::stop() {
  if (impl_->stopped) return;
  impl_->stopped = true;
  for (auto& w : impl_->workers) {
    if (!w->thread.joinable()) continue;
    // Close the listener and the store on the worker's own thread, then end its loop;
    // coroutine frames still pending are destroyed with the io_context.
    asio::post(w->ioc, [wp = w.get()] {
      wp->server->stop();
      wp->store->stop();
      if (wp->directory) wp->directory->stop();
      wp->guard.reset();
      wp->ioc.stop();
    });
  }
  for (auto& w : impl_->workers) {
    if (w->thread.joinable()) w->thread.join();
  }
  {
    std::lock_guard lock(impl_->poller_mutex);
  }
  impl_->poller_wake.notify_all();
  if (impl_->key_file_poller.joinable()) impl_->key_file_poller.join();
}

asio::ip::tcp::endpoint gateway::endpoint() const {
  return impl_->workers.front()->server->local_endpoint();
}

void gateway::reload(std::shared_ptr<const config::rules> rules) {
  const auto gen = impl_->generation.fetch_add(1) + 1;
  impl_->shared.current.store(std::make_shared<const snapshot>(std::move(rules), gen));
  impl_->shared.count.loaded_unix_ms = unix_ms_now();
  impl_->shared.count.reloads.fetch_add(1);
}

void gateway::note_reload_failure() { impl_->shared.count.reload_failures.fetch_add(1); }

gateway::current_rules gateway::current() const {
  const auto snap = impl_->shared.current.load();
  return {snap->rules, snap->generation};
}

observability::metrics_sample gateway::sample() const {
  observability::metrics_sample s;
  const auto snap = impl_->shared.current.load();
  std::map<std::string, observability::route_counts> routes;
  for (const auto& r : snap->rules->routes) routes[r.name].route = r.name;  // present at 0
  std::lock_guard lock(impl_->sample_mutex);
  for (std::size_t i = 0; i < impl_->workers.size(); ++i) {
    const auto& w = *impl_->workers[i];
    const request_counters& c = w.handler->counters();
    c.add_to(routes);
    s.bad_requests += c.bad_requests.value();
    s.store_check.add(c.store_check.read());
    const auto pool = w.handler->pool().stats();
    s.upstream.connects += pool.connects;
    s.upstream.reuses += pool.reuses;
    s.upstream.failures += pool.failures;
    s.upstream.retries += pool.retries;
    const auto ws = impl_->sample_of(i);
    s.plan_cache_hits += ws.plan_cache.hits;
    s.plan_cache_negative_hits += ws.plan_cache.negative_hits;
    s.plan_cache_misses += ws.plan_cache.misses;
    s.plan_cache_evictions += ws.plan_cache.evictions;
    if (impl_->memory && i > 0) continue;  // one shared memory store: count it once
    const auto& st = ws.store;
    s.store.checks += st.checks;
    s.store.timeouts += st.timeouts;
    s.store.errors += st.errors;
    s.store.unavailable += st.unavailable;
    s.store.script_loads += st.script_loads;
    s.store.reconnects += st.reconnects;
    s.store.late_replies += st.late_replies;
    s.store.connect_failures += st.connect_failures;
    s.store.breaker_opens += st.breaker_opens;
    ++s.store_connections;
    if (st.connected) ++s.store_connected;
    ++s.breaker[static_cast<std::size_t>(st.breaker)];
  }
  s.store.connected = s.store_connected > 0;
  // The least healthy connection's breaker (open > half-open > closed).
  using bs = store::breaker_state;
  s.store.breaker = s.breaker[static_cast<std::size_t>(bs::open)] ? bs::open
                    : s.breaker[static_cast<std::size_t>(bs::half_open)] ? bs::half_open
                                                                          : bs::closed;
  for (auto& [name, r] : routes) s.routes.push_back(std::move(r));
  s.reloads = impl_->shared.count.reloads.load();
  s.reload_failures = impl_->shared.count.reload_failures.load();
  s.generation = snap->generation;
  s.config_loaded_unix_ms = impl_->shared.count.loaded_unix_ms.load();
  return s;
}

gateway_stats gateway::stats() const {
  const auto m = sample();
  gateway_stats s;
  for (const auto& w : impl_->workers) s.requests += w->handler->counters().requests.value();
  for (const auto& r : m.routes) {
    s.allowed += r.allowed;
    s.rejected += r.limited;
    s.unlimited += r.unlimited;
    s.fail_open += r.fail_open;
    s.fail_closed += r.fail_closed;
    s.local += r.local;
    s.shadow_rejections += r.shadow_limited;
    s.upstream_errors += r.bad_gateway + r.gateway_timeout;
  }
  s.bad_requests = m.bad_requests;
  s.reloads = m.reloads;
  s.reload_failures = m.reload_failures;
  s.generation = impl_->generation.load();
  s.store = m.store;
  return s;
}

}  // namespace sluice::app
