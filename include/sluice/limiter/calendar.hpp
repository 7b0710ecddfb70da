// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// Calendar quotas (`algorithm: calendar`, `rate: N/day | N/week | N/month`, `utc_offset`):
/// at most N units per calendar day, ISO week (Monday 00:00 to Monday 00:00) or month, in UTC
/// or at a fixed offset from it, on the store's clock. This is the reference that
/// `lua/calendar.lua` mirrors operation for operation (the table tests hold both to one table).
///
/// Civil dates are computed with exact integer arithmetic, no time zone database and no
/// floating point: days_from_civil() and civil_from_days() are the proleptic Gregorian
/// conversions of H. Hinnant, "chrono-Compatible Low-Level Date Algorithms" (2013), which
/// count 400-year eras of 146,097 days starting each year on March 1st, so a leap day is the
/// last day of its computational year (2000 and 2024 leap; 1900 and 2100 not).
///
/// A period is a count of local periods since the Unix epoch (`index`): local days, local ISO
/// weeks (week 0 starts Monday 1969-12-29), or months (year × 12 + month − 1). Its bounds in
/// store time are the local midnights converted back by the offset. The counter is a fixed
/// window whose window is the period: Limit = N, Remaining = N − count, Reset = Retry-After =
/// next = ms to the period's end (while something is counted), and the state expires then.

#include "sluice/limiter/check.hpp"
#include "sluice/limiter/window.hpp"

#include <cstdint>
#include <string>

namespace sluice::limiter {

/// `day`, `week` or `month` (the rules file's word); "" for calendar_unit::none.
const char* calendar_unit_name(config::calendar_unit unit);

/// An offset in minutes east of UTC as the rules file writes it: `+05:30`, `-08:00`, `+00:00`.
std::string utc_offset_text(std::int32_t offset_minutes);

/// Milliseconds in a day.
inline constexpr std::int64_t ms_per_day = 86'400'000;

/// Days since 1970-01-01 of the proleptic Gregorian date y-m-d (m 1..12, d 1..31); negative
/// before 1970. Exact for every date whose day count fits an int64.
std::int64_t days_from_civil(std::int64_t y, int m, int d);

/// A civil date.
struct civil_date {
  std::int64_t year = 1970;
  int month = 1;  ///< 1..12
  int day = 1;    ///< 1..31
};

/// The civil date of day `days` since 1970-01-01 (the inverse of days_from_civil()).
civil_date civil_from_days(std::int64_t days);

/// Store time `ms` (since the Unix epoch) as an RFC 3339 local time at `offset_minutes`:
/// `2027-01-01T00:00:00+05:30` (whole seconds, floored; `+00:00` for UTC).
std::string local_time_text(std::int64_t ms, std::int32_t offset_minutes);

/// One calendar period in store time (ms since the Unix epoch).
struct calendar_period {
  std::int64_t index = 0;     ///< local periods since the epoch (see the file comment)
  std::int64_t start_ms = 0;  ///< first ms of the period
  std::int64_t end_ms = 0;    ///< first ms of the next period
};

/// The period of `unit` at `offset_minutes` east of UTC with index `index`.
calendar_period calendar_period_of(config::calendar_unit unit, std::int32_t offset_minutes,
                                   std::int64_t index);

/// The period of `unit` at `offset_minutes` east of UTC that holds store time `now_ms`.
calendar_period calendar_period_at(config::calendar_unit unit, std::int32_t offset_minutes,
                                   std::int64_t now_ms);

/// The zone tag stored with a calendar count: unit + 4 × (offset + 840), 0 .. 6723. A count
/// stored under another unit or offset (the limit was changed on reload) reads as nothing.
std::int64_t calendar_zone(config::calendar_unit unit, std::int32_t offset_minutes);

/// The counters of a calendar limit (window_counts: `index`, `current`; `previous` holds the
/// zone tag) brought to `now_ms`: now's period and its count (0 for a count of another period
/// or zone). A stored period later than now's (the store's clock stepped back) stays current,
/// read at its start: no time elapses. `period` receives the period the decision is in and
/// `now_eff_ms` max(now, its start). Counts are clamped to [0, N].
window_counts calendar_counts(const window_counts* stored, const bucket_params& p,
                              std::int64_t now_ms, calendar_period& period,
                              std::int64_t& now_eff_ms);

/// The outcome of a calendar limit: `before` the counts the decision read, `after` the
/// counts once debited (or the same), at effective time `now_ms` inside `period`.
limit_outcome describe_calendar(const window_counts& before, const window_counts& after,
                                const bucket_params& p, const calendar_period& period,
                                std::int64_t now_ms, std::int64_t cost, bool admits);

}  // namespace sluice::limiter
