// SPDX-License-Identifier: Apache-2.0
// The `rate_limit_service:` section: sluice as Envoy's rate limit service (src/rls/). Its
// domains are trees of descriptor nodes in the shape envoyproxy/ratelimit's configuration
// uses (a key, an optional exact value, nested nodes), whose leaves name limits written in the
// section's own `limits:` list with the same reader as a route's limits, so every algorithm,
// shadow mode and block works there as it does on the proxy.

#include "config/loader_internal.hpp"

namespace sluice::config::detail {

void loader::parse_rate_limit_service(const entry& e, rules& r) {
  static const std::vector<std::string> keys{"listen", "on_store_failure", "limits", "domains"};
  auto m = fields(e.value, "rate_limit_service", e.line, keys);
  if (!m) return;
  auto& out = r.rate_limit_service;
  out.enabled = true;
  if (const entry* l = m->find("listen")) {
    if (auto a = address(*l, "rate_limit_service.listen", true)) {
      out.listen_host = a->host;
      out.listen_port = a->port;
    }
  } else {
    error(e.line, "rate_limit_service", "missing required key 'listen'");
  }
  if (const entry* f = m->find("on_store_failure")) {
    auto p = choice<failure_policy>(
        f->value, "rate_limit_service.on_store_failure", f->line, "failure policy",
        {{"fail_open", failure_policy::fail_open}, {"fail_closed", failure_policy::fail_closed}});
    if (p) out.on_store_failure = *p;
  }
  if (const entry* l = m->find("limits")) {
    rls_limits_ = parse_limits(*l, "rate_limit_service.limits");
    // A call has no response to settle a charge from and no end to release a slot at; a
    // lease is a worker's own, and the service decides off the workers' request path.
    for (auto& ls : rls_limits_) {
      const limit& v = ls.value;
      std::string why;
      if (v.algorithm == algorithm::concurrency)
        why =
            "algorithm concurrency needs the request's end, which a rate limit service "
            "call does not report";
      else if (v.charge.what != charge_rule::kind::none)
        why = "charge needs the response, which a rate limit service call does not see";
      else if (v.lease > 0)
        why = "lease is not offered on the rate limit service";
      else if (v.shards > 1)
        why = "shards is not offered on the rate limit service";
      else if (!v.plan_overrides.empty() || !v.has_default_params)
        why =
            "plans are not offered on the rate limit service (a call has no caller's plan); "
            "give the limit its own rate";
      if (!why.empty()) {
        error(v.line, ls.path, why);
        ls.usable = false;
      }
    }
  }
  if (const entry* d = m->find("domains")) {
    const std::string path = "rate_limit_service.domains";
    if (!sequence(d->value, path, d->line)) return;
    static const std::vector<std::string> domain_keys{"domain", "descriptors"};
    std::map<std::string, int> seen;
    std::size_t i = 0;
    for (const auto& item : d->value) {
      const std::string p = at(path, i++);
      const int line = line_of(item, d->line);
      auto dm = fields(item, p, line, domain_keys);
      if (!dm) continue;
      rls_domain dom;
      dom.line = line;
      if (const entry* n = dm->find("domain")) {
        if (auto s = non_empty(*n, join(p, "domain"))) {
          dom.domain = *s;
          auto [it, fresh] = seen.emplace(*s, n->line);
          if (!fresh)
            error(
                n->line, join(p, "domain"),
                "duplicate domain '" + *s + "' (first at line " + std::to_string(it->second) + ")");
        }
      } else {
        error(line, p, "missing required key 'domain'");
      }
      if (const entry* ds = dm->find("descriptors"))
        dom.descriptors = parse_rls_descriptors(*ds, join(p, "descriptors"), 1);
      else
        error(line, p, "missing required key 'descriptors'");
      out.domains.push_back(std::move(dom));
    }
  } else {
    error(e.line, "rate_limit_service", "missing required key 'domains'");
  }
}

std::vector<rls_descriptor> loader::parse_rls_descriptors(const entry& e, const std::string& path,
                                                          int depth) {
  std::vector<rls_descriptor> out;
  if (!sequence(e.value, path, e.line)) return out;
  if (depth > rls_max_depth) {
    error(e.line, path,
          "descriptors nest deeper than " + std::to_string(rls_max_depth) +
              " levels (a descriptor has at most that many entries)");
    return out;
  }
  static const std::vector<std::string> keys{"key", "value", "limit", "limits", "descriptors"};
  std::set<std::pair<std::string, std::string>> seen;
  std::size_t i = 0;
  for (const auto& item : e.value) {
    const std::string p = at(path, i++);
    const int line = line_of(item, e.line);
    auto m = fields(item, p, line, keys);
    if (!m) continue;
    rls_descriptor d;
    d.line = line;
    if (const entry* k = m->find("key")) {
      if (auto s = non_empty(*k, join(p, "key"))) d.key = *s;
    } else {
      error(line, p, "missing required key 'key'");
    }
    if (const entry* v = m->find("value")) {
      if (auto s = non_empty(*v, join(p, "value"))) {
        d.value = *s;
        d.any_value = false;
      }
    }
    if (!d.key.empty() && !seen.emplace(d.key, d.any_value ? std::string("\x01") : d.value).second)
      error(line, p,
            "descriptor key '" + d.key + "'" +
                (d.any_value ? std::string(" without a value") : " value '" + d.value + "'") +
                " appears twice at this level");
    const entry* one = m->find("limit");
    const entry* many = m->find("limits");
    if (one && many) {
      error(line, p, "use limit or limits, not both");
    } else if (one) {
      if (auto s = non_empty(*one, join(p, "limit"))) {
        d.limits.push_back(*s);
        rls_refs_.push_back({*s, join(p, "limit"), one->line});
      }
    } else if (many) {
      const std::string lp = join(p, "limits");
      if (sequence(many->value, lp, many->line)) {
        std::size_t j = 0;
        for (const auto& n : many->value) {
          const std::string np = at(lp, j++);
          const int nline = line_of(n, many->line);
          auto s = string(n, np, nline);
          if (!s) continue;
          if (std::find(d.limits.begin(), d.limits.end(), *s) != d.limits.end()) {
            error(nline, np, "limit '" + *s + "' is named twice");
            continue;
          }
          d.limits.push_back(*s);
          rls_refs_.push_back({*s, np, nline});
        }
      }
    }
    if (const entry* n = m->find("descriptors"))
      d.descriptors = parse_rls_descriptors(*n, join(p, "descriptors"), depth + 1);
    if (d.limits.empty() && d.descriptors.empty() && !one && !many)
      error(line, p, "a descriptor needs limit, limits or nested descriptors");
    out.push_back(std::move(d));
  }
  return out;
}

}  // namespace sluice::config::detail
