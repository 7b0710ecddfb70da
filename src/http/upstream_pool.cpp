// Per-worker keep-alive pool of upstream connections.
//
// One exchange = take an idle connection (or connect), write the request, read the response,
// give the connection back if it can carry another request (RFC 9112 §9.3). Deadlines:
// connecting has `upstream.connect_timeout` (errc::upstream_unreachable), the whole exchange
// has `upstream.timeout` from the moment send() starts (errc::upstream_timeout).
//
// Stale connections: an upstream may close an idle connection at any time, and the close
// races with our next request on it (RFC 9112 §9.3.1). Three defences, cheapest first: idle
// connections expire a little before the upstream's advertised `Keep-Alive: timeout`; a
// connection is checked with a non-blocking peek before reuse (EOF or unexpected bytes: drop
// it); and a request that failed on a reused connection before any response byte arrived is
// sent again once on a fresh connection when its method is idempotent (RFC 9110 §9.2.2) —
// never a POST or PATCH, which the upstream may have acted on.

#include "sluice/http/upstream_pool.hpp"

#include "sluice/errc.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/string.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/rfc7230.hpp>
#include <boost/beast/http/write.hpp>

#include <sys/socket.h>

#include <atomic>
#include <charconv>
#include <deque>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace sluice::http {
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
/// Largest response head accepted from an upstream.
constexpr std::uint32_t response_header_limit = 64 * 1024;

struct idle_connection {
  beast::tcp_stream stream;
  steady::time_point expires;
};

/// What an exchange needs of an upstream, copied so that no reference outlives the call.
struct endpoint_spec {
  std::string host;
  std::uint16_t port = 80;
  std::chrono::milliseconds connect_timeout{1000};
  std::chrono::milliseconds timeout{30000};
  std::string key() const { return host + ":" + std::to_string(port); }
};

/// The pool's state; exchanges in flight hold it by shared_ptr.
struct pool_state {
  pool_state(asio::any_io_executor e, std::size_t max) : ex(std::move(e)), max_idle(max) {}

  asio::any_io_executor ex;
  std::size_t max_idle;
  std::uint64_t body_limit = upstream_pool::default_response_body_limit;
  std::unordered_map<std::string, std::deque<idle_connection>> idle;  // back = most recent
  std::atomic<std::uint64_t> connects{0}, reuses{0}, failures{0}, retries{0};

  /// Pops the most recently pooled connection still usable, closing expired or dead ones.
  std::optional<beast::tcp_stream> take_idle(const std::string& key) {
    auto it = idle.find(key);
    if (it == idle.end()) return std::nullopt;
    auto& stack = it->second;
    const auto now = steady::now();
    while (!stack.empty()) {
      idle_connection c = std::move(stack.back());
      stack.pop_back();
      if (c.expires > now && still_open(c.stream)) return std::move(c.stream);
      c.stream.close();
    }
    return std::nullopt;
  }

  void put_idle(const std::string& key, beast::tcp_stream stream, steady::time_point expires) {
    auto& stack = idle[key];
    if (max_idle == 0) return;
    if (stack.size() >= max_idle) {
      stack.front().stream.close();  // the oldest is the likeliest to be stale
      stack.pop_front();
    }
    stream.expires_never();
    stack.push_back({std::move(stream), expires});
  }

  /// A non-blocking peek: an idle connection must have nothing to read. EOF means the
  /// upstream closed it; bytes mean it sent something unsolicited — either way, unusable.
  static bool still_open(beast::tcp_stream& stream) {
    char byte;
    const auto n = ::recv(stream.socket().native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
  }
};

using state_ptr = std::shared_ptr<pool_state>;

bool is_idempotent(bhttp::verb v) {
  switch (v) {
    case bhttp::verb::get:
    case bhttp::verb::head:
    case bhttp::verb::options:
    case bhttp::verb::put:
    case bhttp::verb::delete_:
    case bhttp::verb::trace:
      return true;
    default:
      return false;
  }
}

/// How long the connection that carried `res` may stay idle: `Keep-Alive: timeout=N`
/// (a de-facto field, RFC 2068 §19.7.1.1) less a margin, else the default.
std::chrono::milliseconds idle_lifetime(const response& res) {
  const auto value = res[bhttp::field::keep_alive];
  // Keep-Alive is a comma-separated list of name=value pairs: "timeout=5, max=100".
  std::string_view v = value;
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

/// A connect attempt's outcome (result<tcp_stream> would not do: basic_stream's variadic
/// constructor makes it look constructible from an error code).
struct connect_result {
  error_code ec;
  std::optional<beast::tcp_stream> stream;
};

/// Connects to the upstream within min(connect_timeout, time left before `deadline`).
asio::awaitable<connect_result> connect(state_ptr st, endpoint_spec spec,
                                        steady::time_point deadline) {
  auto budget = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - steady::now());
  if (spec.connect_timeout < budget) budget = spec.connect_timeout;
  if (budget.count() <= 0) co_return connect_result{errc::upstream_timeout, std::nullopt};

  std::vector<tcp::endpoint> endpoints;
  error_code ec;
  const auto address = asio::ip::make_address(spec.host, ec);
  if (!ec) {
    endpoints.emplace_back(address, spec.port);
  } else {
    // The resolver has no deadline of its own: a timer cancels it.
    auto resolver = std::make_shared<tcp::resolver>(st->ex);
    asio::steady_timer timer(st->ex);
    timer.expires_after(budget);
    timer.async_wait([resolver](error_code tec) {
      if (!tec) resolver->cancel();
    });
    auto [rec, results] =
        co_await resolver->async_resolve(spec.host, std::to_string(spec.port), use_tuple);
    timer.cancel();
    if (rec) co_return connect_result{errc::upstream_unreachable, std::nullopt};
    for (const auto& r : results) endpoints.push_back(r.endpoint());
    budget = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - steady::now());
    if (spec.connect_timeout < budget) budget = spec.connect_timeout;
  }

  beast::tcp_stream stream(st->ex);
  stream.expires_after(budget);
  auto [cec, ep] = co_await stream.async_connect(endpoints, use_tuple);
  (void)ep;
  if (cec) co_return connect_result{errc::upstream_unreachable, std::nullopt};
  stream.socket().set_option(tcp::no_delay(true), ec);
  connect_result out;
  out.stream.emplace(std::move(stream));
  co_return out;
}

/// Maps an exchange error to sluice's errors.
errc classify(const error_code& ec) {
  if (ec == beast::error::timeout) return errc::upstream_timeout;
  return errc::upstream_protocol;
}

asio::awaitable<boost::system::result<response>> exchange(state_ptr st, endpoint_spec spec,
                                                          request req) {
  const auto deadline = steady::now() + spec.timeout;
  const std::string key = spec.key();
  const bool head_request = req.method() == bhttp::verb::head;
  const bool idempotent = is_idempotent(req.method());
  if (req.count(bhttp::field::host) == 0) {
    // An HTTP/1.0 client may omit Host; HTTP/1.1 requires one (RFC 9112 §3.2).
    req.set(bhttp::field::host, spec.port == 80 ? spec.host : key);
  }

  for (int attempt = 0;; ++attempt) {
    std::optional<beast::tcp_stream> stream;
    bool reused = false;
    if (attempt == 0) {
      if (auto pooled = st->take_idle(key)) stream.emplace(std::move(*pooled));
    }
    if (stream) {
      reused = true;
      st->reuses.fetch_add(1, std::memory_order_relaxed);
    } else {
      auto connected = co_await connect(st, spec, deadline);
      if (connected.ec) {
        st->failures.fetch_add(1, std::memory_order_relaxed);
        co_return connected.ec;
      }
      st->connects.fetch_add(1, std::memory_order_relaxed);
      stream.emplace(std::move(*connected.stream));
    }

    stream->expires_at(deadline);
    auto [wec, wn] = co_await bhttp::async_write(*stream, req, use_tuple);
    (void)wn;

    error_code failure = wec;
    bool got_bytes = false;
    std::optional<response> res;
    bool reusable = false;
    if (!failure) {
      beast::flat_buffer buffer;
      for (;;) {
        bhttp::response_parser<bhttp::string_body> parser;
        parser.header_limit(response_header_limit);
        parser.body_limit(st->body_limit);
        parser.skip(head_request);  // a response to HEAD has no content (RFC 9110 §9.3.2)
        stream->expires_at(deadline);
        auto [rec, rn] = co_await bhttp::async_read(*stream, buffer, parser, use_tuple);
        (void)rn;
        got_bytes = got_bytes || parser.got_some() || buffer.size() > 0;
        if (rec) {
          failure = rec;
          break;
        }
        const unsigned status = parser.get().result_int();
        if (status / 100 == 1) {
          if (status == 101) {  // we never ask for an upgrade (Upgrade is hop-by-hop)
            failure = bhttp::error::bad_status;
            break;
          }
          continue;  // interim response (100, 103): the final one follows
        }
        reusable = parser.get().keep_alive() && !parser.need_eof() && buffer.size() == 0;
        res.emplace(parser.release());
        break;
      }
    }

    if (!failure) {
      if (reusable) {
        st->put_idle(key, std::move(*stream), steady::now() + idle_lifetime(*res));
      } else {
        stream->close();
      }
      co_return std::move(*res);
    }

    stream->close();
    if (reused && !got_bytes && idempotent && attempt == 0 && failure != beast::error::timeout) {
      // A stale pooled connection: the upstream closed it while our request was on the way.
      st->retries.fetch_add(1, std::memory_order_relaxed);
      continue;
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

asio::awaitable<boost::system::result<response>> upstream_pool::send(const config::upstream& up,
                                                                     request req) {
  endpoint_spec spec{up.host, up.port, up.connect_timeout, up.timeout};
  return exchange(impl_, std::move(spec), std::move(req));
}

pool_stats upstream_pool::stats() const {
  pool_stats s;
  s.connects = impl_->connects.load(std::memory_order_relaxed);
  s.reuses = impl_->reuses.load(std::memory_order_relaxed);
  s.failures = impl_->failures.load(std::memory_order_relaxed);
  s.retries = impl_->retries.load(std::memory_order_relaxed);
  return s;
}

std::size_t upstream_pool::idle_count() const {
  std::size_t n = 0;
  for (const auto& [key, stack] : impl_->idle) n += stack.size();
  return n;
}

}  // namespace sluice::http
