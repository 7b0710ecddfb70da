// SPDX-License-Identifier: Apache-2.0
// sluice-test-support: redis_server
// Checks batched into one script call (store.max_batch), against a real redis-server: the
// checks started in one turn of the worker's loop go to Redis in one call and are decided one
// after the other, each with its own verdict — the second check of a key sees the first; one
// refused and one admitted side by side; a check whose arguments the script refuses fails
// alone; a call refused as a whole (OOM) fails each of its checks and the next call starts
// clean; NOSCRIPT re-sends the batch once; max_batch bounds the calls.
#include "sluice/store/redis_store.hpp"

#include "sluice/errc.hpp"
#include "support/redis_server.hpp"

#include <gtest/gtest.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>

#include <chrono>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

namespace sluice {
namespace {

namespace asio = boost::asio;
using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;
using result_type = boost::system::result<limiter::check_outcome>;

// A token bucket of `burst` tokens refilled at 1 per hour: Remaining says exactly how many
// checks it has taken.
limiter::limit_check limit(const std::string& key, std::int64_t burst) {
  config::limit_params p;
  p.rate.count = 1;
  p.rate.period = std::chrono::hours(1);
  p.burst = burst;
  limiter::limit_check lc;
  lc.key = key;
  lc.bucket = limiter::bucket_params::from(p);
  return lc;
}

limiter::check_request request(std::vector<limiter::limit_check> limits) {
  limiter::check_request r;
  r.limits = std::move(limits);
  return r;
}

template <class Pred>
bool run_until(asio::io_context& ioc, Pred done, std::chrono::milliseconds limit) {
  const auto deadline = clock_type::now() + limit;
  while (!done() && clock_type::now() < deadline) {
    if (ioc.stopped()) ioc.restart();
    ioc.run_one_for(5ms);
  }
  return done();
}

class redis_batch : public ::testing::Test {
 protected:
  void start(std::size_t max_batch = 64) {
    store::redis_settings s;
    s.port = server_.port();
    s.command_timeout = 2000ms;  // a shared two-core machine: no deadline in these tests
    s.connect_timeout = 1000ms;
    s.max_batch = max_batch;
    s.layout.packed = false;  // one key per bucket: what Redis holds reads by the key
    store_.emplace(ioc_.get_executor(), s);
    store_->start();
    ASSERT_TRUE(run_until(
        ioc_, [&] { return store_->stats().connected; }, 5000ms));
  }
  void TearDown() override {
    if (store_) store_->stop();
    ioc_.poll();
  }

  // Starts every check before the loop runs (so they are started in one turn), then runs the
  // loop until each has its answer; the answers in the order of `reqs`.
  std::vector<result_type> together(std::vector<limiter::check_request> reqs) {
    std::vector<std::optional<result_type>> slots(reqs.size());
    for (std::size_t i = 0; i < reqs.size(); ++i) {
      asio::co_spawn(ioc_, store_->check(std::move(reqs[i])),
                     [&slots, i](std::exception_ptr, result_type r) { slots[i].emplace(r); });
    }
    EXPECT_TRUE(run_until(
        ioc_,
        [&] {
          for (const auto& s : slots)
            if (!s) return false;
          return true;
        },
        10'000ms));
    std::vector<result_type> out;
    for (auto& s : slots) out.push_back(s ? *s : result_type(make_error_code(errc::store_timeout)));
    return out;
  }

  std::uint64_t calls(std::size_t bucket) const { return store_->stats().batch_sizes.at(bucket); }
  std::uint64_t all_calls() const {
    const auto b = store_->stats().batch_sizes;
    return std::accumulate(b.begin(), b.end(), std::uint64_t{0});
  }

  test::redis_server server_;
  asio::io_context ioc_;
  std::optional<store::redis_store> store_;
};

TEST_F(redis_batch, buckets_count_calls_by_their_checks) {
  EXPECT_EQ(store::batch_bucket(1), 0u);
  EXPECT_EQ(store::batch_bucket(2), 1u);
  EXPECT_EQ(store::batch_bucket(3), 2u);
  EXPECT_EQ(store::batch_bucket(4), 2u);
  EXPECT_EQ(store::batch_bucket(5), 3u);
  EXPECT_EQ(store::batch_bucket(64), 6u);
  EXPECT_EQ(store::batch_bucket(65), 7u);
  EXPECT_EQ(store::batch_bucket(1024), 7u);
}

TEST_F(redis_batch, the_second_check_of_a_key_sees_the_first) {
  start();
  auto r = together({request({limit("{b}:same", 1)}), request({limit("{b}:same", 1)})});
  ASSERT_TRUE(r[0].has_value()) << r[0].error().message();
  ASSERT_TRUE(r[1].has_value()) << r[1].error().message();
  EXPECT_TRUE(r[0]->allowed);
  EXPECT_EQ(r[0]->limits.at(0).remaining, 0);
  EXPECT_FALSE(r[1]->allowed) << "the one token went to the first check of the batch";
  EXPECT_EQ(r[1]->limits.at(0).remaining, 0);
  EXPECT_GT(r[1]->limits.at(0).retry_after_ms, 0);
  EXPECT_EQ(r[0]->now_ms, r[1]->now_ms) << "one clock reading for the batch";
  EXPECT_EQ(calls(store::batch_bucket(2)), 1u);
  EXPECT_EQ(all_calls(), 1u);
  EXPECT_EQ(store_->stats().checks, 2u);
}

TEST_F(redis_batch, one_refused_and_one_admitted_side_by_side) {
  start();
  // Spend `{b}:full` first, alone.
  auto first = together({request({limit("{b}:full", 1)})});
  ASSERT_TRUE(first[0].has_value() && first[0]->allowed);
  // A request with two limits, one of them spent: refused all or nothing, next to a request
  // on fresh keys that is admitted — in one call.
  auto r = together(
      {request({limit("{b}:fresh1", 3), limit("{b}:full", 1)}), request({limit("{b}:fresh2", 3)})});
  ASSERT_TRUE(r[0].has_value() && r[1].has_value());
  EXPECT_FALSE(r[0]->allowed);
  EXPECT_TRUE(r[0]->limits.at(0).admits);
  EXPECT_EQ(r[0]->limits.at(0).remaining, 3) << "a refused request debits nothing";
  EXPECT_FALSE(r[0]->limits.at(1).admits);
  EXPECT_TRUE(r[1]->allowed);
  EXPECT_EQ(r[1]->limits.at(0).remaining, 2);
  EXPECT_EQ(calls(store::batch_bucket(2)), 1u);
  // What Redis holds agrees: fresh1 untouched (no key), fresh2 charged once.
  EXPECT_EQ(server_.command({"EXISTS", "{b}:fresh1"}).integer, 0);
  EXPECT_EQ(server_.command({"EXISTS", "{b}:fresh2"}).integer, 1);
}

TEST_F(redis_batch, a_check_the_script_refuses_fails_alone) {
  start();
  auto bad = limit("{b}:bad", 1);
  bad.bucket.burst = 0;  // no token bucket has burst 0: the script refuses its arguments
  auto r = together(
      {request({limit("{b}:before", 2)}), request({bad}), request({limit("{b}:after", 2)})});
  ASSERT_TRUE(r[0].has_value());
  EXPECT_TRUE(r[0]->allowed);
  ASSERT_FALSE(r[1].has_value());
  EXPECT_EQ(r[1].error(), make_error_code(errc::store_error));
  ASSERT_TRUE(r[2].has_value());
  EXPECT_TRUE(r[2]->allowed);
  EXPECT_EQ(r[2]->limits.at(0).remaining, 1);
  EXPECT_EQ(calls(store::batch_bucket(3)), 1u);
  EXPECT_EQ(store_->stats().errors, 1u);
  EXPECT_EQ(store_->stats().checks, 2u);
}

TEST_F(redis_batch, a_call_refused_whole_fails_each_check_and_the_next_starts_clean) {
  start();
  server_.command({"CONFIG", "SET", "maxmemory-policy", "noeviction"});
  server_.command({"CONFIG", "SET", "maxmemory", "1"});
  auto r = together({request({limit("{b}:oom1", 2)}), request({limit("{b}:oom2", 2)}),
                     request({limit("{b}:oom3", 2)})});
  for (const auto& x : r) {
    ASSERT_FALSE(x.has_value());
    EXPECT_EQ(x.error(), make_error_code(errc::store_error));
  }
  EXPECT_EQ(store_->stats().errors, 3u) << "counted per check";
  EXPECT_EQ(store_->stats().error_replies.at(static_cast<std::size_t>(store::error_kind::oom)), 3u);
  server_.command({"CONFIG", "SET", "maxmemory", "0"});
  auto next = together({request({limit("{b}:oom1", 2)}), request({limit("{b}:oom2", 2)})});
  ASSERT_TRUE(next[0].has_value() && next[1].has_value());
  EXPECT_EQ(next[0]->limits.at(0).remaining, 1) << "the refused call wrote nothing";
  EXPECT_EQ(next[1]->limits.at(0).remaining, 1);
}

TEST_F(redis_batch, a_function_flush_is_reloaded_and_the_batch_sent_once_more) {
  start();
  server_.command({"FUNCTION", "FLUSH"});
  server_.command({"SCRIPT", "FLUSH"});
  auto r = together({request({limit("{b}:fl1", 2)}), request({limit("{b}:fl1", 2)}),
                     request({limit("{b}:fl2", 2)})});
  for (const auto& x : r) ASSERT_TRUE(x.has_value()) << x.error().message();
  EXPECT_EQ(r[0]->limits.at(0).remaining, 1);
  EXPECT_EQ(r[1]->limits.at(0).remaining, 0) << "decided once each: the re-send ran once";
  EXPECT_EQ(r[2]->limits.at(0).remaining, 1);
  EXPECT_EQ(store_->stats().script_loads, 2u);
}

// A check of a batch that misses its own deadline before the reply comes: its answer is
// skipped as late, the others are decided from the same reply, and the connection stays.
TEST_F(redis_batch, a_check_that_missed_its_deadline_is_skipped_and_the_others_decided) {
  start();
  std::optional<store::redis_store::routed_result> early;
  std::optional<result_type> later;
  server_.pause();  // (the batch waits in the socket until the server resumes)
  store::redis_store::routed_options soon;
  soon.deadline = clock_type::now() + 50ms;
  asio::co_spawn(
      ioc_, store_->check_routed(request({limit("{b}:early", 2)}), soon),
      [&](std::exception_ptr, store::redis_store::routed_result r) { early.emplace(r); });
  asio::co_spawn(ioc_, store_->check(request({limit("{b}:later", 2)})),
                 [&](std::exception_ptr, result_type r) { later.emplace(r); });
  ASSERT_TRUE(run_until(
      ioc_, [&] { return early.has_value(); }, 5000ms));
  EXPECT_EQ(early->ec, make_error_code(errc::store_timeout));
  EXPECT_FALSE(later.has_value()) << "the other check waits for the reply";
  server_.resume();
  ASSERT_TRUE(run_until(
      ioc_, [&] { return later.has_value(); }, 5000ms));
  ASSERT_TRUE(*later) << later->error().message();
  EXPECT_EQ((*later)->limits.at(0).remaining, 1);
  EXPECT_EQ(calls(store::batch_bucket(2)), 1u);
  EXPECT_EQ(store_->stats().late_replies, 1u);
  EXPECT_EQ(store_->stats().reconnects, 0u) << "a late answer in a batch is no broken reply";
  EXPECT_EQ(store_->stats().errors, 0u);
}

TEST_F(redis_batch, max_batch_bounds_each_call) {
  start(4);
  std::vector<limiter::check_request> reqs;
  for (int i = 0; i < 10; ++i) reqs.push_back(request({limit("{b}:bound", 100)}));
  auto r = together(std::move(reqs));
  std::vector<std::int64_t> remaining;
  for (const auto& x : r) {
    ASSERT_TRUE(x.has_value());
    remaining.push_back(x->limits.at(0).remaining);
  }
  // Sent in order, decided in order: 99, 98, ... 90.
  for (std::size_t i = 0; i < remaining.size(); ++i)
    EXPECT_EQ(remaining[i], 99 - static_cast<std::int64_t>(i));
  EXPECT_EQ(calls(store::batch_bucket(4)), 2u);
  EXPECT_EQ(calls(store::batch_bucket(2)), 1u);
  EXPECT_EQ(all_calls(), 3u);
}

TEST_F(redis_batch, max_batch_one_sends_each_check_alone) {
  start(1);
  auto r = together({request({limit("{b}:alone", 2)}), request({limit("{b}:alone", 2)})});
  ASSERT_TRUE(r[0].has_value() && r[1].has_value());
  EXPECT_EQ(r[0]->limits.at(0).remaining, 1);
  EXPECT_EQ(r[1]->limits.at(0).remaining, 0);
  EXPECT_EQ(calls(0), 2u);
  EXPECT_EQ(all_calls(), 2u);
}

}  // namespace
}  // namespace sluice
