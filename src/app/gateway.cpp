// SPDX-License-Identifier: Apache-2.0
// The gateway: N workers wired from config, identity, limiter, store and http; start, drain,
// stop, reload and the counters. Each request's path is in request_path.cpp.

#include "sluice/app/gateway.hpp"

#include "app/listen_endpoint.hpp"
#include "request_path.hpp"
#include "sluice/errc.hpp"

#include "sluice/config/key_file.hpp"
#include "sluice/http/headers.hpp"
#include "sluice/http/router.hpp"
#include "sluice/http/server.hpp"
#include "sluice/http/upstream_pool.hpp"
#include "sluice/identity/identity.hpp"
#include "sluice/identity/plan_cache.hpp"
#include "sluice/limiter/decision.hpp"
#include "sluice/limiter/keys.hpp"
#include "sluice/observability/log.hpp"
#include "sluice/store/memory_store.hpp"
#include "sluice/store/redis_cluster_store.hpp"
#include "sluice/store/redis_directory.hpp"
#include "sluice/store/redis_store.hpp"

#include <spdlog/spdlog.h>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>

#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <future>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <stdexcept>
#include <thread>
#include <vector>

namespace sluice::app {
namespace {

namespace asio = boost::asio;
namespace bhttp = boost::beast::http;
using http::request;
using http::response;

std::int64_t unix_ms_now() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

/// `given`, else the TLS contexts `r` needs, built now (null when it needs none). Throws
/// std::runtime_error naming each problem.
std::shared_ptr<const http::tls_bundle> tls_for(const config::rules& r,
                                                std::shared_ptr<const http::tls_bundle> given) {
  if (given) return given;
  const bool needed = r.tls.enabled || std::any_of(r.upstreams.begin(), r.upstreams.end(),
                                                   [](const auto& u) { return u.second.tls; });
  if (!needed) return nullptr;
  std::vector<config::diagnostic> problems;
  auto built = http::build_tls(r, problems);
  if (!built) {
    std::string text = "TLS cannot be set up:";
    for (const auto& p : problems) text += "\n  " + p.to_string();
    throw std::runtime_error(text);
  }
  return built;
}

}  // namespace

std::uint64_t raise_file_limit() {
  // A gateway holds two descriptors per proxied client (the client's and an upstream's): the
  // usual soft limit of 1024 is reached by a few hundred clients, so take what the hard
  // limit allows (the service unit sets LimitNOFILE=) and say what it came to.
  static const std::uint64_t limit = [] {
    rlimit rl{};
    if (::getrlimit(RLIMIT_NOFILE, &rl) != 0) {
      spdlog::warn("open file limit (RLIMIT_NOFILE) unreadable: {}", std::strerror(errno));
      return std::uint64_t{1024};
    }
    const rlim_t before = rl.rlim_cur;
    if (rl.rlim_cur < rl.rlim_max) {
      rlimit want = rl;
      want.rlim_cur = rl.rlim_max;
      if (::setrlimit(RLIMIT_NOFILE, &want) == 0) {
        rl = want;
      } else {
        spdlog::warn("open file limit (RLIMIT_NOFILE) not raised from {} to the hard limit {}: {}",
                     static_cast<std::uint64_t>(before), static_cast<std::uint64_t>(rl.rlim_max),
                     std::strerror(errno));
      }
    }
    const auto now = static_cast<std::uint64_t>(rl.rlim_cur);
    spdlog::info("open file limit (RLIMIT_NOFILE): {} (was {}, hard limit {})", now,
                 static_cast<std::uint64_t>(before), static_cast<std::uint64_t>(rl.rlim_max));
    return now;
  }();
  return limit;
}

std::size_t auto_max_connections(std::uint64_t file_limit, unsigned workers) {
  const std::uint64_t w = std::max(1u, workers);
  const std::uint64_t reserve = 64 + 8 * w;
  if (file_limit <= reserve + 2 * w) return 1;
  return static_cast<std::size_t>(
      std::min<std::uint64_t>((file_limit - reserve) / (2 * w), 1'000'000));
}

struct gateway::impl {
  struct worker {
    // One thread runs it, and every socket and timer of the worker is used on that thread
    // only (other threads post to it): Asio's per-socket reactor locks are not needed.
    asio::io_context ioc{BOOST_ASIO_CONCURRENCY_HINT_UNSAFE_IO};
    std::shared_ptr<store::counter_store> store;
    std::shared_ptr<store::redis_directory> directory;  // redis store only
    bool directory_started = false;  // its connection was started (worker thread after start)
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
  std::atomic<bool> draining{false};
  bool listener_tls = false;  // decided at construction (`tls:` is read at start-up)
  std::chrono::steady_clock::time_point started_at;  // construction: the status page's uptime

  /// Worker `w`'s open and busy connections, read on its thread; {0, 0} when it does not
  /// answer within 1 s.
  std::pair<std::size_t, std::size_t> sessions_of(worker& w) {
    auto counts = on_worker(w, [srv = w.server.get()] {
      return std::pair{srv->open_sessions(), srv->busy_sessions()};
    });
    return counts.value_or(std::pair<std::size_t, std::size_t>{0, 0});
  }

  /// `read()` run on worker `w`'s own thread (what a worker owns is touched there only),
  /// waited for at most 1 s: nullopt when the worker did not run it by then (it is stopping,
  /// or stuck) — the caller never hangs.
  template <class F>
  static auto on_worker(worker& w, F read) -> std::optional<decltype(read())> {
    using value = decltype(read());
    auto shared = std::make_shared<std::promise<value>>();
    auto answer = shared->get_future();
    asio::post(w.ioc, [shared, read = std::move(read)] { shared->set_value(read()); });
    if (answer.wait_for(std::chrono::seconds(1)) != std::future_status::ready) return std::nullopt;
    return answer.get();
  }

  // `api_keys_file:` is polled once a second off the workers' threads (a reload of half a
  // million keys must not stall requests); the snapshot's file object swaps its own map.
  std::thread key_file_poller;
  std::mutex poller_mutex;
  std::condition_variable poller_wake;

  void poll_key_files() {
    std::unique_lock lock(poller_mutex);
    while (
        !poller_wake.wait_for(lock, std::chrono::seconds(1), [this] { return stopped.load(); })) {
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
    return on_worker(w, [st = w.store.get()] { return st->stats(); })
        .value_or(store::store_stats{});
  }

  /// What a scrape reads on a worker's own thread: its store's counters and its plan
  /// directory cache's (plain counters, owned by the worker).
  struct worker_sample {
    store::store_stats store;
    identity::plan_cache::counters plan_cache;
    std::uint64_t cached_refusals = 0;  ///< the worker's over-limit cache hits
    /// The worker's token leases: requests decided from leases alone, leases taken, tokens
    /// leased beyond the requests' costs, tokens returned.
    std::uint64_t leased_decisions = 0, lease_grants = 0, tokens_leased = 0, tokens_returned = 0;
    slot_counts slots;  ///< the worker's concurrency slots
  };
  static worker_sample read_sample(worker& w) {
    const auto& leases = w.handler->leases();
    return {w.store->stats(),
            w.handler->plan_cache_stats(),
            w.handler->cached_refusals(),
            leases.local_decisions(),
            leases.grants(),
            leases.tokens_leased(),
            leases.tokens_returned(),
            w.handler->slots().counts()};
  }
  std::mutex sample_mutex;                  // one scrape at a time; guards last_samples
  std::vector<worker_sample> last_samples;  // per worker: the last read (counters never go back)

  /// Worker `i`'s sample, read on its thread while it runs. A worker that does not answer
  /// within 1 s (or one stopping) gets its last sample again. sample_mutex held.
  worker_sample sample_of(std::size_t i) {
    worker& w = *workers[i];
    if (last_samples.size() < workers.size()) last_samples.resize(workers.size());
    if (!started) return last_samples[i] = read_sample(w);
    if (stopped) return last_samples[i];
    auto read = on_worker(w, [wp = &w] { return read_sample(*wp); });
    if (!read) return last_samples[i];
    return last_samples[i] = *read;
  }
};

gateway::gateway(std::shared_ptr<const config::rules> rules, gateway_options options,
                 std::shared_ptr<const http::tls_bundle> tls)
    : impl_(std::make_unique<impl>()) {
  tls = tls_for(*rules, std::move(tls));
  impl_->listener_tls = tls && tls->listener;
  impl_->shared.current.store(std::make_shared<const snapshot>(rules, 1, tls));
  impl_->shared.count.loaded_unix_ms = unix_ms_now();
  // API keys appear in the access log and the most limited callers as HMAC-SHA256 under
  // this secret: SLUICE_ACCESS_LOG_KEY (the same hashes across restarts and instances), else
  // random for this process.
  if (const char* k = std::getenv("SLUICE_ACCESS_LOG_KEY"); k != nullptr && *k != '\0') {
    impl_->shared.access_key = k;
  } else {
    std::random_device rd;
    for (int i = 0; i < 4; ++i) impl_->shared.access_key += std::to_string(rd());
  }
  impl_->shared.top = std::make_unique<observability::top_callers>(observability::top_settings{
      .top = rules->status_top, .window_minutes = rules->status_window_minutes});
  impl_->started_at = std::chrono::steady_clock::now();
  if (!rules->access_log_path.empty()) {
    impl_->shared.access = std::make_unique<observability::access_log>(
        rules->access_log_path, rules->access_log_json ? observability::access_format::json
                                                       : observability::access_format::plain);
  }

  unsigned n = options.workers ? options.workers : rules->workers;
  if (n == 0) n = std::max(1u, std::thread::hardware_concurrency());

  asio::ip::tcp::endpoint endpoint =
      options.listen.empty()
          ? asio::ip::tcp::endpoint{asio::ip::make_address(rules->listen_host), rules->listen_port}
          : listen_endpoint(options.listen, "listen");

  store::redis_settings redis;
  if (rules->store.redis()) {
    redis.host = rules->store.host;
    redis.port = rules->store.port;
    redis.command_timeout = rules->store.timeout;
    redis.layout = key_layout_of(rules->store);
    redis.max_batch = rules->store.max_batch;
    // The password comes from the environment or from a file the loader read (and checked:
    // its owner's alone), never from the rules file itself.
    if (!rules->store.password_env.empty()) {
      if (const char* pw = std::getenv(rules->store.password_env.c_str())) redis.password = pw;
    } else {
      redis.password = rules->store.password;
    }
    redis.username = rules->store.username;
    if (rules->store.tls.enabled) {
      const auto& t = rules->store.tls;
      // Read once, shared by every connection of every worker; a file that cannot be read
      // stops the start with its field and OpenSSL's reason.
      redis.tls.context =
          store::make_redis_tls_context({t.ca_file, t.verify, t.cert_file, t.key_file});
      redis.tls.server_name = t.server_name;
      redis.tls.verify = t.verify;
      if (!t.verify) {
        spdlog::warn("store.tls.verify is false: the Redis server's certificate is not checked");
      }
    }
    if (rules->store.type == config::store_settings::kind::redis_sentinel) {
      store::sentinel_settings ss;
      for (const auto& a : rules->store.sentinels) ss.sentinels.push_back({a.host, a.port});
      ss.master_name = rules->store.master_name;
      ss.timeout = rules->store.sentinel_timeout;
      if (!rules->store.sentinel_password_env.empty()) {
        if (const char* pw = std::getenv(rules->store.sentinel_password_env.c_str()))
          ss.password = pw;
      } else {
        ss.password = rules->store.sentinel_password;
      }
      ss.username = rules->store.sentinel_username;
      ss.tls = redis.tls;
      redis.sentinel = std::move(ss);
    }
  } else {
    impl_->memory = std::make_shared<store::memory_store>(store::memory_store::clock_fn{},
                                                          rules->store.max_buckets);
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
  const config::client_settings& client = rules->client;
  const std::uint64_t file_limit = raise_file_limit();
  const std::size_t fitting = auto_max_connections(file_limit, n);
  std::size_t max_connections = client.max_connections ? client.max_connections : fitting;
  if (client.max_connections > fitting) {
    spdlog::warn(
        "client.max_connections {} per worker ({} workers) may exhaust the open file limit {}: "
        "accepts then fail until connections close (auto would be {})",
        client.max_connections, n, file_limit, fitting);
  }
  spdlog::info("at most {} client connections per worker ({} workers)", max_connections, n);
  http::session_limits limits;
  limits.header_limit = static_cast<std::uint32_t>(client.max_header_size);
  limits.header_count_limit = client.max_headers;
  limits.uri_limit = static_cast<std::uint32_t>(client.max_uri_length);
  limits.header_timeout = client.header_timeout;
  limits.idle_timeout = client.keepalive_timeout;
  limits.body_timeout = client.body_timeout;
  limits.body_min_rate = client.body_min_rate;
  limits.send_timeout = client.send_timeout;
  limits.max_connections = max_connections;
  limits.http2 = rules->http2;
  // Concurrency slot ids are `<instance>.<worker>.<counter>`: the instance part is random
  // (48 bits), so gateways sharing a store, and this process after a restart, never reuse one.
  std::string instance;
  {
    std::random_device rd;
    const std::uint64_t r = (std::uint64_t{rd()} << 32 | rd()) & 0xffffffffffffULL;
    instance = fmt::format("{:012x}", r);
  }
  for (unsigned i = 0; i < n; ++i) {
    auto w = std::make_unique<impl::worker>();
    if (impl_->memory) {
      w->store = impl_->memory;
    } else if (rules->store.type == config::store_settings::kind::redis_cluster) {
      store::redis_cluster_settings cs;
      for (const auto& a : rules->store.nodes) cs.seeds.push_back({a.host, a.port});
      cs.node = redis;
      w->store = std::make_shared<store::redis_cluster_store>(w->ioc.get_executor(), cs);
    } else {
      w->store = std::make_shared<store::redis_store>(w->ioc.get_executor(), redis);
    }
    if (!impl_->memory) {
      // The plan directory's own connection: connected once rules enable a directory (at
      // start, or the reload that first enables one), never for rules without one.
      store::redis_directory_settings ds;
      ds.host = redis.host;
      ds.port = redis.port;
      ds.password = redis.password;
      ds.username = redis.username;
      ds.tls = redis.tls;
      ds.sentinel = redis.sentinel;
      ds.command_timeout = std::max(redis.command_timeout, std::chrono::milliseconds(50));
      w->directory = std::make_shared<store::redis_directory>(w->ioc.get_executor(), ds);
    }
    w->handler = std::make_shared<gateway_handler>(impl_->shared, w->store, w->directory,
                                                   w->ioc.get_executor(),
                                                   instance + "." + std::to_string(i));
    w->server = std::make_unique<http::server>(w->ioc, endpoint, w->handler, limits, i);
    if (impl_->listener_tls) w->server->set_tls(tls->listener);
    endpoint = w->server->local_endpoint();  // later workers share the port actually bound
    impl_->workers.push_back(std::move(w));
  }
}

gateway::~gateway() {
  stop();
}

void gateway::start() {
  if (impl_->started) return;
  impl_->started = true;
  for (auto& w : impl_->workers) {
    w->guard = std::make_unique<asio::executor_work_guard<asio::io_context::executor_type>>(
        w->ioc.get_executor());
    w->store->start();
    if (w->directory && impl_->shared.current.load()->rules->identity.directory.enabled) {
      w->directory->start();
      w->directory_started = true;
    }
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
      const auto st = impl_->store_stats_of(*w);
      if (st.connected && st.breaker != store::breaker_state::open) break;
      if (std::chrono::steady_clock::now() >= deadline) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }
  return true;
}

std::string gateway::store_failure() const {
  for (const auto& w : impl_->workers) {
    if (w->store) {
      if (auto why = w->store->failure(); !why.empty()) return why;
    }
  }
  return {};
}

void gateway::stop() {
  if (impl_->stopped) return;
  impl_->stopped = true;
  for (auto& w : impl_->workers) {
    if (!w->thread.joinable()) continue;
    asio::post(w->ioc, [wp = w.get()] {
      wp->server->stop();
      wp->handler->slots().stop();  // no more renewals
    });
  }
  // Concurrency slots: the sessions the stop closed release theirs; let those calls reach the
  // store before it stops (at most 1 s; a slot not released expires slot_ttl after its last
  // renewal). Nothing to wait for without concurrency limits.
  const auto release_deadline = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  for (auto& w : impl_->workers) {
    if (!w->thread.joinable()) continue;
    while (std::chrono::steady_clock::now() < release_deadline) {
      const auto busy = impl_->on_worker(*w, [wp = w.get()] {
        const auto& s = wp->handler->slots();
        return s.pending() + s.held();
      });
      if (!busy || *busy == 0) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }
  for (auto& w : impl_->workers) {
    if (!w->thread.joinable()) continue;
    // Close the store on the worker's own thread, then end its loop; coroutine frames still
    // pending are destroyed with the io_context.
    asio::post(w->ioc, [wp = w.get()] {
      wp->store->stop();
      if (wp->directory) wp->directory->stop();
      wp->guard.reset();
      wp->ioc.stop();
    });
  }
  for (auto& w : impl_->workers) {
    if (w->thread.joinable()) w->thread.join();
  }
  { std::lock_guard lock(impl_->poller_mutex); }
  impl_->poller_wake.notify_all();
  if (impl_->key_file_poller.joinable()) impl_->key_file_poller.join();
}

std::size_t gateway::drain(std::chrono::milliseconds deadline, const std::atomic<bool>* abort) {
  impl_->draining = true;
  if (!impl_->started || impl_->stopped) return 0;
  for (auto& w : impl_->workers) w->server->drain();
  const auto until = std::chrono::steady_clock::now() + deadline;
  for (;;) {
    std::size_t open = 0, busy = 0;
    for (auto& w : impl_->workers) {
      const auto [o, b] = impl_->sessions_of(*w);
      open += o;
      busy += b;
    }
    if (open == 0) return 0;
    if (std::chrono::steady_clock::now() >= until || (abort && abort->load())) return busy;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

bool gateway::draining() const {
  return impl_->draining.load();
}

asio::ip::tcp::endpoint gateway::endpoint() const {
  return impl_->workers.front()->server->local_endpoint();
}

void gateway::reload(std::shared_ptr<const config::rules> rules,
                     std::shared_ptr<const http::tls_bundle> tls) {
  tls = tls_for(*rules, std::move(tls));
  const auto gen = impl_->generation.fetch_add(1) + 1;
  const bool directory = rules->identity.directory.enabled;
  if (impl_->listener_tls && tls && tls->listener) {
    for (auto& w : impl_->workers) w->server->set_tls(tls->listener);
  }
  impl_->shared.current.store(std::make_shared<const snapshot>(std::move(rules), gen, tls));
  if (directory && impl_->started && !impl_->stopped) {
    for (auto& w : impl_->workers) {
      if (!w->directory) continue;
      asio::post(w->ioc, [wp = w.get()] {
        if (wp->directory_started) return;
        wp->directory->start();
        wp->directory_started = true;
      });
    }
  }
  impl_->shared.count.loaded_unix_ms = unix_ms_now();
  impl_->shared.count.reloads.fetch_add(1);
}

void gateway::note_reload_failure() {
  impl_->shared.count.reload_failures.fetch_add(1);
}

gateway::current_rules gateway::current() const {
  const auto snap = impl_->shared.current.load();
  return {snap->rules, snap->generation};
}

std::optional<std::string> gateway::explain(const observability::explain_query& q) const {
  if (impl_->workers.empty()) return std::nullopt;
  auto& w = *impl_->workers.front();
  auto promise = std::make_shared<std::promise<std::string>>();
  auto answer = promise->get_future();
  // The handler lives as long as the gateway; the coroutine holds its own copy of `q`.
  asio::co_spawn(w.ioc, w.handler->explain(q), [promise](std::exception_ptr e, std::string json) {
    if (e) {
      promise->set_exception(e);
    } else {
      promise->set_value(std::move(json));
    }
  });
  if (answer.wait_for(std::chrono::seconds(2)) != std::future_status::ready) return std::nullopt;
  return answer.get();
}

namespace {

using decided = std::function<void(boost::system::result<limiter::check_outcome>)>;

asio::awaitable<void> decide_on(std::shared_ptr<store::counter_store> store,
                                limiter::check_request req, decided done) {
  auto r = co_await store->check(std::move(req));
  done(std::move(r));
}

}  // namespace

void gateway::decide(limiter::check_request req, decided done) const {
  if (impl_->workers.empty() || !impl_->started || impl_->stopped) {
    done(boost::system::error_code(errc::store_unavailable));
    return;
  }
  static std::atomic<std::size_t> next{0};
  auto& w = *impl_->workers[next.fetch_add(1, std::memory_order_relaxed) % impl_->workers.size()];
  limiter::check_outcome out;
  if (w.store->decide_now(req, out)) {  // the memory store: no round trip, any thread
    done(std::move(out));
    return;
  }
  asio::co_spawn(w.ioc, decide_on(w.store, std::move(req), std::move(done)), asio::detached);
}

std::optional<observability::unblock_answer> gateway::unblock(
    const observability::unblock_query& q) const {
  if (impl_->workers.empty()) return std::nullopt;
  auto& w = *impl_->workers.front();
  auto promise = std::make_shared<std::promise<observability::unblock_answer>>();
  auto answer = promise->get_future();
  asio::co_spawn(w.ioc, w.handler->unblock(q),
                 [promise](std::exception_ptr e, observability::unblock_answer a) {
                   if (e) {
                     promise->set_exception(e);
                   } else {
                     promise->set_value(std::move(a));
                   }
                 });
  if (answer.wait_for(std::chrono::seconds(2)) != std::future_status::ready) return std::nullopt;
  return answer.get();
}

void gateway::reopen_logs() {
  if (impl_->shared.access) impl_->shared.access->reopen();
}

std::optional<observability::top_callers::answer> gateway::top(std::size_t n) const {
  if (!impl_->shared.top) return std::nullopt;
  return impl_->shared.top->top(n, std::chrono::duration_cast<std::chrono::milliseconds>(
                                       std::chrono::steady_clock::now().time_since_epoch())
                                       .count());
}

std::int64_t gateway::uptime_ms() const {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() -
                                                               impl_->started_at)
      .count();
}

unsigned gateway::workers() const {
  return static_cast<unsigned>(impl_->workers.size());
}

std::uint64_t gateway::access_log_drops() const {
  return impl_->shared.access ? impl_->shared.access->dropped() : 0;
}

observability::metrics_sample gateway::sample() const {
  observability::metrics_sample s;
  const auto snap = impl_->shared.current.load();
  std::map<std::string, observability::route_counts> routes;
  for (const auto& r : snap->rules->routes) routes[r.name].route = r.name;  // present at 0
  std::map<std::string, observability::exchange_counts> exchanges;
  exchanges[""];  // the unrouted, present at 0
  for (const auto& r : snap->rules->routes) exchanges[r.name].route = r.name;
  std::map<std::string, observability::upstream_counts> upstreams;
  for (const auto& [name, u] : snap->rules->upstreams) upstreams[name].upstream = name;
  std::map<std::string, std::uint64_t> warnings;  // present at 0: every limit with a warn_at
  auto warn_names = [&warnings](const std::vector<config::limit>& limits) {
    for (const auto& l : limits)
      if (l.warn_at_bp > 0) warnings[l.name];
  };
  for (const auto& [name, p] : snap->rules->plans) warn_names(p.limits);
  for (const auto& r : snap->rules->routes) warn_names(r.limits);
  std::array<std::uint64_t, identity::address_source_count> fallbacks{};
  std::map<std::string, std::uint64_t> blocks;  // every limit with a block, at 0 if none
  std::map<std::string, std::int64_t> held;     // every concurrency limit, at 0 if none
  std::array<std::uint64_t, http::exchange_end_count> releases{};
  auto listed = [&](const config::limit& l) {
    if (l.block.count() > 0) blocks[l.name];
    if (l.algorithm == config::algorithm::concurrency) held[l.name];
  };
  for (const auto& [name, plan] : snap->rules->plans)
    for (const auto& l : plan.limits) listed(l);
  for (const auto& r : snap->rules->routes)
    for (const auto& l : r.limits) listed(l);
  std::array<std::uint64_t, settle_outcome_count> settled{};
  std::lock_guard lock(impl_->sample_mutex);
  for (std::size_t i = 0; i < impl_->workers.size(); ++i) {
    const auto& w = *impl_->workers[i];
    const request_counters& c = w.handler->counters();
    const settle_counters& sc = w.handler->settlements();
    for (std::size_t k = 0; k < settled.size(); ++k) settled[k] += sc.by_outcome[k].value();
    s.settle_failures += sc.store_failures.value();
    c.add_to(routes);
    c.add_to(exchanges);
    c.add_to(upstreams);
    c.blocks_started.add_to(blocks);
    c.warnings.add_to(warnings);
    s.bad_requests += c.bad_requests.value();
    for (std::size_t k = 0; k < c.client_fallbacks.size(); ++k)
      fallbacks[k] += c.client_fallbacks[k].value();
    s.store_check.add(c.store_check.read());
    const auto pool = w.server->pool().stats();
    s.tunnels_open += w.server->relays().tunnels_open.load(std::memory_order_relaxed);
    s.tunnels_total += w.server->relays().tunnels_total.load(std::memory_order_relaxed);
    const auto& cx = w.server->connections();
    s.clients.open += cx.open.load(std::memory_order_relaxed);
    s.clients.rejected += cx.rejected.load(std::memory_order_relaxed);
    s.clients.header_timeouts += cx.header_timeouts.load(std::memory_order_relaxed);
    s.clients.idle_closed += cx.idle_closed.load(std::memory_order_relaxed);
    s.clients.body_timeouts += w.server->relays().body_timeouts.load(std::memory_order_relaxed);
    s.clients.too_large_heads += cx.too_large_heads.load(std::memory_order_relaxed);
    s.clients.too_long_uris += cx.too_long_uris.load(std::memory_order_relaxed);
    s.clients.max_connections += w.server->max_connections();
    s.tls_listener.add(w.server->tls_stats());
    s.tls_upstream.add(w.server->pool().tls_stats());
    s.upstream.connects += pool.connects;
    s.upstream.reuses += pool.reuses;
    s.upstream.failures += pool.failures;
    s.upstream.retries_not_sent += pool.retries_not_sent;
    s.upstream.retries_idempotent += pool.retries_idempotent;
    s.upstream.stale_failures += pool.stale_failures;
    s.upstream.idle_closed += pool.idle_closed;
    s.upstream.idle_stray += pool.idle_stray;
    s.upstream.idle += pool.idle;
    const auto ws = impl_->sample_of(i);
    s.plan_cache_hits += ws.plan_cache.hits;
    s.plan_cache_negative_hits += ws.plan_cache.negative_hits;
    s.plan_cache_misses += ws.plan_cache.misses;
    s.plan_cache_evictions += ws.plan_cache.evictions;
    s.cached_refusals += ws.cached_refusals;
    s.leased_decisions += ws.leased_decisions;
    s.lease_grants += ws.lease_grants;
    s.tokens_leased += ws.tokens_leased;
    s.tokens_returned += ws.tokens_returned;
    for (const auto& [name, n] : ws.slots.held) held[name] += n;
    for (std::size_t k = 0; k < releases.size(); ++k) releases[k] += ws.slots.releases[k];
    s.slots_lost += ws.slots.lost;
    s.slot_release_failures += ws.slots.release_failures;
    if (impl_->memory && i > 0) continue;  // one shared memory store: count it once
    const auto& st = ws.store;
    s.store.add_counts(st);
    ++s.store_connections;
    if (st.connected) ++s.store_connected;
    ++s.breaker[static_cast<std::size_t>(st.breaker)];
  }
  s.store.connected = s.store_connected > 0;
  // The least healthy connection's breaker (open > half-open > closed).
  using bs = store::breaker_state;
  s.store.breaker = s.breaker[static_cast<std::size_t>(bs::open)]        ? bs::open
                    : s.breaker[static_cast<std::size_t>(bs::half_open)] ? bs::half_open
                                                                         : bs::closed;
  for (auto& [name, r] : routes) s.routes.push_back(std::move(r));
  for (auto& [name, e] : exchanges) s.exchanges.push_back(std::move(e));
  s.process = observability::read_process_stats();
  s.blocks_started.assign(blocks.begin(), blocks.end());
  for (auto& [name, n] : warnings) s.quota_warnings.emplace_back(name, n);
  for (std::size_t k = 0; k < settled.size(); ++k)
    s.settlements.emplace_back(settle_outcome_label(k), settled[k]);
  s.slots_held.assign(held.begin(), held.end());
  for (std::size_t k = 0; k < releases.size(); ++k)
    s.slot_releases.emplace_back(http::exchange_end_name(static_cast<http::exchange_end>(k)),
                                 releases[k]);
  for (auto& [name, u] : upstreams) s.upstreams.push_back(std::move(u));
  for (std::size_t k = 0; k < fallbacks.size(); ++k) {
    const auto source = static_cast<identity::address_source>(k);
    if (source == identity::address_source::peer || source == identity::address_source::forwarded)
      continue;
    s.client_address_fallbacks.emplace_back(identity::label(source), fallbacks[k]);
  }
  s.reloads = impl_->shared.count.reloads.load();
  s.reload_failures = impl_->shared.count.reload_failures.load();
  s.access_log_dropped = access_log_drops();
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
