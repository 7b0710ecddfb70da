// SPDX-License-Identifier: Apache-2.0
// The store step (store_step.hpp). Order of the ladder and why:
//   memory store   decided at once, no lease, no cache (nothing to save)
//   leases         a limit this worker's lease covers is paid from it (no round trip at all
//                  when every limit is covered)
//   refusal cache  a standing refusal of the same key and cost answers without a round trip —
//                  unless tokens of an ended lease ride on the check (the store would not get
//                  them back)
//   store          one round trip for the rest; a lone enforced limit's refusal is remembered
#include "store_step.hpp"

#include "sluice/errc.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>

#include <algorithm>
#include <optional>

namespace sluice::app {
namespace {

/// send_detached()'s coroutine (parameters by value: it outlives its caller's frame).
boost::asio::awaitable<void> detached_call(std::shared_ptr<store::counter_store> store,
                                           limiter::check_request req,
                                           std::function<void(bool)> done) {
  store_result answered{make_error_code(sluice::errc::store_unavailable)};
  if (req.settle) {
    answered = co_await store->settle(std::move(req));
  } else {
    answered = co_await store->check(std::move(req));
  }
  done(static_cast<bool>(answered));
}

/// Sets each limit's lease size (`lease:`) on `check`, which is parallel to `limits`, for
/// lease_book::split().
void set_leases(const std::vector<const config::limit*>& limits, limiter::check_request& check) {
  for (std::size_t i = 0; i < check.limits.size(); ++i) check.limits[i].lease = limits[i]->lease;
}

/// Whether a limit of `check` returns tokens of an ended lease (the over-limit cache must
/// not answer such a check: the store would not get them back).
bool carries_refund(const limiter::check_request& check) {
  return std::any_of(check.limits.begin(), check.limits.end(),
                     [](const limiter::limit_check& l) { return l.refund > 0; });
}

}  // namespace

void send_detached(const boost::asio::any_io_executor& ex,
                   std::shared_ptr<store::counter_store> store, limiter::check_request req,
                   std::function<void(bool)> done) noexcept {
  if (!ex) {
    done(false);
    return;
  }
  try {
    boost::asio::co_spawn(ex, detached_call(std::move(store), std::move(req), done),
                          boost::asio::detached);
  } catch (...) {
    done(false);
  }
}

bool store_step::decide_now(const limiter::check_request& check, store_result& decided) {
  if (!store_->decides_in_memory()) return false;  // (no clock read on the Redis path)
  const auto asked = std::chrono::steady_clock::now();
  limiter::check_outcome now;
  if (!store_->decide_now(check, now)) return false;
  decided = std::move(now);
  counters_.store_check.observe(std::chrono::steady_clock::now() - asked);
  return true;
}

boost::asio::awaitable<void> store_step::decide(limiter::check_request& check,
                                                const store_plan& plan, store_result& decided) {
  if (decide_now(check, decided)) co_return;
  const auto asked = std::chrono::steady_clock::now();
  const std::uint64_t epoch = store_->connection_epoch();
  // Token leasing: the limits a lease of this worker covers are taken out of `check`.
  limiter::lease_split leased;
  bool leasing = false;
  if (plan.leases) {
    set_leases(*plan.limits, check);
    leasing = leases_.split(check, *plan.lease_time, plan.generation, epoch, asked, leased);
  }
  if (leasing && check.limits.empty()) {
    decided = leases_.settle(leased, nullptr, asked);  // paid from leases: no round trip
    co_return;
  }
  limiter::check_outcome now;
  if (plan.over_limit_cache && !carries_refund(check) &&
      refusals_.recall(check, plan.generation, asked, now, epoch)) {
    decided = std::move(now);  // the store's refusal of this key and cost still stands
  } else {
    // A refusal of a lone limit is remembered (limiter::refusal_cache).
    std::optional<limiter::limit_check> lone;
    if (plan.over_limit_cache && check.limits.size() == 1 && !check.limits.front().shadow)
      lone = check.limits.front();
    // The request is needed again only for a local decision after a failure (with leases,
    // lease_book::failed() gives it back). (A named local, not a conditional temporary
    // inside co_await: GCC 12 miscompiles that.)
    const bool keep = !leasing && plan.keep_for_failure;
    limiter::check_request sent = keep ? check : std::move(check);
    decided = co_await store_->check(std::move(sent));
    counters_.store_check.observe(std::chrono::steady_clock::now() - asked);
    if (decided && lone) refusals_.remember(*lone, *decided, plan.generation, asked, epoch);
  }
  if (leasing && decided) {
    decided = leases_.settle(leased, &*decided, std::chrono::steady_clock::now());
  } else if (leasing) {
    leases_.failed(leased, check);  // `check`: the whole request again, for `local`
  }
}

boost::asio::awaitable<store_result> store_step::peek(limiter::check_request check) {
  check.peek = true;  // nothing is written, nothing spent
  limiter::check_outcome now;
  if (store_->decide_now(check, now)) co_return store_result{std::move(now)};
  co_return co_await store_->check(std::move(check));
}

}  // namespace sluice::app
