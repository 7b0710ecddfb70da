// SPDX-License-Identifier: Apache-2.0
// counter_store's settle (counter_store.hpp): a settle is a check_request marked settle, so it
// travels every store's check path — the memory store's locks, the Redis pipeline with its
// deadline, stale bound and NOSCRIPT reload, the cluster's routing by slot.
#include "sluice/store/counter_store.hpp"

#include "sluice/errc.hpp"

namespace sluice::store {

std::optional<boost::system::result<limiter::check_outcome>> counter_store::settle_now(
    limiter::check_request& req) {
  req.settle = true;
  req.peek = false;
  // What a settle does not do: take or return a lease, start a block. Cleared here, so every
  // store packs and reads a settle's limits alike (the Redis store expects the lease and block
  // fields of a reply from these, and a settle's reply has none).
  for (auto& l : req.limits) {
    l.lease = 0;
    l.refund = 0;
    l.block_ms = 0;
  }
  using result = boost::system::result<limiter::check_outcome>;
  if (!limiter::can_settle(req)) return result(make_error_code(errc::store_error));
  limiter::check_outcome out;
  if (decide_now(req, out)) return result(std::move(out));
  return std::nullopt;
}

boost::asio::awaitable<boost::system::result<limiter::check_outcome>> counter_store::settle(
    limiter::check_request req) {
  if (auto done = settle_now(req)) co_return std::move(*done);
  co_return co_await check(std::move(req));
}

}  // namespace sluice::store
