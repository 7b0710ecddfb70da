// SPDX-License-Identifier: Apache-2.0
// The charge hook (charge_hook.hpp). Why debit-then-refund for `when_status`: the check that
// admits a request takes its units like any limit's (so the limit refuses while no unit is
// left, decided atomically with the request's other limits, with no change to the store's
// check), and the units come back when the response does not match. A request in flight
// holds its units until its response ends: the limit is never exceeded, at the price of
// refusing a request while others in flight hold units they will get back.
#include "charge_hook.hpp"

#include "store_step.hpp"

#include "sluice/http/response_head.hpp"

#include <boost/beast/core/string.hpp>

#include <algorithm>
#include <charconv>

namespace sluice::app {

std::string_view settle_outcome_label(std::size_t i) {
  constexpr std::string_view first[] = {"settled", "refunded", "charged", "fallback"};
  if (i < 4) return first[i];
  return limiter::label(static_cast<limiter::usage_failure>(i - 4));
}

settlement settle_for(const config::charge_rule& rule, std::int64_t taken, std::int64_t limit,
                      unsigned status, const std::optional<limiter::usage_reading>& reading) {
  if (rule.what == config::charge_rule::kind::when_status) {
    if (rule.matches(status)) return {0, outcome_settled};
    return {-taken, outcome_refunded};
  }
  const std::int64_t fallback = rule.fallback < 0 ? taken : rule.fallback;
  std::int64_t cost = fallback;
  std::size_t outcome = outcome_fallback;
  if (reading && reading->cost && !reading->failure) {
    cost = static_cast<std::int64_t>(*reading->cost);
    outcome = cost == taken ? outcome_settled : cost < taken ? outcome_refunded : outcome_charged;
  } else if (reading && reading->failure) {
    outcome = 4 + static_cast<std::size_t>(*reading->failure);
    // A cut body after a whole part said a cost: at least what was read, never below the
    // reservation (the cut part may have cost more).
    if (reading->cost && *reading->failure == limiter::usage_failure::cut)
      cost = std::max(static_cast<std::int64_t>(
                          std::min<std::uint64_t>(*reading->cost, limiter::default_max_usage)),
                      taken);
  }
  // (A usage above the source's max_cost is `too_large`: settled at the fallback.)
  const std::int64_t units = std::clamp<std::int64_t>(cost - taken, -taken, limit);
  return {units, outcome};
}

charge_hook::charge_hook(std::shared_ptr<const config::rules> rules,
                         std::shared_ptr<store::counter_store> store,
                         boost::asio::any_io_executor executor,
                         std::shared_ptr<settle_counters> counters,
                         std::vector<charged_limit> limits, std::int64_t taken_at_ms,
                         std::shared_ptr<reservation_ledger> ledger)
    : rules_(std::move(rules)),
      store_(std::move(store)),
      executor_(std::move(executor)),
      counters_(std::move(counters)),
      limits_(std::move(limits)),
      taken_at_ms_(taken_at_ms),
      ledger_(std::move(ledger)) {
  if (ledger_)
    for (const charged_limit& c : limits_) ledger_->open(c.check.key, c.check.cost);
  scanners_.resize(limits_.size());
  for (std::size_t i = 0; i < limits_.size(); ++i)
    if (limits_[i].source)
      scanners_[i] = std::make_unique<limiter::usage_scanner>(*limits_[i].source);
}

charge_hook::~charge_hook() {
  close_ledger();
}

void charge_hook::close_ledger() noexcept {
  if (!ledger_) return;
  for (const charged_limit& c : limits_) ledger_->close(c.check.key, c.check.cost);
  ledger_.reset();
}

void charge_hook::on_response_head(const http::response_head& head) noexcept {
  head_seen_ = true;
  const std::string_view type = head[boost::beast::http::field::content_type];
  std::optional<std::uint64_t> length;
  if (const std::string_view cl = head[boost::beast::http::field::content_length]; !cl.empty()) {
    std::uint64_t n = 0;
    const auto [end, ec] = std::from_chars(cl.data(), cl.data() + cl.size(), n);
    if (ec == std::errc{} && end == cl.data() + cl.size()) length = n;
  }
  for (std::size_t i = 0; i < limits_.size(); ++i) {
    if (!scanners_[i]) continue;
    // A header source's value; repeated field lines joined by ", " (RFC 9110 §5.3), which
    // read_usage_header() reads as not_a_number: two costs in one response say no one cost.
    std::optional<std::string_view> value;
    std::string joined;
    const std::string& name = limits_[i].source->header;
    if (!name.empty()) {
      for (const auto& line : head) {
        if (!boost::beast::iequals(line.name_string(), name)) continue;
        if (value) {
          if (joined.empty()) joined.assign(*value);
          joined.append(", ").append(line.value());
          value = joined;
        } else {
          value = line.value();
        }
      }
    }
    scanners_[i]->start(type, value, length);
  }
}

void charge_hook::on_body(std::string_view bytes) noexcept {
  for (auto& s : scanners_)
    if (s && s->wants_body()) s->feed(bytes);
}

void charge_hook::on_end(http::exchange_end end, unsigned upstream_status) noexcept {
  close_ledger();  // settled below (or nothing to settle)
  limiter::check_request req;
  req.settle = true;
  for (std::size_t i = 0; i < limits_.size(); ++i) {
    const charged_limit& c = limits_[i];
    std::optional<limiter::usage_reading> reading;
    if (scanners_[i] && head_seen_)
      reading = scanners_[i]->finish(end == http::exchange_end::complete);
    const settlement s = settle_for(*c.rule, c.check.cost, c.check.bucket.quota(c.check.algorithm),
                                    upstream_status, reading);
    counters_->by_outcome[s.outcome].add();
    if (s.units == 0) continue;
    limiter::limit_check l = c.check;
    l.settle = s.units;
    l.taken_at_ms = taken_at_ms_;
    req.limits.push_back(std::move(l));
  }
  if (req.limits.empty()) return;
  // One settle: at once on the memory store, else started on the worker's executor. A failure
  // leaves the units as admission left them (a refund not made refuses early, a charge not made
  // admits late, each bounded by this request's difference).
  if (auto done = store_->settle_now(req)) {
    if (!*done) counters_->store_failures.add();
    return;
  }
  send_detached(executor_, store_, std::move(req), [counters = counters_](bool ok) {
    if (!ok) counters->store_failures.add();
  });
}

}  // namespace sluice::app
