// SPDX-License-Identifier: Apache-2.0
// Per-worker request counters (see request_counters.hpp).

#include "request_counters.hpp"

#include <chrono>

namespace sluice::app {

route_counters& request_counters::named(const std::string& name) {
  auto& slot = by_name_[name];
  if (!slot) slot = std::make_unique<route_counters>();
  return *slot;
}

upstream_counters& request_counters::upstream_named(const std::string& name) {
  auto& slot = upstreams_[name];
  if (!slot) slot = std::make_unique<upstream_counters>();
  return *slot;
}

route_counters& request_counters::of(const config::rules& rules, std::uint64_t generation,
                                     const config::route& route) {
  const auto index = static_cast<std::size_t>(&route - rules.routes.data());
  if (generation != generation_ || index >= by_index_.size()) {
    // A reload (or a request still deciding under the previous snapshot): index this
    // snapshot's routes. Counters are never removed, so references stay valid.
    std::lock_guard lock(mutex_);
    by_index_.clear();
    by_index_.reserve(rules.routes.size());
    for (const auto& r : rules.routes) {
      route_counters& c = named(r.name);
      // Upstream names come from the rules file, as route names do: a bounded label set.
      c.upstream = r.upstream.empty() ? nullptr : &upstream_named(r.upstream);
      by_index_.push_back(&c);
    }
    generation_ = generation;
    if (index >= by_index_.size()) return named(route.name);  // not of this snapshot
  }
  return *by_index_[index];
}

void request_counters::add_to(std::map<std::string, observability::route_counts>& out) const {
  std::lock_guard lock(mutex_);
  for (const auto& [name, c] : by_name_) {
    auto& r = out[name];
    r.route = name;
    for (std::size_t p = 0; p < c->decisions.size(); ++p) {
      const decision_counters& from = c->decisions[p];
      observability::decision_counts& to = r.by_protocol[p];
      to.allowed += from.allowed.value();
      to.limited += from.limited.value();
      to.unlimited += from.unlimited.value();
      to.fail_open += from.fail_open.value();
      to.fail_closed += from.fail_closed.value();
      r.allowed += from.allowed.value();
      r.limited += from.limited.value();
      r.unlimited += from.unlimited.value();
      r.fail_open += from.fail_open.value();
      r.fail_closed += from.fail_closed.value();
    }
    r.local += c->local.value();
    r.shadow_limited += c->shadow_limited.value();
    r.bad_gateway += c->bad_gateway.value();
    r.gateway_timeout += c->gateway_timeout.value();
  }
}

void request_counters::add_to(std::map<std::string, observability::upstream_counts>& out) const {
  std::lock_guard lock(mutex_);
  for (const auto& [name, c] : upstreams_) {
    auto& u = out[name];
    u.upstream = name;
    u.response.add(c->response.read());
    for (std::size_t i = 0; i < u.failures.size(); ++i) u.failures[i] += c->failures[i].value();
    c->add_last_error_to(u);
  }
}

void upstream_counters::note_failure(http::upstream_failure failure, std::string_view what) {
  const auto now = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::system_clock::now().time_since_epoch());
  std::string text(http::upstream_failure_name(failure));
  if (!what.empty()) {
    text += ": ";
    text.append(what.substr(0, 200));  // a bounded copy: a detail may quote a response
  }
  std::lock_guard lock(last_mutex_);
  last_error_ = std::move(text);
  last_error_ms_ = now.count();
}

void upstream_counters::add_last_error_to(observability::upstream_counts& out) const {
  std::lock_guard lock(last_mutex_);
  if (last_error_ms_ > out.last_error_unix_ms) {
    out.last_error = last_error_;
    out.last_error_unix_ms = last_error_ms_;
  }
}

void exchange_counters::record(const http::exchange_result& ex, http::protocol proto) noexcept {
  duration[static_cast<std::size_t>(proto)][observability::code_class_of(ex.status)].observe(
      std::chrono::nanoseconds(static_cast<std::int64_t>(ex.total_ms * 1e6)));
  bytes_in.add(ex.bytes_in);
  bytes_out.add(ex.bytes_out);
}

void exchange_counters::add_to(observability::exchange_counts& out) const noexcept {
  for (std::size_t p = 0; p < duration.size(); ++p)
    for (std::size_t k = 0; k < duration[p].size(); ++k)
      out.duration[p][k].add(duration[p][k].read());
  out.bytes_in += bytes_in.value();
  out.bytes_out += bytes_out.value();
}

void request_counters::add_to(std::map<std::string, observability::exchange_counts>& out) const {
  unrouted.add_to(out[""]);
  std::lock_guard lock(mutex_);
  for (const auto& [name, c] : by_name_) {
    auto& e = out[name];
    e.route = name;
    c->exchanges.add_to(e);
  }
}

observability::owned_counter& per_limit_counters::of(const std::string& name) {
  if (auto it = index_.find(name); it != index_.end()) return *it->second;
  std::lock_guard lock(mutex_);
  auto& slot = counters_[name];
  if (!slot) slot = std::make_unique<observability::owned_counter>();
  index_.emplace(name, slot.get());
  return *slot;
}

void per_limit_counters::add_to(std::map<std::string, std::uint64_t>& out) const {
  std::lock_guard lock(mutex_);
  for (const auto& [name, c] : counters_) out[name] += c->value();
}

}  // namespace sluice::app
