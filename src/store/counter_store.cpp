// SPDX-License-Identifier: Apache-2.0
// counter_store's settle (counter_store.hpp): a settle is a check_request marked settle, so it
// travels every store's check path — the memory store's locks, the Redis pipeline with its
// deadline, stale bound and NOSCRIPT reload, the cluster's routing by slot.
#include "sluice/store/counter_store.hpp"

#include "sluice/errc.hpp"

namespace sluice::store {

std::optional<boost::system::result<limiter::check_outcome>> counter_store::settle_now(
    limiter::check_request& req) {
  req.settle = true;
  req.peek = false;
  // What a settle does not do: take or return a lease, start a block. Cleared here, so every
  // store packs and reads a settle's limits alike (the Redis store expects the lease and block
  // fields of a reply from these, and a settle's reply has none).
  for (auto& l : req.limits) {
    l.lease = 0;
    l.refund = 0;
    l.block_ms = 0;
  }
  using result = boost::system::result<limiter::check_outcome>;
  if (!limiter::can_settle(req)) return result(make_error_code(errc::store_error));
  limiter::check_outcome out;
  if (decide_now(req, out)) return result(std::move(out));
  return std::nullopt;
}

boost::asio::awaitable<boost::system::result<limiter::check_outcome>> counter_store::settle(
    limiter::check_request req) {
  if (auto done = settle_now(req)) co_return std::move(*done);
  co_return co_await check(std::move(req));
}

}  // namespace sluice::store

namespace sluice::store {

void store_stats::add_counts(const store_stats& o) noexcept {
  checks += o.checks;
  timeouts += o.timeouts;
  errors += o.errors;
  unavailable += o.unavailable;
  script_loads += o.script_loads;
  reconnects += o.reconnects;
  late_replies += o.late_replies;
  connect_failures += o.connect_failures;
  breaker_opens += o.breaker_opens;
  breaker_reopens += o.breaker_reopens;
  breaker_half_opens += o.breaker_half_opens;
  breaker_closes += o.breaker_closes;
  buckets += o.buckets;
  evictions += o.evictions;
  clock_resends += o.clock_resends;
  wrong_node_drops += o.wrong_node_drops;
  sentinel_unreachable += o.sentinel_unreachable;
  sentinel_unknown_master += o.sentinel_unknown_master;
  master_switches += o.master_switches;
  sentinels_learned += o.sentinels_learned;
  topology_refreshes += o.topology_refreshes;
  topology_failures += o.topology_failures;
  split_checks += o.split_checks;
  split_commit_refusals += o.split_commit_refusals;
  split_partial_commits += o.split_partial_commits;
  for (std::size_t k = 0; k < error_kind_count; ++k) error_replies[k] += o.error_replies[k];
  for (std::size_t k = 0; k < batch_size_buckets; ++k) batch_sizes[k] += o.batch_sizes[k];
}

}  // namespace sluice::store
