// SPDX-License-Identifier: Apache-2.0
// sluice-test-support: redis_cluster redis_server
// sluice-test-serial
// Settling after the fact (counter_store::settle): one table of sequences — checks and settles
// at given store times, with the exact outcome of each — run against the memory store, one
// Redis (both key layouts) and a three-master Redis Cluster. Every store must answer every
// step identically: the memory store and the script mirror each other operation for operation.
#include "sluice/store/counter_store.hpp"

#include "sluice/errc.hpp"
#include "sluice/store/memory_store.hpp"
#include "sluice/store/redis_cluster_store.hpp"
#include "sluice/store/redis_store.hpp"
#include "support/redis_cluster.hpp"
#include "support/redis_server.hpp"

#include <gtest/gtest.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace sluice {
namespace {

namespace asio = boost::asio;
using limiter::check_outcome;
using limiter::check_request;
using result_type = boost::system::result<check_outcome>;

// Store time 0 of every case: a multiple of the windows' 10 s, so window k is [10k, 10k+10) s.
constexpr std::int64_t epoch_ms = 1'700'000'000'000;

// Every limit of the table: 10 units per 10 s — a token bucket of burst 10 (one token a
// second: 1 unit per ms, 1,000 units a token, capacity 10,000 units), a fixed window, a
// sliding window counter, and a sliding log (which cannot settle).
limiter::limit_check limit_of(config::algorithm a, const std::string& key, std::int64_t cost) {
  config::limit_params p;
  p.rate.count = 10;
  p.rate.period = std::chrono::seconds(10);
  p.burst = 10;
  limiter::limit_check l;
  l.key = key;
  l.algorithm = a;
  l.bucket = limiter::bucket_params::from(p);
  l.cost = cost;
  return l;
}

struct expect {
  bool admits;             // a request of the step's cost is (was) admitted
  std::int64_t remaining;  // never below 0
  std::int64_t reset_ms;
  std::int64_t retry_ms;  // what a request of the step's cost waits (0 when admitted)
};

constexpr std::int64_t now_window = -1;  // taken_at: the current window

struct step {
  std::int64_t t_ms;  // store time, from epoch_ms
  bool settle;        // false: a check of `cost`
  std::int64_t cost;
  std::int64_t units = 0;        // settle: > 0 charged, < 0 refunded
  std::int64_t taken_at_ms = 0;  // settle: the check's store time (from epoch_ms), or now_window
  std::vector<expect> want;      // one per limit of the case
};

struct settle_case {
  const char* name;
  const char* means;
  std::vector<config::algorithm> limits;
  std::vector<step> steps;
};

using config::algorithm;

const std::vector<settle_case>& table() {
  static const std::vector<settle_case> cases = {
      {"tb_refund",
       "a reservation of 5 tokens, 3 unused given back",
       {algorithm::token_bucket},
       {{0, false, 5, 0, 0, {{true, 5, 5000, 0}}}, {0, true, 5, -3, 0, {{true, 8, 2000, 0}}}}},
      {"tb_charge_into_debt",
       "10 tokens charged on a balance of 5: 5 in debt; Retry-After counts the debt, Remaining "
       "stays 0, the bucket admits again once the debt and the cost have refilled",
       {algorithm::token_bucket},
       {{0, false, 5, 0, 0, {{true, 5, 5000, 0}}},
        {0, true, 5, 10, 0, {{false, 0, 15000, 10000}}},
        {9999, false, 5, 0, 0, {{false, 4, 5001, 1}}},
        {10000, false, 5, 0, 0, {{true, 0, 10000, 0}}}}},
      {"tb_debt_is_at_most_one_capacity",
       "charges past one capacity of debt are not kept",
       {algorithm::token_bucket},
       {{0, true, 1, 10, 0, {{false, 0, 10000, 1000}}},
        {0, true, 1, 10, 0, {{false, 0, 20000, 11000}}},
        {0, true, 1, 10, 0, {{false, 0, 20000, 11000}}}}},
      {"tb_refund_capped_at_capacity",
       "a refund never fills the bucket past its burst",
       {algorithm::token_bucket},
       {{0, false, 1, 0, 0, {{true, 9, 1000, 0}}}, {500, true, 1, -5, 0, {{true, 10, 0, 0}}}}},
      {"fw_refund",
       "a refund in the window the units were taken in",
       {algorithm::fixed_window},
       {{1000, false, 5, 0, 0, {{true, 5, 9000, 0}}},
        {1000, true, 5, -3, 1000, {{true, 8, 9000, 0}}}}},
      {"fw_charge_into_debt",
       "a count above the limit: refused until the window rolls it away, Remaining 0",
       {algorithm::fixed_window},
       {{1000, false, 5, 0, 0, {{true, 5, 9000, 0}}},
        {1000, true, 5, 10, 1000, {{false, 0, 9000, 9000}}},
        {9999, false, 5, 0, 0, {{false, 0, 1, 1}}},
        {10000, false, 5, 0, 0, {{true, 5, 10000, 0}}}}},
      {"fw_settle_after_the_window_rolled_over",
       "units taken in window 0 and settled in window 1: the refund is dropped (they expired "
       "with window 0), a charge counts in window 1 (the cost is known now)",
       {algorithm::fixed_window},
       {{9000, false, 5, 0, 0, {{true, 5, 1000, 0}}},
        {10100, false, 4, 0, 0, {{true, 6, 9900, 0}}},
        {10500, true, 4, -5, 9000, {{true, 6, 9500, 0}}},
        {10600, true, 4, 3, 9000, {{false, 3, 9400, 9400}}}}},
      {"sw_refund_into_the_previous_window",
       "a sliding counter's refund of units taken in the window just before comes off its "
       "previous count",
       {algorithm::sliding_window},
       {{9000, false, 5, 0, 0, {{true, 5, 11000, 0}}},
        {10000, false, 1, 0, 0, {{true, 4, 20000, 0}}},
        {10000, true, 1, -5, 9000, {{true, 9, 20000, 0}}}}},
      {"two_limits_in_one_call",
       "a token bucket and a window settled in one call",
       {algorithm::token_bucket, algorithm::fixed_window},
       {{1000, false, 2, 0, 0, {{true, 8, 2000, 0}, {true, 8, 9000, 0}}},
        {1000, true, 2, 10, 1000, {{false, 0, 12000, 4000}, {false, 0, 9000, 9000}}}}},
  };
  return cases;
}

check_request request_for(const settle_case& c, const step& s, const std::string& prefix) {
  check_request req;
  for (std::size_t i = 0; i < c.limits.size(); ++i) {
    // A hash tag per limit: on the cluster, the limits of a case live in different slots.
    auto l = limit_of(c.limits[i],
                      "sl:{" + prefix + "-" + c.name + "-" + std::to_string(i) + "|k|r1}", s.cost);
    if (s.settle) {
      l.settle = s.units;
      l.taken_at_ms = s.taken_at_ms == now_window ? -1 : epoch_ms + s.taken_at_ms;
    }
    req.limits.push_back(std::move(l));
  }
  req.now_ms_override = epoch_ms + s.t_ms;
  return req;
}

template <class T>
T run(asio::io_context& ioc, asio::awaitable<T> a) {
  std::optional<T> out;
  std::exception_ptr ex;
  asio::co_spawn(ioc, std::move(a), [&](std::exception_ptr e, T v) {
    ex = e;
    out.emplace(std::move(v));
  });
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!out && std::chrono::steady_clock::now() < deadline) {
    if (ioc.stopped()) ioc.restart();
    ioc.run_one_for(std::chrono::milliseconds(10));
  }
  if (ex) std::rethrow_exception(ex);
  if (!out) throw std::runtime_error("awaitable did not complete in 10 s");
  return std::move(*out);
}

// Runs the whole table on `store` (keys prefixed by `prefix`).
void run_table(asio::io_context& ioc, store::counter_store& store, const std::string& prefix) {
  for (const auto& c : table()) {
    for (std::size_t k = 0; k < c.steps.size(); ++k) {
      const step& s = c.steps[k];
      SCOPED_TRACE(prefix + " " + c.name + " (" + c.means + ") step " + std::to_string(k));
      auto req = request_for(c, s, prefix);
      const result_type got =
          s.settle ? run(ioc, store.settle(std::move(req))) : run(ioc, store.check(std::move(req)));
      ASSERT_TRUE(got.has_value()) << got.error().message();
      ASSERT_EQ(got->limits.size(), s.want.size());
      EXPECT_EQ(got->now_ms, epoch_ms + s.t_ms);
      if (s.settle) EXPECT_TRUE(got->allowed);  // a settle refuses nothing
      for (std::size_t i = 0; i < s.want.size(); ++i) {
        SCOPED_TRACE("limit " + std::to_string(i));
        const auto& w = s.want[i];
        const auto& o = got->limits[i];
        EXPECT_EQ(o.admits, w.admits);
        EXPECT_EQ(o.limit, 10);
        EXPECT_EQ(o.remaining, w.remaining);
        EXPECT_EQ(o.reset_ms, w.reset_ms);
        EXPECT_EQ(o.retry_after_ms, w.retry_ms);
      }
    }
  }
}

// A sliding log cannot settle, and a settle beyond the Limit is refused: store_error, nothing
// written.
void refuses_what_cannot_settle(asio::io_context& ioc, store::counter_store& store,
                                const std::string& prefix) {
  check_request log;
  log.limits.push_back(limit_of(algorithm::sliding_log, "sl:{" + prefix + "-log|k|r1}", 1));
  log.limits.back().settle = 1;
  auto got = run(ioc, store.settle(log));
  ASSERT_FALSE(got.has_value());
  EXPECT_EQ(got.error(), make_error_code(errc::store_error));

  check_request big;
  big.limits.push_back(limit_of(algorithm::token_bucket, "sl:{" + prefix + "-big|k|r1}", 1));
  big.limits.back().settle = 11;
  got = run(ioc, store.settle(big));
  ASSERT_FALSE(got.has_value());
  EXPECT_EQ(got.error(), make_error_code(errc::store_error));
}

// A settle ignores a limit's lease, refund and block (counter_store::settle_now): settling a
// limit that carries them answers as settling the same limit without them — on Redis too,
// where the reply of a settle has no lease or block fields to read.
void ignores_leases_and_blocks(asio::io_context& ioc, store::counter_store& store,
                               const std::string& prefix) {
  check_request plain;
  plain.limits.push_back(limit_of(algorithm::token_bucket, "sl:{" + prefix + "-pl|k|r1}", 1));
  plain.limits.back().settle = 3;
  plain.now_ms_override = epoch_ms + 9'000'000;  // one clock for both
  check_request carrying = plain;
  carrying.limits.back().key = "sl:{" + prefix + "-bl|k|r1}";
  carrying.limits.back().block_ms = 900'000;
  carrying.limits.back().lease = 5;
  carrying.limits.back().refund = 2;
  const auto want = run(ioc, store.settle(plain));
  const auto got = run(ioc, store.settle(carrying));
  ASSERT_TRUE(want.has_value()) << want.error().message();
  ASSERT_TRUE(got.has_value()) << got.error().message();
  ASSERT_EQ(got->limits.size(), 1u);
  EXPECT_EQ(got->limits[0].remaining, want->limits[0].remaining);
  EXPECT_EQ(got->limits[0].reset_ms, want->limits[0].reset_ms);
  EXPECT_EQ(got->limits[0].granted, 0);
}

asio::awaitable<bool> wait_until(std::function<bool()> done) {
  auto ex = co_await asio::this_coro::executor;
  asio::steady_timer timer(ex);
  for (int i = 0; i < 1000 && !done(); ++i) {
    timer.expires_after(std::chrono::milliseconds(5));
    co_await timer.async_wait(asio::use_awaitable);
  }
  co_return done();
}

TEST(settle_table, memory_store) {
  asio::io_context ioc;
  store::memory_store store;
  run_table(ioc, store, "mem");
  refuses_what_cannot_settle(ioc, store, "mem");
  ignores_leases_and_blocks(ioc, store, "mem");
}

TEST(settle_table, redis_store_both_layouts) {
  test::redis_server server;
  for (const bool packed : {true, false}) {
    asio::io_context ioc;
    store::redis_settings settings;
    settings.port = server.port();
    settings.command_timeout = std::chrono::milliseconds(1000);
    settings.layout.packed = packed;
    store::redis_store store(ioc.get_executor(), settings);
    store.start();
    ASSERT_TRUE(run(ioc, wait_until([&] { return store.stats().connected; })));
    const std::string prefix = packed ? "hash" : "key";
    run_table(ioc, store, prefix);
    refuses_what_cannot_settle(ioc, store, prefix);
    ignores_leases_and_blocks(ioc, store, prefix);
    store.stop();
  }
}

TEST(settle_table, redis_cluster_store) {
  test::redis_cluster cluster;
  asio::io_context ioc;
  store::redis_cluster_settings settings;
  for (const auto p : cluster.ports()) settings.seeds.push_back({"127.0.0.1", p});
  settings.node.command_timeout = std::chrono::milliseconds(1000);
  settings.node.layout.packed = false;  // the key's slot is the bucket's
  store::redis_cluster_store store(ioc.get_executor(), settings);
  store.start();
  ASSERT_TRUE(run(ioc, wait_until([&] { return store.stats().connected; })));
  run_table(ioc, store, "cluster");
  refuses_what_cannot_settle(ioc, store, "cluster");
  ignores_leases_and_blocks(ioc, store, "cluster");
  // The two-limit case was split over slots (settled per node).
  EXPECT_GT(store.cluster().split_checks, 0u);
  store.stop();
}

}  // namespace
}  // namespace sluice
