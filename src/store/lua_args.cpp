// SPDX-License-Identifier: Apache-2.0
// The check script's argument layout (include/sluice/store/lua_scripts.hpp), in one place so
// the Redis store and the table tests cannot disagree about it.
#include "sluice/store/lua_scripts.hpp"

#include "sluice/limiter/keys.hpp"

#include <boost/container/small_vector.hpp>

#include <bit>
#include <cstring>
#include <limits>

namespace sluice::lua {

int algorithm_id(config::algorithm a) noexcept {
  switch (a) {
    case config::algorithm::token_bucket:
      return 0;
    case config::algorithm::fixed_window:
      return 1;
    case config::algorithm::sliding_window:
      return 2;
    case config::algorithm::sliding_log:
      return 3;
    case config::algorithm::calendar:
      return 4;
    case config::algorithm::concurrency:
      return 5;
    case config::algorithm::gcra:
      return -1;
  }
  return -1;
}

std::string pack_limit(int id, std::int64_t a, std::int64_t b, std::int64_t c, std::int64_t cost,
                       bool shadow, bool peek, int more_flags) {
  static_assert(
      std::numeric_limits<double>::is_iec559 && std::endian::native == std::endian::little,
      "struct.unpack('<d') reads little-endian IEEE 754 doubles");
  const double v[6] = {static_cast<double>(id),
                       static_cast<double>(a),
                       static_cast<double>(b),
                       static_cast<double>(c),
                       static_cast<double>(cost),
                       (shadow ? 1.0 : 0.0) + (peek ? 2.0 : 0.0) + static_cast<double>(more_flags)};
  std::string out(sizeof v, '\0');
  std::memcpy(out.data(), v, sizeof v);
  return out;
}

std::string pack_leased_limit(std::int64_t a, std::int64_t b, std::int64_t c, std::int64_t cost,
                              bool shadow, bool peek, std::int64_t lease, std::int64_t refund,
                              int more_flags) {
  std::string out = pack_limit(0, a, b, c, cost, shadow, peek, more_flags);
  const double v[2] = {static_cast<double>(lease), static_cast<double>(refund)};
  out.append(reinterpret_cast<const char*>(v), sizeof v);
  return out;
}

std::string pack_settled_limit(int id, std::int64_t a, std::int64_t b, std::int64_t c,
                               std::int64_t cost, std::int64_t units, std::int64_t taken_at_ms) {
  const double v[8] = {static_cast<double>(id),    static_cast<double>(a),
                       static_cast<double>(b),     static_cast<double>(c),
                       static_cast<double>(cost),  16.0,
                       static_cast<double>(units), static_cast<double>(taken_at_ms)};
  std::string out(sizeof v, '\0');
  std::memcpy(out.data(), v, sizeof v);
  return out;
}

int block_flags(const limiter::check_request& req) noexcept {
  return (req.lift_blocks ? 4 : 0) + (req.peek && req.peek_starts_blocks ? 8 : 0);
}

void append_block(std::string& packed, std::int64_t block_ms) {
  const double v = static_cast<double>(block_ms);
  packed.append(reinterpret_cast<const char*>(&v), sizeof v);
}

namespace {

// Sliding logs (a list) and concurrency slots (a sorted set) are kept at their bucket's own
// key: neither can be a hash field.
bool packable(const limiter::limit_check& l) {
  return l.algorithm != config::algorithm::sliding_log &&
         l.algorithm != config::algorithm::concurrency;
}

}  // namespace

std::string redis_key(const limiter::limit_check& l, const key_layout& layout) {
  if (layout.packed && packable(l)) return limiter::packed_address(l.key, layout.hash_groups).key;
  return l.key;
}

std::size_t append_check_command(const limiter::check_request& req, const key_layout& layout,
                                 std::vector<std::string>& out) {
  const std::size_t n = req.limits.size();
  out.reserve(out.size() + 3 + 3 * n);
  out.push_back(std::to_string(n));
  boost::container::small_vector<std::string, 4> fields(n);
  for (std::size_t i = 0; i < n; ++i) {
    const auto& l = req.limits[i];
    if (layout.packed && packable(l)) {
      auto at = limiter::packed_address(l.key, layout.hash_groups);
      out.push_back(std::move(at.key));
      fields[i] = std::move(at.field);
    } else {
      out.push_back(l.key);
    }
  }
  out.push_back(std::to_string(req.now_ms_override));
  const std::size_t stale_at = out.size();
  out.push_back(std::to_string(req.stale_after_ms));
  const int more = block_flags(req);
  for (std::size_t i = 0; i < n; ++i) {
    const auto& l = req.limits[i];
    if (req.settle) {
      const bool tb = l.algorithm == config::algorithm::token_bucket;
      out.push_back(pack_settled_limit(algorithm_id(l.algorithm),
                                       tb ? l.bucket.refill_per_ms : l.bucket.window_ms,
                                       tb ? l.bucket.units_per_token : l.bucket.window_limit,
                                       tb ? l.bucket.burst : 0, l.cost, l.settle, l.taken_at_ms));
    } else if (packs_lease(l)) {
      out.push_back(pack_leased_limit(l.bucket.refill_per_ms, l.bucket.units_per_token,
                                      l.bucket.burst, l.cost, l.shadow, req.peek, l.lease, l.refund,
                                      more));
    } else if (l.algorithm == config::algorithm::token_bucket) {
      out.push_back(pack_limit(algorithm_id(l.algorithm), l.bucket.refill_per_ms,
                               l.bucket.units_per_token, l.bucket.burst, l.cost, l.shadow, req.peek,
                               more));
    } else if (l.algorithm == config::algorithm::concurrency) {
      out.push_back(pack_limit(algorithm_id(l.algorithm), l.bucket.window_limit, l.bucket.window_ms,
                               static_cast<std::int64_t>(l.op), l.cost, l.shadow, req.peek, more));
      out.push_back(l.slot);  // in the field's place: the slot id
      continue;
    } else if (l.algorithm == config::algorithm::calendar) {
      out.push_back(pack_limit(algorithm_id(l.algorithm), static_cast<int>(l.bucket.calendar),
                               l.bucket.window_limit, l.bucket.utc_offset_minutes, l.cost, l.shadow,
                               req.peek, more));
    } else {
      out.push_back(pack_limit(algorithm_id(l.algorithm), l.bucket.window_ms, l.bucket.window_limit,
                               0, l.cost, l.shadow, req.peek, more));
    }
    if (packs_block(l)) append_block(out.back(), l.block_ms);
    out.push_back(std::move(fields[i]));
  }
  return stale_at;
}

}  // namespace sluice::lua
