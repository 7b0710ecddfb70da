// SPDX-License-Identifier: Apache-2.0
#pragma once
// Costs known after the response (`charge:` of a limit, config::charge_rule), private to the
// app room: the exchange hook a forwarded request carries when one of its limits has a
// charge, and the arithmetic of a settlement. Admission took each charged limit's units (the
// route's cost for `when_status`, the reservation for a settled cost) in the one store check;
// when the exchange ends the hook settles the difference with one counter_store::settle call
// (started on the worker's executor, never awaited by the relay).

#include "sluice/config/rules.hpp"
#include "sluice/http/exchange_hook.hpp"
#include "sluice/limiter/check.hpp"
#include "sluice/limiter/usage_scanner.hpp"
#include "sluice/observability/metrics.hpp"
#include "sluice/store/counter_store.hpp"

#include "reservation_ledger.hpp"

#include <boost/asio/any_io_executor.hpp>

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string_view>
#include <vector>

namespace sluice::app {

/// How one charged limit of one request was settled — the `outcome` label of
/// `sluice_settlements_total`: `settled` (the cost read equals the units taken: nothing sent;
/// a `when_status` match), `refunded`, `charged` (a cost read above the reservation),
/// `fallback` (no response to read: the upstream failed or never got the request, the client
/// went away before the head), then one per limiter::usage_failure (the response was read and
/// its cost could not be: no_header, not_json, ..., cut).
inline constexpr std::size_t settle_outcome_count = 4 + limiter::usage_failure_count;
inline constexpr std::size_t outcome_settled = 0, outcome_refunded = 1, outcome_charged = 2,
                             outcome_fallback = 3;
/// The label of outcome `i` (< settle_outcome_count).
std::string_view settle_outcome_label(std::size_t i);

/// A worker's settlement counters. Written on the worker's thread (by its hooks); read by any
/// thread. Shared with the hooks, which may end after a request's handler returned.
struct settle_counters {
  std::array<observability::owned_counter, settle_outcome_count> by_outcome;
  observability::owned_counter store_failures;  ///< settle calls the store did not confirm
};

/// What one charged limit of one request is settled by, and the metric outcome.
struct settlement {
  std::int64_t units = 0;  ///< charged (> 0) or refunded (< 0) now; within ±Limit
  std::size_t outcome = outcome_settled;
};

/// The settlement of a limit with charge `rule` that took `taken` units at admission, whose
/// Limit is `limit`, for an exchange whose final status is `status` (0: none) and whose cost
/// reading is `reading` (settled costs only; nullopt when no response head was read).
/// - when_status: a matching status keeps the units (settled); any other, or none, refunds them.
/// - settle: a cost read cleanly settles at it (refund or charge); a body cut after a cost was
///   read settles at max(read, taken) (`cut`); anything else settles at the fallback (the
///   reservation, or rule.fallback units), labelled by its reason.
/// A charge is capped at `limit` (a settle moves a bucket by at most one Limit).
settlement settle_for(const config::charge_rule& rule, std::int64_t taken, std::int64_t limit,
                      unsigned status, const std::optional<limiter::usage_reading>& reading);

/// One charged limit of an admitted request: its check as decided (limit_check::cost = the
/// units taken), its rule (owned by `rules` of the hook) and, for a settled cost, where the
/// cost is read.
struct charged_limit {
  limiter::limit_check check;
  const config::charge_rule* rule = nullptr;
  std::shared_ptr<const limiter::usage_source> source;  ///< null for when_status
};

/// The exchange hook of a request with charged limits. Scans the response (head, body as it
/// streams: observed, never held) for each settled cost, and on the end settles every limit
/// whose units change in one counter_store::settle call: at once on a store that decides in
/// memory, else co_spawned on `executor` (the worker's). Worker thread only.
class charge_hook final : public http::exchange_hook {
 public:
  /// `taken_at_ms`: the admission's check_outcome::now_ms (a window's refund comes off the
  /// window the units were taken in). `ledger` (may be null) counts the units taken as
  /// outstanding from now until on_end() sends the settlement, or the hook is destroyed.
  charge_hook(std::shared_ptr<const config::rules> rules,
              std::shared_ptr<store::counter_store> store, boost::asio::any_io_executor executor,
              std::shared_ptr<settle_counters> counters, std::vector<charged_limit> limits,
              std::int64_t taken_at_ms, std::shared_ptr<reservation_ledger> ledger = nullptr);
  ~charge_hook() override;

  void on_response_head(const http::response_head& head) noexcept override;
  void on_body(std::string_view bytes) noexcept override;
  void on_end(http::exchange_end end, unsigned upstream_status) noexcept override;

 private:
  std::shared_ptr<const config::rules> rules_;  // keeps every charged_limit::rule alive
  std::shared_ptr<store::counter_store> store_;
  boost::asio::any_io_executor executor_;
  std::shared_ptr<settle_counters> counters_;
  std::vector<charged_limit> limits_;
  /// Parallel to limits_: a scanner per settled cost (null for when_status).
  std::vector<std::unique_ptr<limiter::usage_scanner>> scanners_;
  std::int64_t taken_at_ms_;
  std::shared_ptr<reservation_ledger> ledger_;  // null: none; reset once closed
  bool head_seen_ = false;

  void close_ledger() noexcept;
};

}  // namespace sluice::app
