// SPDX-License-Identifier: Apache-2.0
#include "sluice/limiter/decision.hpp"

#include "sluice/limiter/calendar.hpp"
#include "sluice/text_writer.hpp"

#include <boost/json.hpp>

#include <algorithm>
#include <charconv>
#include <iterator>

namespace sluice::limiter {
namespace {

// The quota fields' names: what append_quota_lines writes, and the names (of static storage)
// quota_headers hands out for its lines.
constexpr std::string_view x_limit = "X-RateLimit-Limit";
constexpr std::string_view x_remaining = "X-RateLimit-Remaining";
constexpr std::string_view x_reset = "X-RateLimit-Reset";
constexpr std::string_view ietf_policy = "RateLimit-Policy";
constexpr std::string_view ietf_state = "RateLimit";
constexpr std::string_view x_warning = "X-RateLimit-Warning";
constexpr std::string_view quota_names[] = {x_limit,     x_remaining, x_reset,
                                            ietf_policy, ietf_state,  x_warning};

// The units used at or above which a limit of `limit` units is past `bp` basis points:
// ⌈limit × bp / 10,000⌉, computed without overflow for limits up to 2^53.
std::int64_t warning_threshold(std::int64_t limit, std::int64_t bp) {
  return limit / 10'000 * bp + ceil_div(limit % 10'000 * bp, 10'000);
}

}  // namespace

std::optional<std::size_t> most_constraining(const std::vector<applied_limit>& limits,
                                             const check_outcome& outcome) {
  std::optional<std::size_t> best;
  for (std::size_t i = 0; i < limits.size() && i < outcome.limits.size(); ++i) {
    if (limits[i].shadow) continue;
    if (!best) {
      best = i;
      continue;
    }
    const auto& a = outcome.limits[i];
    const auto& b = outcome.limits[*best];
    // Least Remaining; ties: the larger Reset (in the seconds the client sees); then first.
    if (a.remaining < b.remaining ||
        (a.remaining == b.remaining && ceil_seconds(a.reset_ms) > ceil_seconds(b.reset_ms))) {
      best = i;
    }
  }
  return best;
}

std::int64_t policy_window_seconds(const applied_limit& limit) {
  switch (limit.algorithm) {
    case config::algorithm::fixed_window:
    case config::algorithm::sliding_window:
    case config::algorithm::sliding_log:
      // The window itself (draft-ietf-httpapi-ratelimit-headers-11 `w`), whole seconds,
      // rounded up and at least 1.
      return std::max<std::int64_t>(1, ceil_seconds(limit.bucket.window_ms));
    case config::algorithm::calendar:
      // The longest period of the unit (1, 7 or 31 days): policy_window_seconds(limit, now)
      // gives the current period's length when the decision time is known.
      return std::max<std::int64_t>(1, ceil_seconds(limit.bucket.window_ms));
    default:
      return policy_window_seconds(limit.bucket);
  }
}

std::int64_t policy_window_seconds(const applied_limit& limit, std::int64_t now_ms) {
  if (limit.algorithm != config::algorithm::calendar || now_ms <= 0)
    return policy_window_seconds(limit);
  const calendar_period p =
      calendar_period_at(limit.bucket.calendar, limit.bucket.utc_offset_minutes, now_ms);
  return ceil_seconds(p.end_ms - p.start_ms);
}

bool past_warning(const applied_limit& limit, const limit_outcome& o) {
  if (limit.shadow || limit.warn_at_bp <= 0 || o.limit <= 0) return false;
  const std::int64_t used = o.limit - std::clamp<std::int64_t>(o.remaining, 0, o.limit);
  return used >= warning_threshold(o.limit, limit.warn_at_bp);
}

bool crossed_warning(const applied_limit& limit, const limit_outcome& o, std::int64_t cost,
                     bool allowed) {
  if (!allowed || !past_warning(limit, o)) return false;
  const std::int64_t used = o.limit - std::clamp<std::int64_t>(o.remaining, 0, o.limit);
  return used - cost < warning_threshold(o.limit, limit.warn_at_bp);
}

std::int64_t jittered_retry_after(std::int64_t honest_seconds, std::chrono::milliseconds jitter,
                                  std::uint64_t random) {
  const std::int64_t span = jitter.count() / 1000;  // whole seconds of jitter at most
  if (span <= 0) return honest_seconds;
  return honest_seconds + static_cast<std::int64_t>(random % static_cast<std::uint64_t>(span + 1));
}

std::vector<std::string> shadow_violations(const std::vector<applied_limit>& limits,
                                           const check_outcome& outcome) {
  std::vector<std::string> out;
  for (std::size_t i = 0; i < limits.size() && i < outcome.limits.size(); ++i) {
    if (limits[i].shadow && !outcome.limits[i].admits) out.push_back(limits[i].name);
  }
  return out;
}

std::int64_t policy_window_seconds(const bucket_params& bucket) {
  // burst tokens at refill_per_ms / units_per_token tokens per ms:
  // burst * units_per_token / refill_per_ms ms. Rounded up to whole seconds.
  const std::int64_t ms = ceil_div(bucket.capacity(), bucket.refill_per_ms);
  return std::max<std::int64_t>(1, ceil_seconds(ms));
}

void append_quota_lines(std::string& out, const std::vector<applied_limit>& limits,
                        const check_outcome& outcome, const config::header_sets& sets) {
  const std::size_t n = std::min(limits.size(), outcome.limits.size());
  std::size_t bound = 160;  // the X-RateLimit lines, the three names
  for (std::size_t i = 0; i < n; ++i) bound += 3 * limits[i].name.size() + 100;
  text_writer w(out, bound);
  if (sets.x_ratelimit) {
    if (auto i = most_constraining(limits, outcome)) {
      const auto& o = outcome.limits[*i];
      w.put(x_limit).put(": ").number(o.limit).put("\r\n");
      w.put(x_remaining).put(": ").number(std::max<std::int64_t>(0, o.remaining)).put("\r\n");
      w.put(x_reset).put(": ").number(ceil_seconds(o.reset_ms)).put("\r\n");
    }
  }
  if (sets.x_ratelimit || sets.ietf) {
    bool warned = false;
    for (std::size_t i = 0; i < n; ++i) {
      if (!past_warning(limits[i], outcome.limits[i])) continue;
      w.put(warned ? ", \"" : "X-RateLimit-Warning: \"").put(limits[i].name).put("\"");
      warned = true;
    }
    if (warned) w.put("\r\n");
  }
  if (!sets.ietf) return;
  bool any = false;
  for (std::size_t i = 0; i < n; ++i) {
    if (limits[i].shadow) continue;
    if (any) {
      w.put(", \"");
    } else {
      w.put(ietf_policy).put(": \"");
    }
    w.put(limits[i].name).put("\";q=").number(outcome.limits[i].limit);
    if (limits[i].algorithm == config::algorithm::concurrency) {
      // A quota of requests at once has no window: the draft's quota unit says what q counts
      // (draft-ietf-httpapi-ratelimit-headers, "Quota Units": concurrent-requests).
      w.put(";qu=\"concurrent-requests\"");
    } else {
      w.put(";w=").number(policy_window_seconds(limits[i], outcome.now_ms));
    }
    any = true;
  }
  if (!any) return;
  w.put("\r\n");
  any = false;
  for (std::size_t i = 0; i < n; ++i) {
    if (limits[i].shadow) continue;
    const auto& o = outcome.limits[i];
    if (any) {
      w.put(", \"");
    } else {
      w.put(ietf_state).put(": \"");
    }
    w.put(limits[i].name).put("\";r=").number(std::max<std::int64_t>(0, o.remaining));
    if (o.remaining < o.limit)
      w.put(";t=").number(std::max<std::int64_t>(1, ceil_seconds(o.next_ms)));
    any = true;
  }
  w.put("\r\n");
}

std::vector<header_field> quota_headers(const std::vector<applied_limit>& limits,
                                        const check_outcome& outcome,
                                        const config::header_sets& sets) {
  std::string lines;
  append_quota_lines(lines, limits, outcome, sets);
  std::vector<header_field> out;
  std::string_view rest = lines;
  while (!rest.empty()) {
    const auto eol = rest.find("\r\n");
    const std::string_view line = rest.substr(0, eol);
    rest = rest.substr(eol + 2);
    const auto colon = line.find(": ");
    for (const auto name : quota_names) {
      if (line.substr(0, colon) == name) out.emplace_back(name, line.substr(colon + 2));
    }
  }
  return out;
}

std::int64_t retry_after_seconds(const std::vector<applied_limit>& limits,
                                 const check_outcome& outcome) {
  std::int64_t ms = 0;
  for (std::size_t i = 0; i < limits.size() && i < outcome.limits.size(); ++i) {
    if (limits[i].shadow || outcome.limits[i].admits) continue;
    ms = std::max(ms, outcome.limits[i].retry_after_ms);
  }
  return std::max<std::int64_t>(1, ceil_seconds(ms));
}

std::vector<std::string> violated_policies(const std::vector<applied_limit>& limits,
                                           const check_outcome& outcome) {
  std::vector<std::string> out;
  for (std::size_t i = 0; i < limits.size() && i < outcome.limits.size(); ++i) {
    if (!limits[i].shadow && !outcome.limits[i].admits) out.push_back(limits[i].name);
  }
  return out;
}

std::string quota_exceeded_body(const std::vector<std::string>& violated,
                                std::int64_t retry_after) {
  boost::json::object body;
  body["type"] = "https://iana.org/assignments/http-problem-types#quota-exceeded";
  body["title"] = "Too Many Requests";
  body["status"] = 429;
  std::string detail = "Quota exceeded for ";
  for (std::size_t i = 0; i < violated.size(); ++i) {
    if (i) detail += ", ";
    detail += violated[i];
  }
  detail += "; retry after " + std::to_string(retry_after) + " s.";
  body["detail"] = detail;
  boost::json::array names;
  for (const auto& v : violated) names.emplace_back(v);
  body["violated-policies"] = std::move(names);
  return boost::json::serialize(body);
}

}  // namespace sluice::limiter
