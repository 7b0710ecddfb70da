// HGET over hiredis async, with the command-id discipline of redis_store.cpp (STYLE.md,
// "hiredis 0.14 inside Asio"): privdata carries a command id, never a pointer; each command
// owns one deadline timer; whichever of reply, deadline or disconnect (a NULL reply) comes
// first completes the command and erases its id; anything later is dropped. HGET is a pure
// read, so unlike a limit check it could be retried — it is not, because the caller falls
// back (the key stays unresolved for this request) and the next request asks again.

#include "sluice/store/redis_directory.hpp"

#include "store/posted_handler.hpp"

#include "sluice/errc.hpp"
#include "store/hiredis_asio.hpp"

#include <hiredis/async.h>
#include <hiredis/hiredis.h>
#include <boost/asio/append.hpp>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <unordered_map>
#include <vector>

namespace sluice::store {

namespace asio = boost::asio;
using boost::system::error_code;
using value = std::optional<std::string>;

namespace {

using value_handler = detail::posted_handler<value>;

constexpr std::uintptr_t tag_auth = 1;
constexpr std::uint64_t first_id = 1 << 20;

}  // namespace

struct redis_directory::impl : std::enable_shared_from_this<impl> {
  struct pending {
    std::unique_ptr<asio::steady_timer> deadline;
    value_handler handler;
  };
  enum class state_t { idle, connecting, ready, stopped };

  impl(asio::any_io_executor e, redis_directory_settings s)
      : ex(std::move(e)), settings(std::move(s)), backoff_timer(ex) {}

  asio::any_io_executor ex;
  redis_directory_settings settings;
  state_t state = state_t::idle;
  redisAsyncContext* ac = nullptr;
  std::shared_ptr<detail::hiredis_asio> io;
  asio::steady_timer backoff_timer;
  std::chrono::milliseconds backoff{50};
  std::uint64_t next_id = first_id;
  std::unordered_map<std::uint64_t, pending> inflight;

  static impl* owner(const redisAsyncContext* c) {
    return c ? static_cast<impl*>(c->data) : nullptr;
  }

  void connect() {
    if (state == state_t::stopped || ac != nullptr) return;
    redisAsyncContext* c = redisAsyncConnect(settings.host.c_str(), settings.port);
    if (c == nullptr || c->err) {
      if (c) redisAsyncFree(c);
      schedule_reconnect();
      return;
    }
    c->data = this;
    io = detail::hiredis_asio::attach(c, ex);
    if (!io) {
      redisAsyncFree(c);
      schedule_reconnect();
      return;
    }
    ac = c;
    state = state_t::connecting;
    redisAsyncSetConnectCallback(c, &impl::on_connect);
    redisAsyncSetDisconnectCallback(c, &impl::on_disconnect);
    if (!settings.password.empty()) {
      const char* argv[] = {"AUTH", settings.password.c_str()};
      const std::size_t lens[] = {4, settings.password.size()};
      redisAsyncCommandArgv(c, &impl::on_auth, reinterpret_cast<void*>(tag_auth), 2, argv, lens);
    }
  }

  void schedule_reconnect() {
    if (state == state_t::stopped) return;
    state = state_t::idle;
    backoff_timer.expires_after(backoff);
    backoff = std::min(backoff * 2, std::chrono::milliseconds(1000));
    backoff_timer.async_wait([w = weak_from_this()](error_code ec) {
      if (ec) return;
      if (auto self = w.lock()) self->connect();
    });
  }

  static void on_connect(const redisAsyncContext* c, int status) noexcept {
    try {
      impl* self = owner(c);
      if (!self) return;
      if (status != REDIS_OK) {
        self->ac = nullptr;  // hiredis frees the context after this callback
        self->io.reset();
        self->schedule_reconnect();
        return;
      }
      if (self->state == state_t::connecting) {
        self->state = state_t::ready;
        self->backoff = std::chrono::milliseconds(50);
      }
    } catch (...) {
    }
  }

  static void on_disconnect(const redisAsyncContext* c, int /*status*/) noexcept {
    try {
      impl* self = owner(c);
      if (!self) return;
      self->ac = nullptr;
      self->io.reset();
      // NULL replies have completed the commands in flight already.
      if (self->state != state_t::stopped) self->schedule_reconnect();
    } catch (...) {
    }
  }

  static void on_auth(redisAsyncContext* c, void* r, void*) noexcept {
    try {
      auto* reply = static_cast<redisReply*>(r);
      if (reply && reply->type == REDIS_REPLY_ERROR && c) redisAsyncDisconnect(c);
    } catch (...) {
    }
  }

  void start_hget(std::string hash, std::string field, value_handler h) {
    if (state != state_t::ready || ac == nullptr) {
      h.post(ex, errc::store_unavailable, std::nullopt);
      return;
    }
    const std::uint64_t id = next_id++;
    pending p;
    p.handler = std::move(h);
    p.deadline = std::make_unique<asio::steady_timer>(ex, settings.command_timeout);
    p.deadline->async_wait([w = weak_from_this(), id](error_code ec) {
      if (ec) return;
      if (auto self = w.lock()) self->complete(id, errc::store_timeout, std::nullopt);
    });
    inflight.emplace(id, std::move(p));
    const char* argv[] = {"HGET", hash.data(), field.data()};
    const std::size_t lens[] = {4, hash.size(), field.size()};
    if (redisAsyncCommandArgv(ac, &impl::on_reply, reinterpret_cast<void*>(id), 3, argv, lens) !=
        REDIS_OK)
      complete(id, errc::store_unavailable, std::nullopt);
  }

  static void on_reply(redisAsyncContext* c, void* r, void* privdata) noexcept {
    try {
      impl* self = owner(c);
      if (!self) return;
      const auto id = reinterpret_cast<std::uintptr_t>(privdata);
      auto* reply = static_cast<redisReply*>(r);
      if (reply == nullptr) {
        self->complete(id, errc::store_error, std::nullopt);
      } else if (reply->type == REDIS_REPLY_NIL) {
        self->complete(id, {}, std::nullopt);
      } else if (reply->type == REDIS_REPLY_STRING) {
        self->complete(id, {}, std::string(reply->str, reply->len));
      } else if (reply->type == REDIS_REPLY_ERROR) {
        self->complete(id, errc::store_error, std::nullopt);
      } else {
        self->complete(id, errc::store_protocol, std::nullopt);
      }
    } catch (...) {
      // No exception crosses a hiredis callback.
    }
  }

  void complete(std::uint64_t id, error_code ec, value v) {
    auto it = inflight.find(id);
    if (it == inflight.end()) return;  // late: its deadline passed
    value_handler h = std::move(it->second.handler);
    inflight.erase(it);
    h.post(ex, ec, std::move(v));
  }

  void stop() {
    state = state_t::stopped;
    backoff_timer.cancel();
    if (ac != nullptr) {
      redisAsyncContext* c = ac;
      ac = nullptr;
      c->data = nullptr;  // callbacks from the free below find no owner
      redisAsyncFree(c);
      io.reset();
    }
    while (!inflight.empty())
      complete(inflight.begin()->first, errc::store_unavailable, std::nullopt);
  }
};

redis_directory::redis_directory(asio::any_io_executor ex, redis_directory_settings settings)
    : impl_(std::make_shared<impl>(std::move(ex), std::move(settings))) {}

redis_directory::~redis_directory() {
  impl_->stop();
}

void redis_directory::start() {
  if (impl_->state == impl::state_t::idle && impl_->ac == nullptr) impl_->connect();
}

void redis_directory::stop() {
  impl_->stop();
}

bool redis_directory::connected() const {
  return impl_->state == impl::state_t::ready;
}

asio::awaitable<boost::system::result<value>> redis_directory::hget(std::string hash,
                                                                    std::string field) {
  auto token = asio::as_tuple(asio::use_awaitable);
  auto [ec, v] = co_await asio::async_initiate<decltype(token), void(error_code, value)>(
      [](auto handler, std::shared_ptr<impl> self, std::string h, std::string f) {
        self->start_hget(std::move(h), std::move(f), value_handler(std::move(handler)));
      },
      token, impl_, std::move(hash), std::move(field));
  if (ec) co_return ec;
  co_return std::move(v);
}

}  // namespace sluice::store
