// SPDX-License-Identifier: Apache-2.0
// A worker's concurrency slots on the gateway (slot_keeper.hpp). Every store call here is
// started, never awaited by a request: a release when an exchange ends, a renewal every third
// of the shortest slot_ttl held. A call the store cannot answer leaves the slot to expire
// slot_ttl after its last renewal (the stated guarantee's bound).
#include "slot_keeper.hpp"

#include "store_step.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <algorithm>
#include <chrono>

namespace sluice::app {
namespace {

namespace asio = boost::asio;

/// The hook a request holding slots carries: its end releases them.
class slot_hook final : public http::exchange_hook {
 public:
  slot_hook(std::shared_ptr<slot_keeper> keeper, std::string id, bool on_local)
      : keeper_(std::move(keeper)), id_(std::move(id)), on_local_(on_local) {}
  void on_end(http::exchange_end end, unsigned upstream_status) noexcept override {
    (void)upstream_status;
    keeper_->release(id_, on_local_, end);
  }

 private:
  std::shared_ptr<slot_keeper> keeper_;
  std::string id_;
  bool on_local_;
};

/// How many slots a renewal's outcome found no longer held.
std::uint64_t lost_in(const limiter::check_outcome& out) {
  return static_cast<std::uint64_t>(
      std::count_if(out.limits.begin(), out.limits.end(),
                    [](const limiter::limit_outcome& l) { return !l.admits; }));
}

}  // namespace

slot_keeper::slot_keeper(asio::any_io_executor ex, std::shared_ptr<store::counter_store> store,
                         store::memory_store& local, std::string prefix)
    : ex_(ex), store_(std::move(store)), local_(local), book_(std::move(prefix)), local_book_("") {
  if (ex_) timer_.emplace(ex_);
}

std::string slot_keeper::stamp(limiter::check_request& check) {
  std::string id = book_.next_id();
  limiter::slot_book::stamp(check, id);
  return id;
}

http::exchange_watch slot_keeper::hold(const std::string& id, const limiter::check_request& sent,
                                       const limiter::check_outcome& out, bool on_local) {
  limiter::slot_book& book = on_local ? local_book_ : book_;
  if (book.hold(id, sent, out) == 0) return {};
  start_renewal();
  return http::exchange_watch(std::make_unique<slot_hook>(shared_from_this(), id, on_local));
}

void slot_keeper::release(const std::string& id, bool on_local, http::exchange_end end) noexcept {
  try {
    limiter::check_request req = (on_local ? local_book_ : book_).release(id);
    if (req.limits.empty()) return;
    ++counts_.releases[static_cast<std::size_t>(end)];
    if (on_local) {
      (void)local_.decide(req);
      return;
    }
    limiter::check_outcome now;
    if (store_->decide_now(req, now)) return;  // the memory store: released at once
    ++pending_;
    send_detached(ex_, store_, std::move(req), [self = shared_from_this()](bool released) {
      --self->pending_;
      if (!released) ++self->counts_.release_failures;
    });
  } catch (...) {
    ++counts_.release_failures;  // (an allocation failed: the slot expires instead)
  }
}

void slot_keeper::start_renewal() {
  if (renewing_ || stopped_ || !ex_) return;
  renewing_ = true;
  asio::co_spawn(
      ex_, [self = shared_from_this()]() { return self->renew(); }, asio::detached);
}

asio::awaitable<void> slot_keeper::renew() {
  // Idle (no loop) while nothing is held: hold() starts it again.
  while (!stopped_ && held() > 0) {
    std::int64_t period = book_.renew_period_ms();
    const std::int64_t local_period = local_book_.renew_period_ms();
    if (period == 0 || (local_period > 0 && local_period < period)) period = local_period;
    timer_->expires_after(std::chrono::milliseconds(period));
    boost::system::error_code ec;
    co_await timer_->async_wait(asio::redirect_error(asio::use_awaitable, ec));
    if (stopped_) break;
    if (local_book_.held() > 0) counts_.lost += lost_in(local_.decide(local_book_.renewal()));
    if (book_.held() > 0) {
      limiter::check_request req = book_.renewal();
      limiter::check_outcome now;
      if (store_->decide_now(req, now)) {
        counts_.lost += lost_in(now);
      } else {
        const auto renewed = co_await store_->check(std::move(req));
        if (renewed) counts_.lost += lost_in(*renewed);
      }
    }
  }
  renewing_ = false;
}

slot_counts slot_keeper::counts() const {
  slot_counts c = counts_;
  for (const auto* book : {&book_, &local_book_})
    for (const auto& [name, n] : book->held_by_limit()) c.held[name] += n;
  return c;
}

void slot_keeper::stop() {
  stopped_ = true;
  if (timer_) timer_->cancel();
}

}  // namespace sluice::app
