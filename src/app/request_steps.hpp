// SPDX-License-Identifier: Apache-2.0
#pragma once
// Private to the app room: small helpers the request path's steps share (request_path.cpp,
// plan_step.cpp, respond_step.cpp).

#include "sluice/config/rules.hpp"
#include "sluice/http/types.hpp"

#include <boost/beast/http/status.hpp>

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <optional>

namespace sluice::app::steps {

/// Whether `v` answers 429 (refused by a limit).
inline bool refused(const http::verdict& v) {
  return v.what == http::verdict::kind::answer &&
         v.answer.result() == boost::beast::http::status::too_many_requests;
}

/// An answer verdict: `res` is sent as it is.
inline http::verdict answer(http::response res) {
  http::verdict v;
  v.what = http::verdict::kind::answer;
  v.answer = std::move(res);
  return v;
}

/// The units a limit with `charge:` takes at admission: the route's cost (when_status); the
/// fixed reservation; or the request header's, capped at its max (the max when the header
/// is absent; at least 1). nullopt: the header is not a whole number.
inline std::optional<std::int64_t> admission_units(const config::charge_rule& c, std::int64_t cost,
                                                   const http::request_head& head) {
  if (c.what != config::charge_rule::kind::settle) return cost;
  if (c.reserve_header.empty()) return c.reserve;
  const auto value = head[c.reserve_header];
  if (value.empty()) return c.reserve_max;
  std::uint64_t n = 0;
  const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), n);
  if (ec == std::errc::result_out_of_range && end == value.data() + value.size())
    return c.reserve_max;  // digits beyond 2^64: capped like any large number
  if (ec != std::errc{} || end != value.data() + value.size()) return std::nullopt;
  return std::clamp<std::int64_t>(
      static_cast<std::int64_t>(std::min<std::uint64_t>(n, config::max_exact_integer)), 1,
      c.reserve_max);
}

}  // namespace sluice::app::steps
