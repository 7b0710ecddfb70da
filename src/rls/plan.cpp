// SPDX-License-Identifier: Apache-2.0
// ShouldRateLimit requests to store checks and outcomes to answers (rls/plan.hpp). The tree
// walk follows envoyproxy/ratelimit's documented matching (one tree level per descriptor
// entry, an exact value before a key without one, limits only at the node the last entry
// reaches); what differs is the decision: every descriptor's limits are decided together in
// one atomic check with sluice's all-or-nothing rule, so a refused call charges nothing.

#include "sluice/rls/plan.hpp"

#include "sluice/limiter/keys.hpp"

#include <algorithm>
#include <limits>

namespace sluice::rls {

namespace {

constexpr std::uint64_t max_hits = std::numeric_limits<std::int32_t>::max();

/// The node `entries` lead to in `nodes`, or nullptr.
const config::rls_descriptor* walk(
    const std::vector<config::rls_descriptor>& nodes,
    const google::protobuf::RepeatedPtrField<
        envoy::extensions::common::ratelimit::v3::RateLimitDescriptor_Entry>& entries) {
  const std::vector<config::rls_descriptor>* level = &nodes;
  const config::rls_descriptor* at = nullptr;
  for (const auto& e : entries) {
    if (level == nullptr) return nullptr;
    const config::rls_descriptor* exact = nullptr;
    const config::rls_descriptor* any = nullptr;
    for (const auto& n : *level) {
      if (n.key != e.key()) continue;
      if (n.any_value)
        any = &n;
      else if (n.value == e.value())
        exact = &n;
    }
    at = exact != nullptr ? exact : any;
    if (at == nullptr) return nullptr;
    level = &at->descriptors;
  }
  return at;
}

/// Length-prefixed parts: an injective encoding of (domain, entries), hashed by bucket_key.
std::string descriptor_value(
    const std::string& domain,
    const envoy::extensions::common::ratelimit::v3::RateLimitDescriptor& d) {
  std::string out;
  auto add = [&out](const std::string& s) {
    out += std::to_string(s.size());
    out += ':';
    out += s;
  };
  add(domain);
  for (const auto& e : d.entries()) {
    add(e.key());
    add(e.value());
  }
  return out;
}

pb::RateLimitResponse::RateLimit::Unit unit_of(std::int64_t period_ms) {
  using u = pb::RateLimitResponse::RateLimit;
  switch (period_ms) {
    case 1000:
      return u::SECOND;
    case 60'000:
      return u::MINUTE;
    case 3'600'000:
      return u::HOUR;
    case 86'400'000:
      return u::DAY;
    default:
      return u::UNKNOWN;
  }
}

std::uint32_t clamp32(std::int64_t v) {
  return static_cast<std::uint32_t>(
      std::clamp<std::int64_t>(v, 0, std::numeric_limits<std::uint32_t>::max()));
}

}  // namespace

std::variant<plan, invalid> map_request(const config::rate_limit_service_settings& rls,
                                        const pb::RateLimitRequest& req) {
  const config::rls_domain* domain = nullptr;
  for (const auto& d : rls.domains)
    if (d.domain == req.domain()) domain = &d;
  if (domain == nullptr) return invalid{"unknown domain '" + req.domain() + "'"};
  if (req.descriptors_size() == 0) return invalid{"a request needs at least one descriptor"};
  if (req.descriptors_size() > max_descriptors)
    return invalid{"more than " + std::to_string(max_descriptors) + " descriptors"};
  if (req.hits_addend() > max_hits)
    return invalid{"hits_addend " + std::to_string(req.hits_addend()) +
                   " is negative or above 2^31 - 1"};
  const std::int64_t request_cost = req.hits_addend() == 0 ? 1 : req.hits_addend();

  plan out;
  out.per_descriptor.resize(static_cast<std::size_t>(req.descriptors_size()));
  for (int i = 0; i < req.descriptors_size(); ++i) {
    const auto& d = req.descriptors(i);
    const std::string where = "descriptor " + std::to_string(i);
    if (d.entries_size() == 0) return invalid{where + " has no entries"};
    for (const auto& e : d.entries()) {
      if (e.key().empty() || e.value().empty())
        return invalid{where + " has an entry with an empty key or value"};
      if (e.key().size() > max_entry_bytes || e.value().size() > max_entry_bytes)
        return invalid{where + " has an entry longer than " + std::to_string(max_entry_bytes) +
                       " bytes"};
    }
    std::int64_t cost = request_cost;
    if (d.has_hits_addend()) {
      const std::uint64_t h = d.hits_addend().value();
      if (h > static_cast<std::uint64_t>(config::max_exact_integer))
        return invalid{where + ": hits_addend " + std::to_string(h) + " is above 2^53"};
      cost = h == 0 ? 1 : static_cast<std::int64_t>(h);
    }
    const config::rls_descriptor* node = walk(domain->descriptors, d.entries());
    if (node == nullptr || node->limits.empty()) {
      ++out.unknown;
      continue;
    }
    const std::string value = descriptor_value(req.domain(), d);
    for (const auto& name : node->limits) {
      const config::limit* l = rls.find_limit(name);
      if (l == nullptr) continue;  // the loader refuses a leaf naming a missing limit
      std::string key = limiter::bucket_key(l->name, limiter::key_namespace::descriptor, value);
      auto& idx = out.per_descriptor[static_cast<std::size_t>(i)];
      auto same = std::find_if(out.check.limits.begin(), out.check.limits.end(),
                               [&key](const limiter::limit_check& c) { return c.key == key; });
      std::size_t at = static_cast<std::size_t>(same - out.check.limits.begin());
      if (same != out.check.limits.end()) {
        same->cost += cost;
      } else {
        limiter::applied_limit a{l->name, l->algorithm,
                                 limiter::bucket_params::for_limit(*l, l->params),
                                 l->mode == config::limit_mode::shadow, l->warn_at_bp};
        limiter::limit_check c;
        c.key = std::move(key);
        c.algorithm = l->algorithm;
        c.bucket = a.bucket;
        c.cost = cost;
        c.shadow = a.shadow;
        c.block_ms = l->block.count();
        out.check.limits.push_back(std::move(c));
        out.applied.push_back(std::move(a));
      }
      const auto& c = out.check.limits[at];
      if (c.cost > out.applied[at].bucket.quota(c.algorithm))
        return invalid{where + ": hits " + std::to_string(c.cost) + " exceed limit '" + l->name +
                       "' (" + std::to_string(out.applied[at].bucket.quota(c.algorithm)) +
                       "): they could never be admitted"};
      if (std::find(idx.begin(), idx.end(), at) == idx.end()) idx.push_back(at);
    }
  }
  return out;
}

pb::RateLimitResponse render(const plan& p, const limiter::check_outcome& outcome,
                             const config::header_sets& sets) {
  pb::RateLimitResponse out;
  out.set_overall_code(outcome.allowed ? pb::RateLimitResponse::OK
                                       : pb::RateLimitResponse::OVER_LIMIT);
  for (const auto& idx : p.per_descriptor) {
    auto* st = out.add_statuses();
    st->set_code(pb::RateLimitResponse::OK);
    if (idx.empty()) continue;
    std::vector<limiter::applied_limit> applied;
    limiter::check_outcome sub;
    sub.allowed = outcome.allowed;
    sub.now_ms = outcome.now_ms;
    bool refused = false;
    for (std::size_t i : idx) {
      applied.push_back(p.applied[i]);
      sub.limits.push_back(outcome.limits[i]);
      refused = refused || (!outcome.allowed && !p.applied[i].shadow && !outcome.limits[i].admits);
    }
    if (refused) st->set_code(pb::RateLimitResponse::OVER_LIMIT);
    // The descriptor's most constraining enforced limit; a descriptor of shadow limits only
    // reports its first.
    const std::size_t k = limiter::most_constraining(applied, sub).value_or(0);
    const auto& a = applied[k];
    const auto& o = sub.limits[k];
    auto* cl = st->mutable_current_limit();
    cl->set_name(a.name);
    cl->set_requests_per_unit(clamp32(a.bucket.quota(a.algorithm)));
    const std::int64_t period =
        a.algorithm == config::algorithm::token_bucket || a.algorithm == config::algorithm::gcra
            ? a.bucket.units_per_token * a.bucket.burst /
                  std::max<std::int64_t>(1, a.bucket.refill_per_ms)
            : a.bucket.window_ms;
    cl->set_unit(a.bucket.calendar == config::calendar_unit::day
                     ? pb::RateLimitResponse::RateLimit::DAY
                 : a.bucket.calendar == config::calendar_unit::month
                     ? pb::RateLimitResponse::RateLimit::MONTH
                 : a.bucket.calendar != config::calendar_unit::none
                     ? pb::RateLimitResponse::RateLimit::UNKNOWN
                     : unit_of(period));
    st->set_limit_remaining(clamp32(o.remaining));
    auto* d = st->mutable_duration_until_reset();
    d->set_seconds(o.reset_ms / 1000);
    d->set_nanos(static_cast<std::int32_t>(o.reset_ms % 1000) * 1'000'000);
  }
  for (auto& [name, value] : limiter::quota_headers(p.applied, outcome, sets)) {
    auto* h = out.add_response_headers_to_add();
    h->set_key(std::string(name));
    h->set_value(std::move(value));
  }
  if (!outcome.allowed) {
    auto* h = out.add_response_headers_to_add();
    h->set_key("Retry-After");
    h->set_value(std::to_string(limiter::retry_after_seconds(p.applied, outcome)));
  }
  return out;
}

pb::RateLimitResponse allow_all(std::size_t descriptors) {
  pb::RateLimitResponse out;
  out.set_overall_code(pb::RateLimitResponse::OK);
  for (std::size_t i = 0; i < descriptors; ++i)
    out.add_statuses()->set_code(pb::RateLimitResponse::OK);
  return out;
}

}  // namespace sluice::rls
