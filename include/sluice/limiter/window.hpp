// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// Window algorithms in exact integer units: fixed window, sliding window counter and sliding
/// log. This is the reference that `lua/fixed_window.lua`, `lua/sliding_window.lua` and
/// `lua/sliding_log.lua` mirror operation for operation; the table tests
/// (tests/unit/store/*_table_test.cpp) hold the memory store and the scripts to one table.
///
/// A limit `N/P` reads as "at most N units per window of P ms" (bucket_params::window_limit,
/// window_ms). Windows are aligned to multiples of P on the store's clock (ms since the Unix
/// epoch), so window k covers [k·P, (k+1)·P). Every quantity is an integer: counts are at most
/// N (a stored count above N, left by a lowered limit, is read as N), and the sliding counter's
/// products are at most N·P, which validation keeps at most 2^53 (exact in Lua doubles).
///
/// Outcomes follow DESIGN.md, "Headers and bodies": Limit = N; Remaining = whole units
/// spendable right after this decision; Reset = ms until Remaining would equal N again;
/// Retry-After = ms until `cost` would be admitted with no further traffic; next = ms until
/// Remaining grows by one. Every key's expiry is its Reset (nothing to remember after it).

#include "sluice/limiter/check.hpp"

#include <cstdint>
#include <deque>

namespace sluice::limiter {

/// Counters of a window algorithm, as stored: window index `index` = floor(start / P),
/// `current` units counted in that window, `previous` in the window before it (sliding
/// counter only; always 0 for the fixed window).
struct window_counts {
  std::int64_t index = 0;
  std::int64_t current = 0;
  std::int64_t previous = 0;
};

/// Stored counters brought to store time `now_ms` (nullptr: nothing stored). The result's
/// index is now's window, or the stored one when the clock stepped back behind it (no time
/// elapses then). Fixed window: another window's count reads as 0. Sliding counter: the
/// stored window becomes `previous` when it is the one just before now's, and both read as 0
/// when it is older. Counts are clamped to [0, 2N] (above N: a debt settled_counts() left).
/// `now_eff_ms` receives max(now, start).
window_counts current_counts(const window_counts* stored, const bucket_params& p,
                             config::algorithm a, std::int64_t now_ms, std::int64_t& now_eff_ms);

/// Settling (check_request::settle) counters `c` brought to now (current_counts()): a charge
/// (`units` > 0) is counted in the current window — the cost is known now — up to 2N (a count
/// above N is a debt: nothing more is admitted until the window has rolled it away); a refund
/// (`units` < 0) is taken off the window the units were spent in, the one holding store time
/// `taken_at_ms` (< 0: the current one), never below 0: the current window's count, the
/// sliding counter's previous one when the units were spent in the window just before, and
/// nothing when that window has ended (its units expired with it: refunding them into a newer
/// window would admit more than the limit). lua/window.lua's window_settle mirrors it.
window_counts settled_counts(const window_counts& c, const bucket_params& p, config::algorithm a,
                             std::int64_t units, std::int64_t taken_at_ms);

/// Whether `need` more units fit now (need <= N): fixed window: current + need <= N; sliding
/// counter: previous·(P − elapsed)/P + current + need <= N, compared exactly as
/// previous·(P − elapsed) <= (N − current − need)·P.
bool window_admits(const window_counts& c, const bucket_params& p, config::algorithm a,
                   std::int64_t now_ms, std::int64_t need);

/// Milliseconds from `now_ms` until `need` units fit (0 when they fit now), with no further
/// traffic. Fixed window: the window's end. Sliding counter: the first instant at which the
/// weighted estimate admits `need`, possibly in the next window (so it may exceed P: 3/1m after
/// 3 units in the previous window waits 80 − offset s).
std::int64_t window_wait(const window_counts& c, const bucket_params& p, config::algorithm a,
                         std::int64_t now_ms, std::int64_t need);

/// The outcome of a window limit whose counters after the decision are `after` (at
/// `now_ms` = the effective time); `before` are the counters the decision read.
limit_outcome describe_window(const window_counts& before, const window_counts& after,
                              const bucket_params& p, config::algorithm a, std::int64_t now_ms,
                              std::int64_t cost, bool admits);

/// Sliding log: timestamps (ms, ascending, one per admitted unit) of the entries still inside
/// the rolling window (now − P, now]. An entry stamped t stops counting at t + P.
using log_entries = std::deque<std::int64_t>;

/// Drops the entries of `log` that no longer count at `now_ms` (stamp <= now − P). Returns the
/// number dropped. `now_ms` must be at least the newest stamp (see log_now).
std::size_t expire_log(log_entries& log, const bucket_params& p, std::int64_t now_ms);

/// The effective time of a log decision: max(now, newest stamp), so a clock stepped back
/// counts as no time and stamps stay ascending.
std::int64_t log_now(const log_entries& log, std::int64_t now_ms);

/// Milliseconds until `need` (<= N) more units fit in an expired log: 0 when
/// size + need <= N; else the time until the (size + need − N)-th oldest entry expires.
std::int64_t log_wait(const log_entries& log, const bucket_params& p, std::int64_t now_ms,
                      std::int64_t need);

/// The outcome of a sliding-log limit: `before` is the expired log the decision read,
/// `after` the log once debited (or the same).
limit_outcome describe_log(const log_entries& before, const log_entries& after,
                           const bucket_params& p, std::int64_t now_ms, std::int64_t cost,
                           bool admits);

}  // namespace sluice::limiter
