// SPDX-License-Identifier: Apache-2.0
// The Redis counter store on the worker's executor, over one redis_connection (plain or TLS;
// hiredis as the codec: redis_connection.hpp; REFERENCES.md, Redis and hiredis).
//
// One connection, pipelined: every check is one FCALL of the check function (lua/, loaded with
// FUNCTION LOAD), or one EVALSHA of the same code as a script where Redis has no functions
// (before 7.0) or the ACL forbids FUNCTION LOAD. A check is
// identified by a command id carried in the command's privdata (never a pointer to a coroutine
// frame or handler that may be gone) and has a deadline: one entry in a queue under one timer
// (every check has the same timeout, so the queue is in deadline order, and replies come in send
// order, so the checks already answered are at its front). Whichever comes first — the reply, the
// deadline, or the connection's end (a NULL reply) — completes the check and erases its id;
// anything arriving for an erased id is a late reply, dropped and counted. A check is re-sent
// only after an explicit NOSCRIPT reply or "Function not found" (the check did not run), once,
// behind a new load on the same connection; never after a timeout or a disconnect, since it may
// have run (no NOSCRIPT replay). While not connected a check fails at once with store_unavailable
// (an outage must not cost a wait); the connection comes back by itself with jittered exponential
// backoff.
//
// The breaker (DESIGN.md "Failure"): a stalled store would otherwise cost every request its
// full deadline. Consecutive failures open it; while open, checks fail at once; after the
// cool-down one probe goes through (half-open). Opening on a missed deadline also replaces the
// connection: a peer that stopped answering (SIGSTOP, CLIENT PAUSE, dropped packets) may hold the
// old socket in TCP retransmission long after it is back, whereas a new connection — bounded by
// the connect timeout — succeeds as soon as the server answers again, and its successful set-up
// (AUTH, SCRIPT LOAD) makes the breaker half-open at once, so recovery costs one backoff step
// (at most 500 ms) rather than a retransmission timeout.
//
// Threading: everything (hooks, callbacks, timers, check()) runs on the store's executor, which
// must be the one the callers' coroutines run on; nothing here locks.
#include "store/redis_store_impl.hpp"

#include <spdlog/spdlog.h>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/use_awaitable.hpp>

namespace sluice::store {

void redis_store::impl::set_failure(std::string text) {
  std::lock_guard lock(failure_mutex);
  failure_text = std::move(text);
}

std::int64_t redis_store::impl::steady_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::int64_t redis_store::impl::stale_bound(std::int64_t sent_ms) const {
  return sent_ms + *clock_offset_ms + settings.command_timeout.count() + stale_margin_ms;
}

void redis_store::impl::connect() {
  if (state == conn_state::stopped || ac != nullptr || locating) return;
  if (settings.sentinel) {
    locate_master();
    return;
  }
  connect_to();
}

void redis_store::impl::locate_master() {
  if (!locator) {
    locator = std::make_unique<detail::sentinel_locator>(
        ex, *settings.sentinel,
        [w = weak_from_this()](std::string host, std::uint16_t port) {
          if (auto self = w.lock()) self->master_switched(std::move(host), port);
        },
        [w = weak_from_this()](std::size_t added) {
          if (auto self = w.lock()) self->counters.sentinels_learned += added;
        });
    locator->watch();
  }
  locating = true;
  locator->locate([w = weak_from_this()](detail::sentinel_locator::located l) {
    if (auto self = w.lock()) self->master_located(std::move(l));
  });
}

void redis_store::impl::master_located(detail::sentinel_locator::located l) {
  using kind = detail::sentinel_locator::located::kind;
  locating = false;
  if (state == conn_state::stopped || l.what == kind::stopped) return;
  if (l.what == kind::found) {
    settings.host = std::move(l.host);
    settings.port = l.port;
    connect_to();
    return;
  }
  ++(l.what == kind::unknown_master ? counters.sentinel_unknown_master
                                    : counters.sentinel_unreachable);
  set_failure("redis sentinel: " +
              std::string(l.what == kind::unknown_master ? "no Sentinel knows master '"
                                                         : "no Sentinel answered for master '") +
              settings.sentinel->master_name + "' (" + l.detail + ")");
  schedule_reconnect();
}

void redis_store::impl::master_switched(std::string host, std::uint16_t port) {
  ++counters.master_switches;
  if (state == conn_state::stopped) return;
  if (ac != nullptr) {
    if (host == settings.host && port == settings.port) return;  // there already
    drop_connection();
  } else if (locating) {
    return;  // a ROLE check follows that attempt; the next lookup returns the new address
  }
  backoff = backoff_first;
  backoff_timer.cancel();
  connect();
}

void redis_store::impl::connect_failed(std::string reason) {
  ++counters.connect_failures;
  set_failure("redis " + settings.host + ":" + std::to_string(settings.port) + ": " + reason);
  if (reason != last_failure) {
    spdlog::warn("redis {}:{}: cannot connect: {} (retrying with backoff; repeats not logged)",
                 settings.host, settings.port, reason);
    last_failure = std::move(reason);
  } else {
    spdlog::debug("redis {}:{}: cannot connect: {}", settings.host, settings.port, reason);
  }
}

void redis_store::impl::connect_to() {
  io = detail::redis_connection::open(
      ex,
      {settings.host, settings.port, settings.connect_timeout, settings.username, settings.password,
       settings.tls, idle_probe_every, settings.command_timeout, &impl::on_stall},
      this, &impl::on_connect, &impl::on_disconnect);
  ac = io.get();
  use_functions = true;
  const std::uint64_t gen = ++generation;
  state = conn_state::connecting;
  // Pipelined behind the connect and AUTH: FUNCTION LOAD (SCRIPT LOAD if that is refused);
  // the connection is ready once the check is loaded.
  if (settings.sentinel) {
    // The Sentinels' answer may be out of date (a failover in progress): the node must say it
    // is a master before it serves checks (Sentinel client guidelines, step 3).
    ac->command(&impl::on_setup_reply, reinterpret_cast<void*>(tag_role), {"ROLE"});
  }
  if (settings.load_script) {
    send_script_load(tag_initial_load);
  } else {
    ac->command(&impl::on_setup_reply, reinterpret_cast<void*>(tag_initial_load), {"PING"});
  }
  connect_timer.expires_after(settings.connect_timeout);
  connect_timer.async_wait([w = weak_from_this(), gen](error_code ec) {
    if (ec) return;
    if (auto self = w.lock();
        self && self->generation == gen && self->state == conn_state::connecting) {
      self->connect_failed("no answer within the connect timeout of " +
                           std::to_string(self->settings.connect_timeout.count()) + " ms");
      self->drop_connection();
      self->schedule_reconnect();
    }
  });
}

void redis_store::impl::send_script_load(std::uintptr_t tag) {
  auto* privdata = reinterpret_cast<void*>(tag);
  const bool sent =
      use_functions
          ? ac->command(&impl::on_setup_reply, privdata,
                        {"FUNCTION", "LOAD", "REPLACE", lua::check_library()})
          : ac->command(&impl::on_setup_reply, privdata, {"SCRIPT", "LOAD", lua::check()});
  if (sent) ++loads_sent;
}

void redis_store::impl::drop_connection() {
  auto c = std::move(io);
  lost();
  if (c) c->close();
}

void redis_store::impl::lost() {
  ac = nullptr;
  io.reset();
  connect_timer.cancel();
  if (state != conn_state::stopped) state = conn_state::idle;
  counters.connected = false;
}

void redis_store::impl::schedule_reconnect() {
  if (state == conn_state::stopped) return;
  // Full jitter in [backoff/2, backoff], so many workers do not reconnect in lockstep.
  std::uniform_int_distribution<std::int64_t> d(backoff.count() / 2, backoff.count());
  const std::chrono::milliseconds delay(d(rng));
  backoff = std::min(backoff * 2, backoff_max);
  backoff_timer.expires_after(delay);
  backoff_timer.async_wait([w = weak_from_this()](error_code ec) {
    if (ec) return;
    if (auto self = w.lock()) self->connect();
  });
}

void redis_store::impl::ready(std::string target) {
  call_command = use_functions ? "FCALL" : "EVALSHA";
  call_target = std::move(target);
  state = conn_state::ready;
  connect_timer.cancel();
  if (wrong_node_streak == 0) backoff = backoff_first;
  counters.connected = true;
  set_failure({});
  if (ever_connected) ++counters.reconnects;
  ever_connected = true;
  if (wrong_node_streak > 1) {
    spdlog::debug("redis {}:{}: connected again, still to a node that cannot serve?", settings.host,
                  settings.port);
  } else {
    // (A connection that only reads — the plan directory's — has no script.)
    const std::string what = !settings.load_script ? std::string("connected (plan directory)")
                             : use_functions       ? "connected, function " + call_target
                                                   : "connected, script " + call_target;
    if (!last_failure.empty()) {
      spdlog::info("redis {}:{}: {} (after: {})", settings.host, settings.port, what, last_failure);
      last_failure.clear();
    } else {
      spdlog::info("redis {}:{}: {}", settings.host, settings.port, what);
    }
  }
  // The set-up round trips were answered: the next check may probe at once.
  breaker.cool_down_over();
}

void redis_store::impl::on_connect(detail::redis_connection* c, bool ok,
                                   const std::string& why) noexcept {
  try {
    impl* self = owner(c);
    if (self == nullptr || self->ac != c || ok) return;
    self->connect_failed(why);
    self->lost();
    self->schedule_reconnect();
  } catch (...) {
    // No exception crosses a connection callback.
  }
}

void redis_store::impl::on_stall(detail::redis_connection* c, bool stalled) noexcept {
  try {
    impl* self = owner(c);
    if (self == nullptr || self->ac != c) return;
    if (stalled) {
      self->counters.connected = false;
      ++self->counters.idle_stalls;
      spdlog::warn(
          "redis {}:{}: no answer to an idle PING within {} ms: not ready until it answers",
          self->settings.host, self->settings.port, self->settings.command_timeout.count());
    } else {
      if (self->state == conn_state::ready) self->counters.connected = true;
      spdlog::info("redis {}:{}: answers again", self->settings.host, self->settings.port);
    }
  } catch (...) {
    // No exception crosses a connection callback.
  }
}

void redis_store::impl::on_disconnect(detail::redis_connection* c,
                                      const std::string& why) noexcept {
  try {
    impl* self = owner(c);
    if (self == nullptr || self->ac != c) return;  // a connection we dropped ourselves
    if (self->state != conn_state::ready) {
      // Closed before its set-up was answered (a proxy whose backend is down accepts and
      // closes): a failed attempt — logged once per reason, and the backoff keeps growing.
      self->connect_failed("closed during set-up: " + why);
      self->lost();
      self->schedule_reconnect();
      return;
    }
    spdlog::warn("redis {}:{}: connection lost: {}", self->settings.host, self->settings.port, why);
    self->lost();
    self->backoff = backoff_first;
    self->schedule_reconnect();
  } catch (...) {
    // No exception crosses a connection callback.
  }
}

void redis_store::impl::on_setup_reply(detail::redis_connection* c, const redisReply* r,
                                       void* privdata) noexcept {
  try {
    impl* self = owner(c);
    if (self == nullptr || self->ac != c || r == nullptr) return;  // NULL: disconnect path
    const auto* reply = r;
    const auto tag = reinterpret_cast<std::uintptr_t>(privdata);
    if (reply->type == REDIS_REPLY_ERROR) {
      // A failed reload needs nothing: the retried EVALSHA answers NOSCRIPT again and that
      // check fails. A failed set-up is a failed connection attempt (the password is never
      // logged: only the server's error text is).
      const auto kind = classify_error_reply(reply_text(reply));
      if (tag == tag_reload) {
        spdlog::warn("redis {}:{}: {} failed: {}", self->settings.host, self->settings.port,
                     self->use_functions ? "FUNCTION LOAD" : "SCRIPT LOAD", reply_text(reply));
      } else if (tag == tag_initial_load && self->settings.load_script && self->use_functions &&
                 (kind == error_kind::other || kind == error_kind::noperm ||
                  kind == error_kind::oom)) {
        // No functions here (Redis before 7.0: unknown command; an ACL without FUNCTION;
        // maxmemory reached): the same check as a script, with EVALSHA.
        if (!self->functions_refusal_logged) {
          self->functions_refusal_logged = true;
          spdlog::info("redis {}:{}: FUNCTION LOAD refused ({}); checks use EVALSHA",
                       self->settings.host, self->settings.port, reply_text(reply));
        }
        self->use_functions = false;
        self->send_script_load(tag_initial_load);
      } else {
        ++self->counters.error_replies[static_cast<std::size_t>(kind)];
        self->connect_failed(std::string(tag == tag_role               ? "ROLE"
                                         : !self->settings.load_script ? "PING"
                                         : self->use_functions         ? "FUNCTION LOAD"
                                                                       : "SCRIPT LOAD") +
                             " failed: " + std::string(reply_text(reply)));
        self->drop_connection();
        self->schedule_reconnect();
      }
      return;
    }
    if (tag == tag_role) {
      const auto role = reply->type == REDIS_REPLY_ARRAY && reply->elements > 0
                            ? reply_text(reply->element[0])
                            : std::string_view();
      if (role != "master") {
        self->connect_failed("the node the Sentinels named is not a master (ROLE: " +
                             std::string(role.empty() ? "?" : role) + ")");
        self->drop_connection();
        self->schedule_reconnect();
      }
      return;
    }
    const bool script = self->settings.load_script;
    if (script) ++self->counters.script_loads;  // (start-up or NOSCRIPT)
    if (tag == tag_initial_load) {
      // The library's name (FUNCTION LOAD), the script's SHA1 (SCRIPT LOAD), or PONG on a
      // connection that only reads.
      if (reply->type != (script ? REDIS_REPLY_STRING : REDIS_REPLY_STATUS)) {
        self->drop_connection();
        self->schedule_reconnect();
        return;
      }
      self->ready(!script               ? std::string()
                  : self->use_functions ? std::string(lua::check_function())
                                        : std::string(reply_text(reply)));
    }
  } catch (...) {
    // No exception crosses a connection callback.
  }
}

void redis_store::impl::start_read(std::string hash, std::string field, read_handler h) {
  bool probe = false;
  if (state != conn_state::ready || ac == nullptr || !breaker_allows(probe)) {
    ++counters.unavailable;
    h.post(ex, errc::store_unavailable, std::nullopt);
    return;
  }
  const std::uint64_t id = next_id++;
  auto it = reads.emplace(id, pending_read{std::move(h), probe}).first;
  deadlines.emplace_back(std::chrono::steady_clock::now() + settings.command_timeout, id);
  if (!deadline_armed) arm_deadline();
  if (!ac->command(&impl::on_read_reply, reinterpret_cast<void*>(id), {"HGET", hash, field})) {
    ++counters.unavailable;
    complete_read(it, errc::store_unavailable, std::nullopt, verdict::not_sent);
  }
}

void redis_store::impl::on_read_reply(detail::redis_connection* c, const redisReply* r,
                                      void* privdata) noexcept {
  try {
    impl* self = owner(c);
    if (self != nullptr) {
      self->handle_read_reply(reinterpret_cast<std::uintptr_t>(privdata), r);
    }
  } catch (...) {
    // No exception crosses a connection callback.
  }
}

void redis_store::impl::handle_read_reply(std::uint64_t id, const redisReply* r) {
  auto it = reads.find(id);
  if (it == reads.end()) {
    if (r != nullptr) ++counters.late_replies;
    return;
  }
  if (r == nullptr) {
    ++counters.errors;
    last_check_failure = "connection lost";
    complete_read(it, errc::store_error, std::nullopt, verdict::failed);
  } else if (r->type == REDIS_REPLY_NIL) {
    complete_read(it, {}, std::nullopt, verdict::answered);
  } else if (r->type == REDIS_REPLY_STRING) {
    complete_read(it, {}, std::string(reply_text(r)), verdict::answered);
  } else if (r->type == REDIS_REPLY_ERROR) {
    const auto text = reply_text(r);
    const error_kind kind = classify_error_reply(text);
    ++counters.error_replies[static_cast<std::size_t>(kind)];
    complete_read(it, errc::store_error, std::nullopt, error_reply(kind, text));
  } else {
    ++counters.errors;
    complete_read(it, errc::store_protocol, std::nullopt, verdict::answered);
  }
}

void redis_store::impl::complete_read(std::unordered_map<std::uint64_t, pending_read>::iterator it,
                                      error_code ec, std::optional<std::string> v,
                                      verdict verdict_of) {
  read_handler h = std::move(it->second.handler);
  const bool probe = it->second.probe;
  reads.erase(it);
  h.post(ex, ec, std::move(v));
  breaker_record(verdict_of, probe);
}

redis_store::redis_store(asio::any_io_executor ex, redis_settings settings)
    : impl_(std::make_shared<impl>(std::move(ex), std::move(settings))) {}

redis_store::~redis_store() {
  impl_->stop();
}

asio::awaitable<redis_store::routed_result> redis_store::check_routed(limiter::check_request req,
                                                                      routed_options how) {
  auto text = std::make_shared<std::string>();
  auto token = asio::as_tuple(asio::use_awaitable);
  auto [ec, out] = co_await asio::async_initiate<decltype(token), void(error_code, check_outcome)>(
      [](auto handler, std::shared_ptr<impl> self, limiter::check_request r, routed_options h,
         std::shared_ptr<std::string> t) {
        self->start_check(std::move(r), check_handler(std::move(handler)), h, std::move(t));
      },
      token, impl_, std::move(req), how, text);
  co_return routed_result{ec, std::move(out), std::move(*text)};
}

asio::awaitable<boost::system::result<check_outcome>> redis_store::check(
    limiter::check_request req) {
  auto token = asio::as_tuple(asio::use_awaitable);
  auto [ec, out] = co_await asio::async_initiate<decltype(token), void(error_code, check_outcome)>(
      [](auto handler, std::shared_ptr<impl> self, limiter::check_request r) {
        self->start_check(std::move(r), check_handler(std::move(handler)));
      },
      token, impl_, std::move(req));
  if (ec) co_return ec;
  co_return std::move(out);
}

void redis_store::start() {
  if (impl_->state == impl::conn_state::idle && impl_->ac == nullptr) impl_->connect();
}

void redis_store::stop() {
  impl_->stop();
}

asio::awaitable<boost::system::result<std::optional<std::string>>> redis_store::hget(
    std::string hash, std::string field) {
  auto token = asio::as_tuple(asio::use_awaitable);
  auto [ec, v] =
      co_await asio::async_initiate<decltype(token), void(error_code, std::optional<std::string>)>(
          [](auto handler, std::shared_ptr<impl> self, std::string h, std::string f) {
            self->start_read(std::move(h), std::move(f), read_handler(std::move(handler)));
          },
          token, impl_, std::move(hash), std::move(field));
  if (ec) co_return ec;
  co_return std::move(v);
}

std::uint64_t redis_store::connection_epoch() const {
  return impl_->counters.reconnects.load(std::memory_order_relaxed);
}

store_stats redis_store::stats() const {
  return impl_->counters.snapshot();
}

std::string redis_store::failure() const {
  std::lock_guard lock(impl_->failure_mutex);
  return impl_->failure_text;
}

}  // namespace sluice::store
