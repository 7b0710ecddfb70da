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
// have run (c10). While not connected a check fails at once with store_unavailable (c11: an outage
// must not cost a wait); the connection comes back by itself with jittered exponential backoff.
//
// The breaker (c11, DESIGN.md "Failure"): a stalled store would otherwise cost every request its
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
#include "sluice/store/redis_store.hpp"

#include "sluice/store/circuit_breaker.hpp"

#include "store/posted_handler.hpp"

#include "sluice/errc.hpp"
#include "sluice/log_throttle.hpp"
#include "sluice/store/lua_scripts.hpp"
#include "store/check_batch.hpp"
#include "store/redis_connection.hpp"
#include "store/sentinel_locator.hpp"
#include "store/store_stats_mirror.hpp"

#include <hiredis/hiredis.h>

#include <spdlog/spdlog.h>
#include <boost/asio/append.hpp>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/associated_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/ip/address.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <chrono>
#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>
#include <random>
#include <span>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace sluice::store {

namespace asio = boost::asio;
using boost::system::error_code;
using limiter::check_outcome;

namespace {

using check_handler = detail::posted_handler<check_outcome>;
using read_handler = detail::posted_handler<std::optional<std::string>>;

constexpr std::chrono::milliseconds backoff_first{50};
// 500 ms keeps recovery after an outage within a second (one backoff step plus a connect).
constexpr std::chrono::milliseconds backoff_max{500};

// privdata of the connection-setup commands (checks carry their id, which starts at 1 << 20).
constexpr std::uintptr_t tag_initial_load = 2;
constexpr std::uintptr_t tag_reload = 3;
constexpr std::uintptr_t tag_role = 4;  // ROLE, on a master named by the Sentinels
constexpr std::uint64_t first_check_id = 1 << 20;

std::string_view reply_text(const redisReply* r) {
  return r && r->str ? std::string_view(r->str, r->len) : std::string_view();
}

// Error replies that say the server cannot serve checks right now (as opposed to an error of
// this one check, such as WRONGTYPE from a colliding key): they count towards the breaker.
// Redis error prefixes: https://redis.io/docs/reference/protocol-spec/#simple-errors
bool unhealthy_error(std::string_view text) {
  for (std::string_view prefix :
       {"READONLY", "OOM", "BUSY", "LOADING", "MASTERDOWN", "MISCONF", "NOAUTH", "NOPERM",
        "TRYAGAIN", "CLUSTERDOWN", "NOREPLICAS", "NOSCRIPT"}) {
    if (text.starts_with(prefix)) return true;
  }
  return false;
}

// How a completed check counts for the breaker.
enum class verdict {
  answered,   // the server answered (a decision, or an error of this check only)
  failed,     // the server did not serve it: error reply of an unhealthy server, lost connection
  timed_out,  // the deadline passed
  not_sent,   // refused before reaching the server (no effect on the breaker)
};

}  // namespace

struct redis_store::impl : std::enable_shared_from_this<impl> {
  // One check, from start_check() to its completion (a reply, its deadline, the connection's
  // end).
  struct pending {
    // Its numkeys, KEYS and ARGV (lua::append_check_command), until it goes into a call.
    std::vector<std::string> args;
    detail::reply_shape shape;  // how its answer reads
    check_handler handler;
    bool probe = false;         // the one check let through by a half-open breaker
    std::int64_t sent_ms = 0;   // this host's steady clock (ms) when it was started
    bool learns_clock = false;  // decided on Redis's own clock (no test override)
    bool batchable = true;      // may share a call with others (no test override, no ASKING)
    bool asking = false;        // cluster: sent behind ASKING (an ASK redirection)
    std::shared_ptr<std::string> error_text;  // cluster: receives the text of an error reply
  };

  // One script call on the connection: one check, or a batch of them, answered in order.
  struct command {
    std::vector<std::string> argv;      // kept for the one NOSCRIPT or STALE re-send
    std::vector<std::uint64_t> checks;  // ids of its checks, in the order of their answers
    // Each check's answer length (reply_shape::size()): a check that missed its deadline
    // before the reply came is gone with its shape, and its answer is skipped by this.
    std::vector<std::size_t> sizes;
    std::uint64_t loads_at_send = 0;  // loads_sent when it was (last) sent
    bool retried = false;             // re-sent once after NOSCRIPT
    bool stale_retried = false;       // re-sent once after a STALE answer (the clocks moved)
    std::size_t stale_arg = 0;        // index in argv of the stale bound
    std::int64_t sent_ms = 0;         // sent_ms of its first check
    bool learns_clock = false;
    bool asking = false;
  };
  std::unordered_map<std::uint64_t, command> commands;  // by the id its privdata carries
  std::vector<std::uint64_t> queued;  // checks started this turn of the loop, not yet sent
  bool flush_posted = false;

  struct pending_read {
    read_handler handler;
    bool probe = false;  // the one command let through by a half-open breaker
  };
  std::unordered_map<std::uint64_t, pending_read> reads;

  enum class conn_state { idle, connecting, ready, stopped };

  impl(asio::any_io_executor e, redis_settings s)
      : ex(std::move(e)),
        settings(std::move(s)),
        connect_timer(ex),
        backoff_timer(ex),
        idle_timer(ex),
        deadline_timer(ex),
        breaker(settings.breaker_failures, settings.breaker_cool_down),
        rng(std::random_device{}()) {}

  asio::any_io_executor ex;
  redis_settings settings;
  conn_state state = conn_state::idle;
  detail::redis_connection* ac = nullptr;  // the connection (io), or null
  std::shared_ptr<detail::redis_connection> io;
  // How checks are sent on this connection: FCALL of the check function, or EVALSHA of the
  // script (SHA1 from SCRIPT LOAD) when FUNCTION LOAD was refused. Each connection tries
  // functions first (a Redis upgraded in place gets them at the next connection).
  bool use_functions = true;
  bool functions_refusal_logged = false;
  std::string call_command = "FCALL";
  std::string call_target;  // the function's name or the script's SHA1
  asio::steady_timer connect_timer;
  asio::steady_timer backoff_timer;
  // Idle probe: a frozen server (SIGSTOP, a stalled network) keeps its TCP connection, so with
  // no checks to time out nothing would notice. While nothing has been heard for
  // `idle_probe_every`, a PING is sent; unanswered after the command timeout, the connection
  // counts as not connected (stats, readiness) until anything is heard again.
  static constexpr std::chrono::milliseconds idle_probe_every{1000};
  static constexpr std::chrono::milliseconds idle_tick{250};
  asio::steady_timer idle_timer;
  // The checks' deadlines, in send order (= deadline order: one timeout for all), with one
  // timer armed for the first check still in flight. No timer (and no timer system call) per
  // check: under load it fires about once per timeout.
  asio::steady_timer deadline_timer;
  std::deque<std::pair<std::chrono::steady_clock::time_point, std::uint64_t>> deadlines;
  bool deadline_armed = false;
  std::chrono::steady_clock::time_point last_heard{};
  std::chrono::steady_clock::time_point ping_sent{};
  bool ping_outstanding = false;
  bool stalled = false;
  // Sentinel mode (settings.sentinel): where to connect is asked of the Sentinels before every
  // attempt; `settings.host`/`port` then hold the master last named (for the attempt and the
  // log lines). Made at the first connect (it needs weak_from_this).
  std::unique_ptr<detail::sentinel_locator> locator;
  bool locating = false;
  std::string last_failure;  // reason of the last failed connection attempt ("" after success)
  // failure()'s text, for other threads: the last failed attempt until the next success.
  mutable std::mutex failure_mutex;
  std::string failure_text;
  void set_failure(std::string text) {
    std::lock_guard lock(failure_mutex);
    failure_text = std::move(text);
  }
  std::chrono::milliseconds backoff = backoff_first;
  bool ever_connected = false;
  std::uint64_t next_id = first_check_id;
  std::uint64_t loads_sent = 0;  // SCRIPT LOADs queued, ever (orders NOSCRIPT retries)
  std::uint64_t generation = 0;  // connection attempts, ever (matches a connect timer to one)
  std::unordered_map<std::uint64_t, pending> inflight;
  store_stats_mirror counters;
  // Breaker (worker thread only; `counters.breaker` mirrors its state for other threads).
  circuit_breaker breaker;
  std::uint64_t refused_while_open = 0;  // checks refused since it last opened (for the log)
  std::string last_check_failure;        // why the last check failed (for the breaker's log line)
  std::mt19937_64 rng;
  // At most one line per second per kind: these fire on the request path during an outage.
  sluice::log_throttle error_log;
  std::optional<error_kind> logged_error;  // the kind of error reply last logged
  unsigned wrong_node_streak = 0;          // wrong-node drops since a check was last answered
  sluice::log_throttle clock_log;
  // Redis's clock (TIME, ms) minus this host's steady clock (ms), as last seen by a timely
  // reply: its decision time minus the moment it was sent (an upper bound of the true offset,
  // by at most the command timeout); learned again from every timely reply and from every
  // STALE answer. The steady clock does not move when this host's wall clock is stepped (NTP,
  // a suspend), so only a step of Redis's clock can make a bound wrong: a step back makes the
  // bound late until the next reply relearns it, a step forward makes a timely check STALE,
  // which is then re-sent once under the relearned offset (the script wrote nothing).
  // Unknown until a first reply.
  std::optional<std::int64_t> clock_offset_ms;
  // Margin past the deadline (in Redis time) before the script refuses to run a check: it
  // absorbs jitter and a clock that moved since the offset was seen.
  static constexpr std::int64_t stale_margin_ms = 500;

  static std::int64_t steady_ms() {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }

  // The stale bound (Redis TIME ms) of a check sent at steady time `sent_ms`: past it, the
  // gateway has given up on the check (its deadline) by a margin.
  std::int64_t stale_bound(std::int64_t sent_ms) const {
    return sent_ms + *clock_offset_ms + settings.command_timeout.count() + stale_margin_ms;
  }

  // ---- connection -----------------------------------------------------------------------------

  // A connection attempt starts with "where to connect": the configured host:port, or the
  // master the Sentinels name (sentinel_locator.hpp).
  void connect() {
    if (state == conn_state::stopped || ac != nullptr || locating) return;
    if (settings.sentinel) {
      locate_master();
      return;
    }
    connect_to();
  }

  void locate_master() {
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

  // The lookup's outcome (the locator logs each change of it): connect to the master, or stay
  // not connected and ask again after the backoff.
  void master_located(detail::sentinel_locator::located l) {
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

  // A Sentinel announced `+switch-master` for our master: leave the old one now (checks in
  // flight on it fail, the routes' failure policy answers them) rather than at its first
  // READONLY or when the Sentinels reconfigure it; the next attempt goes to the new one.
  void master_switched(std::string host, std::uint16_t port) {
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

  // A failed connection attempt: counted, logged once per distinct reason until a success.
  void connect_failed(std::string reason) {
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

  // An attempt (redis_connection: resolution, connect, TLS, AUTH, all under the connect
  // timeout), with the set-up commands queued behind it.
  void connect_to() {
    detail::redis_connection::options o;
    o.host = settings.host;
    o.port = settings.port;
    o.connect_timeout = settings.connect_timeout;
    o.username = settings.username;
    o.password = settings.password;
    o.tls = settings.tls;
    io = detail::redis_connection::open(ex, std::move(o), this, &impl::on_connect,
                                        &impl::on_disconnect);
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

  // Queues the load of the check: FUNCTION LOAD REPLACE of the library, or SCRIPT LOAD of the
  // script once functions were refused on this connection.
  void send_script_load(std::uintptr_t tag) {
    auto* privdata = reinterpret_cast<void*>(tag);
    const bool sent =
        use_functions
            ? ac->command(&impl::on_setup_reply, privdata,
                          {"FUNCTION", "LOAD", "REPLACE", lua::check_library()})
            : ac->command(&impl::on_setup_reply, privdata, {"SCRIPT", "LOAD", lua::check()});
    if (sent) ++loads_sent;
  }

  // Closes the connection deliberately (connect timeout, setup failure, stop): every queued
  // command is answered with a NULL reply (after the reply being handled, from inside one).
  void drop_connection() {
    auto c = std::move(io);
    lost();
    if (c) c->close();
  }

  // Bookkeeping of a connection that is gone (or going): not ready, checks refused at once.
  void lost() {
    ac = nullptr;
    io.reset();
    connect_timer.cancel();
    ping_outstanding = false;
    stalled = false;
    if (state != conn_state::stopped) state = conn_state::idle;
    counters.connected = false;
  }

  void schedule_reconnect() {
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

  // `target`: the check function's name or the script's SHA1 ("" for the plan directory).
  void ready(std::string target) {
    call_command = use_functions ? "FCALL" : "EVALSHA";
    call_target = std::move(target);
    state = conn_state::ready;
    connect_timer.cancel();
    heard();
    arm_idle_timer();
    if (wrong_node_streak == 0) backoff = backoff_first;
    counters.connected = true;
    set_failure({});
    if (ever_connected) ++counters.reconnects;
    ever_connected = true;
    if (wrong_node_streak > 1) {
      spdlog::debug("redis {}:{}: connected again, still to a node that cannot serve?",
                    settings.host, settings.port);
    } else {
      // (A connection that only reads — the plan directory's — has no script.)
      const std::string what = !settings.load_script ? std::string("connected (plan directory)")
                               : use_functions       ? "connected, function " + call_target
                                                     : "connected, script " + call_target;
      if (!last_failure.empty()) {
        spdlog::info("redis {}:{}: {} (after: {})", settings.host, settings.port, what,
                     last_failure);
        last_failure.clear();
      } else {
        spdlog::info("redis {}:{}: {}", settings.host, settings.port, what);
      }
    }
    // The set-up round trips were answered: the next check may probe at once.
    breaker.cool_down_over();
  }

  static impl* owner(const detail::redis_connection* c) { return static_cast<impl*>(c->data()); }

  static void on_connect(detail::redis_connection* c, bool ok, const std::string& why) noexcept {
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

  // Anything heard from the server: the connection answers.
  void heard() {
    last_heard = std::chrono::steady_clock::now();
    ping_outstanding = false;
    if (stalled) {
      stalled = false;
      if (state == conn_state::ready) counters.connected = true;
      spdlog::info("redis {}:{}: answers again", settings.host, settings.port);
    }
  }

  void arm_idle_timer() {
    idle_timer.expires_after(idle_tick);
    idle_timer.async_wait([w = weak_from_this()](error_code ec) {
      if (ec) return;
      if (auto self = w.lock()) self->on_idle_tick();
    });
  }

  void on_idle_tick() {
    if (state != conn_state::ready || ac == nullptr) return;  // ready() arms it again
    const auto now = std::chrono::steady_clock::now();
    if (ping_outstanding && !stalled && now - ping_sent > settings.command_timeout) {
      stalled = true;
      counters.connected = false;
      spdlog::warn(
          "redis {}:{}: no answer to an idle PING within {} ms: not ready until it "
          "answers",
          settings.host, settings.port, settings.command_timeout.count());
    }
    if (!ping_outstanding && now - last_heard >= idle_probe_every) {
      if (ac->command(&impl::on_ping_reply, nullptr, {"PING"})) {
        ping_outstanding = true;
        ping_sent = now;
      }
    }
    arm_idle_timer();
  }

  static void on_ping_reply(detail::redis_connection* c, const redisReply* r,
                            void* /*privdata*/) noexcept {
    try {
      impl* self = owner(c);
      if (self == nullptr || self->ac != c || r == nullptr) return;
      self->heard();
    } catch (...) {
      // No exception crosses a connection callback.
    }
  }

  static void on_disconnect(detail::redis_connection* c, const std::string& why) noexcept {
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
      spdlog::warn("redis {}:{}: connection lost: {}", self->settings.host, self->settings.port,
                   why);
      self->lost();
      self->backoff = backoff_first;
      self->schedule_reconnect();
    } catch (...) {
      // No exception crosses a connection callback.
    }
  }

  static void on_setup_reply(detail::redis_connection* c, const redisReply* r,
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

  // ---- checks ---------------------------------------------------------------------------------

  // ---- breaker -------------------------------------------------------------------------------
  // O(1) per check; reads the clock only while open.

  void mirror_breaker() { counters.breaker = breaker.state(); }

  // Whether a check may go to the server; `probe` is set when it is the half-open probe.
  bool breaker_allows(bool& probe) {
    const auto before = breaker.state();
    const auto a = breaker.admit();
    mirror_breaker();
    if (before == breaker_state::open && breaker.state() == breaker_state::half_open) {
      ++counters.breaker_half_opens;
      spdlog::debug("redis {}:{}: breaker half-open, probing", settings.host, settings.port);
    }
    probe = a == circuit_breaker::admission::probe;
    return a != circuit_breaker::admission::refused;
  }

  // The breaker opened (or opened again after a failed probe) because of a check's `why`.
  void breaker_opened(verdict why, bool from_closed) {
    if (from_closed) {
      ++counters.breaker_opens;
      refused_while_open = 0;
      spdlog::warn(
          "redis {}:{}: breaker open after {} consecutive failed checks (last: {}); checks fail "
          "at once for {} ms, then a probe",
          settings.host, settings.port, breaker.consecutive_failures(), last_check_failure,
          settings.breaker_cool_down.count());
    } else {
      ++counters.breaker_reopens;
      spdlog::debug("redis {}:{}: probe failed ({}); breaker open again", settings.host,
                    settings.port, last_check_failure);
    }
    // A missed deadline means the peer stopped answering: replace the connection (see the top
    // of this file). Posted: we may be inside a connection callback or iterating `inflight`.
    if (why == verdict::timed_out && ac != nullptr) {
      asio::post(ex, [w = weak_from_this(), gen = generation] {
        auto self = w.lock();
        if (!self || self->generation != gen || self->ac == nullptr ||
            self->breaker.state() == breaker_state::closed) {
          return;
        }
        spdlog::debug("redis {}:{}: replacing the stalled connection", self->settings.host,
                      self->settings.port);
        self->drop_connection();
        self->backoff = backoff_first;
        self->schedule_reconnect();
      });
    }
  }

  // Told the verdict of every check that left start_check; `probe`: it was the probe.
  void breaker_record(verdict v, bool probe) {
    if (v == verdict::not_sent) {
      if (probe) breaker.probe_not_sent();  // it never reached the server: probe again
      return;
    }
    const auto t = breaker.record(v == verdict::answered, probe);
    mirror_breaker();
    switch (t) {
      case circuit_breaker::transition::none:
        break;
      case circuit_breaker::transition::opened:
        breaker_opened(v, true);
        break;
      case circuit_breaker::transition::reopened:
        breaker_opened(v, false);
        break;
      case circuit_breaker::transition::closed:
        ++counters.breaker_closes;
        spdlog::info(
            "redis {}:{}: breaker closed, the store answers again (open {} ms, {} "
            "checks refused meanwhile)",
            settings.host, settings.port, breaker.open_for().count(), refused_while_open);
        break;
    }
  }

  void start_check(limiter::check_request req, check_handler handler,
                   const routed_options& how = {}, std::shared_ptr<std::string> error_text = {}) {
    bool probe = false;
    if (state != conn_state::ready || ac == nullptr) {
      ++counters.unavailable;
      if (breaker.state() != breaker_state::closed) ++refused_while_open;
      finish(std::move(handler), errc::store_unavailable, {});
      return;
    }
    if (!breaker_allows(probe)) {
      ++counters.unavailable;
      ++refused_while_open;
      finish(std::move(handler), errc::store_unavailable, {});
      return;
    }
    const std::uint64_t id = next_id++;
    pending p;
    const std::size_t n = req.limits.size();
    // A check still queued (a stalled server) when its deadline has long passed must not run
    // when the server resumes: the request was answered without it.
    p.sent_ms = steady_ms();
    p.learns_clock = req.now_ms_override < 0;  // (a test's simulated time says nothing of it)
    if (clock_offset_ms && p.learns_clock) req.stale_after_ms = stale_bound(p.sent_ms);
    lua::append_check_command(req, settings.layout, p.args);  // numkeys, KEYS and ARGV
    p.shape.bursts.reserve(n);
    for (std::size_t i = 0; i < n; ++i) {
      const auto& l = req.limits[i];
      p.shape.bursts.push_back(l.bucket.quota(l.algorithm));
      if (lua::packs_lease(l)) p.shape.leased.push_back(i);
      if (lua::packs_block(l)) p.shape.blocked.push_back(i);
    }
    p.handler = std::move(handler);
    p.probe = probe;
    p.asking = how.asking;
    p.batchable = !how.asking && p.learns_clock && n <= detail::max_batched_limits;
    p.error_text = std::move(error_text);
    auto it = inflight.emplace(id, std::move(p)).first;
    add_deadline(
        std::min(std::chrono::steady_clock::now() + settings.command_timeout, how.deadline), id);
    if (settings.max_batch > 1 && it->second.batchable) {
      // Sent with the other checks started in this turn of the loop, after it.
      queued.push_back(id);
      if (!flush_posted) {
        flush_posted = true;
        asio::post(ex, [w = weak_from_this()] {
          if (auto self = w.lock()) self->flush();
        });
      }
      return;
    }
    flush();  // (the checks queued before it go first: calls are answered in order)
    send_checks({&id, 1});
  }

  // Sends the queued checks, at most max_batch per call, in the order they were started.
  void flush() {
    flush_posted = false;
    std::vector<std::uint64_t> ids;
    ids.swap(queued);
    // (A cluster node's batch needs the function's allow-cross-slot-keys: none with EVALSHA.)
    const std::size_t most = settings.cluster_node && !use_functions ? 1 : settings.max_batch;
    for (std::size_t at = 0; at < ids.size(); at += most) {
      const std::size_t k = std::min(most, ids.size() - at);
      send_checks({ids.data() + at, k});
    }
  }

  // Sends `ids` (checks still in flight, not yet sent) as one call: alone, today's check; or a
  // batch (lua_scripts.hpp). Fails them at once when there is no connection to send on.
  void send_checks(std::span<const std::uint64_t> ids) {
    command c;
    std::vector<std::vector<std::string>*> parts;
    c.checks.reserve(ids.size());
    c.sizes.reserve(ids.size());
    parts.reserve(ids.size());
    for (const auto id : ids) {
      auto it = inflight.find(id);
      if (it == inflight.end()) continue;  // (completed meanwhile: a stop)
      if (c.checks.empty()) {
        c.sent_ms = it->second.sent_ms;
        c.learns_clock = it->second.learns_clock;
        c.asking = it->second.asking;
      }
      c.checks.push_back(id);
      c.sizes.push_back(it->second.shape.size());
      parts.push_back(&it->second.args);
    }
    if (c.checks.empty()) return;
    if (ac == nullptr || state != conn_state::ready) {
      for (const auto id : c.checks) {
        if (auto it = inflight.find(id); it != inflight.end()) {
          ++counters.unavailable;
          complete(it, errc::store_unavailable, {}, verdict::not_sent);
        }
      }
      return;
    }
    c.argv.reserve(2 + 1 + 5 * parts.size());
    c.argv.push_back(call_command);
    c.argv.push_back(call_target);
    c.stale_arg = detail::append_batch(parts, !settings.cluster_node, c.argv);
    ++counters.batch_sizes[batch_bucket(c.checks.size())];
    const std::uint64_t cid = next_id++;
    auto cit = commands.emplace(cid, std::move(c)).first;
    if (!send(cid, cit->second)) fail_command(cit, errc::store_unavailable, verdict::not_sent);
  }

  // Fails every check of a call still in flight, and forgets the call.
  void fail_command(std::unordered_map<std::uint64_t, command>::iterator cit, error_code ec,
                    verdict v) {
    const auto ids = std::move(cit->second.checks);
    commands.erase(cit);
    for (const auto id : ids) {
      if (auto it = inflight.find(id); it != inflight.end()) {
        if (ec == errc::store_unavailable) {
          ++counters.unavailable;
        } else {
          ++counters.errors;
        }
        complete(it, ec, {}, v);
      }
    }
  }

  bool send(std::uint64_t id, command& c) {
    std::vector<const char*> argv;
    std::vector<std::size_t> lens;
    argv.reserve(c.argv.size());
    lens.reserve(c.argv.size());
    for (const auto& a : c.argv) {
      argv.push_back(a.data());
      lens.push_back(a.size());
    }
    c.loads_at_send = loads_sent;
    // ASK: this one command goes to the importing node behind ASKING (the Redis Cluster
    // specification, "ASK redirection"); sent again before a re-sent check.
    if (c.asking && !ac->command(nullptr, nullptr, {"ASKING"})) return false;
    // The arguments are copied into the connection's output buffer here.
    return ac->command(&impl::on_check_reply, reinterpret_cast<void*>(id),
                       static_cast<int>(argv.size()), argv.data(), lens.data());
  }

  // Queues a deadline. Checks share one timeout, so the queue is in send order; only a cluster
  // retry (routed_options::deadline, the rest of its check's deadline) may come earlier than
  // the last one queued: it is inserted in order, and the timer re-armed when it is first.
  void add_deadline(std::chrono::steady_clock::time_point at, std::uint64_t id) {
    if (deadlines.empty() || deadlines.back().first <= at) {
      deadlines.emplace_back(at, id);
      if (!deadline_armed) arm_deadline();
      return;
    }
    const auto pos = std::upper_bound(deadlines.begin(), deadlines.end(), at,
                                      [](const auto& t, const auto& e) { return t < e.first; });
    const bool first = pos == deadlines.begin();
    deadlines.insert(pos, {at, id});
    if (first || !deadline_armed) arm_deadline();  // (expires_at cancels the earlier wait)
  }

  // Arms the timer for the first check still in flight (answered ones are dropped from the
  // front); disarmed when none is.
  void arm_deadline() {
    while (!deadlines.empty() && !inflight.contains(deadlines.front().second) &&
           !reads.contains(deadlines.front().second)) {
      deadlines.pop_front();
    }
    if (deadlines.empty()) {
      deadline_armed = false;
      return;
    }
    deadline_armed = true;
    deadline_timer.expires_at(deadlines.front().first);
    deadline_timer.async_wait([w = weak_from_this()](error_code ec) {
      if (ec) return;
      if (auto self = w.lock()) self->deadlines_passed();
    });
  }

  // The timer fired: every check in flight whose deadline has passed fails (on_deadline).
  void deadlines_passed() {
    const auto now = std::chrono::steady_clock::now();
    while (!deadlines.empty() && deadlines.front().first <= now) {
      const auto id = deadlines.front().second;
      deadlines.pop_front();
      on_deadline(id);  // (nothing when it was answered)
    }
    arm_deadline();
  }

  void on_deadline(std::uint64_t id) {
    if (auto r = reads.find(id); r != reads.end()) {
      ++counters.timeouts;
      complete_read(r, errc::store_timeout, std::nullopt, verdict::timed_out);
      return;
    }
    auto it = inflight.find(id);
    if (it == inflight.end()) return;
    ++counters.timeouts;
    if (error_log.admit()) {
      spdlog::warn("redis {}:{}: check missed its {} ms deadline", settings.host, settings.port,
                   settings.command_timeout.count());
    }
    last_check_failure =
        "missed the " + std::to_string(settings.command_timeout.count()) + " ms deadline";
    complete(it, errc::store_timeout, {}, verdict::timed_out);
  }

  static void on_check_reply(detail::redis_connection* c, const redisReply* r,
                             void* privdata) noexcept {
    try {
      impl* self = owner(c);
      if (self != nullptr) {
        self->handle_check_reply(reinterpret_cast<std::uintptr_t>(privdata), r);
      }
    } catch (...) {
      // No exception crosses a connection callback.
    }
  }

  void handle_check_reply(std::uint64_t cid, const redisReply* r) {
    if (r != nullptr) heard();
    auto cit = commands.find(cid);
    if (cit == commands.end()) return;  // (a stop forgot it)
    command& c = cit->second;
    if (r == nullptr) {  // the connection went away with the call in flight: no replay
      last_check_failure = "connection lost";
      fail_command(cit, errc::store_error, verdict::failed);
      return;
    }
    // Every check of the call timed out already: its answer is late.
    if (std::none_of(c.checks.begin(), c.checks.end(),
                     [&](std::uint64_t id) { return inflight.contains(id); })) {
      counters.late_replies += c.checks.size();  // dropped, never reused
      commands.erase(cit);
      return;
    }
    if (r->type == REDIS_REPLY_ERROR) {
      call_failed(cit, r);
      return;
    }
    if (r->type != REDIS_REPLY_ARRAY) {
      malformed_reply(cit, 0, r->elements);
      return;
    }
    if (c.learns_clock && !c.stale_retried && r->elements >= 2 &&
        r->element[1]->type == REDIS_REPLY_INTEGER) {
      clock_offset_ms = r->element[1]->integer - c.sent_ms;  // the store time it decided at
    }
    // Each check's answer in turn, in the order they were sent.
    std::size_t at = 0;
    for (std::size_t k = 0; k < c.checks.size(); ++k) {
      const std::size_t available = at < r->elements ? r->elements - at : 0;
      auto it = inflight.find(c.checks[k]);
      if (it == inflight.end()) {
        // It missed its deadline meanwhile: its answer is late, skipped by its length.
        ++counters.late_replies;
        const bool refused = available > 0 && r->element[at]->type == REDIS_REPLY_INTEGER &&
                             r->element[at]->integer == -1;
        at += refused ? 2 : c.sizes[k];
        continue;
      }
      check_outcome out;
      std::size_t used = 0;
      const auto kind =
          detail::read_answer(r->element + at, available, it->second.shape, out, used);
      if (kind == detail::answer_kind::malformed ||
          (k + 1 == c.checks.size() && at + used != r->elements)) {
        malformed_reply(cit, k, r->elements);
        return;
      }
      at += used;
      if (kind == detail::answer_kind::refused) {
        ++counters.errors;
        ++counters.error_replies[static_cast<std::size_t>(error_kind::other)];
        if (error_log.admit()) {
          spdlog::warn(
              "redis {}:{}: the check script refused a check's arguments (in a batch of "
              "{})",
              settings.host, settings.port, c.checks.size());
        }
        complete(it, errc::store_error, {}, verdict::answered);
        continue;
      }
      ++counters.checks;
      wrong_node_streak = 0;
      if (logged_error) {
        spdlog::info("redis {}:{}: checks answered again (after {} replies)", settings.host,
                     settings.port, error_kind_name(*logged_error));
        logged_error.reset();
      }
      complete(it, {}, std::move(out), verdict::answered);
    }
    if (at != r->elements) {  // (the last check had missed its deadline)
      malformed_reply(cit, c.checks.size(), r->elements);
      return;
    }
    commands.erase(cit);
  }

  // A reply that does not fit its call: the checks not yet answered fail (store_protocol); a
  // batch's reply whose length does not match the batch also drops the connection (what
  // follows on it cannot be trusted to line up).
  void malformed_reply(std::unordered_map<std::uint64_t, command>::iterator cit, std::size_t from,
                       std::size_t elements) {
    const std::size_t size = cit->second.checks.size();
    if (error_log.admit()) {
      spdlog::warn("redis {}:{}: a reply of {} elements does not fit its call of {} check{}",
                   settings.host, settings.port, elements, size, size == 1 ? "" : "s");
    }
    for (std::size_t k = from; k < size; ++k) {
      if (auto it = inflight.find(cit->second.checks[k]); it != inflight.end()) {
        ++counters.errors;
        complete(it, errc::store_protocol, {}, verdict::answered);
      }
    }
    commands.erase(cit);
    if (size > 1 && ac != nullptr && state != conn_state::stopped) {
      drop_connection();  // the other calls in flight on it fail (NULL replies)
      schedule_reconnect();
    }
  }

  // An error reply to a call: the call did not decide its checks. A STALE answer to a timely
  // call or NOSCRIPT is re-sent once; otherwise each check still in flight fails with it.
  void call_failed(std::unordered_map<std::uint64_t, command>::iterator cit, const redisReply* r) {
    command& c = cit->second;
    const auto text = reply_text(r);
    const error_kind kind = classify_error_reply(text);
    if (settings.cluster_node && c.checks.size() > 1 &&
        text.find("non local key") != std::string_view::npos) {
      // A key of the batch is no longer served by this node (a slot moving): the script wrote
      // nothing (check_batch touches every check's key first). Each check goes again alone,
      // its keys declared, so the node answers MOVED or ASK for the ones that moved.
      spdlog::debug(
          "redis {}:{}: a batch of {} refused (a key no longer served here); sent "
          "again check by check",
          settings.host, settings.port, c.checks.size());
      const auto ids = std::move(c.checks);
      commands.erase(cit);
      for (const auto id : ids) {
        if (inflight.contains(id)) send_checks({&id, 1});
      }
      return;
    }
    count_error_reply(cit, kind, text);
    if (text.starts_with("STALE ")) {
      // The call is still in flight (a check's deadline has not passed), so it was timely:
      // only Redis's clock moving forward makes it stale. Learn the offset again from the time
      // the script saw and re-send it once under the new bound (the script wrote nothing).
      constexpr std::string_view mark = "now ";
      bool learned = false;
      if (const auto at = text.rfind(mark); at != std::string_view::npos) {
        std::int64_t now = 0;
        const auto digits = text.substr(at + mark.size());
        if (std::from_chars(digits.data(), digits.data() + digits.size(), now).ec == std::errc{}) {
          clock_offset_ms = now - c.sent_ms;
          learned = true;
        }
      }
      if (learned && !c.stale_retried && ac != nullptr && c.stale_arg < c.argv.size()) {
        c.stale_retried = true;
        counters.clock_resends += c.checks.size();
        c.argv[c.stale_arg] = std::to_string(stale_bound(c.sent_ms));
        if (clock_log.admit()) {
          spdlog::info(
              "redis {}:{}: the server's clock moved ({}); offset learned again, check re-sent",
              settings.host, settings.port, text);
        }
        if (send(cit->first, c)) return;
      }
      if (error_log.admit()) {
        spdlog::warn("redis {}:{}: check refused as stale by the server ({})", settings.host,
                     settings.port, text);
      }
      fail_command(cit, errc::store_error, verdict::answered);
      return;
    }
    if (kind == error_kind::noscript && !c.retried && ac != nullptr) {
      // The call did not run (NOSCRIPT, or "Function not found" after FUNCTION FLUSH): load
      // the check (unless a load was already sent after this call, which the pipeline orders
      // before the re-send) and re-send it once.
      c.retried = true;
      if (c.loads_at_send == loads_sent) send_script_load(tag_reload);
      if (send(cit->first, c)) return;
    }
    const verdict v = error_reply(kind, text);  // (counts one error, unless a redirection)
    const bool counted = kind != error_kind::moved && kind != error_kind::ask;
    const auto ids = std::move(c.checks);
    commands.erase(cit);
    bool first = true;
    for (const auto id : ids) {
      if (auto it = inflight.find(id); it != inflight.end()) {
        if (!first && counted) ++counters.errors;
        first = false;
        complete(it, errc::store_error, {}, v);
      }
    }
    if (is_wrong_node(kind)) wrong_node();
  }

  // An error reply counts once per check it answered, by its kind; a cluster check receives its
  // text.
  void count_error_reply(std::unordered_map<std::uint64_t, command>::iterator cit, error_kind kind,
                         std::string_view text) {
    for (const auto id : cit->second.checks) {
      if (auto it = inflight.find(id); it != inflight.end()) {
        ++counters.error_replies[static_cast<std::size_t>(kind)];
        if (it->second.error_text) it->second.error_text->assign(text.substr(0, 200));
      }
    }
  }

  // An error reply that fails a command (a check or a read): counted and logged; how it
  // counts for the breaker — failed when it says the server cannot serve (unhealthy_error).
  verdict error_reply(error_kind kind, std::string_view text) {
    // A cluster redirection is an answer, not a failure: the cluster store follows it.
    if (kind == error_kind::moved || kind == error_kind::ask) return verdict::answered;
    ++counters.errors;
    log_error_state(kind, text);
    if (!unhealthy_error(text)) return verdict::answered;
    last_check_failure = std::string(text.substr(0, 120));
    return verdict::failed;
  }

  // One line per change of the error replies' kind (and one when checks are answered again),
  // not one per failed check: an outage fails every check.
  void log_error_state(error_kind kind, std::string_view text) {
    if (logged_error == kind) return;
    logged_error = kind;
    spdlog::warn(
        "redis {}:{}: checks fail: {} (the routes' on_store_failure applies; repeats "
        "not logged)",
        settings.host, settings.port, text.substr(0, 200));
  }

  // READONLY, LOADING or MASTERDOWN: this connection reached a node that cannot serve checks
  // (a demoted primary, one still loading its dataset, a replica without a primary). The
  // address may lead elsewhere now (a DNS name, a proxy or a virtual IP that followed the
  // failover): drop the connection and make it again at once, through name resolution, so
  // the new primary answers within a second. The check fails (the route's failure policy);
  // the breaker counts it.
  void wrong_node() {
    if (ac == nullptr || state == conn_state::stopped) return;  // already dropped (the breaker)
    ++counters.wrong_node_drops;
    drop_connection();  // the other checks in flight on it fail (NULL replies)
    // The first drop reconnects at once; while the address keeps leading to a node that
    // cannot serve (the failover is not over), the backoff grows (to 500 ms) as for any
    // failed attempt, and the reconnections are logged at debug level.
    if (++wrong_node_streak == 1) backoff = backoff_first;
    schedule_reconnect();
  }

  // Completes and forgets a check, then tells the breaker (last: opening it may drop the
  // connection, which completes other checks).
  void complete(std::unordered_map<std::uint64_t, pending>::iterator it, error_code ec,
                check_outcome out, verdict v) {
    check_handler h = std::move(it->second.handler);
    const bool probe = it->second.probe;
    inflight.erase(it);  // its deadline entry is dropped when it reaches the queue's front
    finish(std::move(h), ec, std::move(out));
    breaker_record(v, probe);
  }

  // Never resumes the caller inline (we may be inside a connection callback or the initiation).
  void finish(check_handler h, error_code ec, check_outcome out) { h.post(ex, ec, std::move(out)); }

  void stop() {
    state = conn_state::stopped;
    backoff_timer.cancel();
    connect_timer.cancel();
    idle_timer.cancel();
    deadline_timer.cancel();
    deadlines.clear();
    deadline_armed = false;
    if (locator) locator->stop();
    locating = false;
    drop_connection();  // NULL replies complete the checks in flight with store_error
    commands.clear();
    queued.clear();
    while (!inflight.empty()) {
      ++counters.errors;
      complete(inflight.begin(), errc::store_unavailable, {}, verdict::not_sent);
    }
    while (!reads.empty()) {
      complete_read(reads.begin(), errc::store_unavailable, std::nullopt, verdict::not_sent);
    }
  }

  // ---- reads (HGET: the plan directory) -------------------------------------------------------

  void start_read(std::string hash, std::string field, read_handler h) {
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

  static void on_read_reply(detail::redis_connection* c, const redisReply* r,
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

  void handle_read_reply(std::uint64_t id, const redisReply* r) {
    if (r != nullptr) heard();
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

  void complete_read(std::unordered_map<std::uint64_t, pending_read>::iterator it, error_code ec,
                     std::optional<std::string> v, verdict verdict_of) {
    read_handler h = std::move(it->second.handler);
    const bool probe = it->second.probe;
    reads.erase(it);
    h.post(ex, ec, std::move(v));
    breaker_record(verdict_of, probe);
  }
};

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
