#include "sluice/limiter/decision.hpp"

#include <boost/json.hpp>

#include <algorithm>
#include <charconv>
#include <iterator>

namespace sluice::limiter {
namespace {

/// Appends the decimal text of `v` (no temporary string).
void append_int(std::string& out, std::int64_t v) {
  char digits[24];
  const auto r = std::to_chars(std::begin(digits), std::end(digits), v);
  out.append(digits, r.ptr);
}

std::string int_text(std::int64_t v) {
  std::string s;
  append_int(s, v);
  return s;
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
    default:
      return policy_window_seconds(limit.bucket);
  }
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

std::vector<header_field> quota_headers(const std::vector<applied_limit>& limits,
                                        const check_outcome& outcome,
                                        const config::header_sets& sets) {
  std::vector<header_field> out;
  out.reserve(5);
  if (sets.x_ratelimit) {
    if (auto i = most_constraining(limits, outcome)) {
      const auto& o = outcome.limits[*i];
      out.emplace_back("X-RateLimit-Limit", int_text(o.limit));
      out.emplace_back("X-RateLimit-Remaining", int_text(std::max<std::int64_t>(0, o.remaining)));
      out.emplace_back("X-RateLimit-Reset", int_text(ceil_seconds(o.reset_ms)));
    }
  }
  if (sets.ietf) {
    std::string policy;
    std::string state;
    policy.reserve(64);  // (one allocation each for the usual one or two limits)
    state.reserve(64);
    for (std::size_t i = 0; i < limits.size() && i < outcome.limits.size(); ++i) {
      if (limits[i].shadow) continue;
      const auto& o = outcome.limits[i];
      // (Appended piece by piece: no temporary string per operator+.)
      if (!policy.empty()) policy += ", ";
      policy += '"';
      policy += limits[i].name;
      policy += "\";q=";
      append_int(policy, o.limit);
      policy += ";w=";
      append_int(policy, policy_window_seconds(limits[i]));
      if (!state.empty()) state += ", ";
      state += '"';
      state += limits[i].name;
      state += "\";r=";
      append_int(state, std::max<std::int64_t>(0, o.remaining));
      if (o.remaining < o.limit) {
        state += ";t=";
        append_int(state, std::max<std::int64_t>(1, ceil_seconds(o.next_ms)));
      }
    }
    if (!policy.empty()) {
      out.emplace_back("RateLimit-Policy", std::move(policy));
      out.emplace_back("RateLimit", std::move(state));
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
