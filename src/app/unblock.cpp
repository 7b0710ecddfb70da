// SPDX-License-Identifier: Apache-2.0
// `POST /admin/unblock` (the penalty box, limiter/block.hpp): the block of one caller on one
// limit is deleted by the store's own check — a check with peek and lift_blocks set, which
// writes nothing but the deletion, in the block's hash slot, so it works alike on the memory
// store, Redis and Redis Cluster. Runs on a worker's executor (the worker owns its store
// connection), called through gateway::unblock().
#include "request_path.hpp"

#include "sluice/errc.hpp"
#include "sluice/limiter/keys.hpp"
#include "sluice/limiter/refusal_cache.hpp"
#include "sluice/observability/admin.hpp"
#include "sluice/utf8.hpp"

#include <boost/json.hpp>

#include <algorithm>
#include <variant>

namespace sluice::app {
namespace asio = boost::asio;
namespace json = boost::json;

namespace {

observability::unblock_answer answer(unsigned status, const json::object& o) {
  return {status, utf8::make_valid(json::serialize(o))};
}

observability::unblock_answer refused(unsigned status, std::string why) {
  json::object o;
  o["error"] = std::move(why);
  return answer(status, o);
}

/// The limit named `name` in the rules (plans first, then routes; one name is one bucket).
const config::limit* find_limit(const config::rules& rules, const std::string& name) {
  for (const auto& [plan_name, plan] : rules.plans)
    for (const auto& l : plan.limits)
      if (l.name == name) return &l;
  for (const auto& route : rules.routes)
    for (const auto& l : route.limits)
      if (l.name == name) return &l;
  return nullptr;
}

/// The bucket identity `q` names for `l`, as identity::limit_identity() keys a request of
/// that caller; or why the query does not name one.
std::variant<std::pair<limiter::key_namespace, std::string>, std::string> caller_of(
    const config::limit& l, const observability::unblock_query& q) {
  using ns = limiter::key_namespace;
  const int given = !q.api_key.empty() + !q.ip.empty() + !q.user.empty() + !q.header.empty();
  if (l.by == config::identity_kind::global) {
    if (given != 0) return "limit '" + l.name + "' counts by global: name no caller";
    return std::pair{ns::global, std::string("*")};
  }
  if (given != 1) {
    return std::string("name the caller with exactly one of ") +
           (l.by == config::identity_kind::api_key ? "api_key= or ip= (an anonymous caller)"
            : l.by == config::identity_kind::ip    ? "ip="
            : l.by == config::identity_kind::user  ? "user= or ip= (a caller without one)"
                                                   : "header= or ip= (a caller without one)");
  }
  switch (l.by) {
    case config::identity_kind::api_key:
      if (!q.api_key.empty()) return std::pair{ns::api_key, q.api_key};
      if (!q.ip.empty()) return std::pair{ns::anonymous_ip, q.ip};
      break;
    case config::identity_kind::ip:
      if (!q.ip.empty()) return std::pair{ns::ip, q.ip};
      break;
    case config::identity_kind::user:
      if (!q.user.empty()) return std::pair{ns::user, q.user};
      if (!q.ip.empty()) return std::pair{ns::fallback_ip, q.ip};
      break;
    case config::identity_kind::header:
      if (!q.header.empty()) return std::pair{ns::header, q.header};
      if (!q.ip.empty()) return std::pair{ns::fallback_ip, q.ip};
      break;
    case config::identity_kind::global:
      break;
  }
  return "limit '" + l.name + "' does not count callers by that parameter";
}

}  // namespace

asio::awaitable<observability::unblock_answer> gateway_handler::unblock(
    observability::unblock_query q) {
  const std::shared_ptr<const snapshot> snap = shared_.current.load();
  const config::limit* l = find_limit(*snap->rules, q.limit);
  if (l == nullptr) co_return refused(404, "no limit named '" + q.limit + "'");
  if (l->block.count() <= 0) co_return refused(404, "limit '" + q.limit + "' has no block:");
  auto who = caller_of(*l, q);
  if (auto* why = std::get_if<std::string>(&who)) co_return refused(400, std::move(*why));
  const auto& [ns, value] = std::get<0>(who);

  // Any of the limit's parameters: they only shape the as-if outcome, never the block's place.
  const config::limit_params& p =
      l->has_default_params ? l->params : l->plan_overrides.begin()->second;
  limiter::check_request check;
  limiter::limit_check lc;
  lc.key = limiter::bucket_key(l->name, ns, value);
  lc.algorithm = l->algorithm;
  lc.bucket = limiter::bucket_params::for_limit(*l, p);
  lc.block_ms = l->block.count();
  check.limits.push_back(std::move(lc));
  check.peek = true;
  check.lift_blocks = true;
  // The explain step's store call (peek: nothing written but the lift).
  const boost::system::result<limiter::check_outcome> decided = co_await store_.peek(check);
  if (!decided) co_return refused(503, "store: " + decided.error().message());
  const limiter::limit_outcome& lo = decided->limits.front();
  const bool lifted = lo.block == limiter::limit_outcome::block_event::lifted;
  if (lifted) limiter::note_block_lift();
  json::object o;
  o["limit"] = l->name;
  o["bucket"] = check.limits.front().key;
  o["lifted"] = lifted;
  if (lifted) {
    o["block_ended_at_ms"] = lo.block_end_ms;  // store time the block would have ended
    o["seconds_left"] =
        limiter::ceil_div(std::max<std::int64_t>(0, lo.block_end_ms - decided->now_ms), 1000);
  }
  o["store_time_ms"] = decided->now_ms;
  co_return answer(200, o);
}

}  // namespace sluice::app
