// SPDX-License-Identifier: Apache-2.0
// The over-limit cache (include/sluice/limiter/refusal_cache.hpp).

#include "sluice/limiter/refusal_cache.hpp"

#include <algorithm>
#include <atomic>

namespace sluice::limiter {
namespace {

bool same_limit(const limit_check& a, const limit_check& b) {
  const auto& x = a.bucket;
  const auto& y = b.bucket;
  return a.algorithm == b.algorithm && a.cost == b.cost && a.shadow == b.shadow &&
         a.block_ms == b.block_ms && x.refill_per_ms == y.refill_per_ms &&
         x.units_per_token == y.units_per_token && x.burst == y.burst &&
         x.window_ms == y.window_ms && x.window_limit == y.window_limit;
}

}  // namespace

bool refusal_cache::recall(const check_request& req, std::uint64_t generation,
                           clock::time_point now, check_outcome& out, std::uint64_t epoch) {
  if (req.limits.size() != 1 || entries_.empty()) return false;
  if (lifts_seen_ != block_lifts()) {
    // A block was lifted on this gateway (POST /admin/unblock): forget every refusal.
    lifts_seen_ = block_lifts();
    entries_.clear();
    return false;
  }
  const auto it = entries_.find(req.limits.front().key);
  if (it == entries_.end()) return false;
  const entry& e = it->second;
  if (now >= e.until || e.generation != generation || e.epoch != epoch ||
      !same_limit(e.limit, req.limits.front())) {
    entries_.erase(it);
    return false;
  }
  const std::int64_t elapsed =
      std::chrono::duration_cast<std::chrono::milliseconds>(now - e.sent).count();
  out = e.outcome;
  out.now_ms = e.outcome.now_ms + elapsed;
  limit_outcome& lo = out.limits.front();
  lo.block = limit_outcome::block_event::none;  // (in force, not started again)
  // Still > 0: `until` is at most sent + min(retry_after, next).
  lo.reset_ms = std::max<std::int64_t>(1, lo.reset_ms - elapsed);
  lo.retry_after_ms = std::max<std::int64_t>(1, lo.retry_after_ms - elapsed);
  lo.next_ms = std::max<std::int64_t>(1, lo.next_ms - elapsed);
  ++hits_;
  return true;
}

void refusal_cache::remember(const limit_check& limit, const check_outcome& out,
                             std::uint64_t generation, clock::time_point sent,
                             std::uint64_t epoch) {
  if (limit.shadow || out.allowed || out.limits.size() != 1) return;
  // A concurrency slot frees whenever a request of the key ends, any moment: its refusal
  // holds for no time that the cache could count on.
  if (limit.algorithm == config::algorithm::concurrency) return;
  const limit_outcome& lo = out.limits.front();
  if (lo.admits || lo.retry_after_ms <= 0 || lo.next_ms <= 0) return;
  std::int64_t window = std::min(lo.retry_after_ms, lo.next_ms);
  // A block is lifted by an admin call on any gateway: one in force is answered from here
  // for at most block_recheck, then asked of the store again.
  if (lo.block_end_ms > 0) window = std::min(window, block_recheck.count());
  // A calendar quota's refusal can stand for days, and its end is on the store's clock, which
  // this worker's monotonic clock follows only approximately over that long (NTP slews the
  // store host's clock; an operator may step it). Kept at most calendar_hold_ms, a cached
  // refusal cannot outlive the period's end on the store by more than that.
  if (limit.algorithm == config::algorithm::calendar) window = std::min(window, calendar_hold_ms);
  const auto until = sent + std::chrono::milliseconds(window);
  if (until <= clock::now()) return;
  if (entries_.size() >= capacity_ && !entries_.contains(limit.key)) {
    const auto now = clock::now();
    std::erase_if(entries_, [now](const auto& kv) { return kv.second.until <= now; });
    if (entries_.size() >= capacity_) entries_.clear();
  }
  entries_.insert_or_assign(limit.key, entry{limit, generation, epoch, sent, until, out});
}

namespace {
std::atomic<std::uint64_t> lifts{0};
}  // namespace

std::uint64_t block_lifts() noexcept {
  return lifts.load(std::memory_order_acquire);
}

void note_block_lift() noexcept {
  lifts.fetch_add(1, std::memory_order_acq_rel);
}

}  // namespace sluice::limiter
