// SPDX-License-Identifier: Apache-2.0
// The plan directory's reads: HGET on a connection of the Redis store's own class (a
// redis_store that loads no script), so the directory has what every store connection has —
// name resolution off the worker's thread, a connect timeout, AUTH, jittered backoff, the idle
// PING, the deadline queue, the breaker and the wrong-node handling — from one implementation.
// HGET is a pure read, so unlike a limit check it could be retried; it is not, because the
// caller falls back (the key stays unresolved for this request) and the next request asks again.

#include "sluice/store/redis_directory.hpp"

#include "sluice/store/redis_store.hpp"

namespace sluice::store {

namespace {

redis_settings connection_settings(const redis_directory_settings& d) {
  redis_settings s;
  s.host = d.host;
  s.port = d.port;
  s.password = d.password;
  s.username = d.username;
  s.tls = d.tls;
  s.command_timeout = d.command_timeout;
  s.load_script = false;
  s.sentinel = d.sentinel;
  return s;
}

}  // namespace

struct redis_directory::impl {
  explicit impl(boost::asio::any_io_executor ex, const redis_directory_settings& s)
      : connection(std::move(ex), connection_settings(s)) {}
  redis_store connection;
  bool started = false;
};

redis_directory::redis_directory(boost::asio::any_io_executor ex, redis_directory_settings settings)
    : impl_(std::make_unique<impl>(std::move(ex), settings)) {}

redis_directory::~redis_directory() = default;

boost::asio::awaitable<boost::system::result<std::optional<std::string>>> redis_directory::hget(
    std::string hash, std::string field) {
  return impl_->connection.hget(std::move(hash), std::move(field));
}

void redis_directory::start() {
  if (impl_->started) return;
  impl_->started = true;
  impl_->connection.start();
}

void redis_directory::stop() {
  impl_->connection.stop();
}

bool redis_directory::connected() const {
  return impl_->connection.stats().connected;
}

store_stats redis_directory::stats() const {
  return impl_->connection.stats();
}

}  // namespace sluice::store
