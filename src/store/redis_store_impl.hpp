// SPDX-License-Identifier: Apache-2.0
#pragma once
// Private to the store room: redis_store's state and its steps, declared once and defined in
// redis_store.cpp (the connection: where to, set-up, the idle probe's verdict, loss; the plan
// directory's reads; the public class) and redis_store_checks.cpp (checks: batches, deadlines,
// replies, the breaker). Everything runs on the store's executor; nothing here locks.

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

using detail::reply_text;

// Error replies that say the server cannot serve checks right now (as opposed to an error of
// this one check, such as WRONGTYPE from a colliding key): they count towards the breaker.
// Redis error prefixes: https://redis.io/docs/reference/protocol-spec/#simple-errors
inline bool unhealthy_error(std::string_view text) {
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
  // The connection's idle probe (redis_connection::options::idle_probe): a PING after this
  // long without a reply; unanswered within the command timeout, the store counts as not
  // connected (stats, readiness) until anything is heard again.
  static constexpr std::chrono::milliseconds idle_probe_every{1000};
  // The checks' deadlines, in send order (= deadline order: one timeout for all), with one
  // timer armed for the first check still in flight. No timer (and no timer system call) per
  // check: under load it fires about once per timeout.
  asio::steady_timer deadline_timer;
  std::deque<std::pair<std::chrono::steady_clock::time_point, std::uint64_t>> deadlines;
  bool deadline_armed = false;
  // Sentinel mode (settings.sentinel): where to connect is asked of the Sentinels before every
  // attempt; `settings.host`/`port` then hold the master last named (for the attempt and the
  // log lines). Made at the first connect (it needs weak_from_this).
  std::unique_ptr<detail::sentinel_locator> locator;
  bool locating = false;
  std::string last_failure;  // reason of the last failed connection attempt ("" after success)
  // failure()'s text, for other threads: the last failed attempt until the next success.
  mutable std::mutex failure_mutex;
  std::string failure_text;
  void set_failure(std::string text);
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

  static std::int64_t steady_ms();

  // The stale bound (Redis TIME ms) of a check sent at steady time `sent_ms`: past it, the
  // gateway has given up on the check (its deadline) by a margin.
  std::int64_t stale_bound(std::int64_t sent_ms) const;

  // ---- connection -----------------------------------------------------------------------------

  // A connection attempt starts with "where to connect": the configured host:port, or the
  // master the Sentinels name (sentinel_locator.hpp).
  void connect();

  void locate_master();

  // The lookup's outcome (the locator logs each change of it): connect to the master, or stay
  // not connected and ask again after the backoff.
  void master_located(detail::sentinel_locator::located l);

  // A Sentinel announced `+switch-master` for our master: leave the old one now (checks in
  // flight on it fail, the routes' failure policy answers them) rather than at its first
  // READONLY or when the Sentinels reconfigure it; the next attempt goes to the new one.
  void master_switched(std::string host, std::uint16_t port);

  // A failed connection attempt: counted, logged once per distinct reason until a success.
  void connect_failed(std::string reason);

  // An attempt (redis_connection: resolution, connect, TLS, AUTH, all under the connect
  // timeout), with the set-up commands queued behind it.
  void connect_to();

  // Queues the load of the check: FUNCTION LOAD REPLACE of the library, or SCRIPT LOAD of the
  // script once functions were refused on this connection.
  void send_script_load(std::uintptr_t tag);

  // Closes the connection deliberately (connect timeout, setup failure, stop): every queued
  // command is answered with a NULL reply (after the reply being handled, from inside one).
  void drop_connection();

  // Bookkeeping of a connection that is gone (or going): not ready, checks refused at once.
  void lost();

  void schedule_reconnect();

  // `target`: the check function's name or the script's SHA1 ("" for the plan directory).
  void ready(std::string target);

  static impl* owner(const detail::redis_connection* c) { return static_cast<impl*>(c->data()); }

  static void on_connect(detail::redis_connection* c, bool ok, const std::string& why) noexcept;

  // The idle probe's verdict on the connection: not connected while stalled.
  static void on_stall(detail::redis_connection* c, bool stalled) noexcept;

  static void on_disconnect(detail::redis_connection* c, const std::string& why) noexcept;

  static void on_setup_reply(detail::redis_connection* c, const redisReply* r,
                             void* privdata) noexcept;

  // ---- checks ---------------------------------------------------------------------------------

  // ---- breaker -------------------------------------------------------------------------------
  // O(1) per check; reads the clock only while open.

  void mirror_breaker() { counters.breaker = breaker.state(); }

  // Whether a check may go to the server; `probe` is set when it is the half-open probe.
  bool breaker_allows(bool& probe);

  // The breaker opened (or opened again after a failed probe) because of a check's `why`.
  void breaker_opened(verdict why, bool from_closed);

  // Told the verdict of every check that left start_check; `probe`: it was the probe.
  void breaker_record(verdict v, bool probe);

  void start_check(limiter::check_request req, check_handler handler,
                   const routed_options& how = {}, std::shared_ptr<std::string> error_text = {});

  // Sends the queued checks, at most max_batch per call, in the order they were started.
  void flush();

  // Sends `ids` (checks still in flight, not yet sent) as one call: alone, today's check; or a
  // batch (lua_scripts.hpp). Fails them at once when there is no connection to send on.
  void send_checks(std::span<const std::uint64_t> ids);

  // Fails every check of a call still in flight, and forgets the call.
  void fail_command(std::unordered_map<std::uint64_t, command>::iterator cit, error_code ec,
                    verdict v);

  bool send(std::uint64_t id, command& c);

  // Queues a deadline. Checks share one timeout, so the queue is in send order; only a cluster
  // retry (routed_options::deadline, the rest of its check's deadline) may come earlier than
  // the last one queued: it is inserted in order, and the timer re-armed when it is first.
  void add_deadline(std::chrono::steady_clock::time_point at, std::uint64_t id);

  // Arms the timer for the first check still in flight (answered ones are dropped from the
  // front); disarmed when none is.
  void arm_deadline();

  // The timer fired: every check in flight whose deadline has passed fails (on_deadline).
  void deadlines_passed();

  void on_deadline(std::uint64_t id);

  static void on_check_reply(detail::redis_connection* c, const redisReply* r,
                             void* privdata) noexcept;

  void handle_check_reply(std::uint64_t cid, const redisReply* r);

  // A reply that does not fit its call: the checks not yet answered fail (store_protocol); a
  // batch's reply whose length does not match the batch also drops the connection (what
  // follows on it cannot be trusted to line up).
  void malformed_reply(std::unordered_map<std::uint64_t, command>::iterator cit, std::size_t from,
                       std::size_t elements);

  // An error reply to a call: the call did not decide its checks. A STALE answer to a timely
  // call or NOSCRIPT is re-sent once; otherwise each check still in flight fails with it.
  void call_failed(std::unordered_map<std::uint64_t, command>::iterator cit, const redisReply* r);

  // An error reply counts once per check it answered, by its kind; a cluster check receives its
  // text.
  void count_error_reply(std::unordered_map<std::uint64_t, command>::iterator cit, error_kind kind,
                         std::string_view text);

  // An error reply that fails a command (a check or a read): counted and logged; how it
  // counts for the breaker — failed when it says the server cannot serve (unhealthy_error).
  verdict error_reply(error_kind kind, std::string_view text);

  // One line per change of the error replies' kind (and one when checks are answered again),
  // not one per failed check: an outage fails every check.
  void log_error_state(error_kind kind, std::string_view text);

  // READONLY, LOADING or MASTERDOWN: this connection reached a node that cannot serve checks
  // (a demoted primary, one still loading its dataset, a replica without a primary). The
  // address may lead elsewhere now (a DNS name, a proxy or a virtual IP that followed the
  // failover): drop the connection and make it again at once, through name resolution, so
  // the new primary answers within a second. The check fails (the route's failure policy);
  // the breaker counts it.
  void wrong_node();

  // Completes and forgets a check, then tells the breaker (last: opening it may drop the
  // connection, which completes other checks).
  void complete(std::unordered_map<std::uint64_t, pending>::iterator it, error_code ec,
                check_outcome out, verdict v);

  // Never resumes the caller inline (we may be inside a connection callback or the initiation).
  void finish(check_handler h, error_code ec, check_outcome out) { h.post(ex, ec, std::move(out)); }

  void stop();

  // ---- reads (HGET: the plan directory) -------------------------------------------------------

  void start_read(std::string hash, std::string field, read_handler h);

  static void on_read_reply(detail::redis_connection* c, const redisReply* r,
                            void* privdata) noexcept;

  void handle_read_reply(std::uint64_t id, const redisReply* r);

  void complete_read(std::unordered_map<std::uint64_t, pending_read>::iterator it, error_code ec,
                     std::optional<std::string> v, verdict verdict_of);
};

}  // namespace sluice::store
