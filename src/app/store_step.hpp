// SPDX-License-Identifier: Apache-2.0
#pragma once
// The request path's store step, private to the app room: one prepared check_request decided
// by the counter store, with what a worker keeps in front of the store — token leases
// (limiter::lease_book) and the over-limit cache (limiter::refusal_cache). The request path's
// drivers (decide_now on the memory store, decide, `GET /admin/explain`) all decide through
// it. The store calls made after a request (settlements, charge_hook.hpp; slot releases and
// renewals, slot_keeper.hpp) are started with send_detached().

#include "request_counters.hpp"

#include "sluice/limiter/check.hpp"
#include "sluice/limiter/lease_book.hpp"
#include "sluice/limiter/refusal_cache.hpp"
#include "sluice/store/counter_store.hpp"

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/system/result.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

namespace sluice::app {

/// What the store step needs to know of the request's limits and the rules in force.
struct store_plan {
  /// The limits of the check, parallel to check_request::limits (their `lease:` sizes).
  const std::vector<const config::limit*>* limits = nullptr;
  /// Their lease times (parallel); read only when `leases`.
  const std::vector<std::chrono::milliseconds>* lease_time = nullptr;
  bool leases = false;            ///< some limit leases (`lease: N`)
  bool over_limit_cache = false;  ///< `store.over_limit_cache` of the rules in force
  std::uint64_t generation = 0;   ///< the rules snapshot's generation
  /// The check is needed again after a store failure (`on_store_failure: local` decides it
  /// on the per-instance store): the store gets a copy, not the check itself.
  bool keep_for_failure = false;
};

/// The result of the store step: the outcome, or the store's error (errc::store_*).
using store_result = boost::system::result<limiter::check_outcome>;

/// Starts a store call that no request waits for (a settlement, a slot release or renewal) on
/// `ex`, the worker's executor: `store.settle(req)` when req.settle, else `store.check(req)`;
/// then `done(true)` when the store answered, `done(false)` when it did not. A call that cannot
/// start (no executor: a handler made without one; an allocation failure) is `done(false)` at
/// once. Never throws; `done` runs on the worker's thread.
void send_detached(const boost::asio::any_io_executor& ex,
                   std::shared_ptr<store::counter_store> store, limiter::check_request req,
                   std::function<void(bool)> done) noexcept;

/// The store step of one worker. Worker thread only (its lease book and refusal cache are
/// the worker's own; the store is the worker's connection, or the shared memory store).
class store_step {
 public:
  store_step(std::shared_ptr<store::counter_store> store, request_counters& counters)
      : store_(std::move(store)), counters_(counters) {}

  /// Whether the store always decides in memory (the memory store): decide_now() then never
  /// returns false, and the request path needs no coroutine frame.
  bool in_memory() const { return store_->decides_in_memory(); }

  /// Decides `check` without waiting, on a store that decides in memory: true with `decided`
  /// set and the store-check histogram observed; false (nothing done, no clock read) on a
  /// store that needs a round trip.
  bool decide_now(const limiter::check_request& check, store_result& decided);

  /// Decides `check` as the request path does: in memory when the store can; else with the
  /// limits this worker's leases cover taken out of the check (no round trip when they cover
  /// all), the over-limit cache asked first (a standing refusal of the same key and cost is
  /// answered without a round trip), one store round trip for the rest, and a refusal of a
  /// lone enforced limit remembered. On a store failure `decided` holds the error and, when
  /// `plan.keep_for_failure`, `check` holds the whole request again (for the `local` policy).
  /// `decided` must hold an error on entry (a store failure when nothing else sets it).
  boost::asio::awaitable<void> decide(limiter::check_request& check, const store_plan& plan,
                                      store_result& decided);

  /// `GET /admin/explain`: what `check` would get now, writing nothing (check_request::peek
  /// is set); neither leases nor the over-limit cache are read or changed.
  boost::asio::awaitable<store_result> peek(limiter::check_request check);

  /// The store this step decides on.
  store::counter_store& store() { return *store_; }
  /// The same, shared (a charge hook settles on it after the request's handler returned).
  const std::shared_ptr<store::counter_store>& shared_store() const { return store_; }
  /// This worker's standing refusals (Redis store only).
  const limiter::refusal_cache& refusals() const { return refusals_; }
  /// This worker's token leases (lease: N; Redis store only).
  const limiter::lease_book& leases() const { return leases_; }

 private:
  std::shared_ptr<store::counter_store> store_;
  request_counters& counters_;       // the store-check histogram
  limiter::refusal_cache refusals_;  // the store's standing refusals (Redis store only)
  limiter::lease_book leases_;       // tokens this worker took ahead (Redis store only)
};

}  // namespace sluice::app
