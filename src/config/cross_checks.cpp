// SPDX-License-Identifier: Apache-2.0
// The cross-checks that run after the walk: names a route or limit refers to (upstreams,
// plans), limits repeated under one name with other parameters, and costs no burst admits.

#include "config/loader_internal.hpp"

namespace sluice::config::detail {

void loader::cross_check(const rules& r) {
  // Plan names: declared ones, plus the implicit `anonymous`.
  std::vector<std::string> plan_names;
  for (const auto& p : plans_) plan_names.push_back(p.name);
  if (std::find(plan_names.begin(), plan_names.end(), "anonymous") == plan_names.end())
    plan_names.emplace_back("anonymous");
  auto unknown_plan = [&](const std::string& name, int line, const std::string& path) {
    if (std::find(plan_names.begin(), plan_names.end(), name) != plan_names.end()) return;
    if (auto s = text::suggest(name, plan_names))
      error(line, path, "unknown plan '" + name + "'; did you mean '" + *s + "'?");
    else
      error(line, path, "unknown plan '" + name + "'; plans are " + list_of(plan_names));
  };
  for (const auto& k : api_keys_) unknown_plan(k.plan, k.line, k.path);
  if (r.identity.directory.enabled &&
      (!r.store.redis() || r.store.type == store_settings::kind::redis_cluster))
    error(directory_line_, "identity.directory",
          "a redis directory is read on the store's connection: it needs store.type redis "
          "or redis-sentinel");

  // Every limit, in file order, for the plan references and the one-name-one-bucket rule.
  std::vector<const limit_src*> all;
  for (const auto& p : plans_)
    for (const auto& l : p.limits) all.push_back(&l);
  for (const auto& rs : routes_)
    for (const auto& l : rs.limits) all.push_back(&l);
  for (const auto& l : rls_limits_) all.push_back(&l);
  std::stable_sort(all.begin(), all.end(), [](const limit_src* a, const limit_src* b) {
    return a->value.line < b->value.line;
  });
  std::map<std::string, const limit_src*> first;
  for (const limit_src* l : all) {
    for (const auto& ref : l->plan_refs) unknown_plan(ref.plan, ref.line, ref.path);
    if (!l->usable || l->duplicate) continue;
    auto [it, fresh] = first.emplace(l->value.name, l);
    if (fresh) continue;
    if (auto field = difference(it->second->value, l->value)) {
      error(l->value.line, l->path,
            "limit '" + l->value.name + "' differs in " + *field + " from " + it->second->path +
                " (line " + std::to_string(it->second->value.line) +
                "); one name is one bucket, so every definition must be identical");
    }
  }

  // The rate limit service: each leaf names limits of rate_limit_service.limits; a call
  // costs at least 1 unit.
  {
    std::vector<std::string> names;
    for (const auto& l : rls_limits_)
      if (!l.value.name.empty()) names.push_back(l.value.name);
    for (const auto& ref : rls_refs_) {
      if (std::find(names.begin(), names.end(), ref.limit) != names.end()) continue;
      if (names.empty())
        error(ref.line, ref.path,
              "unknown limit '" + ref.limit + "'; rate_limit_service.limits defines none");
      else if (auto s = text::suggest(ref.limit, names))
        error(ref.line, ref.path, "unknown limit '" + ref.limit + "'; did you mean '" + *s + "'?");
      else
        error(ref.line, ref.path,
              "unknown limit '" + ref.limit + "'; rate_limit_service.limits are " + list_of(names));
    }
    for (const auto& l : rls_limits_) check_cost(l, 1, "");
  }

  // Routes: names, upstreams, costs.
  std::vector<std::string> upstream_names;
  for (const auto& [name, u] : r.upstreams) upstream_names.push_back(name);
  std::map<std::string, int> route_names;
  for (const auto& rs : routes_) {
    if (!rs.value.name.empty()) {
      auto [it, fresh] = route_names.emplace(rs.value.name, rs.name_line);
      if (!fresh)
        error(rs.name_line, rs.name_path,
              "duplicate route name '" + rs.value.name + "' (first at line " +
                  std::to_string(it->second) + ")");
    }
    const std::string& up = rs.value.upstream;
    if (!up.empty() && !r.upstreams.contains(up)) {
      if (upstream_names.empty())
        error(rs.upstream_line, rs.upstream_path,
              "unknown upstream '" + up + "'; no upstreams are defined");
      else if (auto s = text::suggest(up, upstream_names))
        error(rs.upstream_line, rs.upstream_path,
              "unknown upstream '" + up + "'; did you mean '" + *s + "'?");
      else
        error(rs.upstream_line, rs.upstream_path,
              "unknown upstream '" + up + "'; upstreams are " + list_of(upstream_names));
    }
    if (!rs.cost_ok) continue;
    for (const auto& l : rs.limits) check_cost(l, rs.value.cost, "");
  }
  // Plan limits follow the caller onto every route, so each route's cost must fit them too.
  // With no routes, a request would still cost at least 1.
  for (const auto& p : plans_) {
    for (const auto& l : p.limits) {
      if (routes_.empty()) check_cost(l, 1, "");
      for (const auto& rs : routes_) {
        if (rs.cost_ok)
          check_cost(l, rs.value.cost,
                     " on route '" + (rs.value.name.empty() ? rs.path : rs.value.name) + "'");
      }
    }
  }
}

}  // namespace sluice::config::detail
