// The check script's argument layout (include/sluice/store/lua_scripts.hpp), in one place so
// the Redis store and the table tests cannot disagree about it.
#include "sluice/store/lua_scripts.hpp"

#include "sluice/limiter/keys.hpp"

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
    case config::algorithm::gcra:
      return -1;
  }
  return -1;
}

void append_check_command(const limiter::check_request& req, const key_layout& layout,
                          std::vector<std::string>& out) {
  const std::size_t n = req.limits.size();
  out.reserve(out.size() + 3 + 8 * n);
  out.push_back(std::to_string(n));
  std::vector<std::string> fields;
  fields.reserve(n);
  for (const auto& l : req.limits) {
    if (layout.packed && l.algorithm != config::algorithm::sliding_log) {
      auto at = limiter::packed_address(l.key, layout.hash_groups);
      out.push_back(std::move(at.key));
      fields.push_back(std::move(at.field));
    } else {
      out.push_back(l.key);
      fields.emplace_back();
    }
  }
  out.push_back(std::to_string(req.now_ms_override));
  out.push_back(std::to_string(n));
  out.push_back(std::to_string(req.stale_after_ms));
  for (std::size_t i = 0; i < n; ++i) {
    const auto& l = req.limits[i];
    out.push_back(std::to_string(algorithm_id(l.algorithm)));
    if (l.algorithm == config::algorithm::token_bucket) {
      out.push_back(std::to_string(l.bucket.refill_per_ms));
      out.push_back(std::to_string(l.bucket.units_per_token));
      out.push_back(std::to_string(l.bucket.burst));
    } else {
      out.push_back(std::to_string(l.bucket.window_ms));
      out.push_back(std::to_string(l.bucket.window_limit));
      out.emplace_back("0");
    }
    out.push_back(std::to_string(l.cost));
    out.emplace_back(l.shadow ? "1" : "0");
    out.push_back(std::move(fields[i]));
  }
}

}  // namespace sluice::lua
