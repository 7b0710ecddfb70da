// SPDX-License-Identifier: Apache-2.0
// counter_store's settle (counter_store.hpp): a settle is a check_request marked settle, so it
// travels every store's check path — the memory store's locks, the Redis pipeline with its
// deadline, stale bound and NOSCRIPT reload, the cluster's routing by slot.
#include "sluice/store/counter_store.hpp"

#include "sluice/errc.hpp"

namespace sluice::store {

boost::asio::awaitable<boost::system::result<limiter::check_outcome>> counter_store::settle(
    limiter::check_request req) {
  req.settle = true;
  req.peek = false;
  if (!limiter::can_settle(req)) co_return make_error_code(errc::store_error);
  limiter::check_outcome out;
  if (decide_now(req, out)) co_return out;
  co_return co_await check(std::move(req));
}

}  // namespace sluice::store
