// SPDX-License-Identifier: Apache-2.0
// Calendar quotas in exact integer arithmetic: the reference that lua/calendar.lua mirrors
// operation for operation (see include/sluice/limiter/calendar.hpp).
//
// Why no time zone database: a quota's zone is a fixed offset (utc_offset), so a local time is
// store time + offset, and every boundary is a local midnight converted back by the offset.
// Daylight-saving zones are out of scope (docs/operating.md says so): their days are 23 or 25
// hours long twice a year, and the same offset all year is what an operator can state.
#include "sluice/limiter/calendar.hpp"

#include <algorithm>

namespace sluice::limiter {
namespace {

// floor(a / b) for b > 0 and any a (C++ division truncates toward zero).
constexpr std::int64_t floor_div(std::int64_t a, std::int64_t b) {
  const std::int64_t q = a / b;
  return q - ((a % b) < 0 ? 1 : 0);
}

// Days from 1970-01-01 (a Thursday) to Monday 1969-12-29, where ISO week 0 starts.
constexpr std::int64_t week_shift_days = 3;
// Days from 0000-03-01 (the first day of era 0 in the computational calendar) to 1970-01-01.
constexpr std::int64_t epoch_shift_days = 719'468;
constexpr std::int64_t days_per_era = 146'097;  // 400 Gregorian years

}  // namespace

const char* calendar_unit_name(config::calendar_unit unit) {
  switch (unit) {
    case config::calendar_unit::day:
      return "day";
    case config::calendar_unit::week:
      return "week";
    case config::calendar_unit::month:
      return "month";
    case config::calendar_unit::none:
      break;
  }
  return "";
}

std::string utc_offset_text(std::int32_t offset_minutes) {
  const std::int32_t a = offset_minutes < 0 ? -offset_minutes : offset_minutes;
  std::string out(offset_minutes < 0 ? "-" : "+");
  const auto two = [&out](std::int32_t v) {
    out += static_cast<char>('0' + v / 10);
    out += static_cast<char>('0' + v % 10);
  };
  two(a / 60);
  out += ':';
  two(a % 60);
  return out;
}

std::int64_t days_from_civil(std::int64_t y, int m, int d) {
  // The computational year starts on March 1st: January and February belong to the year
  // before, so the leap day is the last day of a year and month lengths repeat every 5
  // months from March (31 30 31 30 31), which (153 · mp + 2) / 5 counts.
  y -= m <= 2 ? 1 : 0;
  const std::int64_t era = floor_div(y, 400);
  const std::int64_t yoe = y - era * 400;                          // [0, 399]
  const std::int64_t mp = (m + 9) % 12;                            // March = 0 .. February = 11
  const std::int64_t doy = (153 * mp + 2) / 5 + d - 1;             // [0, 365]
  const std::int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;  // [0, 146096]
  return era * days_per_era + doe - epoch_shift_days;
}

civil_date civil_from_days(std::int64_t days) {
  const std::int64_t z = days + epoch_shift_days;
  const std::int64_t era = floor_div(z, days_per_era);
  const std::int64_t doe = z - era * days_per_era;  // [0, 146096]
  // Years of the era: 365 days each, one more every 4th, one fewer every 100th, one more
  // every 400th (the era's last day).
  const std::int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;  // [0, 399]
  const std::int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);                // [0, 365]
  const std::int64_t mp = (5 * doy + 2) / 153;                                     // [0, 11]
  civil_date out;
  out.day = static_cast<int>(doy - (153 * mp + 2) / 5 + 1);
  out.month = static_cast<int>(mp < 10 ? mp + 3 : mp - 9);
  out.year = yoe + era * 400 + (out.month <= 2 ? 1 : 0);
  return out;
}

std::string local_time_text(std::int64_t ms, std::int32_t offset_minutes) {
  const std::int64_t local_s = floor_div(ms + std::int64_t{offset_minutes} * 60'000, 1000);
  const std::int64_t day = floor_div(local_s, 86'400);
  const std::int64_t sec = local_s - day * 86'400;
  const civil_date c = civil_from_days(day);
  std::string out = std::to_string(c.year);
  const auto two = [&out](char sep, std::int64_t v) {
    out += sep;
    out += static_cast<char>('0' + v / 10);
    out += static_cast<char>('0' + v % 10);
  };
  two('-', c.month);
  two('-', c.day);
  two('T', sec / 3600);
  two(':', sec / 60 % 60);
  two(':', sec % 60);
  return out + utc_offset_text(offset_minutes);
}

calendar_period calendar_period_of(config::calendar_unit unit, std::int32_t offset_minutes,
                                   std::int64_t index) {
  std::int64_t first = index;  // local day the period starts on
  std::int64_t next = index + 1;
  switch (unit) {
    case config::calendar_unit::week:
      first = index * 7 - week_shift_days;
      next = first + 7;
      break;
    case config::calendar_unit::month: {
      const std::int64_t y = floor_div(index, 12);
      const int m = static_cast<int>(index - y * 12) + 1;
      first = days_from_civil(y, m, 1);
      next = m == 12 ? days_from_civil(y + 1, 1, 1) : days_from_civil(y, m + 1, 1);
      break;
    }
    default:
      break;
  }
  const std::int64_t off_ms = std::int64_t{offset_minutes} * 60'000;
  return {index, first * ms_per_day - off_ms, next * ms_per_day - off_ms};
}

calendar_period calendar_period_at(config::calendar_unit unit, std::int32_t offset_minutes,
                                   std::int64_t now_ms) {
  const std::int64_t local_day =
      floor_div(now_ms + std::int64_t{offset_minutes} * 60'000, ms_per_day);
  std::int64_t index = local_day;
  if (unit == config::calendar_unit::week) {
    index = floor_div(local_day + week_shift_days, 7);
  } else if (unit == config::calendar_unit::month) {
    const civil_date c = civil_from_days(local_day);
    index = c.year * 12 + c.month - 1;
  }
  return calendar_period_of(unit, offset_minutes, index);
}

std::int64_t calendar_zone(config::calendar_unit unit, std::int32_t offset_minutes) {
  return static_cast<std::int64_t>(unit) + 4 * (std::int64_t{offset_minutes} + 840);
}

window_counts calendar_counts(const window_counts* stored, const bucket_params& p,
                              std::int64_t now_ms, calendar_period& period,
                              std::int64_t& now_eff_ms) {
  window_counts out;
  out.previous = calendar_zone(p.calendar, p.utc_offset_minutes);
  period = calendar_period_at(p.calendar, p.utc_offset_minutes, now_ms);
  out.index = period.index;
  now_eff_ms = now_ms;
  if (stored == nullptr || stored->previous != out.previous) return out;
  if (stored->index > out.index) {
    // The clock stepped back behind the stored period: no time elapses (DESIGN.md).
    period = calendar_period_of(p.calendar, p.utc_offset_minutes, stored->index);
    out.index = stored->index;
    now_eff_ms = period.start_ms;
  }
  if (stored->index == out.index)
    out.current = std::clamp<std::int64_t>(stored->current, 0, p.window_limit);
  return out;
}

limit_outcome describe_calendar(const window_counts& before, const window_counts& after,
                                const bucket_params& p, const calendar_period& period,
                                std::int64_t now_ms, std::int64_t cost, bool admits) {
  const std::int64_t lim = p.window_limit;
  const std::int64_t to_end = period.end_ms - now_ms;  // > 0: now is inside the period
  limit_outcome out;
  out.admits = admits;
  out.limit = lim;
  out.remaining = std::max<std::int64_t>(0, lim - after.current);
  out.reset_ms = after.current > 0 ? to_end : 0;
  out.retry_after_ms = admits || before.current + cost <= lim ? 0 : to_end;
  out.next_ms = out.remaining < lim ? to_end : 0;
  return out;
}

}  // namespace sluice::limiter
