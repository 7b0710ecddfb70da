// The check script's argument layout (include/sluice/store/lua_scripts.hpp), in one place so
// the Redis store and the table tests cannot disagree about it.
#include "sluice/store/lua_scripts.hpp"

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

void append_check_args(const limiter::check_request& req, std::vector<std::string>& out) {
  out.reserve(out.size() + 2 + 6 * req.limits.size());
  out.push_back(std::to_string(req.now_ms_override));
  out.push_back(std::to_string(req.limits.size()));
  for (const auto& l : req.limits) {
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
  }
}

}  // namespace sluice::lua
