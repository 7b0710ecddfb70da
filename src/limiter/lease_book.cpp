// SPDX-License-Identifier: Apache-2.0
// Token leases of one worker (include/sluice/limiter/lease_book.hpp).
#include "sluice/limiter/lease_book.hpp"

#include <algorithm>

namespace sluice::limiter {
namespace {

/// How long a lease request may stay unanswered before the key may ask again: beyond any
/// store deadline, so only a request that never settled (its coroutine gone) reaches it.
constexpr std::chrono::seconds pending_bound{2};

}  // namespace

bool lease_book::same_bucket(const bucket_params& a, const bucket_params& b) {
  return a.refill_per_ms == b.refill_per_ms && a.units_per_token == b.units_per_token &&
         a.burst == b.burst;
}

void lease_book::make_room(clock::time_point now) {
  if (entries_.size() < capacity_) return;
  std::erase_if(entries_, [&](const auto& kv) { return kv.second.until <= now; });
  if (entries_.size() >= capacity_) entries_.clear();
}

limit_outcome lease_book::described(const bucket_params& p, std::int64_t remaining) {
  limit_outcome o;
  o.admits = true;
  o.limit = p.burst;
  o.remaining = std::min(p.burst, remaining);
  const std::int64_t level = o.remaining * p.units_per_token;
  o.reset_ms = ceil_div(p.capacity() - level, p.refill_per_ms);
  o.next_ms = level >= p.capacity() ? 0 : ceil_div(p.units_per_token, p.refill_per_ms);
  return o;
}

void lease_book::give_back(const std::string& key, std::uint64_t id, std::int64_t cost) {
  auto it = entries_.find(key);
  if (it != entries_.end() && it->second.id == id && !it->second.pending) it->second.tokens += cost;
}

bool lease_book::split(check_request& req, const std::vector<std::chrono::milliseconds>& lease_time,
                       std::uint64_t generation, std::uint64_t epoch, clock::time_point now,
                       lease_split& s) {
  const std::size_t n = req.limits.size();
  bool any = false;
  for (const auto& l : req.limits) any = any || l.lease > 0;
  if (!any) return false;
  s.all = std::move(req.limits);
  s.local.assign(n, false);
  s.covered.assign(n, limit_outcome{});
  s.lease_time.assign(n, std::chrono::milliseconds{0});
  s.lease_id.assign(n, 0);
  std::vector<limit_check> rest;
  rest.reserve(n);
  for (std::size_t i = 0; i < n; ++i) {
    if (s.all[i].lease <= 0) {
      rest.push_back(s.all[i]);
      continue;
    }
    limit_check l = s.all[i];
    s.all[i].lease = 0;  // (kept as the request was prepared: failed() gives it back)
    s.all[i].refund = 0;
    auto it = entries_.find(l.key);
    if (it == entries_.end()) {
      make_room(now);
      it = entries_.try_emplace(l.key).first;
    } else {
      entry& e = it->second;
      const bool same = same_bucket(e.bucket, l.bucket) && e.epoch == epoch;
      if (e.pending && now < e.until) {  // a lease of this key is on its way: go without one
        l.lease = 0;
        rest.push_back(std::move(l));
        continue;
      }
      if (same && e.generation == generation && now < e.until && e.tokens >= l.cost) {
        e.tokens -= l.cost;
        s.local[i] = true;
        s.lease_id[i] = e.id;
        s.covered[i] = described(l.bucket, e.tokens + e.store_remaining);
        continue;
      }
      // The lease ended or cannot pay for this request: what it left goes back to the bucket
      // (not across a new store connection, whose bucket may be another).
      if (same && e.tokens > 0) {
        l.refund = std::min(e.tokens, l.bucket.burst);
        tokens_returned_ += static_cast<std::uint64_t>(l.refund);
      }
    }
    entry& e = it->second;
    e = entry{};
    e.bucket = l.bucket;
    e.generation = generation;
    e.epoch = epoch;
    e.id = ++next_id_;
    e.pending = true;
    e.until = now + pending_bound;  // (a request that never settles cannot block the key)
    s.lease_id[i] = e.id;
    s.lease_time[i] = i < lease_time.size() ? lease_time[i] : std::chrono::milliseconds{0};
    rest.push_back(std::move(l));
  }
  req.limits = std::move(rest);
  return true;
}

check_outcome lease_book::settle(lease_split& s, const check_outcome* rest, clock::time_point now) {
  const std::size_t n = s.all.size();
  check_outcome out;
  out.allowed = rest == nullptr || rest->allowed;
  out.now_ms = rest ? rest->now_ms : 0;
  out.limits.resize(n);
  std::size_t j = 0;  // the next limit of `rest`
  for (std::size_t i = 0; i < n; ++i) {
    const limit_check& l = s.all[i];
    if (s.local[i]) {
      out.limits[i] = s.covered[i];
      if (!out.allowed && !l.shadow) give_back(l.key, s.lease_id[i], l.cost);
      continue;
    }
    if (rest == nullptr || j >= rest->limits.size()) continue;  // (never: rest parallels it)
    const limit_outcome& o = rest->limits[j++];
    out.limits[i] = o;
    if (s.lease_id[i] == 0 || s.local[i]) continue;
    auto it = entries_.find(l.key);
    if (it == entries_.end() || it->second.id != s.lease_id[i]) continue;  // made room: lost
    if (o.granted > l.cost) {
      entry& e = it->second;
      e.tokens = o.granted - l.cost;
      e.store_remaining = o.remaining;
      e.pending = false;
      e.until = now + s.lease_time[i];
      ++grants_;
      tokens_leased_ += static_cast<std::uint64_t>(e.tokens);
      // What this caller can spend now includes the lease this worker holds for it.
      out.limits[i] = described(l.bucket, e.tokens + e.store_remaining);
    } else {
      entries_.erase(it);
    }
  }
  if (rest == nullptr) ++local_decisions_;
  return out;
}

void lease_book::failed(lease_split& s, check_request& req) {
  for (std::size_t i = 0; i < s.all.size(); ++i) {
    if (s.lease_id[i] == 0) continue;
    if (s.local[i]) {
      give_back(s.all[i].key, s.lease_id[i], s.all[i].cost);
    } else if (auto it = entries_.find(s.all[i].key);
               it != entries_.end() && it->second.id == s.lease_id[i]) {
      entries_.erase(it);
    }
  }
  req.limits = std::move(s.all);
}

}  // namespace sluice::limiter
