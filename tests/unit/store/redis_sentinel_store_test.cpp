// SPDX-License-Identifier: Apache-2.0
// sluice-test-support: redis_sentinel redis_server redis_tls test_ca
// sluice-test-serial
#include "sluice/store/redis_store.hpp"

#include "sluice/errc.hpp"
#include "support/redis_sentinel.hpp"
#include "support/redis_server.hpp"
#include "support/redis_tls.hpp"
#include "support/temp_dir.hpp"

#include <gtest/gtest.h>
#include <spdlog/sinks/ringbuffer_sink.h>
#include <spdlog/spdlog.h>
#include "support/eventually.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <future>
#include <optional>
#include <string>
#include <thread>
#include <vector>

// The Redis store with `sentinel` settings against a real Sentinel group (three Sentinels, a
// primary and a replica): checks decided by the primary; after SENTINEL FAILOVER, and after the
// primary is killed and the Sentinels promote the replica, checks decided by the new primary
// within the failover time plus 1 s, on the bucket state written before (replicated), and no
// check decided as if the bucket were new; a master name no Sentinel knows, and Sentinels that
// do not answer: not connected, checks refused at once, one log line, counted.

namespace sluice {
namespace {

using test::scaled;

namespace asio = boost::asio;
using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;
using result_type = boost::system::result<limiter::check_outcome>;
using ms = std::chrono::milliseconds;

ms since(clock_type::time_point t) {
  return std::chrono::duration_cast<ms>(clock_type::now() - t);
}

// One token bucket of `burst` tokens refilled at 1 per hour: nothing refills during a test, so
// the remaining count says exactly how many checks the bucket has seen.
limiter::check_request request(const std::string& key, std::int64_t burst) {
  config::limit_params p;
  p.rate.count = 1;
  p.rate.period = std::chrono::hours(1);
  p.burst = burst;
  limiter::limit_check lc;
  lc.key = key;
  lc.bucket = limiter::bucket_params::from(p);
  limiter::check_request req;
  req.limits.push_back(lc);
  return req;
}

template <class Pred>
bool run_until(asio::io_context& ioc, Pred done, ms limit) {
  const auto deadline = clock_type::now() + limit;
  while (!done() && clock_type::now() < deadline) {
    if (ioc.stopped()) ioc.restart();
    ioc.run_one_for(5ms);
  }
  return done();
}

std::optional<result_type> check_once(asio::io_context& ioc, store::redis_store& s,
                                      limiter::check_request req) {
  std::optional<result_type> out;
  asio::co_spawn(ioc, s.check(std::move(req)), [&](std::exception_ptr e, result_type r) {
    if (!e) out.emplace(std::move(r));
  });
  run_until(
      ioc, [&] { return out.has_value(); }, 2000ms);
  return out;
}

store::redis_settings sentinel_store(const std::vector<std::uint16_t>& sentinel_ports,
                                     const std::string& master) {
  store::redis_settings s;
  s.command_timeout = 200ms;
  s.connect_timeout = 250ms;
  store::sentinel_settings ss;
  for (auto p : sentinel_ports) ss.sentinels.push_back({"127.0.0.1", p});
  ss.master_name = master;
  ss.timeout = 200ms;
  s.sentinel = ss;
  return s;
}

std::vector<std::uint16_t> ports_of(const test::redis_sentinel_group& g) {
  std::vector<std::uint16_t> out;
  for (std::size_t i = 0; i < g.sentinels(); ++i) out.push_back(g.sentinel_port(i));
  return out;
}

// Check commands a node has run (FCALL, or EVALSHA where functions are refused).
long long checks_run_on(const test::redis_server& node) {
  const auto info = node.command({"INFO", "commandstats"}).str;
  long long n = 0;
  for (const char* cmd : {"cmdstat_fcall:calls=", "cmdstat_evalsha:calls="}) {
    if (const auto at = info.find(cmd); at != std::string::npos)
      n += std::stoll(info.substr(at + std::char_traits<char>::length(cmd)));
  }
  return n;
}

// Collects the log lines while alive (and restores the default logger).
struct log_capture {
  log_capture() : sink(std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(1000)) {
    previous = spdlog::default_logger();
    auto l = std::make_shared<spdlog::logger>("capture", sink);
    l->set_level(spdlog::level::info);
    spdlog::set_default_logger(l);
  }
  ~log_capture() { spdlog::set_default_logger(previous); }
  std::size_t count(const std::string& text) const {
    std::size_t n = 0;
    for (const auto& line : sink->last_formatted()) n += line.find(text) != std::string::npos;
    return n;
  }
  std::shared_ptr<spdlog::sinks::ringbuffer_sink_mt> sink;
  std::shared_ptr<spdlog::logger> previous;
};

constexpr std::int64_t burst = 1000;

// What a failover looked like from the store: checks every 5 ms from `t0` (the failover
// starts) until the new primary has decided 20 checks.
struct follow_report {
  ms switched{-1};           // when the Sentinels all named the new master (from t0)
  ms first_on_new{-1};       // the first check the new primary decided (from t0)
  std::int64_t decided = 0;  // checks decided (by either node) from t0 on
  std::int64_t failed = 0;   // checks that failed (the route's failure policy would answer)
  std::int64_t first_new_remaining = -1;
  std::int64_t min_remaining_seen = burst;
  std::int64_t max_remaining_seen = 0;
};

// Runs checks of `key` while `switched` (the failover, on another thread) runs and after.
follow_report follow(asio::io_context& ioc, store::redis_store& s, const std::string& key,
                     test::redis_server& next_master, clock_type::time_point t0,
                     std::future<void>& switched) {
  follow_report rep;
  long long runs = checks_run_on(next_master);
  std::int64_t on_new = 0;
  while (since(t0) < 25s && on_new < 20) {
    if (rep.switched.count() < 0 && switched.wait_for(0s) == std::future_status::ready) {
      rep.switched = since(t0);
    }
    auto r = check_once(ioc, s, request(key, burst));
    if (!r || !r->has_value()) {
      ++rep.failed;
    } else {
      ++rep.decided;
      const auto remaining = (*r)->limits.at(0).remaining;
      rep.min_remaining_seen = std::min(rep.min_remaining_seen, remaining);
      rep.max_remaining_seen = std::max(rep.max_remaining_seen, remaining);
      const long long now_runs = checks_run_on(next_master);
      if (now_runs > runs) {  // this one ran on the new master
        if (on_new == 0) {
          rep.first_on_new = since(t0);
          rep.first_new_remaining = remaining;
        }
        ++on_new;
      }
      runs = now_runs;
    }
    run_until(
        ioc, [] { return false; }, 5ms);
  }
  if (rep.switched.count() < 0 && switched.wait_for(5s) == std::future_status::ready)
    rep.switched = since(t0);
  return rep;
}

void expect_followed(const follow_report& rep, std::int64_t before, const char* what) {
  std::printf(
      "%s: Sentinels switched after %lld ms, first check on the new master after %lld ms "
      "(follow %lld ms); %lld checks decided, %lld failed; remaining before %lld, on the new "
      "master %lld, highest seen %lld\n",
      what, static_cast<long long>(rep.switched.count()),
      static_cast<long long>(rep.first_on_new.count()),
      static_cast<long long>((rep.first_on_new - rep.switched).count()),
      static_cast<long long>(rep.decided), static_cast<long long>(rep.failed),
      static_cast<long long>(before), static_cast<long long>(rep.first_new_remaining),
      static_cast<long long>(rep.max_remaining_seen));
  ASSERT_GE(rep.switched.count(), 0) << "the Sentinels did not switch";
  ASSERT_GE(rep.first_on_new.count(), 0) << "no check was decided by the new master";
  EXPECT_LE(rep.first_on_new, rep.switched + 1000ms) << "followed within the failover time + 1 s";
  // The bucket written before survived (replicated): the new master charges the same bucket,
  // never a new one; and no decision anywhere read as a fresh bucket.
  EXPECT_LT(rep.first_new_remaining, before);
  EXPECT_LT(rep.max_remaining_seen, before);
}

// Ten checks on the primary the Sentinels name, then SENTINEL FAILOVER: followed within the
// failover time + 1 s on the replicated bucket.
void decides_and_follows_a_failover(test::redis_sentinel_group& group,
                                    const store::redis_settings& settings) {
  asio::io_context ioc;
  store::redis_store s(ioc.get_executor(), settings);
  s.start();
  ASSERT_TRUE(run_until(
      ioc, [&] { return s.stats().connected; }, 3000ms))
      << s.failure();

  const std::string key = "{sentinel}:follow";
  std::int64_t remaining = burst;
  const long long on_primary = checks_run_on(group.primary());
  for (int i = 0; i < 10; ++i) {
    auto r = check_once(ioc, s, request(key, burst));
    ASSERT_TRUE(r && r->has_value());
    EXPECT_TRUE((*r)->allowed);
    remaining = (*r)->limits.at(0).remaining;
  }
  EXPECT_EQ(remaining, burst - 10);
  EXPECT_EQ(checks_run_on(group.primary()) - on_primary, 10) << "decided by the primary";
  ASSERT_EQ(group.primary().command({"WAIT", "1", "2000"}).integer, 1) << "replicated";

  const auto t0 = clock_type::now();
  auto switched = std::async(std::launch::async, [&] { group.failover(20s); });
  const auto rep = follow(ioc, s, key, group.replica(), t0, switched);
  switched.get();
  expect_followed(rep, remaining, "SENTINEL FAILOVER");
  EXPECT_GE(s.stats().master_switches, 1u) << "+switch-master was received";
  // Counts the old master took after the promotion and never passed on are what a failover
  // forgets: the bucket on the new master against every decided check.
  auto last = check_once(ioc, s, request(key, burst));
  ASSERT_TRUE(last && last->has_value());
  const auto expected = remaining - rep.decided - 1;
  const auto forgotten = (*last)->limits.at(0).remaining - expected;
  std::printf("SENTINEL FAILOVER: %lld counts forgotten\n", static_cast<long long>(forgotten));
  EXPECT_GE(forgotten, 0);
  EXPECT_LE(forgotten, rep.decided);
  s.stop();
}

TEST(redis_sentinel_store, decides_on_the_primary_and_follows_sentinel_failover) {
  test::redis_sentinel_group group;
  decides_and_follows_a_failover(group, sentinel_store(ports_of(group), group.master_name()));
}

// The same over TLS: the Sentinels and both data nodes serve TLS with client certificates
// required, replication and the Sentinels' links use it, and the store reaches the Sentinels
// and the master they name (an address: the certificate's IP entry is checked) over TLS only.
TEST(redis_sentinel_store, over_tls_decides_on_the_primary_and_follows_sentinel_failover) {
  test::temp_dir dir("sentinel-tls");
  test::redis_tls_material tls(dir.path);
  test::redis_sentinel_group::options o;
  o.tls_args = [&tls](std::uint16_t port) { return tls.server_args(port, true); };
  test::redis_sentinel_group group(o);
  std::vector<std::uint16_t> tls_ports;
  for (std::size_t i = 0; i < group.sentinels(); ++i)
    tls_ports.push_back(group.sentinel_tls_port(i));
  auto settings = sentinel_store(tls_ports, group.master_name());
  settings.connect_timeout = 1000ms;
  settings.tls.context = store::make_redis_tls_context(
      {tls.ca.cert().string(), true, tls.client.cert.string(), tls.client.key.string()});
  settings.sentinel->timeout = 1000ms;
  settings.sentinel->tls = settings.tls;
  decides_and_follows_a_failover(group, settings);
}

TEST(redis_sentinel_store, follows_a_killed_primary_once_the_sentinels_promote_the_replica) {
  test::redis_sentinel_group group;
  asio::io_context ioc;
  store::redis_store s(ioc.get_executor(), sentinel_store(ports_of(group), group.master_name()));
  s.start();
  ASSERT_TRUE(run_until(
      ioc, [&] { return s.stats().connected; }, 3000ms));
  const std::string key = "{sentinel}:killed";
  std::int64_t remaining = burst;
  for (int i = 0; i < 5; ++i) {
    auto r = check_once(ioc, s, request(key, burst));
    ASSERT_TRUE(r && r->has_value());
    remaining = (*r)->limits.at(0).remaining;
  }
  ASSERT_EQ(group.primary().command({"WAIT", "1", "2000"}).integer, 1) << "replicated";

  const auto t0 = clock_type::now();
  group.primary().kill();
  auto switched = std::async(std::launch::async, [&] {
    if (!group.wait_master(group.replica().port(), 20s))
      throw std::runtime_error("the Sentinels did not promote the replica");
  });
  const auto rep = follow(ioc, s, key, group.replica(), t0, switched);
  switched.get();
  expect_followed(rep, remaining, "primary killed");
  // Nothing was decided by the dead primary: every decided check is on the new master.
  auto last = check_once(ioc, s, request(key, burst));
  ASSERT_TRUE(last && last->has_value());
  EXPECT_EQ((*last)->limits.at(0).remaining, remaining - rep.decided - 1) << "nothing forgotten";
  s.stop();
}

TEST(redis_sentinel_store, an_unknown_master_name_is_not_connected_logged_once_and_counted) {
  test::redis_sentinel_group group;
  log_capture logs;
  asio::io_context ioc;
  store::redis_store s(ioc.get_executor(), sentinel_store(ports_of(group), "no-such-master"));
  s.start();
  // Several lookups (one per backoff step, at most 500 ms apart).
  ASSERT_TRUE(run_until(
      ioc, [&] { return s.stats().sentinel_unknown_master >= 3; }, 5000ms));
  EXPECT_FALSE(s.stats().connected);
  EXPECT_EQ(s.stats().sentinel_unreachable, 0u);
  const auto t = clock_type::now();
  auto r = check_once(ioc, s, request("{sentinel}:unknown", burst));
  ASSERT_TRUE(r.has_value());
  ASSERT_FALSE(r->has_value()) << "never decided without a master";
  EXPECT_EQ(r->error(), make_error_code(errc::store_unavailable));
  EXPECT_LT(since(t), scaled(50ms)) << "refused at once, no deadline spent";
  EXPECT_EQ(logs.count("no Sentinel knows master 'no-such-master'"), 1u) << "once per state";
  s.stop();
}

TEST(redis_sentinel_store, no_sentinel_answering_is_not_connected_logged_once_and_counted) {
  log_capture logs;
  // Ports nothing listens on (taken and released by the kernel just now).
  const std::vector<std::uint16_t> ports = {test::free_loopback_port(), test::free_loopback_port()};
  asio::io_context ioc;
  store::redis_store s(ioc.get_executor(), sentinel_store(ports, "mymaster"));
  s.start();
  ASSERT_TRUE(run_until(
      ioc, [&] { return s.stats().sentinel_unreachable >= 3; }, 5000ms));
  EXPECT_FALSE(s.stats().connected);
  EXPECT_EQ(s.stats().sentinel_unknown_master, 0u);
  auto r = check_once(ioc, s, request("{sentinel}:none", burst));
  ASSERT_TRUE(r.has_value());
  ASSERT_FALSE(r->has_value());
  EXPECT_EQ(r->error(), make_error_code(errc::store_unavailable));
  EXPECT_EQ(logs.count("no Sentinel answered for master 'mymaster'"), 1u) << "once per state";
  s.stop();
}

}  // namespace
}  // namespace sluice
