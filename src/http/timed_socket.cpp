// SPDX-License-Identifier: Apache-2.0
// A TCP socket with a lazily re-armed deadline (see timed_socket.hpp for why).

#include "sluice/http/timed_socket.hpp"

#include <boost/beast/core/error.hpp>

namespace sluice::http {

timed_socket::timed_socket(boost::asio::ip::tcp::socket socket)
    : state_(std::make_shared<state>(std::move(socket))) {}

timed_socket::timed_socket(const executor_type& ex)
    : state_(std::make_shared<state>(boost::asio::ip::tcp::socket(ex))) {}

void timed_socket::start_tls(boost::asio::ssl::context& ctx, std::shared_ptr<const void> owner) {
  state_->tls_owner = std::move(owner);
  state_->tls.emplace(state_->socket, ctx);
}

timed_socket::~timed_socket() {
  if (state_) close();
}

void timed_socket::arm(const std::shared_ptr<state>& st, clock::time_point at) {
  st->armed_at = at;
  const std::uint64_t generation = ++st->generation;
  st->timer.expires_at(at);  // cancels a pending wait; its completion sees a newer generation
  st->timer.async_wait([st, generation](const boost::system::error_code& ec) {
    if (generation != st->generation) return;
    st->armed_at = clock::time_point::max();
    if (ec || st->deadline == clock::time_point::max()) return;
    if (clock::now() < st->deadline) {
      arm(st, st->deadline);  // the deadline moved on since this wait was armed
      return;
    }
    st->timed_out = true;
    boost::system::error_code ignored;
    st->socket.cancel(ignored);
  });
}

void timed_socket::expires_after(std::chrono::milliseconds d) {
  state_->timed_out = false;
  state_->deadline = clock::now() + d;
  if (state_->deadline < state_->armed_at) arm(state_, state_->deadline);
}

void timed_socket::expires_never() {
  state_->timed_out = false;
  state_->deadline = clock::time_point::max();
}

boost::system::error_code timed_socket::timeout_error(const boost::system::error_code& ec) const {
  if (ec && state_->timed_out) return boost::beast::error::timeout;
  return ec;
}

void timed_socket::close() {
  boost::system::error_code ignored;
  state_->socket.close(ignored);
  state_->deadline = clock::time_point::max();
  ++state_->generation;
  state_->armed_at = clock::time_point::max();
  state_->timer.cancel();
}

}  // namespace sluice::http
