// SPDX-License-Identifier: Apache-2.0
// Window algorithms in exact integer units: the reference that lua/fixed_window.lua,
// lua/sliding_window.lua and lua/sliding_log.lua mirror operation for operation.
//
// Why integers only: Redis truncates Lua numbers to integers at the boundary and Lua 5.1
// numbers are doubles, so the scripts can be exact only if every intermediate value is an
// integer <= 2^53. Counts are clamped to [0, N] on read, so every product below is at most
// N·P, which config validation bounds by 2^53 for the sliding counter (its weighted estimate
// previous·(P − elapsed)/P + current is compared multiplied out by P, never divided).
#include "sluice/limiter/window.hpp"

#include <algorithm>

namespace sluice::limiter {
namespace {

bool sliding(config::algorithm a) {
  return a == config::algorithm::sliding_window;
}

}  // namespace

window_counts current_counts(const window_counts* stored, const bucket_params& p,
                             config::algorithm a, std::int64_t now_ms, std::int64_t& now_eff_ms) {
  const std::int64_t w = p.window_ms;
  const std::int64_t lim = p.window_limit;
  window_counts out;
  out.index = now_ms / w;
  now_eff_ms = now_ms;
  if (stored == nullptr) return out;
  if (stored->index > out.index) {
    // The clock stepped back behind the stored window: no time elapses (DESIGN.md).
    out.index = stored->index;
    now_eff_ms = stored->index * w;
  }
  // Up to 2N: a count above N is a debt a settled charge left (settled_counts).
  const auto clamp = [lim](std::int64_t v) { return std::clamp<std::int64_t>(v, 0, 2 * lim); };
  if (stored->index == out.index) {
    out.current = clamp(stored->current);
    out.previous = sliding(a) ? clamp(stored->previous) : 0;
  } else if (sliding(a) && stored->index == out.index - 1) {
    out.previous = clamp(stored->current);
  }
  return out;
}

window_counts settled_counts(const window_counts& c, const bucket_params& p, config::algorithm a,
                             std::int64_t units, std::int64_t taken_at_ms) {
  window_counts out = c;
  if (units >= 0) {
    out.current = std::min(c.current + units, 2 * p.window_limit);
    return out;
  }
  const std::int64_t taken = taken_at_ms < 0 ? c.index : taken_at_ms / p.window_ms;
  if (taken == c.index) {
    out.current = std::max<std::int64_t>(0, c.current + units);
  } else if (sliding(a) && taken == c.index - 1) {
    out.previous = std::max<std::int64_t>(0, c.previous + units);
  }  // else: the window the units were taken in has ended; they expired with it
  return out;
}

bool window_admits(const window_counts& c, const bucket_params& p, config::algorithm a,
                   std::int64_t now_ms, std::int64_t need) {
  return window_wait(c, p, a, now_ms, need) == 0;
}

std::int64_t window_wait(const window_counts& c, const bucket_params& p, config::algorithm a,
                         std::int64_t now_ms, std::int64_t need) {
  const std::int64_t w = p.window_ms;
  const std::int64_t lim = p.window_limit;
  const std::int64_t elapsed = now_ms - c.index * w;  // in [0, w)
  const std::int64_t to_end = w - elapsed;
  const std::int64_t room = lim - c.current - need;  // units left besides the previous window's
  if (!sliding(a)) return room >= 0 ? 0 : to_end;

  // Now: previous·(w − elapsed) <= room·w.
  if (room >= 0 && c.previous * to_end <= room * w) return 0;
  // Later in this window, at the first elapsed time e with previous·(w − e) <= room·w, i.e.
  // e = w − floor(room·w / previous), when that is inside the window.
  if (room >= 0 && c.previous > 0) {
    const std::int64_t q = room * w / c.previous;
    if (q >= 1) return (w - q) - elapsed;
  }
  // In the next window, where this window's count is the previous one and nothing is current:
  // current·(w − e) <= (lim − need)·w, i.e. e = max(0, w − floor((lim − need)·w / current)).
  // With need == lim and current > 0 that is e = w: the start of the window after next.
  const std::int64_t spare = lim - need;
  const std::int64_t e = c.current == 0 ? 0 : std::max<std::int64_t>(0, w - spare * w / c.current);
  return to_end + e;
}

limit_outcome describe_window(const window_counts& before, const window_counts& after,
                              const bucket_params& p, config::algorithm a, std::int64_t now_ms,
                              std::int64_t cost, bool admits) {
  const std::int64_t w = p.window_ms;
  const std::int64_t lim = p.window_limit;
  limit_outcome out;
  out.admits = admits;
  out.limit = lim;
  if (sliding(a)) {
    const std::int64_t elapsed = now_ms - after.index * w;
    const std::int64_t spare = (lim - after.current) * w - after.previous * (w - elapsed);
    out.remaining = spare <= 0 ? 0 : spare / w;
  } else {
    out.remaining = std::max<std::int64_t>(0, lim - after.current);
  }
  out.reset_ms = window_wait(after, p, a, now_ms, lim);
  out.retry_after_ms = admits ? 0 : window_wait(before, p, a, now_ms, cost);
  out.next_ms = out.remaining >= lim ? 0 : window_wait(after, p, a, now_ms, out.remaining + 1);
  return out;
}

std::size_t expire_log(log_entries& log, const bucket_params& p, std::int64_t now_ms) {
  std::size_t dropped = 0;
  while (!log.empty() && log.front() <= now_ms - p.window_ms) {
    log.pop_front();
    ++dropped;
  }
  return dropped;
}

std::int64_t log_now(const log_entries& log, std::int64_t now_ms) {
  return log.empty() ? now_ms : std::max(now_ms, log.back());
}

std::int64_t log_wait(const log_entries& log, const bucket_params& p, std::int64_t now_ms,
                      std::int64_t need) {
  const std::int64_t n = static_cast<std::int64_t>(log.size());
  const std::int64_t over = n + need - p.window_limit;  // entries that must expire first
  if (over <= 0) return 0;
  // need <= N, so over <= n: the over-th oldest entry exists.
  return log[static_cast<std::size_t>(over - 1)] + p.window_ms - now_ms;
}

limit_outcome describe_log(const log_entries& before, const log_entries& after,
                           const bucket_params& p, std::int64_t now_ms, std::int64_t cost,
                           bool admits) {
  const std::int64_t lim = p.window_limit;
  limit_outcome out;
  out.admits = admits;
  out.limit = lim;
  out.remaining = std::max<std::int64_t>(0, lim - static_cast<std::int64_t>(after.size()));
  out.reset_ms = log_wait(after, p, now_ms, lim);
  out.retry_after_ms = admits ? 0 : log_wait(before, p, now_ms, cost);
  out.next_ms = out.remaining >= lim ? 0 : log_wait(after, p, now_ms, out.remaining + 1);
  return out;
}

}  // namespace sluice::limiter
