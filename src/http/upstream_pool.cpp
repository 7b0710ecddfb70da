// SPDX-License-Identifier: Apache-2.0
// Per-worker keep-alive pool of upstream connections.
//
// One exchange = take an idle connection (or connect), write the request, read the response,
// give the connection back if it can carry another request (RFC 9112 §9.3). Deadlines:
// connecting has `upstream.connect_timeout` (errc::upstream_unreachable), the whole exchange
// has `upstream.timeout` from the moment send() starts (errc::upstream_timeout).
//
// Stale connections: an upstream may close an idle connection at any time, and the close
// races with our next request on it (RFC 9112 §9.3.1). Three defences, cheapest first: idle
// connections expire a little before the upstream's advertised `Keep-Alive: timeout`; an idle
// connection keeps a read outstanding (idle_watch), so its EOF, reset or unexpected bytes
// complete that read and the connection leaves the pool at once (no check before reuse; the
// read's start costs one `recv` that finds nothing — Asio 1.81's speculative read — and the
// same read then receives the next response, so none fails after the request is sent); and a
// request that failed on a reused connection before any response byte arrived is sent again
// once on a fresh connection when nothing of it had been sent or its method is idempotent
// (RFC 9110 §9.2.2) — never a POST or PATCH once bytes of it went out, which the upstream
// may have acted on.
//
// HTTPS: the TLS handshake follows the TCP connect within the same budget. Its failures are
// reported with the reason OpenSSL gives: for a certificate that does not verify, the
// verification's own message (X509_verify_cert_error_string: "hostname mismatch",
// "unable to get local issuer certificate", "certificate has expired"), which the 502's
// problem body carries so that an operator sees at once why the upstream was refused. The
// idle check's peek reads raw bytes: a TLS close_notify (or any record) waiting on an idle
// connection makes it unusable too, which it is.

#include "sluice/http/upstream_pool.hpp"

#include "sluice/text_writer.hpp"

#include "sluice/errc.hpp"
#include "sluice/http/headers.hpp"
#include "sluice/http/tls_context.hpp"
#include "sluice/log_throttle.hpp"

#include <openssl/ssl.h>
#include <openssl/x509_vfy.h>
#include <spdlog/spdlog.h>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/connect.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/string.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/rfc7230.hpp>
#include <boost/beast/http/write.hpp>

#include <array>
#include <atomic>
#include <charconv>
#include <cstring>
#include <deque>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace sluice::http {

/// The read an idle pooled connection keeps outstanding, into a small buffer of its own (the
/// read may outlive the lease that took the connection: a closed connection's read completes
/// later). Reused for every idle period of its connection.
struct idle_watch {
  /// Bytes the outstanding read may take: a response head and a small body fit; the rest of
  /// a larger response is read into the lease's buffer.
  static constexpr std::size_t buffer_size = 4096;
  std::unique_ptr<char[]> data = std::make_unique<char[]>(buffer_size);
  std::string key;         ///< the pool key of the connection (to find it when dropped)
  bool pending = false;    ///< a read is outstanding and its result not yet taken
  bool leased = false;     ///< a request took the connection: the read is its response's
  bool completed = false;  ///< the read completed (ec, n)
  boost::system::error_code ec;
  std::size_t n = 0;
  /// first_read() waiting for the read (its coroutine's completion handler).
  struct waiting {
    virtual ~waiting() = default;
    virtual void complete(boost::system::error_code ec, std::size_t n) = 0;
  };
  template <class Handler>
  struct waiting_for final : waiting {
    explicit waiting_for(Handler h) : handler(std::move(h)) {}
    void complete(boost::system::error_code ec, std::size_t n) override {
      std::move(handler)(ec, n);
    }
    Handler handler;
  };
  std::unique_ptr<waiting> waiter;
};

namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = beast::http;
using tcp = asio::ip::tcp;
using error_code = boost::system::error_code;
using steady = std::chrono::steady_clock;

constexpr auto use_tuple = asio::as_tuple(asio::use_awaitable);

/// Idle lifetime when the upstream does not advertise one.
constexpr std::chrono::milliseconds default_idle_lifetime{15000};
/// Margin taken off an advertised `Keep-Alive: timeout` (the close races with our reuse).
constexpr std::chrono::milliseconds idle_margin{500};

struct idle_connection {
  timed_socket stream;
  beast::flat_buffer buffer;
  steady::time_point expires;
  std::shared_ptr<idle_watch> watch;  ///< its outstanding read
};

/// Stray bytes on idle connections: logged at most once a second.
sluice::log_throttle stray_log;

/// The pool's state; exchanges in flight hold it by shared_ptr.
struct pool_state {
  pool_state(asio::any_io_executor e, std::size_t max) : ex(std::move(e)), max_idle(max) {}

  asio::any_io_executor ex;
  std::size_t max_idle;
  std::uint64_t body_limit = upstream_pool::default_response_body_limit;
  std::unordered_map<std::string, std::deque<idle_connection>> idle;  // back = most recent
  std::atomic<std::uint64_t> connects{0}, reuses{0}, failures{0};
  std::atomic<std::uint64_t> retries_not_sent{0}, retries_idempotent{0}, stale_failures{0};
  std::atomic<std::uint64_t> idle_closed{0}, idle_stray{0};
  tls_counters tls;
  /// Connections in `idle` (a gauge the scraper reads; written here only).
  std::atomic<std::int64_t> idle_now{0};
  void count_idle(std::int64_t d) {
    idle_now.store(idle_now.load(std::memory_order_relaxed) + d, std::memory_order_relaxed);
  }

  /// Pops the most recently pooled connection still usable, closing expired ones (a
  /// connection the upstream closed has left the pool already: its read completed).
  bool take_idle(upstream_lease& lease) {
    auto it = idle.find(lease.key);
    if (it == idle.end()) return false;
    auto& stack = it->second;
    const auto now = steady::now();
    while (!stack.empty()) {
      idle_connection c = std::move(stack.back());
      stack.pop_back();
      count_idle(-1);
      if (c.expires > now && !c.watch->completed) {
        c.watch->leased = true;
        lease.stream.emplace(std::move(c.stream));
        lease.buffer = std::move(c.buffer);
        lease.watch = std::move(c.watch);
        return true;
      }
      c.stream.close();  // its read completes with operation_aborted
    }
    return false;
  }

  /// Pools the connection of `lease` (at most `limit` per key, the oldest closed first);
  /// returns it, or null when it was closed instead (no room, or a read still pending on it).
  idle_connection* put_idle(upstream_lease& lease, steady::time_point expires, std::size_t limit) {
    if (limit == 0 || (lease.watch && lease.watch->pending)) {
      lease.stream->close();
      lease.stream.reset();
      return nullptr;
    }
    auto& stack = idle[lease.key];
    if (stack.size() >= limit) {
      stack.front().stream.close();  // the oldest is the likeliest to be stale
      stack.pop_front();
      count_idle(-1);
    }
    lease.stream->expires_never();
    lease.buffer.clear();
    if (!lease.watch) {
      lease.watch = std::make_shared<idle_watch>();
      lease.watch->key = lease.key;
    }
    stack.push_back(
        {std::move(*lease.stream), std::move(lease.buffer), expires, std::move(lease.watch)});
    count_idle(1);
    lease.stream.reset();
    return &stack.back();
  }

  /// A completed read of an idle connection: the upstream closed it or sent bytes nobody
  /// asked for (a late part of a response that lied about its length, garbage): either way
  /// the connection is unusable and leaves the pool (when it is still there: a connection
  /// closed by the pool itself completes its read later).
  void drop_idle(const idle_watch& w) {
    auto it = idle.find(w.key);
    if (it == idle.end()) return;
    auto& stack = it->second;
    for (auto c = stack.begin(); c != stack.end(); ++c) {
      if (c->watch.get() != &w) continue;
      if (w.n > 0) {
        idle_stray.fetch_add(1, std::memory_order_relaxed);
        std::uint64_t suppressed = 0;
        if (stray_log.admit(suppressed)) {
          spdlog::warn(
              "upstream {}: {} bytes arrived on an idle pooled connection; connection dropped "
              "({} similar lines suppressed)",
              w.key, w.n, suppressed);
        }
      } else {
        idle_closed.fetch_add(1, std::memory_order_relaxed);
      }
      c->stream.close();
      stack.erase(c);
      count_idle(-1);
      return;
    }
  }
};

using state_ptr = std::shared_ptr<pool_state>;

/// Starts the outstanding read of a connection that was just pooled (the back of its stack).
/// Its start costs one speculative `recv` (Asio's reactor tries every new read at once); then
/// it waits in epoll until the upstream sends or closes.
void watch_idle(const state_ptr& st, idle_connection& c) {
  auto& w = *c.watch;
  w.pending = true;
  w.leased = false;
  w.completed = false;
  w.ec = {};
  w.n = 0;
  c.stream.async_read_some(
      asio::buffer(w.data.get(), idle_watch::buffer_size),
      [watch = c.watch, pool = std::weak_ptr<pool_state>(st)](error_code ec, std::size_t n) {
        watch->completed = true;
        watch->ec = ec;
        watch->n = n;
        if (watch->leased) {
          if (watch->waiter) {
            auto waiter = std::move(watch->waiter);
            waiter->complete(ec, n);
          }
          return;
        }
        if (auto s = pool.lock()) s->drop_idle(*watch);
      });
}

/// Pools `lease` (put_idle) and starts its connection's outstanding read.
void pool_connection(const state_ptr& st, upstream_lease& lease, steady::time_point expires,
                     std::size_t limit) {
  if (auto* c = st->put_idle(lease, expires, limit)) watch_idle(st, *c);
}

/// first_read(): waits for the outstanding read of the leased connection, takes its bytes.
asio::awaitable<error_code> take_watched_read(upstream_lease& lease) {
  auto w = lease.watch;
  if (!w || !w->pending) co_return error_code{};
  if (!w->completed) {
    co_await asio::async_initiate<decltype(use_tuple), void(error_code, std::size_t)>(
        [&w](auto handler) {
          using waiting = idle_watch::waiting_for<std::decay_t<decltype(handler)>>;
          w->waiter = std::make_unique<waiting>(std::move(handler));
        },
        use_tuple);
  }
  w->pending = false;
  if (w->n > 0) {
    auto space = lease.buffer.prepare(w->n);
    std::memcpy(space.data(), w->data.get(), w->n);
    lease.buffer.commit(w->n);
  }
  co_return w->ec;
}

using state_ptr = std::shared_ptr<pool_state>;

/// The pool key of `up` over `tls`: `host:port`, or `host:port tls#N`.
void pool_key(std::string& key, const config::upstream& up, const client_tls* tls) {
  key.clear();
  text_writer w(key, up.host.size() + 48);
  w.put(up.host).put(':').number(std::uint64_t{up.port});
  if (tls) w.put(" tls#").number(tls->id());
}

/// Why a client handshake failed, in words: the certificate verification's message when
/// that is what failed, else OpenSSL's (or the OS's) error.
std::string handshake_detail(timed_socket& stream, const error_code& ec, tls_failure why) {
  if (why == tls_failure::timeout) return "the handshake did not complete in time";
  if (why == tls_failure::bad_certificate || why == tls_failure::name_mismatch) {
    const long v = SSL_get_verify_result(stream.native_tls());
    return std::string("its certificate was not accepted: ") + X509_verify_cert_error_string(v);
  }
  return ec.message();
}

/// The TLS handshake of a connected `stream` as a client of `tls`, before `budget` is over.
/// Fills lease.ec and lease.detail on failure.
asio::awaitable<bool> handshake(state_ptr st, timed_socket& stream,
                                std::shared_ptr<const client_tls> tls,
                                std::chrono::milliseconds budget, upstream_lease& lease) {
  try {
    auto& context = tls->context();
    stream.start_tls(context, tls);
  } catch (const std::exception& e) {  // SSL_new failed: out of memory
    lease.ec = errc::upstream_tls;
    lease.detail = e.what();
    co_return false;
  }
  if (!tls->prepare(stream.native_tls())) {
    lease.ec = errc::upstream_tls;
    lease.detail = "the host name could not be set for SNI and verification";
    co_return false;
  }
  stream.expires_after(budget);
  auto [ec0] = co_await stream.async_handshake(asio::ssl::stream_base::client, use_tuple);
  stream.expires_never();
  if (!ec0) {
    st->tls.succeed();
    co_return true;
  }
  const auto ec = stream.timeout_error(ec0);
  const auto why = classify_tls_failure(ec, SSL_get_verify_result(stream.native_tls()));
  st->tls.fail(why);
  lease.ec = errc::upstream_tls;
  lease.detail = handshake_detail(stream, ec, why);
  co_return false;
}

/// Connects to the upstream within min(connect_timeout, time left before `deadline`), and
/// over `tls` (when not null) makes the TLS handshake within what is left of that budget.
asio::awaitable<void> connect(state_ptr st, const config::upstream& up, steady::time_point deadline,
                              upstream_lease& lease, std::shared_ptr<const client_tls> tls) {
  const auto began = steady::now();
  auto budget = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - steady::now());
  if (up.connect_timeout < budget) budget = up.connect_timeout;
  if (budget.count() <= 0) {
    lease.ec = errc::upstream_timeout;
    co_return;
  }

  std::vector<tcp::endpoint> endpoints;
  error_code ec;
  const auto address = asio::ip::make_address(up.host, ec);
  if (!ec) {
    endpoints.emplace_back(address, up.port);
  } else {
    // The resolver has no deadline of its own: a timer cancels it.
    auto resolver = std::make_shared<tcp::resolver>(st->ex);
    asio::steady_timer timer(st->ex);
    timer.expires_after(budget);
    timer.async_wait([resolver](error_code tec) {
      if (!tec) resolver->cancel();
    });
    auto [rec, results] =
        co_await resolver->async_resolve(up.host, std::to_string(up.port), use_tuple);
    timer.cancel();
    if (rec) {
      lease.ec = errc::upstream_unreachable;
      lease.cause = "resolving " + up.host + ": " + rec.message();
      co_return;
    }
    for (const auto& r : results) endpoints.push_back(r.endpoint());
    budget = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - steady::now());
    if (up.connect_timeout < budget) budget = up.connect_timeout;
  }

  timed_socket stream(st->ex);
  stream.expires_after(budget);
  auto [cec, ep] = co_await asio::async_connect(stream.socket(), endpoints, use_tuple);
  (void)ep;
  const bool timed_out = stream.timed_out();
  stream.expires_never();
  if (cec) {
    lease.ec = errc::upstream_unreachable;
    lease.cause = timed_out ? "no connection within connect_timeout" : cec.message();
    co_return;
  }
  stream.socket().set_option(tcp::no_delay(true), ec);
  if (tls) {
    // The handshake gets what the connect left of the budget (connect_timeout from the
    // start of connect(), or less before `deadline`).
    auto limit = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - steady::now());
    const auto spent = std::chrono::duration_cast<std::chrono::milliseconds>(steady::now() - began);
    limit = std::min(limit, up.connect_timeout - spent);
    if (limit.count() <= 0) {
      lease.ec = errc::upstream_timeout;
      co_return;
    }
    if (!co_await handshake(st, stream, std::move(tls), limit, lease)) co_return;
  }
  lease.stream.emplace(std::move(stream));
}

bool reuse(const state_ptr& st, const config::upstream& up, upstream_lease& lease,
           const client_tls* tls) {
  pool_key(lease.key, up, tls);
  lease.max_idle = up.max_idle;
  if (!st->take_idle(lease)) return false;
  lease.reused = true;
  st->reuses.fetch_add(1, std::memory_order_relaxed);
  return true;
}

asio::awaitable<upstream_lease> acquire(state_ptr st, const config::upstream& up,
                                        steady::time_point deadline, bool fresh,
                                        std::shared_ptr<const client_tls> tls) {
  upstream_lease lease;
  if (fresh) {
    pool_key(lease.key, up, tls.get());
    lease.max_idle = up.max_idle;
  } else if (reuse(st, up, lease, tls.get())) {
    co_return lease;
  }
  co_await connect(st, up, deadline, lease, std::move(tls));
  if (lease.stream) st->connects.fetch_add(1, std::memory_order_relaxed);
  co_return lease;
}

/// Maps an exchange error to sluice's errors.
errc classify(const error_code& ec) {
  if (ec == beast::error::timeout) return errc::upstream_timeout;
  return errc::upstream_protocol;
}

/// The whole-message exchange of send(): write `req`, read the whole response.
asio::awaitable<boost::system::result<response>> exchange(state_ptr st, config::upstream up,
                                                          request req, std::string client_address) {
  const auto deadline = steady::now() + up.timeout;
  const bool head_request = req.method() == bhttp::verb::head;
  const bool idempotent = is_idempotent(req.method());
  const bool has_body = !req.body().empty();
  std::string head;
  render_upstream_request(head, req.base(),
                          upstream_hop{req.target(), client_address,
                                       has_body ? body_framing::content_length : body_framing::none,
                                       req.body().size(), false, &up});
  const std::array<asio::const_buffer, 2> message{asio::buffer(head), asio::buffer(req.body())};

  for (int attempt = 0;; ++attempt) {
    upstream_lease lease = co_await acquire(st, up, deadline, /*fresh=*/attempt > 0, nullptr);
    if (!lease) {
      st->failures.fetch_add(1, std::memory_order_relaxed);
      co_return lease.ec;
    }
    auto& stream = *lease.stream;
    stream.expires_after(
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - steady::now()));
    auto [wec, wn] = co_await asio::async_write(stream, message, use_tuple);

    error_code failure = stream.timeout_error(wec);
    bool got_bytes = false;
    std::optional<response> res;
    bool reusable = false;
    if (!failure) {
      failure = stream.timeout_error(co_await take_watched_read(lease));
      if (failure == asio::error::eof) failure = bhttp::error::end_of_stream;
      got_bytes = lease.buffer.size() > 0;
    }
    if (!failure) {
      for (;;) {
        bhttp::response_parser<bhttp::string_body> parser;
        parser.header_limit(upstream_pool::response_header_limit);
        parser.body_limit(st->body_limit);
        parser.skip(head_request);  // a response to HEAD has no content (RFC 9110 §9.3.2)
        stream.expires_after(
            std::chrono::duration_cast<std::chrono::milliseconds>(deadline - steady::now()));
        auto [rec0, rn] = co_await bhttp::async_read(stream, lease.buffer, parser, use_tuple);
        (void)rn;
        const auto rec = stream.timeout_error(rec0);
        got_bytes = got_bytes || parser.got_some() || lease.buffer.size() > 0;
        if (rec) {
          failure = rec;
          break;
        }
        const unsigned status = parser.get().result_int();
        if (status / 100 == 1) {
          if (status == 101) {  // send() never asks for an upgrade
            failure = bhttp::error::bad_status;
            break;
          }
          continue;  // interim response (100, 103): the final one follows
        }
        reusable = parser.get().keep_alive() && !parser.need_eof() && lease.buffer.size() == 0;
        res.emplace(parser.release());
        break;
      }
    }

    if (!failure) {
      if (reusable) {
        pool_connection(
            st, lease,
            steady::now() + upstream_pool::idle_lifetime((*res)[bhttp::field::keep_alive]),
            st->max_idle);
      } else {
        stream.close();
      }
      co_return std::move(*res);
    }

    stream.close();
    if (lease.reused && !got_bytes && attempt == 0 && failure != beast::error::timeout &&
        (wn == 0 || idempotent)) {
      // A stale pooled connection: the upstream closed it while our request was on the way.
      (wn == 0 ? st->retries_not_sent : st->retries_idempotent)
          .fetch_add(1, std::memory_order_relaxed);
      continue;
    }
    if (lease.reused && !got_bytes && failure != beast::error::timeout) {
      st->stale_failures.fetch_add(1, std::memory_order_relaxed);
    }
    st->failures.fetch_add(1, std::memory_order_relaxed);
    co_return classify(failure);
  }
}

}  // namespace

struct upstream_pool::impl : pool_state {
  using pool_state::pool_state;
};

upstream_pool::upstream_pool(asio::any_io_executor ex, std::size_t max_idle_per_upstream)
    : impl_(std::make_shared<impl>(std::move(ex), max_idle_per_upstream)) {}

upstream_pool::~upstream_pool() = default;

void upstream_pool::set_response_body_limit(std::uint64_t bytes) {
  impl_->body_limit = bytes;
}

asio::awaitable<boost::system::result<response>> upstream_pool::send(
    const config::upstream& up, request req, std::string_view client_address) {
  return exchange(impl_, up, std::move(req), std::string(client_address));
}

asio::awaitable<upstream_lease> upstream_pool::acquire(const config::upstream& up,
                                                       steady::time_point deadline, bool fresh,
                                                       std::shared_ptr<const client_tls> tls) {
  return http::acquire(impl_, up, deadline, fresh, std::move(tls));
}

bool upstream_pool::try_reuse(const config::upstream& up, upstream_lease& lease,
                              const client_tls* tls) {
  return reuse(impl_, up, lease, tls);
}

const tls_counters& upstream_pool::tls_stats() const {
  return impl_->tls;
}

void upstream_pool::release(upstream_lease lease, std::chrono::milliseconds idle_for) {
  if (!lease.stream) return;
  const std::size_t limit = lease.max_idle;
  pool_connection(impl_, lease, steady::now() + idle_for, limit);
}

void upstream_pool::count_failure() {
  impl_->failures.fetch_add(1, std::memory_order_relaxed);
}
void upstream_pool::count_retry(retry_reason why) {
  (why == retry_reason::not_sent ? impl_->retries_not_sent : impl_->retries_idempotent)
      .fetch_add(1, std::memory_order_relaxed);
}
void upstream_pool::count_stale_failure() {
  impl_->stale_failures.fetch_add(1, std::memory_order_relaxed);
}

asio::awaitable<error_code> upstream_pool::first_read(upstream_lease& lease) {
  return take_watched_read(lease);
}

std::chrono::milliseconds upstream_pool::idle_lifetime(std::string_view keep_alive) {
  // Keep-Alive is a comma-separated list of name=value pairs: "timeout=5, max=100".
  std::string_view v = keep_alive;
  while (!v.empty()) {
    const auto comma = v.find(',');
    std::string_view item = v.substr(0, comma);
    v = comma == std::string_view::npos ? std::string_view{} : v.substr(comma + 1);
    while (!item.empty() && (item.front() == ' ' || item.front() == '\t')) item.remove_prefix(1);
    if (item.size() > 8 && beast::iequals(item.substr(0, 8), "timeout=")) {
      std::int64_t seconds = 0;
      const auto digits = item.substr(8);
      const auto [p, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), seconds);
      (void)p;
      if (ec == std::errc{} && seconds >= 0) {
        const auto advertised = std::chrono::milliseconds(seconds * 1000);
        return advertised > idle_margin ? advertised - idle_margin : std::chrono::milliseconds(0);
      }
    }
  }
  return default_idle_lifetime;
}

pool_stats upstream_pool::stats() const {
  pool_stats s;
  s.connects = impl_->connects.load(std::memory_order_relaxed);
  s.reuses = impl_->reuses.load(std::memory_order_relaxed);
  s.failures = impl_->failures.load(std::memory_order_relaxed);
  s.retries_not_sent = impl_->retries_not_sent.load(std::memory_order_relaxed);
  s.retries_idempotent = impl_->retries_idempotent.load(std::memory_order_relaxed);
  s.stale_failures = impl_->stale_failures.load(std::memory_order_relaxed);
  s.idle_closed = impl_->idle_closed.load(std::memory_order_relaxed);
  s.idle_stray = impl_->idle_stray.load(std::memory_order_relaxed);
  s.idle = static_cast<std::uint64_t>(impl_->idle_now.load(std::memory_order_relaxed));
  return s;
}

std::size_t upstream_pool::idle_count() const {
  std::size_t n = 0;
  for (const auto& [key, stack] : impl_->idle) n += stack.size();
  return n;
}

}  // namespace sluice::http
