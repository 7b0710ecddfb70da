// SPDX-License-Identifier: Apache-2.0
// Limit lists (`limits:` of a plan or a route, and each plan override inside a limit): name,
// key, algorithm, rate and burst, mode, cost checks and the comparison of two limits of one name.

#include "config/loader_internal.hpp"

#include <numeric>

namespace sluice::config::detail {

void loader::check_capacity(const param_src& p, algorithm algo) {
  if (!p.usable || p.value.rate.count <= 0) return;
  if (algo == algorithm::sliding_window) {
    // The counter's estimate previous·(P − elapsed)/P + current is compared multiplied out
    // by the window P in ms (no rounding), so N·P must stay an exact double.
    const std::int64_t w = p.value.rate.period.count();
    if (p.value.rate.count > max_exact_integer / w)
      error(p.rate_line, p.rate_path,
            "rate " + p.rate_text + " cannot be counted exactly by sliding_window: count × " +
                "window in ms = " + std::to_string(p.value.rate.count) + " × " + std::to_string(w) +
                " is above " + std::string(two_53) + " (use a shorter window or fixed_window)");
    return;
  }
  if (algo == algorithm::sliding_log) {
    // One stored stamp per unit, read whole on every check: memory and time grow with N.
    if (p.value.rate.count > max_log_units)
      error(p.rate_line, p.rate_path,
            "rate " + p.rate_text + " is too large for sliding_log, which stores one " +
                "timestamp per unit: the count must be at most " + std::to_string(max_log_units) +
                " (use sliding_window or token_bucket)");
    return;
  }
  if (is_window_algorithm(algo)) return;
  const std::int64_t period = p.value.rate.period.count();
  const std::int64_t g = std::gcd(p.value.rate.count, period);
  const std::int64_t units = period / g;
  if (p.value.burst > max_exact_integer / units) {
    error(p.burst_line, p.burst_path,
          "burst " + std::to_string(p.value.burst) + " with rate " + p.rate_text +
              " cannot be counted exactly: one token is " + std::to_string(units) +
              " units (period_ms / gcd(count, period_ms) = " + std::to_string(period) + " / " +
              std::to_string(g) + "), and burst × " + std::to_string(units) + " is above " +
              std::string(two_53));
  }
}

param_src loader::params(const entry* rate_e, const entry* burst_e, const param_src* inherit,
                         const std::string& path, int line, algorithm algo) {
  param_src p;
  p.burst_path = path;
  p.burst_line = line;
  std::optional<rate> r;
  if (rate_e) {
    p.rate_path = join(path, "rate");
    p.rate_line = rate_e->line;
    r = algo == algorithm::calendar ? calendar_rate_value(*rate_e, p.rate_path, p.rate_text)
                                    : rate_value(*rate_e, p.rate_path, p.rate_text);
  } else if (inherit) {
    p.rate_path = inherit->rate_path;
    p.rate_line = inherit->rate_line;
    p.rate_text = inherit->rate_text;
    if (inherit->usable) r = inherit->value.rate;
  }
  std::optional<std::int64_t> burst;
  if (burst_e) {
    p.burst_path = join(path, "burst");
    p.burst_line = burst_e->line;
    if (is_window_algorithm(algo)) {
      error(burst_e->line, p.burst_path,
            std::string("burst applies only to token_bucket; a ") + algorithm_name(algo) +
                " limit admits the count of its rate per window");
    }
    burst = integer(*burst_e, p.burst_path, "burst", 0, max_exact_integer);
  } else if (rate_e) {
    if (r) burst = r->count;
  } else if (inherit && inherit->usable) {
    burst = inherit->value.burst;
  }
  if (r && burst) {
    p.value.rate = *r;
    p.value.burst = *burst;
    p.usable = true;
  }
  return p;
}

std::optional<limit_src> loader::parse_limit(const YAML::Node& n, const std::string& path,
                                             int line) {
  static const std::vector<std::string> keys{
      "name",          "by",        "algorithm", "rate",       "burst",   "plans",
      "mode",          "preflight", "lease",     "lease_time", "shards",  "region_share",
      "max_in_flight", "slot_ttl",  "block",     "utc_offset", "warn_at", "charge"};
  auto m = fields(n, path, line, keys);
  if (!m) return std::nullopt;
  limit_src l;
  l.path = path;
  l.value.line = line;
  l.name_path = path;
  l.name_line = line;

  if (const entry* e = m->find("name")) {
    l.name_path = join(path, "name");
    l.name_line = e->line;
    auto s = string(e->value, l.name_path, e->line);
    if (s && !valid_limit_name(*s)) {
      error(e->line, l.name_path, "limit name '" + *s + "' must match [A-Za-z0-9_-]{1,64}");
      s.reset();
    }
    if (s)
      l.value.name = *s;
    else
      l.usable = false;
  } else {
    error(line, path, "missing required key 'name'");
    l.usable = false;
  }

  if (const entry* e = m->find("by")) {
    const std::string p = join(path, "by");
    auto s = string(e->value, p, e->line);
    if (s && s->starts_with("header:")) {
      const std::string name = s->substr(7);
      if (name.empty()) {
        error(e->line, p, "'header:' needs a header name, such as header:X-Tenant");
        l.usable = false;
      } else if (!text::is_token(name)) {
        error(e->line, p, "invalid header name '" + name + "': a header name is an HTTP token");
        l.usable = false;
      } else {
        l.value.by = identity_kind::header;
        l.value.header_name = name;
      }
    } else if (s) {
      auto k = choice<identity_kind>(e->value, p, e->line, "identity",
                                     {{"api_key", identity_kind::api_key},
                                      {"user", identity_kind::user},
                                      {"ip", identity_kind::ip},
                                      {"global", identity_kind::global},
                                      {"header:NAME", identity_kind::header}});
      if (k)
        l.value.by = *k;  // "header:NAME" itself lands in the branch above
      else
        l.usable = false;
    } else {
      l.usable = false;
    }
  }

  if (const entry* e = m->find("algorithm")) {
    const std::string p = join(path, "algorithm");
    auto a = choice<algorithm>(e->value, p, e->line, "algorithm",
                               {{"token_bucket", algorithm::token_bucket},
                                {"fixed_window", algorithm::fixed_window},
                                {"sliding_window", algorithm::sliding_window},
                                {"sliding_log", algorithm::sliding_log},
                                {"calendar", algorithm::calendar},
                                {"gcra", algorithm::gcra},
                                {"concurrency", algorithm::concurrency}});
    if (a) {
      l.value.algorithm = *a;
      if (*a == algorithm::gcra)
        error(e->line, p,
              "algorithm gcra is not supported yet (token_bucket gives the same limits)");
    } else {
      l.usable = false;
    }
  }

  if (const entry* e = m->find("mode")) {
    auto mode =
        choice<limit_mode>(e->value, join(path, "mode"), e->line, "mode",
                           {{"enforce", limit_mode::enforce}, {"shadow", limit_mode::shadow}});
    if (mode)
      l.value.mode = *mode;
    else
      l.usable = false;
  }

  // A preflight has no credentials: by default only limits that need none are charged.
  l.value.preflight = l.value.by == identity_kind::ip || l.value.by == identity_kind::global;
  if (const entry* e = m->find("preflight")) {
    if (auto v = boolean(*e, join(path, "preflight"))) l.value.preflight = *v;
  }

  const entry* rate_e = m->find("rate");
  const entry* burst_e = m->find("burst");
  const entry* plans_e = m->find("plans");
  if (l.value.algorithm == algorithm::concurrency) {
    parse_concurrency(*m, l);
  } else {
    for (const char* k : {"max_in_flight", "slot_ttl"}) {
      if (const entry* e = m->find(k)) {
        error(e->line, join(path, k),
              std::string(k) + " applies only to algorithm: concurrency; a " +
                  algorithm_name(l.value.algorithm) + " limit counts units per period (rate:)");
        l.usable = false;
      }
    }
  }
  if (l.value.algorithm == algorithm::concurrency) {
    // (parsed above: no rate, burst or plans)
  } else if (rate_e) {
    l.defaults = params(rate_e, burst_e, nullptr, path, line, l.value.algorithm);
    check_capacity(*l.defaults, l.value.algorithm);
    if (!l.defaults->usable) l.usable = false;
  } else if (!plans_e || burst_e) {
    error(line, path, "missing required key 'rate'");
    l.usable = false;
  }

  if (plans_e && l.value.algorithm != algorithm::concurrency) {
    const std::string plans_path = join(path, "plans");
    if (auto pm = mapping(plans_e->value, plans_path, plans_e->line, nullptr, true)) {
      static const std::vector<std::string> override_keys{"rate", "burst"};
      for (const entry& pe : pm->entries) {
        const std::string opath = join(plans_path, pe.key);
        l.plan_refs.push_back({pe.key, opath, pe.key_line});
        auto om = fields(pe.value, opath, pe.line, override_keys);
        if (!om) {
          l.usable = false;
          continue;
        }
        const entry* orate = om->find("rate");
        if (!orate && !l.defaults) {
          error(pe.line, opath, "missing required key 'rate' (the limit has no default rate)");
          l.usable = false;
          continue;
        }
        param_src p = params(orate, om->find("burst"), l.defaults ? &*l.defaults : nullptr, opath,
                             pe.line, l.value.algorithm);
        check_capacity(p, l.value.algorithm);
        if (!p.usable) l.usable = false;
        l.overrides.emplace_back(pe.key, std::move(p));
      }
    } else {
      l.usable = false;
    }
  }

  if (const entry* e = m->find("utc_offset")) {
    const std::string p = join(path, "utc_offset");
    if (l.value.algorithm != algorithm::calendar) {
      error(e->line, p,
            std::string("utc_offset applies only to algorithm calendar; a ") +
                algorithm_name(l.value.algorithm) + " limit is not aligned to local midnights");
      l.usable = false;
    } else if (auto off = utc_offset(*e, p)) {
      // Every rate of the limit (its own and each plan's) counts in this zone.
      l.value.utc_offset_minutes = *off;
      if (l.defaults) l.defaults->value.rate.utc_offset_minutes = *off;
      for (auto& [plan, o] : l.overrides) o.value.rate.utc_offset_minutes = *off;
    } else {
      l.usable = false;
    }
  }
  if (const entry* e = m->find("warn_at")) {
    if (auto bp = warn_at(*e, join(path, "warn_at")))
      l.value.warn_at_bp = *bp;
    else
      l.usable = false;
  }

  if (l.defaults) l.value.params = l.defaults->value;
  l.value.has_default_params = l.defaults.has_value();
  for (const auto& [plan, p] : l.overrides) l.value.plan_overrides[plan] = p.value;
  parse_hot_key_fields(*m, l);
  return l;
}

void loader::parse_concurrency(const map_view& m, limit_src& l) {
  // max_in_flight and slot_ttl are kept as the rate's count and period (config::algorithm),
  // so the Limit, the guarantee and a reload's comparison read them as any limit's.
  for (const char* k : {"rate", "burst"}) {
    if (const entry* e = m.find(k)) {
      error(e->line, join(l.path, k),
            std::string(k) +
                " does not apply to a concurrency limit, which counts requests in flight "
                "(max_in_flight: N)");
      l.usable = false;
    }
  }
  if (const entry* e = m.find("plans")) {
    error(e->line, join(l.path, "plans"),
          "plans overrides are not supported on a concurrency limit (one max_in_flight for every "
          "caller; declare a concurrency limit in each plan instead)");
    l.usable = false;
  }
  param_src p;
  p.rate_path = p.burst_path = join(l.path, "max_in_flight");
  p.rate_line = p.burst_line = l.value.line;
  p.value.rate.period = std::chrono::milliseconds{30'000};
  if (const entry* e = m.find("slot_ttl")) {
    const std::string sp = join(l.path, "slot_ttl");
    if (auto d = duration(*e, sp, "slot_ttl", std::chrono::milliseconds{3'600'000})) {
      if (*d < std::chrono::milliseconds{1000}) {
        error(e->line, sp,
              "slot_ttl " + duration_text(*d) +
                  " is shorter than the minimum of 1s (slots are renewed every slot_ttl / 3)");
        l.usable = false;
      } else {
        p.value.rate.period = *d;
      }
    } else {
      l.usable = false;
    }
  }
  if (const entry* e = m.find("max_in_flight")) {
    p.rate_line = p.burst_line = e->line;
    if (auto n = integer(*e, p.rate_path, "max_in_flight", 1, max_in_flight_bound)) {
      p.value.rate.count = *n;
      p.value.burst = *n;
      p.rate_text = "max_in_flight " + std::to_string(*n);
      p.usable = true;
    } else {
      l.usable = false;
    }
  } else {
    error(l.value.line, l.path, "missing required key 'max_in_flight'");
    l.usable = false;
  }
  if (p.usable) l.defaults = std::move(p);
}

void loader::parse_hot_key_fields(const map_view& m, limit_src& l) {
  limit& v = l.value;
  const bool bucket = v.algorithm == algorithm::token_bucket;
  v.region_share = region_share_;
  if (const entry* e = m.find("region_share")) {
    if (auto s = share(*e, join(l.path, "region_share"), "region_share"))
      v.region_share = *s;
    else
      l.usable = false;
  }
  if (const entry* e = m.find("shards")) {
    l.shards_path = join(l.path, "shards");
    l.shards_line = e->line;
    if (auto n = integer(*e, l.shards_path, "shards", 1, 1024)) {
      if (v.by != identity_kind::global) {
        error(e->line, l.shards_path,
              "shards apply only to a by: global limit (the buckets of a per-caller limit are "
              "already spread over the store, one per caller)");
        l.usable = false;
      } else if (!bucket) {
        error(e->line, l.shards_path,
              std::string("shards apply only to token_bucket; a ") + algorithm_name(v.algorithm) +
                  " limit cannot be split into buckets of a share of the rate each");
        l.usable = false;
      } else {
        v.shards = static_cast<std::uint32_t>(*n);
      }
    } else {
      l.usable = false;
    }
  }
  const entry* lease_e = m.find("lease");
  if (lease_e) {
    l.lease_path = join(l.path, "lease");
    l.lease_line = lease_e->line;
    if (auto n = integer(*lease_e, l.lease_path, "lease", 1, max_exact_integer)) {
      if (!bucket) {
        error(lease_e->line, l.lease_path,
              std::string("lease applies only to token_bucket; a ") + algorithm_name(v.algorithm) +
                  " limit has no tokens to hand out ahead");
        l.usable = false;
      } else {
        v.lease = *n;
      }
    } else {
      l.usable = false;
    }
  }
  if (const entry* e = m.find("lease_time")) {
    const std::string p = join(l.path, "lease_time");
    if (!lease_e) {
      error(e->line, p, "lease_time needs a lease (lease: N)");
      l.usable = false;
    } else if (auto d = duration(*e, p, "lease_time", std::chrono::milliseconds{60'000})) {
      v.lease_time = *d;
    } else {
      l.usable = false;
    }
  }
  // Every bucket the limit makes (its own parameters and each plan's), as enforced.
  auto each_bucket = [&](const param_src& p) {
    if (!p.usable || p.value.rate.count <= 0) return;
    const limit_params b = v.enforced(p.value);
    if (!bucket) return;
    const std::int64_t period = b.rate.period.count();
    const std::int64_t units = period / std::gcd(b.rate.count, period);
    // (Unsplit, the bucket is the limit's own, whose burst check has spoken already.)
    const bool split = v.shards > 1 || v.region_share < 1.0;
    if (split && b.burst > max_exact_integer / units) {
      error(p.burst_line, p.burst_path,
            "burst " + std::to_string(p.value.burst) + " with rate " + p.rate_text +
                " cannot be counted exactly once split by shards or region_share: one token is " +
                std::to_string(units) + " units and the burst " + std::to_string(b.burst));
      l.usable = false;
    }
    if (v.shards > 1 && p.value.burst < static_cast<std::int64_t>(v.shards)) {
      error(l.shards_line, l.shards_path,
            "shards " + std::to_string(v.shards) + " leave each shard no token of burst " +
                std::to_string(p.value.burst) + " (each shard holds burst / shards)");
      l.usable = false;
    }
    if (v.lease > b.burst) {
      error(l.lease_line, l.lease_path,
            "lease " + std::to_string(v.lease) + " is larger than the burst " +
                std::to_string(b.burst) + " of " +
                (v.shards > 1 || v.region_share < 1.0 ? "one bucket of " : "") + "rate " +
                p.rate_text + (&p == &*l.defaults ? std::string() : " (" + p.burst_path + ")") +
                ": a worker cannot take more than the bucket holds");
      l.usable = false;
    }
  };
  if (l.defaults) each_bucket(*l.defaults);
  for (const auto& [plan, p] : l.overrides) each_bucket(p);
  if (const entry* e = m.find("block")) parse_block(*e, l);
  if (const entry* e = m.find("charge")) parse_charge(*e, l);
}

void loader::parse_block(const entry& e, limit_src& l) {
  limit& v = l.value;
  const std::string p = join(l.path, "block");
  const auto text = e.value.IsScalar() ? e.value.Scalar() : std::string();
  // `block: 0` (or 0s, 0m...) reads as "no block" to some and "forever" to others: neither.
  const std::string_view number =
      std::string_view(text).substr(0, text.find_first_not_of("0123456789"));
  if (!number.empty() && number.find_first_not_of('0') == std::string_view::npos) {
    error(e.line, p,
          "block " + text + " is no block: a block lasts from 1s to 7d (leave block out for none)");
    l.usable = false;
    return;
  }
  const auto d = duration(e, p, "block", max_block);
  if (!d) {
    l.usable = false;
    return;
  }
  if (*d < std::chrono::seconds{1}) {
    error(e.line, p, "block " + text + " is shorter than 1s (Retry-After counts whole seconds)");
    l.usable = false;
    return;
  }
  if (v.mode == limit_mode::shadow) {
    error(e.line, p,
          "block applies only to an enforced limit: a shadow limit never refuses anybody, so "
          "it never blocks anybody (remove block, or mode: shadow)");
    l.usable = false;
    return;
  }
  if (v.algorithm == algorithm::concurrency) {
    error(e.line, p,
          "block does not apply to a concurrency limit: a slot frees when a request ends, so a "
          "refusal there says nothing about the caller (use block on a rate limit)");
    l.usable = false;
    return;
  }
  if (v.lease > 0) {
    error(e.line, p,
          "block cannot be combined with lease: a worker spends leased tokens without asking "
          "the store, so a block started elsewhere would not stop it");
    l.usable = false;
    return;
  }
  if (v.shards > 1) {
    error(e.line, p,
          "block cannot be combined with shards: a refusal by one shard would block only that "
          "shard, while the others go on admitting");
    l.usable = false;
    return;
  }
  v.block = *d;
}

std::vector<limit_src> loader::parse_limits(const entry& e, const std::string& path) {
  std::vector<limit_src> out;
  if (!sequence(e.value, path, e.line, true)) return out;
  std::size_t i = 0;
  for (const auto& item : e.value) {
    const std::string p = at(path, i++);
    if (auto l = parse_limit(item, p, line_of(item, e.line))) out.push_back(std::move(*l));
  }
  // Within one list a repeated name would check the same bucket twice per request.
  std::map<std::string, int> seen;
  for (auto& l : out) {
    if (l.value.name.empty()) continue;
    auto [it, fresh] = seen.emplace(l.value.name, l.name_line);
    if (!fresh) {
      error(l.name_line, l.name_path,
            "duplicate limit name '" + l.value.name + "' in this list (first at line " +
                std::to_string(it->second) + ")");
      l.duplicate = true;
    }
  }
  return out;
}

void loader::check_cost(const limit_src& l, std::int64_t cost, const std::string& where) {
  // A request holds one slot of a concurrency limit whatever its cost.
  if (l.value.algorithm == algorithm::concurrency) return;
  // A settled limit's request spends its reservation at admission, not the route's cost.
  if (l.value.charge.what == charge_rule::kind::settle)
    cost =
        l.value.charge.reserve_header.empty() ? l.value.charge.reserve : l.value.charge.reserve_max;
  auto check = [&](const param_src& p) {
    if (!p.usable) return;
    if (is_window_algorithm(l.value.algorithm)) {
      if (p.value.rate.count > 0 && cost > p.value.rate.count)
        error(p.rate_line, p.rate_path,
              "cost " + std::to_string(cost) + " can never be admitted by rate " + p.rate_text +
                  where);
      else if (const std::int64_t n = l.value.enforced(p.value).rate.count;
               p.value.rate.count > 0 && cost > n)
        error(p.rate_line, p.rate_path,
              "cost " + std::to_string(cost) + " can never be admitted by rate " + p.rate_text +
                  " at region_share " + std::to_string(l.value.region_share) + " (" +
                  std::to_string(n) + " per window)" + where);
    } else if (cost > p.value.burst) {
      error(p.burst_line, p.burst_path,
            "cost " + std::to_string(cost) + " can never be admitted by burst " +
                std::to_string(p.value.burst) + where);
    } else if (const std::int64_t b = l.value.enforced(p.value).burst; cost > b) {
      error(p.burst_line, p.burst_path,
            "cost " + std::to_string(cost) + " can never be admitted by burst " +
                std::to_string(b) + " of one bucket (burst " + std::to_string(p.value.burst) +
                " split by shards or region_share)" + where);
    }
  };
  if (l.defaults) check(*l.defaults);
  for (const auto& [plan, p] : l.overrides) check(p);
}

std::optional<std::string> loader::difference(const limit& a, const limit& b) {
  if (a.by != b.by || a.header_name != b.header_name) return "by";
  if (a.algorithm != b.algorithm) return "algorithm";
  if (a.has_default_params != b.has_default_params) return "rate";
  if (a.has_default_params) {
    if (a.params.rate.count != b.params.rate.count || a.params.rate.period != b.params.rate.period)
      return "rate";
    if (a.params.burst != b.params.burst) return "burst";
  }
  // (The limit's own field: also in every rate of it, plan overrides' included.)
  if (a.utc_offset_minutes != b.utc_offset_minutes) return "utc_offset";
  if (a.plan_overrides.size() != b.plan_overrides.size()) return "plans";
  for (const auto& [plan, p] : a.plan_overrides) {
    auto it = b.plan_overrides.find(plan);
    if (it == b.plan_overrides.end() || !same_params(p, it->second)) return "plans";
  }
  if (a.mode != b.mode) return "mode";
  if (a.preflight != b.preflight) return "preflight";
  if (a.lease != b.lease || a.lease_time != b.lease_time) return "lease";
  if (a.shards != b.shards) return "shards";
  if (a.region_share != b.region_share) return "region_share";
  if (a.block != b.block) return "block";
  if (a.warn_at_bp != b.warn_at_bp) return "warn_at";
  if (a.charge != b.charge) return "charge";
  return std::nullopt;
}

}  // namespace sluice::config::detail
