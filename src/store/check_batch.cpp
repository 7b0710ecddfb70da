// SPDX-License-Identifier: Apache-2.0
// The script call of a batch of checks and the reading of each check's answer (check_batch.hpp).
#include "store/check_batch.hpp"

namespace sluice::store::detail {

std::size_t append_batch(std::span<std::vector<std::string>*> parts, bool declare_keys,
                         std::vector<std::string>& out) {
  // A part: numkeys, n keys, override, stale bound, 2n limit arguments.
  const auto limits = [](const std::vector<std::string>& p) { return (p.size() - 3) / 3; };
  if (parts.size() == 1) {
    auto& p = *parts.front();
    const std::size_t stale_at = out.size() + limits(p) + 2;
    for (auto& a : p) out.push_back(std::move(a));
    return stale_at;
  }
  // Moved from, unless the parts are to be kept.
  const auto take = [&](std::string& a) { out.push_back(declare_keys ? std::move(a) : a); };
  std::size_t keys = 0;
  for (const auto* p : parts) keys += limits(*p);
  out.reserve(out.size() + 5 + 3 * keys);
  out.push_back(declare_keys ? std::to_string(keys) : std::string("0"));
  const auto put_keys = [&] {
    for (auto* p : parts) {
      for (std::size_t i = 1; i <= limits(*p); ++i) take((*p)[i]);
    }
  };
  if (declare_keys) put_keys();
  out.emplace_back("batch");
  auto& first = *parts.front();
  take(first[limits(first) + 1]);  // the override
  const std::size_t stale_at = out.size();
  take(first[limits(first) + 2]);  // the stale bound
  std::string counts;
  counts.reserve(parts.size());
  for (const auto* p : parts) counts.push_back(static_cast<char>(limits(*p)));
  out.push_back(std::move(counts));
  if (!declare_keys) put_keys();
  for (auto* p : parts) {
    for (std::size_t i = limits(*p) + 3; i < p->size(); ++i) take((*p)[i]);
  }
  return stale_at;
}

answer_kind read_answer(redisReply* const* e, std::size_t available, const reply_shape& shape,
                        limiter::check_outcome& out, std::size_t& used) {
  if (available < 2 || e[0]->type != REDIS_REPLY_INTEGER || e[1]->type != REDIS_REPLY_INTEGER)
    return answer_kind::malformed;
  if (e[0]->integer == -1) {
    used = 2;
    out.now_ms = e[1]->integer;
    return answer_kind::refused;
  }
  const std::size_t n = shape.bursts.size();
  used = shape.size();
  if (available < used) return answer_kind::malformed;
  for (std::size_t i = 0; i < used; ++i) {
    if (e[i]->type != REDIS_REPLY_INTEGER) return answer_kind::malformed;
  }
  out.allowed = e[0]->integer == 1;
  out.now_ms = e[1]->integer;  // the store time the script decided at
  out.limits.clear();
  out.limits.reserve(n);
  for (std::size_t i = 0; i < n; ++i) {
    redisReply* const* l = e + 2 + 5 * i;
    limiter::limit_outcome lo;
    lo.admits = l[0]->integer == 1;
    lo.limit = shape.bursts[i];
    lo.remaining = l[1]->integer;
    lo.reset_ms = l[2]->integer;
    lo.retry_after_ms = l[3]->integer;
    lo.next_ms = l[4]->integer;
    out.limits.push_back(lo);
  }
  const std::size_t leases = 2 + 5 * n;
  for (std::size_t j = 0; j < shape.leased.size(); ++j)
    out.limits[shape.leased[j]].granted = e[leases + j]->integer;
  for (std::size_t j = 0; j < shape.blocked.size(); ++j) {
    redisReply* const* b = e + leases + shape.leased.size() + 2 * j;
    auto& lo = out.limits[shape.blocked[j]];
    lo.block_end_ms = b[0]->integer;
    lo.block = b[1]->integer == 1   ? limiter::limit_outcome::block_event::started
               : b[1]->integer == 2 ? limiter::limit_outcome::block_event::lifted
                                    : limiter::limit_outcome::block_event::none;
  }
  return answer_kind::decided;
}

}  // namespace sluice::store::detail
