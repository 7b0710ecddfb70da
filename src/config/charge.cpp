// SPDX-License-Identifier: Apache-2.0
// `charge:` of a limit (config::charge_rule): a response filter (`when_status`) or a
// reservation settled from the response (`reserve`, `settle`, `fallback`), with what it cannot
// be combined with. The exact texts are in tests/unit/config/charge_config_test.cpp.
#include "config/loader_internal.hpp"

#include <numeric>

namespace sluice::config::detail {
namespace {

/// `4xx` → 4; 0 when `s` is not a class.
unsigned status_class(std::string_view s) {
  if (s.size() != 3 || s[1] != 'x' || s[2] != 'x' || s[0] < '1' || s[0] > '9') return 0;
  return static_cast<unsigned>(s[0] - '0');
}

}  // namespace

void loader::parse_charge(const entry& e, limit_src& l) {
  const std::string path = join(l.path, "charge");
  static const std::vector<std::string> keys{"when_status", "reserve", "settle", "fallback"};
  auto m = fields(e.value, path, e.line, keys);
  if (!m) {
    l.usable = false;
    return;
  }
  charge_rule c;
  limit& v = l.value;
  const entry* when = m->find("when_status");
  const entry* reserve = m->find("reserve");
  const entry* settle = m->find("settle");
  const entry* fallback = m->find("fallback");
  bool ok = true;
  if (when != nullptr) {
    for (const entry* other : {reserve, settle, fallback}) {
      if (other == nullptr) continue;
      error(other->key_line, join(path, other->key),
            other->key +
                " cannot be combined with when_status: a limit is either charged by response "
                "status or reserved and settled from the response");
      ok = false;
    }
    c.what = charge_rule::kind::when_status;
    const std::string wp = join(path, "when_status");
    if (!sequence(when->value, wp, when->line, true) || when->value.size() == 0) {
      if (when->value.IsNull() || (when->value.IsSequence() && when->value.size() == 0))
        error(when->line, wp,
              "when_status lists no status: name at least one status (401) or class (\"5xx\")");
      ok = false;
    } else {
      std::size_t i = 0;
      for (const auto& item : when->value) {
        const std::string ip = at(wp, i++);
        const int line = line_of(item, when->line);
        const std::string text = item.IsScalar() ? item.Scalar() : std::string();
        if (const unsigned k = status_class(text); k != 0) {
          if (k > 5) {
            error(line, ip,
                  "unknown status class '" + text + "'; expected 1xx, 2xx, 3xx, 4xx or 5xx");
            ok = false;
          } else {
            c.classes |= 1u << k;
          }
          continue;
        }
        if (!text.empty() && text.find_first_not_of("0123456789") == std::string::npos &&
            text.size() <= 6) {
          const auto n = std::stoul(text);
          if (n < 100 || n > 599) {
            error(line, ip, "unknown status " + text + ": a response status is 100 .. 599");
            ok = false;
          } else {
            c.statuses.push_back(static_cast<unsigned>(n));
          }
          continue;
        }
        error(line, ip,
              "unknown status '" + (item.IsScalar() ? text : describe(item)) +
                  "': write a status (401) or a class (\"4xx\")");
        ok = false;
      }
    }
  } else {
    c.what = charge_rule::kind::settle;
    if (reserve == nullptr) {
      error(e.line, path, "missing required key 'reserve' (or when_status)");
      ok = false;
    } else if (reserve->value.IsMap()) {
      const std::string rp = join(path, "reserve");
      static const std::vector<std::string> rkeys{"header", "max"};
      if (auto rm = fields(reserve->value, rp, reserve->line, rkeys)) {
        if (const entry* h = rm->find("header")) {
          if (auto name = header_name(*h, join(rp, "header")))
            c.reserve_header = *name;
          else
            ok = false;
        } else {
          error(reserve->line, rp, "missing required key 'header'");
          ok = false;
        }
        if (const entry* mx = rm->find("max")) {
          if (auto n = integer(*mx, join(rp, "max"), "max", 1, max_exact_integer))
            c.reserve_max = *n;
          else
            ok = false;
        } else {
          error(reserve->line, rp,
                "missing required key 'max' (the most units a request header may reserve)");
          ok = false;
        }
      } else {
        ok = false;
      }
    } else if (auto n = integer(*reserve, join(path, "reserve"), "reserve", 1, max_exact_integer)) {
      c.reserve = *n;
    } else {
      ok = false;
    }
    if (settle == nullptr) {
      error(e.line, path, "missing required key 'settle' ({header: NAME} or {json: PATH})");
      ok = false;
    } else {
      const std::string sp = join(path, "settle");
      static const std::vector<std::string> skeys{"header", "json"};
      if (auto sm = fields(settle->value, sp, settle->line, skeys)) {
        const entry* h = sm->find("header");
        const entry* j = sm->find("json");
        if ((h == nullptr) == (j == nullptr)) {
          error(settle->line, sp,
                "settle names one source: {header: NAME} or {json: PATH}, not " +
                    std::string(h == nullptr ? "neither" : "both"));
          ok = false;
        } else if (h != nullptr) {
          if (auto name = header_name(*h, join(sp, "header")))
            c.settle_header = *name;
          else
            ok = false;
        } else if (auto text = string(j->value, join(sp, "json"), j->line)) {
          std::string why;
          if (auto steps = parse_usage_path(*text, why)) {
            c.settle_path = std::move(*steps);
            c.settle_path_text = *text;
          } else {
            error(j->line, join(sp, "json"), "invalid JSON path '" + *text + "': " + why);
            ok = false;
          }
        } else {
          ok = false;
        }
      } else {
        ok = false;
      }
    }
    if (fallback != nullptr) {
      const std::string fp = join(path, "fallback");
      if (fallback->value.IsScalar() && fallback->value.Scalar() == "reserve") {
        c.fallback = -1;
      } else if (auto n = integer(*fallback, fp, "fallback", 0, max_exact_integer)) {
        c.fallback = *n;
      } else {
        ok = false;
      }
    }
  }
  // What a charge cannot be combined with: each would settle on a bucket other than the one
  // the request was charged to, or on none.
  auto refuse = [&](const std::string& why) {
    error(e.line, path, why);
    ok = false;
  };
  if (v.mode == limit_mode::shadow)
    refuse(
        "charge applies only to an enforced limit: a shadow limit is decided as if alone and "
        "never settled (remove charge, or mode: shadow)");
  else if (v.algorithm != algorithm::token_bucket && v.algorithm != algorithm::fixed_window &&
           v.algorithm != algorithm::sliding_window)
    refuse(std::string("charge applies to token_bucket, fixed_window and sliding_window; a ") +
           algorithm_name(v.algorithm) + " limit cannot be settled after the response");
  else if (v.lease > 0)
    refuse(
        "charge cannot be combined with lease: leased tokens are spent by a worker without the "
        "store, and a settlement goes to the store");
  else if (v.shards > 1)
    refuse(
        "charge cannot be combined with shards: a request is charged to one shard at random, "
        "and its settlement must reach that same bucket");
  // A settle may leave a debt, which doubles the span the store's arithmetic covers (a token
  // bucket's level down to -capacity, a window's count up to 2N): every value must stay an
  // exact integer in a double (lua/common.lua), so the capacity (burst × units per token), a
  // sliding window's N × window ms and a fixed window's N stay within 2^52.
  const auto exact_with_debt = [&](const limit_params& p) {
    const std::int64_t n = p.rate.count, period = p.rate.period.count();
    if (n <= 0 || period <= 0) return true;  // (refused elsewhere)
    constexpr std::int64_t half = max_exact_integer / 2;
    if (v.algorithm == algorithm::token_bucket) {
      const std::int64_t units = period / std::gcd(n, period);
      return (p.burst > 0 ? p.burst : n) <= half / units;
    }
    if (v.algorithm == algorithm::sliding_window) return n <= half / period;
    return n <= half;
  };
  if (ok) {
    bool exact = !v.has_default_params || exact_with_debt(v.params);
    for (const auto& [plan, p] : v.plan_overrides) exact = exact && exact_with_debt(p);
    if (!exact)
      refuse(
          "charge needs the limit's arithmetic to stay exact with a debt of one Limit: its "
          "capacity (burst x ms per token) or a window's count x ms must be at most 2^52");
  }
  if (!ok) {
    l.usable = false;
    return;
  }
  v.charge = std::move(c);
}

}  // namespace sluice::config::detail
