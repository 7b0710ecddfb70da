// SPDX-License-Identifier: Apache-2.0
// sluice-test-support: redis_server
#include "sluice/store/redis_store.hpp"
#include "sluice/store/lua_scripts.hpp"

#include "sluice/errc.hpp"
#include "sluice/limiter/keys.hpp"
#include "sluice/limiter/refusal_cache.hpp"
#include "support/bucket_view.hpp"
#include "support/eventually.hpp"
#include "support/redis_server.hpp"
#include "support/stopped_clock.hpp"

#include <gtest/gtest.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

// The Redis store against a real redis-server: decisions, pipelined concurrency (c08), script
// reload after SCRIPT FLUSH (c10 part 1), outages (kill / restart, c11), stalls (SIGSTOP: the
// deadline, the late reply dropped, no replay — c10 part 2) and a port nobody listens on.

namespace sluice {
namespace {

namespace asio = boost::asio;
using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;
using test::scaled;
using result_type = boost::system::result<limiter::check_outcome>;

limiter::check_request request(const std::string& key, std::int64_t n, std::int64_t period_ms,
                               std::int64_t burst, std::int64_t now_ms = -1) {
  config::limit_params p;
  p.rate.count = n;
  p.rate.period = std::chrono::milliseconds(period_ms);
  p.burst = burst;
  limiter::limit_check lc;
  lc.key = key;
  lc.bucket = limiter::bucket_params::from(p);
  limiter::check_request req;
  req.limits.push_back(lc);
  req.now_ms_override = now_ms;
  return req;
}

// Runs `ioc` until `done()` or `limit` has passed (the store keeps timers, so run() never
// returns on its own).
template <class Pred>
bool run_until(asio::io_context& ioc, Pred done, std::chrono::milliseconds limit) {
  const auto deadline = clock_type::now() + limit;
  while (!done() && clock_type::now() < deadline) {
    if (ioc.stopped()) ioc.restart();
    ioc.run_one_for(5ms);
  }
  return done();
}

void run_for(asio::io_context& ioc, std::chrono::milliseconds d) {
  run_until(
      ioc, [] { return false; }, d);
}

// One check, timed.
struct timed_result {
  std::optional<result_type> result;
  std::chrono::milliseconds took{0};
};

timed_result check_once(asio::io_context& ioc, store::redis_store& s, limiter::check_request req,
                        std::chrono::milliseconds limit = 5000ms) {
  timed_result out;
  const auto start = clock_type::now();
  asio::co_spawn(ioc, s.check(std::move(req)), [&](std::exception_ptr e, result_type r) {
    if (!e) out.result.emplace(std::move(r));
    out.took = std::chrono::duration_cast<std::chrono::milliseconds>(clock_type::now() - start);
  });
  run_until(
      ioc, [&] { return out.result.has_value(); }, limit);
  return out;
}

bool wait_connected(asio::io_context& ioc, store::redis_store& s,
                    std::chrono::milliseconds limit = 3000ms) {
  return run_until(
      ioc, [&] { return s.stats().connected; }, limit);
}

// Checks `req` until the store decides it (true), for at most 2 s from `since`, with a pause
// of `poll` between failed tries.
bool decided_within_2s(asio::io_context& ioc, store::redis_store& s,
                       const limiter::check_request& req, clock_type::time_point since,
                       std::chrono::milliseconds poll = 10ms) {
  while (clock_type::now() - since < 2000ms) {
    auto r = check_once(ioc, s, req);
    if (r.result && r.result->has_value()) return true;
    run_for(ioc, poll);
  }
  return false;
}

store::redis_settings settings_for(const test::redis_server& server,
                                   std::chrono::milliseconds timeout = 200ms) {
  store::redis_settings s;
  s.port = server.port();
  s.command_timeout = timeout;
  s.connect_timeout = 250ms;
  return s;
}

TEST(redis_store, decides_a_check) {
  test::redis_server server;
  asio::io_context ioc;
  store::redis_store s(ioc.get_executor(), settings_for(server));
  s.start();
  ASSERT_TRUE(wait_connected(ioc, s));
  EXPECT_EQ(s.stats().script_loads, 1u);

  auto r = check_once(ioc, s, request("{k}:basic", 1, 10'000, 2));
  ASSERT_TRUE(r.result && r.result->has_value()) << r.result->error().message();
  const auto& out = **r.result;
  EXPECT_TRUE(out.allowed);
  ASSERT_EQ(out.limits.size(), 1u);
  EXPECT_EQ(out.limits[0].limit, 2);
  EXPECT_EQ(out.limits[0].remaining, 1);
  EXPECT_EQ(out.limits[0].reset_ms, 10'000);
  EXPECT_EQ(s.stats().checks, 1u);
  // Redis TIME decided it: the stored stamp is the server's clock, within a second of ours.
  auto state = test::bucket_view{server, test::per_key}.get("{k}:basic");
  ASSERT_EQ(state.type, test::redis_reply::kind::string);
  EXPECT_EQ(state.str.substr(0, state.str.find(' ')), "10000");
  auto pttl = server.command({"PTTL", "{k}:basic"});
  EXPECT_GT(pttl.integer, 9'000);
  EXPECT_LE(pttl.integer, 10'000);
  s.stop();
}

TEST(redis_store, an_error_reply_is_a_store_error) {
  test::redis_server server;
  asio::io_context ioc;
  store::redis_store s(ioc.get_executor(), settings_for(server));
  s.start();
  ASSERT_TRUE(wait_connected(ioc, s));
  // Over maxmemory with noeviction, Redis refuses a script that may write: an -OOM reply.
  server.command({"CONFIG", "SET", "maxmemory-policy", "noeviction"});
  server.command({"CONFIG", "SET", "maxmemory", "1"});
  auto r = check_once(ioc, s, request("{k}:oom", 1, 1000, 1));
  ASSERT_TRUE(r.result);
  ASSERT_FALSE(r.result->has_value());
  EXPECT_EQ(r.result->error(), make_error_code(errc::store_error));
  EXPECT_EQ(s.stats().errors, 1u);
}

// c08: 100 checks issued at once on one connection against burst 5 → exactly 5 admitted, with
// Remaining 4, 3, 2, 1, 0 each once.
TEST(redis_store, concurrent_checks_admit_exactly_the_burst) {
  test::redis_server server;
  asio::io_context ioc;
  store::redis_store s(ioc.get_executor(), settings_for(server, 2000ms));
  s.start();
  ASSERT_TRUE(wait_connected(ioc, s));
  std::vector<std::optional<result_type>> results(100);
  for (auto& slot : results) {
    asio::co_spawn(ioc, s.check(request("{c08}:items_key", 5, 60'000, 5)),
                   [&slot](std::exception_ptr, result_type r) { slot.emplace(std::move(r)); });
  }
  ASSERT_TRUE(run_until(
      ioc,
      [&] {
        for (auto& r : results) {
          if (!r) return false;
        }
        return true;
      },
      5000ms));
  int allowed = 0;
  std::vector<int> remaining_seen(5, 0);
  for (auto& r : results) {
    ASSERT_TRUE(r->has_value()) << r->error().message();
    const auto& o = **r;
    if (o.allowed) {
      ++allowed;
      ASSERT_GE(o.limits[0].remaining, 0);
      ASSERT_LT(o.limits[0].remaining, 5);
      ++remaining_seen[static_cast<std::size_t>(o.limits[0].remaining)];
    } else {
      EXPECT_EQ(o.limits[0].remaining, 0);
      EXPECT_GT(o.limits[0].retry_after_ms, 11'000);  // Retry-After 12 s
      EXPECT_LE(o.limits[0].retry_after_ms, 12'000);
    }
  }
  EXPECT_EQ(allowed, 5);
  EXPECT_EQ(remaining_seen, std::vector<int>(5, 1));
  EXPECT_EQ(s.stats().checks, 100u);
}

// c10 part 1: after SCRIPT FLUSH the next check meets NOSCRIPT, reloads once and is decided
// from the store's state.
// The two ways a check runs: FCALL of the function library, and EVALSHA of the script on a
// server without functions (FUNCTION renamed away, as on Redis before 7.0). Each loses its
// code to its own flush.
struct load_mode {
  std::string name;
  std::vector<std::string> server_args;
  std::vector<std::string> flush;
};
const std::vector<load_mode> load_modes = {
    {"functions", {}, {"FUNCTION", "FLUSH"}},
    {"scripts", {"--rename-command", "FUNCTION", ""}, {"SCRIPT", "FLUSH"}},
};

// c10 part 1: the loaded check is lost (FUNCTION FLUSH; SCRIPT FLUSH without functions): the
// next check answers "Function not found" / NOSCRIPT, is re-sent once after a load, and decides.
TEST(redis_store, script_flush_reloads_and_decides) {
  for (const auto& mode : load_modes) {
    SCOPED_TRACE(mode.name);
    test::redis_server server(mode.server_args);
    asio::io_context ioc;
    store::redis_store s(ioc.get_executor(), settings_for(server));
    s.start();
    ASSERT_TRUE(wait_connected(ioc, s));
    const std::int64_t t0 = 1'700'000'000'000;
    auto first = check_once(ioc, s, request("{c10}:a", 3, 60'000, 3, t0));
    ASSERT_TRUE(first.result && first.result->has_value());
    EXPECT_EQ((*first.result)->limits[0].remaining, 2);
    const auto loads = s.stats().script_loads;
    if (mode.name == "functions") {
      // Loaded as a library named after the code's hash, its one function the store calls.
      std::vector<std::string> names;  // every string in the nested FUNCTION LIST reply
      auto collect = [&names](const test::redis_reply& r, auto& self) -> void {
        if (r.type == test::redis_reply::kind::string) names.push_back(r.str);
        for (const auto& e : r.elements) self(e, self);
      };
      collect(server.command({"FUNCTION", "LIST"}), collect);
      EXPECT_NE(std::find(names.begin(), names.end(), std::string(lua::check_function())),
                names.end());
      EXPECT_EQ(server.command({"SCRIPT", "FLUSH"}).str, "OK");  // nothing to lose there
      auto unaffected = check_once(ioc, s, request("{c10}:b", 3, 60'000, 3, t0));
      ASSERT_TRUE(unaffected.result && unaffected.result->has_value());
      EXPECT_EQ(s.stats().script_loads, loads);
    }

    ASSERT_EQ(server.command(mode.flush).str, "OK");
    auto second = check_once(ioc, s, request("{c10}:a", 3, 60'000, 3, t0 + 1'000));
    ASSERT_TRUE(second.result && second.result->has_value()) << second.result->error().message();
    EXPECT_TRUE((*second.result)->allowed);
    EXPECT_EQ((*second.result)->limits[0].remaining, 1);  // 2.05 → 1.05
    EXPECT_EQ(s.stats().script_loads, loads + 1);
    EXPECT_EQ(s.stats().error_replies[static_cast<std::size_t>(store::error_kind::noscript)], 1u);
    auto third = check_once(ioc, s, request("{c10}:a", 3, 60'000, 3, t0 + 1'100));
    EXPECT_EQ((*third.result)->limits[0].remaining, 0);
    auto fourth = check_once(ioc, s, request("{c10}:a", 3, 60'000, 3, t0 + 1'200));
    EXPECT_FALSE((*fourth.result)->allowed);
    EXPECT_EQ((*fourth.result)->limits[0].retry_after_ms, 18'800);  // Retry-After 19
    EXPECT_EQ(s.stats().script_loads, loads + 1);
  }
}

// Many checks in flight meet NOSCRIPT together: one reload is enough for all of them.
TEST(redis_store, script_flush_with_many_in_flight) {
  for (const auto& mode : load_modes) {
    SCOPED_TRACE(mode.name);
    test::redis_server server(mode.server_args);
    asio::io_context ioc;
    store::redis_store s(ioc.get_executor(), settings_for(server, 2000ms));
    s.start();
    ASSERT_TRUE(wait_connected(ioc, s));
    ASSERT_EQ(server.command(mode.flush).str, "OK");
    std::vector<std::optional<result_type>> results(20);
    for (std::size_t i = 0; i < results.size(); ++i) {
      asio::co_spawn(ioc, s.check(request("{flush}:k" + std::to_string(i), 1, 1000, 1)),
                     [&results, i](std::exception_ptr, result_type r) { results[i].emplace(r); });
    }
    ASSERT_TRUE(run_until(
        ioc,
        [&] {
          for (auto& r : results) {
            if (!r) return false;
          }
          return true;
        },
        5000ms));
    for (auto& r : results) {
      ASSERT_TRUE(r->has_value()) << r->error().message();
      EXPECT_TRUE((**r).allowed);
    }
    EXPECT_EQ(s.stats().script_loads, 2u);
  }
}

// c11: a killed server makes checks fail at once (no wait for a deadline), and the store comes
// back by itself after a restart.
TEST(redis_store, killed_server_fails_fast_then_recovers) {
  test::redis_server server;
  asio::io_context ioc;
  store::redis_store s(ioc.get_executor(), settings_for(server, 500ms));
  s.start();
  ASSERT_TRUE(wait_connected(ioc, s));
  ASSERT_TRUE(check_once(ioc, s, request("{kill}:k", 10, 1000, 10)).result->has_value());

  server.kill();
  std::vector<timed_result> during;
  for (int i = 0; i < 10; ++i) {
    during.push_back(check_once(ioc, s, request("{kill}:k", 10, 1000, 10)));
    run_for(ioc, 20ms);
  }
  for (const auto& r : during) {
    ASSERT_TRUE(r.result) << "a check hung";
    EXPECT_FALSE(r.result->has_value());
    const auto ec = r.result->error();
    EXPECT_TRUE(ec == make_error_code(errc::store_unavailable) ||
                ec == make_error_code(errc::store_error))
        << ec.message();
    EXPECT_LT(r.took, scaled(500ms)) << "must not wait for the deadline";
  }
  EXPECT_FALSE(s.stats().connected);
  EXPECT_GE(s.stats().unavailable, 9u);

  run_for(ioc, 300ms);
  server.restart();
  const auto restarted = clock_type::now();
  ASSERT_TRUE(wait_connected(ioc, s, 3000ms));
  const auto took =
      std::chrono::duration_cast<std::chrono::milliseconds>(clock_type::now() - restarted);
  RecordProperty("reconnect_ms", static_cast<int>(took.count()));
  std::printf("reconnected %lld ms after the restart\n", static_cast<long long>(took.count()));
  EXPECT_LT(took, scaled(1200ms));
  auto after = check_once(ioc, s, request("{kill}:k", 10, 1000, 10));
  ASSERT_TRUE(after.result && after.result->has_value()) << after.result->error().message();
  EXPECT_TRUE((*after.result)->allowed);
  EXPECT_EQ(s.stats().reconnects, 1u);
  EXPECT_EQ(s.stats().script_loads, 2u);  // loaded again on the new connection
}

// c10 part 2 / c11: a stalled server costs the deadline and no more; the late reply is dropped
// (never handed to a later check) and the script is not replayed: it ran exactly once.
TEST(redis_store, stalled_server_times_out_without_replay) {
  test::redis_server server;
  asio::io_context ioc;
  const auto timeout = 50ms;
  auto settings = settings_for(server, timeout);
  settings.breaker_failures = 0;  // keep the stalled connection: its late replies are counted
  store::redis_store s(ioc.get_executor(), settings);
  s.start();
  ASSERT_TRUE(wait_connected(ioc, s));
  const std::int64_t t0 = 1'700'000'000'000;

  server.pause();
  std::vector<std::optional<result_type>> results(5);
  std::vector<std::chrono::milliseconds> took(5);
  const auto start = clock_type::now();
  for (std::size_t i = 0; i < results.size(); ++i) {
    asio::co_spawn(ioc, s.check(request("{c10}:b", 3, 60'000, 3, t0)),
                   [&, i](std::exception_ptr, result_type r) {
                     results[i].emplace(std::move(r));
                     took[i] = std::chrono::duration_cast<std::chrono::milliseconds>(
                         clock_type::now() - start);
                   });
  }
  ASSERT_TRUE(run_until(
      ioc,
      [&] {
        for (auto& r : results) {
          if (!r) return false;
        }
        return true;
      },
      2000ms));
  for (std::size_t i = 0; i < results.size(); ++i) {
    ASSERT_FALSE(results[i]->has_value());
    EXPECT_EQ(results[i]->error(), make_error_code(errc::store_timeout));
    EXPECT_GE(took[i], timeout);
    EXPECT_LT(took[i], timeout + 30ms) << "timeouts must not stack";
    std::printf("check %zu timed out after %lld ms\n", i, static_cast<long long>(took[i].count()));
  }
  EXPECT_EQ(s.stats().timeouts, 5u);

  server.resume();
  ASSERT_TRUE(run_until(
      ioc, [&] { return s.stats().late_replies == 5; }, 2000ms));
  // Five scripts ran once each (3 → 0 tokens, the last two refused) — none was replayed:
  // at t0 + 0.5 s the bucket holds 500 units (0.025 token) and refuses.
  auto next = check_once(ioc, s, request("{c10}:b", 3, 60'000, 3, t0 + 500));
  ASSERT_TRUE(next.result && next.result->has_value()) << next.result->error().message();
  EXPECT_FALSE((*next.result)->allowed);
  EXPECT_EQ((*next.result)->limits[0].remaining, 0);
  // (That refusal changed nothing and wrote nothing: the state is the last debit's, 0 units
  // at t0, which is 500 units at t0 + 0.5 s.)
  const test::bucket_view view{server, test::per_key};
  EXPECT_EQ(view.get("{c10}:b").str, "0 " + std::to_string(t0) + " 20000");
  EXPECT_EQ(s.stats().checks, 1u);
}

// One stalled check, then the c10 part 2 sequence on a fresh key: 3 → 2 by the timed-out run,
// 2.025 → 1.025 at t = 0.5 s: Remaining 1 (0 would mean a replay, 2 a misrouted reply).
TEST(redis_store, c10_timed_out_check_ran_once) {
  test::redis_server server;
  asio::io_context ioc;
  store::redis_store s(ioc.get_executor(), settings_for(server, 50ms));
  s.start();
  ASSERT_TRUE(wait_connected(ioc, s));
  const std::int64_t t0 = 1'700'000'000'000;
  server.pause();
  auto first = check_once(ioc, s, request("{c10}:key-b", 3, 60'000, 3, t0));
  ASSERT_TRUE(first.result);
  EXPECT_EQ(first.result->error(), make_error_code(errc::store_timeout));
  server.resume();
  ASSERT_TRUE(run_until(
      ioc, [&] { return s.stats().late_replies == 1; }, 2000ms));
  auto second = check_once(ioc, s, request("{c10}:key-b", 3, 60'000, 3, t0 + 500));
  ASSERT_TRUE(second.result && second.result->has_value());
  EXPECT_TRUE((*second.result)->allowed);
  EXPECT_EQ((*second.result)->limits[0].remaining, 1);
}

TEST(redis_store, nothing_listening_is_unavailable_at_once) {
  std::uint16_t port = 0;
  {
    test::redis_server server;  // a port that was free, now free again
    port = server.port();
  }
  asio::io_context ioc;
  store::redis_settings settings;
  settings.port = port;
  settings.command_timeout = 50ms;
  store::redis_store s(ioc.get_executor(), settings);
  s.start();
  run_for(ioc, 100ms);
  EXPECT_FALSE(s.stats().connected);
  for (int i = 0; i < 3; ++i) {
    auto r = check_once(ioc, s, request("{none}:k", 1, 1000, 1));
    ASSERT_TRUE(r.result);
    EXPECT_EQ(r.result->error(), make_error_code(errc::store_unavailable));
    EXPECT_LT(r.took, scaled(10ms));
  }
  EXPECT_EQ(s.stats().unavailable, 3u);
}

TEST(redis_store, check_before_start_is_unavailable) {
  asio::io_context ioc;
  store::redis_store s(ioc.get_executor(), store::redis_settings{});
  auto r = check_once(ioc, s, request("{x}:k", 1, 1000, 1));
  ASSERT_TRUE(r.result);
  EXPECT_EQ(r.result->error(), make_error_code(errc::store_unavailable));
}

TEST(redis_store, auth_with_a_password) {
  test::redis_server server({"--requirepass", "s3cret"});
  asio::io_context ioc;
  auto settings = settings_for(server);
  settings.password = "s3cret";
  store::redis_store s(ioc.get_executor(), settings);
  s.start();
  ASSERT_TRUE(wait_connected(ioc, s));
  auto r = check_once(ioc, s, request("{auth}:k", 1, 1000, 1));
  ASSERT_TRUE(r.result && r.result->has_value());

  store::redis_store none(ioc.get_executor(), settings_for(server));  // no password: NOAUTH
  none.start();
  auto bad_settings = settings_for(server);
  bad_settings.password = "wrong";
  store::redis_store wrong(ioc.get_executor(), bad_settings);  // WRONGPASS
  wrong.start();
  run_for(ioc, 300ms);
  for (auto* st : {&none, &wrong}) {
    EXPECT_FALSE(st->stats().connected);
    EXPECT_GE(st->stats().connect_failures, 1u);
    auto refused = check_once(ioc, *st, request("{auth}:k", 1, 1000, 1));
    ASSERT_TRUE(refused.result);
    EXPECT_EQ(refused.result->error(), make_error_code(errc::store_unavailable));
    EXPECT_LT(refused.took, scaled(10ms));
  }
}

// c11: a stalled server (SIGSTOP) costs the deadline of 5 checks; then the breaker opens and
// checks fail at once without touching the socket; after SIGCONT a new connection and one
// probe close it again within a second.
TEST(redis_store, breaker_opens_on_a_stall_and_a_probe_closes_it) {
  test::redis_server server;
  asio::io_context ioc;
  store::redis_store s(ioc.get_executor(), settings_for(server, 50ms));
  s.start();
  ASSERT_TRUE(wait_connected(ioc, s));
  ASSERT_TRUE(check_once(ioc, s, request("{brk}:k", 100, 1000, 100)).result->has_value());
  EXPECT_EQ(s.stats().breaker, store::breaker_state::closed);

  server.pause();
  for (int i = 0; i < 5; ++i) {
    auto r = check_once(ioc, s, request("{brk}:k", 100, 1000, 100));
    ASSERT_TRUE(r.result);
    EXPECT_EQ(r.result->error(), make_error_code(errc::store_timeout));
    EXPECT_GE(r.took, 50ms);
    EXPECT_LT(r.took, scaled(80ms));
  }
  EXPECT_EQ(s.stats().breaker, store::breaker_state::open);
  EXPECT_EQ(s.stats().breaker_opens, 1u);
  EXPECT_EQ(s.stats().timeouts, 5u);
  const auto unavailable = s.stats().unavailable;
  for (int i = 0; i < 20; ++i) {
    auto r = check_once(ioc, s, request("{brk}:k", 100, 1000, 100));
    ASSERT_TRUE(r.result);
    EXPECT_EQ(r.result->error(), make_error_code(errc::store_unavailable));
    EXPECT_LT(r.took, scaled(5ms)) << "an open breaker costs no deadline";
    run_for(ioc, 10ms);
  }
  EXPECT_EQ(s.stats().unavailable, unavailable + 20);
  EXPECT_EQ(s.stats().timeouts, 5u);
  run_for(ioc, 1500ms);  // cool-down passes; connection attempts time out meanwhile
  EXPECT_GE(s.stats().connect_failures, 1u) << "the stalled connection was replaced";

  server.resume();
  const auto resumed = clock_type::now();
  const bool decided = decided_within_2s(ioc, s, request("{brk}:k", 100, 1000, 100), resumed);
  const auto took =
      std::chrono::duration_cast<std::chrono::milliseconds>(clock_type::now() - resumed);
  std::printf("decided by the store %lld ms after SIGCONT\n", static_cast<long long>(took.count()));
  EXPECT_TRUE(decided);
  EXPECT_LT(took, scaled(1000ms));
  EXPECT_EQ(s.stats().breaker, store::breaker_state::closed);
  EXPECT_EQ(s.stats().breaker_opens, 1u);
}

// READONLY (a demoted primary): the check fails with store_error, is counted by kind, and the
// connection is dropped and made again at once (a failover behind a name, proxy or virtual IP
// is followed); once the node takes writes again, checks are decided on the new connection.
TEST(redis_store, readonly_drops_the_connection_and_reconnects) {
  test::redis_server server;
  asio::io_context ioc;
  store::redis_store s(ioc.get_executor(), settings_for(server, 200ms));
  s.start();
  ASSERT_TRUE(wait_connected(ioc, s));
  ASSERT_TRUE(check_once(ioc, s, request("{ro}:k", 100, 1000, 100)).result->has_value());
  server.command({"REPLICAOF", "127.0.0.1", "1"});
  auto r = check_once(ioc, s, request("{ro}:k", 100, 1000, 100));
  ASSERT_TRUE(r.result);
  EXPECT_EQ(r.result->error(), make_error_code(errc::store_error));
  const auto st = s.stats();
  EXPECT_EQ(st.error_replies[static_cast<std::size_t>(store::error_kind::readonly)], 1u);
  EXPECT_EQ(st.wrong_node_drops, 1u);
  EXPECT_FALSE(st.connected) << "the connection to the read-only node was kept";
  server.command({"REPLICAOF", "NO", "ONE"});
  EXPECT_TRUE(decided_within_2s(ioc, s, request("{ro}:k", 100, 1000, 100), clock_type::now()));
  EXPECT_GE(s.stats().reconnects, 1u);
}

// LOADING (a restart with a dataset to load, ~2 s here): while the server loads, checks fail
// at once (the route's failure policy; none waits), the store is not ready, and checks are
// decided again within a second of the load's end.
TEST(redis_store, a_server_loading_its_dataset_is_waited_out) {
  test::redis_server server(
      {"--key-load-delay", "50", "--loading-process-events-interval-bytes", "1024"});
  ASSERT_FALSE(
      server.command({"EVAL", "for i = 1, 20000 do redis.call('SET', 'fill:' .. i, i) end", "0"})
          .is_error());
  ASSERT_FALSE(server.command({"SAVE"}).is_error());
  asio::io_context ioc;
  store::redis_store s(ioc.get_executor(), settings_for(server));
  s.start();
  ASSERT_TRUE(wait_connected(ioc, s));
  auto req = request("{load}:k", 100, 1000, 100);
  ASSERT_TRUE(check_once(ioc, s, req).result->has_value());

  auto loading = [&] { return server.command({"GET", "fill:1"}).str.starts_with("LOADING"); };
  // The checks run on another thread: restart() blocks until the load is over, and the server
  // must be restarted by this thread (it dies with the thread that started it).
  int failed = 0, slow = 0, decided_early = 0;
  bool saw_loading = false, ever_ready = false, decided = false;
  std::chrono::milliseconds took{0};
  std::thread checker([&] {
    saw_loading = test::eventually([&] { return loading(); }, 5000ms);
    while (loading()) {
      auto r = check_once(ioc, s, req, 1000ms);
      if (!r.result || r.result->has_value()) ++decided_early;
      if (r.took >= 300ms) ++slow;
      ever_ready = ever_ready || s.stats().connected;
      ++failed;
      run_for(ioc, 20ms);
    }
    const auto loaded = clock_type::now();
    decided = decided_within_2s(ioc, s, req, loaded);
    took = std::chrono::duration_cast<std::chrono::milliseconds>(clock_type::now() - loaded);
  });
  server.restart();  // returns once PING answers PONG (loaded)
  checker.join();
  ASSERT_TRUE(saw_loading) << "the server never answered LOADING";
  std::printf("decided %lld ms after the load ended (%d checks failed meanwhile)\n",
              static_cast<long long>(took.count()), failed);
  EXPECT_GE(failed, 5);
  EXPECT_EQ(decided_early, 0) << "decided by a server still loading";
  EXPECT_EQ(slow, 0) << "a check waited for the load";
  EXPECT_FALSE(ever_ready) << "the store said connected while the server was loading";
  EXPECT_TRUE(decided) << "connected " << s.stats().connected << ", connect failures "
                       << s.stats().connect_failures;
  EXPECT_LT(took, scaled(1000ms));
}

// OOM under maxmemory in the hash layout, with another caller's bucket in the same group
// hash: the check fails with the OOM error (counted by kind) and writes nothing — the group
// is never deleted as if it were a key of another type, so the other bucket keeps its state.
TEST(redis_store, oom_in_a_shared_group_fails_the_check_and_wipes_nothing) {
  test::redis_server server;
  asio::io_context ioc;
  auto settings = settings_for(server);
  settings.layout.hash_groups = 1;  // every bucket in one hash
  store::redis_store s(ioc.get_executor(), settings);
  s.start();
  ASSERT_TRUE(wait_connected(ioc, s));
  auto key = [](const std::string& id) {
    return limiter::bucket_key("oom_key", limiter::key_namespace::api_key, id);
  };
  const auto spent = request(key("spent"), 1, 60000, 1);
  ASSERT_TRUE((*check_once(ioc, s, spent).result)->allowed);
  ASSERT_FALSE((*check_once(ioc, s, spent).result)->allowed);

  server.command({"CONFIG", "SET", "maxmemory", "1"});
  for (int i = 0; i < 3; ++i) {
    auto r = check_once(ioc, s, request(key("other-" + std::to_string(i)), 1, 60000, 1));
    ASSERT_TRUE(r.result);
    EXPECT_EQ(r.result->error(), make_error_code(errc::store_error)) << "admitted under OOM";
  }
  EXPECT_GE(s.stats().error_replies[static_cast<std::size_t>(store::error_kind::oom)], 1u);
  server.command({"CONFIG", "SET", "maxmemory", "0"});
  auto after = check_once(ioc, s, spent);
  ASSERT_TRUE(after.result && after.result->has_value());
  EXPECT_FALSE((*after.result)->allowed) << "the spent bucket was wiped during the OOM";
}

TEST(redis_store, error_replies_are_classified_by_their_prefix) {
  using store::error_kind;
  EXPECT_EQ(store::classify_error_reply("READONLY You can't write against a read only replica."),
            error_kind::readonly);
  EXPECT_EQ(store::classify_error_reply("LOADING Redis is loading the dataset in memory"),
            error_kind::loading);
  EXPECT_EQ(store::classify_error_reply("MASTERDOWN Link with MASTER is down"),
            error_kind::masterdown);
  EXPECT_EQ(store::classify_error_reply("OOM command not allowed"), error_kind::oom);
  EXPECT_EQ(store::classify_error_reply("NOPERM this user has no permissions"), error_kind::noperm);
  EXPECT_EQ(store::classify_error_reply("WRONGTYPE Operation against a key"),
            error_kind::wrongtype);
  EXPECT_EQ(store::classify_error_reply("READONLYX no"), error_kind::other);
  EXPECT_EQ(store::classify_error_reply("ERR unknown"), error_kind::other);
  EXPECT_TRUE(store::is_wrong_node(error_kind::loading));
  EXPECT_FALSE(store::is_wrong_node(error_kind::busy));
  EXPECT_EQ(store::error_kind_name(error_kind::masterdown), "MASTERDOWN");
}

// Error replies of a server that cannot serve (OOM, BUSY): each check fails with
// store_error and counts; five in a row open the breaker; once the cause is gone a probe after
// the cool-down closes it (on the same connection: error replies do not replace it).
class unhealthy_reply : public testing::TestWithParam<std::string> {};

TEST_P(unhealthy_reply, counts_opens_the_breaker_and_recovers) {
  const std::string kind = GetParam();
  test::redis_server server({"--busy-reply-threshold", "50"});
  asio::io_context ioc;
  auto settings = settings_for(server, 200ms);
  settings.breaker_cool_down = 300ms;
  store::redis_store s(ioc.get_executor(), settings);
  s.start();
  ASSERT_TRUE(wait_connected(ioc, s));
  std::thread busy;
  if (kind == "OOM") server.command({"CONFIG", "SET", "maxmemory", "1"});
  if (kind == "BUSY") {
    busy = std::thread([&] { server.command({"EVAL", "while true do end", "0"}); });
    std::this_thread::sleep_for(150ms);  // past the busy-reply threshold
  }
  for (int i = 0; i < 5; ++i) {
    auto r = check_once(ioc, s, request("{err}:k", 100, 1000, 100));
    ASSERT_TRUE(r.result);
    EXPECT_EQ(r.result->error(), make_error_code(errc::store_error)) << i;
  }
  EXPECT_EQ(s.stats().errors, 5u);
  EXPECT_EQ(s.stats().breaker, store::breaker_state::open);
  auto refused = check_once(ioc, s, request("{err}:k", 100, 1000, 100));
  EXPECT_EQ(refused.result->error(), make_error_code(errc::store_unavailable));
  EXPECT_LT(refused.took, scaled(5ms));

  if (kind == "OOM") server.command({"CONFIG", "SET", "maxmemory", "0"});
  if (kind == "BUSY") {
    server.command({"SCRIPT", "KILL"});
    busy.join();
  }
  EXPECT_TRUE(
      decided_within_2s(ioc, s, request("{err}:k", 100, 1000, 100), clock_type::now(), 20ms));
  EXPECT_EQ(s.stats().breaker, store::breaker_state::closed);
  EXPECT_TRUE(s.stats().connected);
  EXPECT_EQ(s.stats().reconnects, 0u);
}

INSTANTIATE_TEST_SUITE_P(redis_store, unhealthy_reply, testing::Values("OOM", "BUSY"),
                         [](const auto& info) { return info.param; });

// A loopback listener that never accepts: the first connection completes its handshake in the
// kernel's queue and is never answered; later ones never complete the handshake (the queue is
// full). Each attempt ends at the connect timeout; checks never wait for one.
TEST(redis_store, a_black_hole_peer_costs_only_the_connect_timeout) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  ASSERT_EQ(::listen(fd, 0), 0);

  asio::io_context ioc;
  store::redis_settings settings;
  settings.port = ntohs(addr.sin_port);
  settings.command_timeout = 50ms;
  settings.connect_timeout = 100ms;
  store::redis_store s(ioc.get_executor(), settings);
  s.start();
  run_for(ioc, 700ms);
  EXPECT_FALSE(s.stats().connected);
  EXPECT_GE(s.stats().connect_failures, 3u) << "every attempt ends at the connect timeout";
  for (int i = 0; i < 3; ++i) {
    auto r = check_once(ioc, s, request("{bh}:k", 1, 1000, 1));
    ASSERT_TRUE(r.result);
    EXPECT_EQ(r.result->error(), make_error_code(errc::store_unavailable));
    EXPECT_LT(r.took, scaled(10ms));
  }
  s.stop();
  ::close(fd);
}

// A host name that does not resolve: resolved off the worker's thread, counted as a failed
// attempt, retried with backoff; checks fail at once.
TEST(redis_store, a_name_that_does_not_resolve_is_unavailable_at_once) {
  asio::io_context ioc;
  store::redis_settings settings;
  settings.host = "sluice-no-such-host.invalid";
  settings.command_timeout = 50ms;
  store::redis_store s(ioc.get_executor(), settings);
  s.start();
  ASSERT_TRUE(run_until(
      ioc, [&] { return s.stats().connect_failures >= 1; }, 2000ms));
  auto r = check_once(ioc, s, request("{dns}:k", 1, 1000, 1));
  ASSERT_TRUE(r.result);
  EXPECT_EQ(r.result->error(), make_error_code(errc::store_unavailable));
  EXPECT_LT(r.took, scaled(10ms));
  EXPECT_FALSE(s.stats().connected);
}

// A name that resolves (localhost) connects like an address.
TEST(redis_store, a_host_name_is_resolved) {
  test::redis_server server;
  asio::io_context ioc;
  auto settings = settings_for(server);
  settings.host = "localhost";
  store::redis_store s(ioc.get_executor(), settings);
  s.start();
  ASSERT_TRUE(wait_connected(ioc, s));
  EXPECT_TRUE(check_once(ioc, s, request("{name}:k", 1, 1000, 1)).result->has_value());
}

TEST(redis_store, stop_fails_checks_in_flight) {
  test::redis_server server;
  asio::io_context ioc;
  store::redis_store s(ioc.get_executor(), settings_for(server, 1000ms));
  s.start();
  ASSERT_TRUE(wait_connected(ioc, s));
  server.pause();
  std::optional<result_type> result;
  asio::co_spawn(ioc, s.check(request("{stop}:k", 1, 1000, 1)),
                 [&](std::exception_ptr, result_type r) { result.emplace(std::move(r)); });
  run_for(ioc, 20ms);
  s.stop();
  ASSERT_TRUE(run_until(
      ioc, [&] { return result.has_value(); }, 500ms));
  EXPECT_FALSE(result->has_value());
  server.resume();
}

}  // namespace
}  // namespace sluice

namespace sluice {
namespace {

// Issue 10, item 5: Redis's wall clock stepped +1 h and -1 h (twice) mid-traffic, under a
// preload that steps it (tests/preload/clock_step.cpp: Debian's libfaketime cannot start
// redis-server on bookworm, its jemalloc reads the clock while libfaketime initialises; the
// monotonic clock is left alone, as an NTP step leaves it). No timely check turns STALE: the
// one after a forward step is answered STALE by the script, which wrote nothing, and is
// re-sent once under the relearned offset. The decisions are those of an unstepped clock: a
// bucket of 1 token a day spends exactly one whole token per check (an hour refills 1/24 of
// one, and a step back counts as no time).
TEST(redis_store, a_step_of_the_servers_clock_turns_no_check_stale) {
  const auto dir =
      std::filesystem::temp_directory_path() / ("sluice-clock-step-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const auto offset_file = (dir / "offset").string();
  auto step_to = [&](const char* seconds) {
    std::ofstream(offset_file, std::ios::trunc) << seconds << "\n";
  };
  step_to("0");
  test::redis_server server({}, {std::string("LD_PRELOAD=") + SLUICE_CLOCK_STEP_PRELOAD,
                                 "SLUICE_CLOCK_OFFSET_FILE=" + offset_file});
  auto redis_ms = [&] {
    const auto t = server.command({"TIME"});
    return std::stoll(t.elements.at(0).str) * 1000 + std::stoll(t.elements.at(1).str) / 1000;
  };
  asio::io_context ioc;
  auto settings = settings_for(server, 200ms);
  settings.breaker_failures = 0;
  store::redis_store s(ioc.get_executor(), settings);
  s.start();
  ASSERT_TRUE(wait_connected(ioc, s));

  std::int64_t expected_remaining = 1000;
  auto spend = [&](int checks, const std::string& phase) {
    for (int i = 0; i < checks; ++i) {
      auto r = check_once(ioc, s, request("{step}:b", 1, 86'400'000, 1000));
      ASSERT_TRUE(r.result && r.result->has_value())
          << phase << " check " << i << ": "
          << (r.result ? r.result->error().message() : std::string("no answer"));
      EXPECT_TRUE((*r.result)->allowed) << phase << " " << i;
      EXPECT_EQ((*r.result)->limits[0].remaining, --expected_remaining) << phase << " " << i;
    }
  };
  spend(20, "before");
  const auto before = redis_ms();
  step_to("3600");  // forward 1 h
  const auto forward = redis_ms();
  EXPECT_GT(forward - before, 3'500'000) << "the server's clock did not step";
  spend(20, "after +1 h");
  EXPECT_GE(s.stats().clock_resends, 1u) << "the first check after the step came back STALE";
  step_to("0");  // back 1 h
  spend(20, "after -1 h");
  step_to("-3600");  // back 1 h more
  EXPECT_LT(redis_ms() - before, -3'000'000);
  spend(20, "after another -1 h");
  step_to("0");  // forward 1 h
  spend(20, "after +1 h again");
  EXPECT_EQ(s.stats().errors, 0u);
  EXPECT_EQ(s.stats().timeouts, 0u);
  EXPECT_EQ(s.stats().checks, 100u);
  s.stop();
  std::filesystem::remove_all(dir);
}

// The over-limit cache (limiter::refusal_cache) against the store's own answers, one table
// row per algorithm and cost, on one clock. The store decides at simulated store times
// (check_request::now_ms_override) on a redis-server whose own clock is stopped (no key
// expires while the test runs, however slowly it runs), and the cache is asked at the same
// offsets of its own clock. After a refusal, a recalled outcome equals what the store answers
// at the same moment — Remaining, Reset, Retry-After and the next-token time, exactly — up to
// the last millisecond before the refused limit could change; from then on, or after a reload
// or for another cost, the cache says ask the store.
TEST(redis_store, cached_refusals_equal_the_stores_answers) {
  struct row {
    const char* name;
    config::algorithm algorithm;
    std::int64_t n, period_ms, burst, cost;
  };
  const row rows[] = {
      {"token bucket 3/1s", config::algorithm::token_bucket, 3, 1000, 3, 1},
      {"token bucket 4/2s cost 2", config::algorithm::token_bucket, 4, 2000, 4, 2},
      {"fixed window 3/1s", config::algorithm::fixed_window, 3, 1000, 3, 1},
      {"sliding window 4/1s", config::algorithm::sliding_window, 4, 1000, 4, 1},
  };
  // The store's time: a whole number of every row's period, so each window starts here.
  constexpr std::int64_t start_ms = 1'700'000'000'000;
  test::stopped_clock redis_clock(SLUICE_CLOCK_STEP_PRELOAD, start_ms);
  test::redis_server server({}, redis_clock.env());
  asio::io_context ioc;
  store::redis_store s(ioc.get_executor(), settings_for(server));
  s.start();
  ASSERT_TRUE(wait_connected(ioc, s));
  // The cache's clock: store time start_ms + d is `sent + d`. (An hour ahead of the real
  // steady clock: remember() keeps only a refusal that ends after the real now.)
  const auto sent = clock_type::now() + 1h;
  for (const row& r : rows) {
    SCOPED_TRACE(r.name);
    auto req = request(std::string("{rc}:") + r.name, r.n, r.period_ms, r.burst, start_ms);
    req.limits.front().algorithm = r.algorithm;
    req.limits.front().cost = r.cost;
    limiter::refusal_cache cache;
    limiter::check_outcome refused;
    for (int i = 0; i < 50; ++i) {
      auto got = check_once(ioc, s, req);
      ASSERT_TRUE(got.result && got.result->has_value());
      if (!(*got.result)->allowed) {
        refused = **got.result;
        break;
      }
    }
    ASSERT_FALSE(refused.allowed);
    cache.remember(req.limits.front(), refused, 7, sent);
    const auto& lo = refused.limits.front();
    const std::int64_t window = std::min(lo.retry_after_ms, lo.next_ms);
    ASSERT_GT(window, 0);

    limiter::check_outcome other_cost;
    auto costly = req;
    costly.limits.front().cost = r.cost + 1;
    EXPECT_FALSE(cache.recall(costly, 7, sent, other_cost)) << "another cost";
    EXPECT_FALSE(cache.recall(req, 8, sent, other_cost)) << "another generation";
    cache.remember(req.limits.front(), refused, 7, sent);  // (the miss forgot it)

    std::uint64_t compared = 0;
    for (const std::int64_t d :
         {0L, window / 5, 2 * window / 5, 3 * window / 5, 4 * window / 5, window - 1}) {
      SCOPED_TRACE("at +" + std::to_string(d) + " ms");
      limiter::check_outcome recalled;
      ASSERT_TRUE(cache.recall(req, 7, sent + std::chrono::milliseconds(d), recalled));
      auto at = req;
      at.now_ms_override = start_ms + d;
      auto store_now = check_once(ioc, s, at);
      ASSERT_TRUE(store_now.result && store_now.result->has_value());
      const auto& fresh = **store_now.result;
      EXPECT_FALSE(fresh.allowed) << "the store admitted inside the cached window";
      const auto& a = recalled.limits.front();
      const auto& b = fresh.limits.front();
      EXPECT_FALSE(a.admits);
      EXPECT_EQ(a.limit, b.limit);
      EXPECT_EQ(a.remaining, b.remaining);
      EXPECT_EQ(a.reset_ms, b.reset_ms);
      EXPECT_EQ(a.retry_after_ms, b.retry_after_ms);
      EXPECT_EQ(a.next_ms, b.next_ms);
      // (The cache never claims a refusal lasts longer than the store says.)
      EXPECT_LE(b.retry_after_ms, a.retry_after_ms);
      ++compared;
    }
    limiter::check_outcome late;
    EXPECT_FALSE(cache.recall(req, 7, sent + std::chrono::milliseconds(window), late))
        << "kept past its window";
    EXPECT_EQ(cache.hits(), compared);
  }
}

}  // namespace
}  // namespace sluice
