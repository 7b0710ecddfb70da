// SPDX-License-Identifier: Apache-2.0
#include "store/redis_connection.hpp"

#include <hiredis/hiredis.h>

#include <boost/asio/ip/address.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/ssl/error.hpp>
#include <boost/asio/ssl/stream.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>

#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include <array>
#include <cstdlib>
#include <optional>
#include <utility>

namespace sluice::store::detail {

namespace asio = boost::asio;
using boost::system::error_code;

struct redis_connection::transport {
  explicit transport(const asio::any_io_executor& ex)
      : resolver(ex), timer(ex), probe(ex), socket(ex) {}
  asio::ip::tcp::resolver resolver;
  asio::steady_timer timer;  // the connect deadline
  asio::steady_timer probe;  // the idle probe's tick
  asio::ip::tcp::socket socket;
  std::optional<asio::ssl::stream<asio::ip::tcp::socket&>> tls;
  bool ready = false;  // connected (and handshaken): bytes may be written
  std::array<char, 16 * 1024> in{};

  // Calls `f` with the stream the bytes go through: the TLS stream, or the socket.
  template <class F>
  void with_stream(F&& f) {
    if (tls) {
      f(*tls);
    } else {
      f(socket);
    }
  }

  void shut() {
    error_code ec;
    resolver.cancel();
    timer.cancel();
    probe.cancel();
    socket.close(ec);  // aborts the read and the write in flight, on either stream
  }
};

namespace {

// A TLS failure in words: the certificate check's own reason when it was the certificate
// (unknown issuer, host-name mismatch, expired), else OpenSSL's.
std::string tls_reason(const error_code& ec, SSL* ssl) {
  if (ssl != nullptr) {
    const long v = SSL_get_verify_result(ssl);
    if (v != X509_V_OK) {
      return std::string("certificate verify failed: ") + X509_verify_cert_error_string(v);
    }
  }
  if (ec == asio::ssl::error::stream_truncated) return "the server closed the connection";
  return ec.message();
}

}  // namespace

std::string_view reply_text(const redisReply* r) {
  return r != nullptr && r->str != nullptr ? std::string_view(r->str, r->len) : std::string_view();
}

std::shared_ptr<redis_connection> redis_connection::open(asio::any_io_executor ex, options o,
                                                         void* data, connect_callback on_connect,
                                                         disconnect_callback on_disconnect) {
  auto c = std::make_shared<redis_connection>(std::move(ex), std::move(o), data, on_connect,
                                              on_disconnect);
  c->start();
  return c;
}

redis_connection::redis_connection(asio::any_io_executor ex, options o, void* data,
                                   connect_callback on_connect, disconnect_callback on_disconnect)
    : ex_(std::move(ex)),
      o_(std::move(o)),
      data_(data),
      on_connect_(on_connect),
      on_disconnect_(on_disconnect),
      t_(std::make_unique<transport>(ex_)),
      reader_(redisReaderCreate()) {}

redis_connection::~redis_connection() {
  if (reader_ != nullptr) redisReaderFree(static_cast<redisReader*>(reader_));
}

std::string redis_connection::name() const {
  return o_.host + ":" + std::to_string(o_.port);
}

void redis_connection::start() {
  if (reader_ == nullptr) {
    asio::post(ex_, [self = shared_from_this()] { self->fail("out of memory"); });
    return;
  }
  if (o_.connect_timeout.count() > 0) {
    t_->timer.expires_after(o_.connect_timeout);
    t_->timer.async_wait([self = shared_from_this()](error_code ec) {
      if (ec || self->state_ != state::connecting) return;
      self->fail("no answer within the connect timeout of " +
                 std::to_string(self->o_.connect_timeout.count()) + " ms");
    });
  }
  error_code ec;
  (void)asio::ip::make_address(o_.host, ec);
  if (!ec) {
    resolved(o_.host);
    return;
  }
  // A name may move (a failover behind DNS): resolved before every attempt, off this thread.
  t_->resolver.async_resolve(
      o_.host, std::to_string(o_.port),
      [self = shared_from_this()](error_code e, asio::ip::tcp::resolver::results_type res) {
        if (self->state_ != state::connecting) return;
        if (e || res.empty()) {
          self->fail("cannot resolve the host name: " +
                     (e ? e.message() : std::string("no address")));
          return;
        }
        self->resolved(res.begin()->endpoint().address().to_string());
      });
}

void redis_connection::resolved(const std::string& address) {
  error_code ec;
  const asio::ip::tcp::endpoint ep(asio::ip::make_address(address, ec), o_.port);
  if (ec) {
    asio::post(ex_, [self = shared_from_this(), why = "bad address " + address] {
      if (self->state_ == state::connecting) self->fail(why);
    });
    return;
  }
  t_->socket.async_connect(ep, [self = shared_from_this()](error_code e) {
    if (self->state_ != state::connecting) return;
    if (e) {
      self->fail(e.message());
      return;
    }
    error_code ignored;
    self->t_->socket.set_option(asio::ip::tcp::no_delay(true), ignored);
    if (!self->o_.tls.context) {
      self->handshaken();
      return;
    }
    auto& tls = self->t_->tls.emplace(self->t_->socket, *self->o_.tls.context);
    SSL* ssl = tls.native_handle();
    const std::string& name =
        self->o_.tls.server_name.empty() ? self->o_.host : self->o_.tls.server_name;
    error_code not_ip;
    (void)asio::ip::make_address(name, not_ip);
    // SNI carries host names only (RFC 6066 §3); the check takes a name or an address.
    if (not_ip) SSL_set_tlsext_host_name(ssl, name.c_str());
    if (self->o_.tls.verify) {
      SSL_set_verify(ssl, SSL_VERIFY_PEER, nullptr);
      X509_VERIFY_PARAM* param = SSL_get0_param(ssl);
      if (not_ip) {
        X509_VERIFY_PARAM_set_hostflags(param, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
        SSL_set1_host(ssl, name.c_str());
      } else {
        X509_VERIFY_PARAM_set1_ip_asc(param, name.c_str());
      }
    } else {
      SSL_set_verify(ssl, SSL_VERIFY_NONE, nullptr);
    }
    tls.async_handshake(asio::ssl::stream_base::client, [self](error_code he) {
      if (self->state_ != state::connecting) return;
      if (he) {
        self->fail("TLS handshake failed: " +
                   tls_reason(he, self->t_->tls ? self->t_->tls->native_handle() : nullptr));
        return;
      }
      self->handshaken();
    });
  });
}

void redis_connection::handshaken() {
  t_->ready = true;
  if (!o_.password.empty()) {
    // AUTH goes first, ahead of anything queued during the attempt (the password is never
    // logged: only the server's error text is).
    char* cmd = nullptr;
    int len = 0;
    if (o_.username.empty()) {
      const char* argv[] = {"AUTH", o_.password.c_str()};
      const std::size_t lens[] = {4, o_.password.size()};
      len = redisFormatCommandArgv(&cmd, 2, argv, lens);
    } else {
      const char* argv[] = {"AUTH", o_.username.c_str(), o_.password.c_str()};
      const std::size_t lens[] = {4, o_.username.size(), o_.password.size()};
      len = redisFormatCommandArgv(&cmd, 3, argv, lens);
    }
    if (len < 0) {
      fail("out of memory");
      return;
    }
    out_.insert(0, cmd, static_cast<std::size_t>(len));
    std::free(cmd);
    waiting_.push_front(
        pending{[](redis_connection* c, const redisReply* r, void*) { c->on_auth(r); }, nullptr});
  } else {
    went_up();
  }
  read_some();
  write_some();
  if (state_ == state::up && on_connect_) on_connect_(this, true, std::string());
}

void redis_connection::on_auth(const redisReply* r) {
  if (r == nullptr || state_ != state::connecting) return;
  if (r->type == REDIS_REPLY_ERROR) {
    fail("AUTH failed: " + std::string(reply_text(r).substr(0, 200)));
    return;
  }
  went_up();
  if (on_connect_) on_connect_(this, true, std::string());
}

void redis_connection::went_up() {
  state_ = state::up;
  t_->timer.cancel();
  last_heard_ = std::chrono::steady_clock::now();
  arm_probe();
}

void redis_connection::arm_probe() {
  if (o_.idle_probe.count() <= 0) return;
  t_->probe.expires_after(o_.idle_probe / 4);
  t_->probe.async_wait([w = weak_from_this()](error_code ec) {
    if (ec) return;
    if (auto self = w.lock()) self->probe_tick();
  });
}

void redis_connection::probe_tick() {
  if (state_ != state::up || subscribed_) return;
  const auto now = std::chrono::steady_clock::now();
  if (ping_outstanding_ && !stalled_ && now - ping_sent_ > o_.probe_timeout) {
    stalled_ = true;
    if (o_.on_stall) o_.on_stall(this, true);
    if (state_ != state::up) return;  // closed by its owner
  }
  if (!ping_outstanding_ && now - last_heard_ >= o_.idle_probe &&
      command(nullptr, nullptr, {"PING"})) {
    ping_outstanding_ = true;
    ping_sent_ = now;
  }
  arm_probe();
}

void redis_connection::heard() {
  last_heard_ = std::chrono::steady_clock::now();
  ping_outstanding_ = false;
  if (std::exchange(stalled_, false) && o_.on_stall) o_.on_stall(this, false);
}

void redis_connection::fail(const std::string& why) {
  if (state_ != state::connecting) {
    end(why);
    return;
  }
  state_ = state::closed;
  t_->shut();
  if (on_connect_) on_connect_(this, false, why);
  fail_pending();
}

void redis_connection::end(const std::string& why) {
  if (state_ == state::closed) return;
  if (state_ == state::connecting) {
    fail(why);
    return;
  }
  state_ = state::closed;
  t_->shut();
  fail_pending();
  if (on_disconnect_) on_disconnect_(this, why);
}

void redis_connection::close() {
  if (state_ == state::closed) return;
  state_ = state::closed;
  t_->shut();
  // Inside a reply's callback the others wait until it returns (as hiredis defers a free):
  // the caller may be iterating over what those callbacks change.
  if (delivering_) {
    fail_after_delivery_ = true;
  } else {
    fail_pending();
  }
}

void redis_connection::fail_pending() {
  auto keep = shared_from_this();
  std::deque<pending> gone;
  gone.swap(waiting_);
  out_.clear();
  for (const auto& p : gone)
    if (p.cb != nullptr) p.cb(this, nullptr, p.privdata);
  if (auto s = std::exchange(subscriber_, pending{nullptr, nullptr}); s.cb != nullptr) {
    s.cb(this, nullptr, s.privdata);
  }
}

bool redis_connection::command(reply_callback cb, void* privdata, int argc, const char* const* argv,
                               const std::size_t* lens) {
  if (state_ == state::closed || subscribed_) return false;
  char* cmd = nullptr;
  const int len = redisFormatCommandArgv(&cmd, argc, const_cast<const char**>(argv), lens);
  if (len < 0) return false;
  out_.append(cmd, static_cast<std::size_t>(len));
  std::free(cmd);
  waiting_.push_back(pending{cb, privdata});
  write_some();
  return true;
}

bool redis_connection::command(reply_callback cb, void* privdata,
                               std::initializer_list<std::string_view> args) {
  constexpr std::size_t most = 8;
  const char* argv[most];
  std::size_t lens[most];
  if (args.size() > most) return false;
  int n = 0;
  for (auto a : args) {
    argv[n] = a.data();
    lens[n] = a.size();
    ++n;
  }
  return command(cb, privdata, n, argv, lens);
}

bool redis_connection::subscribe(reply_callback cb, void* privdata, std::string_view channel) {
  if (!command(nullptr, nullptr, {"SUBSCRIBE", channel})) return false;
  // The confirmation is the subscriber's too (as hiredis has it): take the waiting entry back.
  waiting_.pop_back();
  subscribed_ = true;
  subscriber_ = pending{cb, privdata};
  return true;
}

void redis_connection::write_some() {
  if (writing_ || out_.empty() || !t_->ready || state_ == state::closed) return;
  writing_ = true;
  writing_buf_.swap(out_);
  out_.clear();
  t_->with_stream([&](auto& stream) {
    asio::async_write(stream, asio::buffer(writing_buf_),
                      [self = shared_from_this()](error_code ec, std::size_t) {
                        self->writing_ = false;
                        if (self->state_ == state::closed) return;
                        if (ec) {
                          self->end("write failed: " + ec.message());
                          return;
                        }
                        self->writing_buf_.clear();
                        self->write_some();
                      });
  });
}

void redis_connection::read_some() {
  if (state_ == state::closed) return;
  t_->with_stream([&](auto& stream) {
    stream.async_read_some(
        asio::buffer(t_->in), [self = shared_from_this()](error_code ec, std::size_t n) {
          if (self->state_ == state::closed) return;
          if (ec) {
            self->end(ec == asio::error::eof || ec == asio::ssl::error::stream_truncated
                          ? std::string("the server closed the connection")
                      : ec.category() == asio::error::get_ssl_category()
                          ? "TLS session failed: " + ec.message()
                          : ec.message());
            return;
          }
          self->on_read(n);
        });
  });
}

void redis_connection::on_read(std::size_t n) {
  auto* reader = static_cast<redisReader*>(reader_);
  if (redisReaderFeed(reader, t_->in.data(), n) != REDIS_OK) {
    end("out of memory");
    return;
  }
  for (;;) {
    void* r = nullptr;
    if (redisReaderGetReply(reader, &r) != REDIS_OK) {
      end(std::string("a reply that does not parse: ") + reader->errstr);
      return;
    }
    if (r == nullptr) break;
    deliver(static_cast<redisReply*>(r));
    if (state_ == state::closed) return;
  }
  read_some();
}

void redis_connection::deliver(redisReply* r) {
  struct freer {
    redisReply* r;
    ~freer() { freeReplyObject(r); }
  } f{r};
  if (!waiting_.empty()) {
    const pending p = waiting_.front();
    waiting_.pop_front();
    delivering_ = true;
    if (p.cb != nullptr) p.cb(this, r, p.privdata);
    delivering_ = false;
  } else if (subscribed_ && subscriber_.cb != nullptr) {
    delivering_ = true;
    subscriber_.cb(this, r, subscriber_.privdata);
    delivering_ = false;
  } else {
    end("a reply to no command");
  }
  // Any reply shows the server answers (the idle probe's, a check's, a message).
  if (state_ == state::up) heard();
  if (std::exchange(fail_after_delivery_, false)) fail_pending();
}

}  // namespace sluice::store::detail
