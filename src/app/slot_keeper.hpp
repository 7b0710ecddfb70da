// SPDX-License-Identifier: Apache-2.0
#pragma once
// Concurrency slots on the gateway, private to the app room: a worker's slot keeper stamps a
// request's check with a slot id, records the slots the decision took (limiter::slot_book),
// gives them back when the exchange ends (a response-end hook, http::exchange_hook) and
// renews them while they are held. Two books: the slots taken on the worker's counter store,
// and those `on_store_failure: local` took on the per-instance store.

#include "sluice/http/exchange_hook.hpp"
#include "sluice/limiter/check.hpp"
#include "sluice/limiter/slot_book.hpp"
#include "sluice/store/counter_store.hpp"
#include "sluice/store/memory_store.hpp"

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/steady_timer.hpp>

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>

namespace sluice::app {

/// What a worker's slot keeper has counted, read on the worker's thread (a metrics scrape).
struct slot_counts {
  /// Slots held now, by limit name (both books).
  std::map<std::string, std::int64_t> held;
  /// Requests whose slots were released, by how their exchange ended (http::exchange_end).
  std::array<std::uint64_t, http::exchange_end_count> releases{};
  /// Slots a renewal found no longer held (expired: the store was out of reach for longer
  /// than slot_ttl, or its clock jumped). Such a request runs on without a slot.
  std::uint64_t lost = 0;
  /// Release calls the store could not answer: their slots expire slot_ttl after their last
  /// renewal instead.
  std::uint64_t release_failures = 0;
};

/// One worker's concurrency slots. Worker thread only. Made shared (the hooks it hands out
/// and its renewal loop hold it), so a hook ended while the worker is torn down stays safe.
class slot_keeper : public std::enable_shared_from_this<slot_keeper> {
 public:
  /// `prefix`: unique across every gateway on the store (instance id and worker index);
  /// `local`: the per-instance store of `on_store_failure: local`.
  slot_keeper(boost::asio::any_io_executor ex, std::shared_ptr<store::counter_store> store,
              store::memory_store& local, std::string prefix);

  /// Sets a new slot id as the slot of every concurrency limit of `check` (op acquire) and
  /// returns it.
  std::string stamp(limiter::check_request& check);

  /// Records the slots `sent` took as `out` decided (`on_local`: on the per-instance store),
  /// under `id`; when any was taken, a watch whose end releases them (once), else an empty
  /// watch. Starts the renewal loop if it is not running.
  http::exchange_watch hold(const std::string& id, const limiter::check_request& sent,
                            const limiter::check_outcome& out, bool on_local);

  /// Releases the slots held under `id` (one store call, started and not awaited), counted
  /// by `end`. Never throws.
  void release(const std::string& id, bool on_local, http::exchange_end end) noexcept;

  /// Release calls started and not yet answered.
  std::size_t pending() const { return pending_; }
  /// Slots held now (both books).
  std::size_t held() const { return book_.held() + local_book_.held(); }
  /// The counts, as a scrape reads them.
  slot_counts counts() const;

  /// Ends the renewal loop (the worker stops).
  void stop();

 private:
  boost::asio::awaitable<void> renew();
  void start_renewal();

  boost::asio::any_io_executor ex_;
  std::shared_ptr<store::counter_store> store_;
  store::memory_store& local_;
  limiter::slot_book book_;                         // slots on store_
  limiter::slot_book local_book_;                   // slots on local_ (ids from book_)
  std::optional<boost::asio::steady_timer> timer_;  // with an executor only
  bool renewing_ = false;
  bool stopped_ = false;
  std::size_t pending_ = 0;
  slot_counts counts_;  // releases, lost, release_failures (held is read from the books)
};

}  // namespace sluice::app
