// SPDX-License-Identifier: Apache-2.0
// counter_store's settle (counter_store.hpp): a settle is a check_request marked settle, so it
// travels every store's check path — the memory store's locks, the Redis pipeline with its
// deadline, stale bound and NOSCRIPT reload, the cluster's routing by slot. And store_stats'
// sum, made from the counter list (store_counters.hpp), so no counter is left out of it.
#include "sluice/store/counter_store.hpp"

#include "sluice/errc.hpp"

#include <array>

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

// ---- store_stats: its sum, made from the counter list (store_counters.hpp) -----------------

namespace {

void add(std::uint64_t& into, std::uint64_t n) noexcept {
  into += n;
}

template <std::size_t N>
void add(std::array<std::uint64_t, N>& into, const std::array<std::uint64_t, N>& n) noexcept {
  for (std::size_t k = 0; k < N; ++k) into[k] += n[k];
}

}  // namespace

void store_stats::add_counts(const store_stats& o) noexcept {
#define SLUICE_STORE_STATS_ADD(member, ...) add(member, o.member);
  SLUICE_STORE_COUNTERS(SLUICE_STORE_STATS_ADD)
#undef SLUICE_STORE_STATS_ADD
}

std::string_view error_kind_label(std::size_t k) {
  return error_kind_name(static_cast<error_kind>(k));
}

std::string_view batch_size_label(std::size_t k) {
  static constexpr std::array<std::string_view, batch_size_buckets> labels{
      "1", "2", "3-4", "5-8", "9-16", "17-32", "33-64", "65+"};
  return labels[k];
}

}  // namespace sluice::store
