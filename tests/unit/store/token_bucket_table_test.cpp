// SPDX-License-Identifier: Apache-2.0
// sluice-test-support: redis_server redis_tls test_ca
#include "sluice/limiter/token_bucket.hpp"

#include "sluice/store/lua_scripts.hpp"
#include "sluice/store/memory_store.hpp"
#include "sluice/store/redis_store.hpp"
#include "support/bucket_view.hpp"
#include "support/redis_server.hpp"
#include "support/redis_tls.hpp"
#include "support/store_time.hpp"
#include "support/temp_dir.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <limits>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

// One table of token-bucket sequences (the regression cases' values, in ms of store time),
// decided by the memory store, by the Lua script run directly on a real redis-server under
// both key layouts (a key per bucket; buckets packed into hashes, one or many per hash), and
// by the redis_store (hiredis async) — all must give the same outcomes, step for step.

namespace sluice {
namespace {

using test::all_in_one_hash;
using test::layout_name;
using test::packed;
using test::per_key;

using limiter::bucket_params;

// Whether the script's stored state `stored` ("<level> <stamp> <units per token>") is the
// memory store's `mem` (level, stamp) up to the stamp: the same level at `now` and neither
// stamp after it, so the same level at every later time (the level refills linearly up to
// the capacity). A refusal that changes nothing leaves the script's state unwritten (issue
// 10), where the memory store rewrites it stamped now. Returns "" when equal, else both.
std::string same_bucket(const std::string& stored, std::pair<std::int64_t, std::int64_t> mem,
                        const bucket_params& p, std::int64_t now) {
  long long level = 0, stamp = 0;
  if (std::sscanf(stored.c_str(), "%lld %lld", &level, &stamp) != 2) return "unreadable " + stored;
  const limiter::bucket_state a{level, stamp}, b{mem.first, mem.second};
  if (stamp <= now && mem.second <= now &&
      limiter::refilled_level(&a, p, now) == limiter::refilled_level(&b, p, now)) {
    return "";
  }
  return stored + " vs " + std::to_string(mem.first) + " " + std::to_string(mem.second);
}
using limiter::check_outcome;
using limiter::check_request;
using limiter::limit_outcome;
using test::redis_reply;

// A limit of a case: `n` tokens per `period_ms`, `burst`.
struct limit_spec {
  std::string name;
  std::int64_t n;
  std::int64_t period_ms;
  std::int64_t burst;
  bool shadow = false;

  bucket_params params() const {
    config::limit_params p;
    p.rate.count = n;
    p.rate.period = std::chrono::milliseconds(period_ms);
    p.burst = burst;
    return bucket_params::from(p);
  }
};

struct expect {
  bool admits;
  std::int64_t remaining;
  std::int64_t reset_ms;
  std::int64_t retry_after_ms;
  std::int64_t next_ms;
};

struct step {
  std::int64_t t_ms;  // store time since the case's start
  std::int64_t cost;
  bool allowed;
  std::vector<expect> limits;  // parallel to the case's limits
};

struct table_case {
  std::string name;
  std::vector<limit_spec> limits;
  std::vector<step> steps;
};

// An arbitrary epoch (2023-11-14T22:13:20Z) plus a per-case offset, far from any real clock
// step and from 0, so a "clock stepped back" case has room.
constexpr std::int64_t epoch_ms = 1'700'000'000'000;

const std::vector<table_case>& table() {
  static const std::vector<table_case> cases = {
      // c01, token-bucket variant: 5/1m burst 5 (one token per 12 s).
      {"c01_tb",
       {{"items_key", 5, 60'000, 5}},
       {{0, 1, true, {{true, 4, 12'000, 0, 12'000}}},
        {100, 1, true, {{true, 3, 23'900, 0, 11'900}}},
        {200, 1, true, {{true, 2, 35'800, 0, 11'800}}},
        {300, 1, true, {{true, 1, 47'700, 0, 11'700}}},
        {400, 1, true, {{true, 0, 59'600, 0, 11'600}}},
        {500, 1, false, {{false, 0, 59'500, 11'500, 11'500}}}}},
      // c02: 1/10s burst 2.
      {"c02",
       {{"search_key", 1, 10'000, 2}},
       {{0, 1, true, {{true, 1, 10'000, 0, 10'000}}},
        {100, 1, true, {{true, 0, 19'900, 0, 9'900}}},
        {200, 1, false, {{false, 0, 19'800, 9'800, 9'800}}},
        {9'800, 1, false, {{false, 0, 10'200, 200, 200}}},
        {10'200, 1, true, {{true, 0, 19'800, 0, 9'800}}}}},
      // c03 part A: 1/2s burst 1 (a truncated reply would let t=1.8 through).
      {"c03_a",
       {{"items_key", 1, 2'000, 1}},
       {{0, 1, true, {{true, 0, 2'000, 0, 2'000}}},
        {1'500, 1, false, {{false, 0, 500, 500, 500}}},
        {1'800, 1, false, {{false, 0, 200, 200, 200}}},
        {2'200, 1, true, {{true, 0, 2'000, 0, 2'000}}},
        {2'300, 1, false, {{false, 0, 1'900, 1'900, 1'900}}}}},
      // c03 part B: 1/1s burst 1 (a floored balance would starve this poller).
      {"c03_b",
       {{"items_key", 1, 1'000, 1}},
       {{0, 1, true, {{true, 0, 1'000, 0, 1'000}}},
        {400, 1, false, {{false, 0, 600, 600, 600}}},
        {800, 1, false, {{false, 0, 200, 200, 200}}},
        {1'200, 1, true, {{true, 0, 1'000, 0, 1'000}}},
        {1'600, 1, false, {{false, 0, 600, 600, 600}}},
        {2'400, 1, true, {{true, 0, 1'000, 0, 1'000}}}}},
      // c04: 1/1s burst 10, costs 4, 4, 4 (refused, debits nothing), then 1.
      {"c04",
       {{"api_budget", 1, 1'000, 10}},
       {{0, 4, true, {{true, 6, 4'000, 0, 1'000}}},
        {100, 4, true, {{true, 2, 7'900, 0, 900}}},
        {200, 4, false, {{false, 2, 7'800, 1'800, 800}}},
        {300, 1, true, {{true, 1, 8'700, 0, 700}}}}},
      // c06 A: 1/30d burst 1000 (time to full above 2^31 ms).
      {"c06_a",
       {{"items_key", 1, 2'592'000'000, 1000}},
       {{0, 1, true, {{true, 999, 2'592'000'000, 0, 2'592'000'000}}}}},
      // c06 B: 1000000/1s burst 1000000 (full again after 1 us: 1 ms, never 0).
      {"c06_b",
       {{"items_key", 1'000'000, 1'000, 1'000'000}},
       {{0, 1, true, {{true, 999'999, 1, 0, 1}}}}},
      // c06 D: 1/10s burst 2, expiry re-armed by every write.
      {"c06_d",
       {{"items_key", 1, 10'000, 2}},
       {{0, 1, true, {{true, 1, 10'000, 0, 10'000}}},
        {5'500, 1, true, {{true, 0, 14'500, 0, 4'500}}},
        {10'500, 1, true, {{true, 0, 19'500, 0, 9'500}}},
        {10'500, 1, false, {{false, 0, 19'500, 9'500, 9'500}}}}},
      // Two enforced limits; when one refuses, neither is debited (the other keeps its balance).
      {"multi_refusal_debits_nothing",
       {{"per_second", 10, 1'000, 10}, {"slow", 1, 1'000, 2}},
       {{0, 1, true, {{true, 9, 100, 0, 100}, {true, 1, 1'000, 0, 1'000}}},
        {10, 1, true, {{true, 8, 190, 0, 90}, {true, 0, 1'990, 0, 990}}},
        {20, 1, false, {{true, 8, 180, 0, 80}, {false, 0, 1'980, 980, 980}}},
        {30, 1, false, {{true, 8, 170, 0, 70}, {false, 0, 1'970, 970, 970}}},
        {1'000, 1, true, {{true, 9, 100, 0, 100}, {true, 0, 2'000, 0, 1'000}}}}},
      // A shadow limit refusing never refuses the request, and is debited only when it admits.
      {"shadow_refusing",
       {{"enforced", 1, 1'000, 5}, {"shadow", 1, 1'000, 1, true}},
       {{0, 1, true, {{true, 4, 1'000, 0, 1'000}, {true, 0, 1'000, 0, 1'000}}},
        {100, 1, true, {{true, 3, 1'900, 0, 900}, {false, 0, 900, 900, 900}}},
        {200, 1, true, {{true, 2, 2'800, 0, 800}, {false, 0, 800, 800, 800}}},
        {1'000, 1, true, {{true, 2, 3'000, 0, 1'000}, {true, 0, 1'000, 0, 1'000}}}}},
      // A shadow limit is evaluated as if alone: debited when it admits, even on a refusal.
      {"shadow_debited_when_refused",
       {{"enforced", 1, 1'000, 1}, {"shadow", 1, 1'000, 5, true}},
       {{0, 1, true, {{true, 0, 1'000, 0, 1'000}, {true, 4, 1'000, 0, 1'000}}},
        {100, 1, false, {{false, 0, 900, 900, 900}, {true, 3, 1'900, 0, 900}}}}},
      // The store clock stepped back 5 s: no time elapses (no refill, nothing negative).
      {"clock_stepped_back",
       {{"items_key", 1, 10'000, 2}},
       {{10'000, 1, true, {{true, 1, 10'000, 0, 10'000}}},
        {5'000, 1, true, {{true, 0, 20'000, 0, 10'000}}},
        {6'000, 1, false, {{false, 0, 19'000, 9'000, 9'000}}}}},
      // c07's sequence (the PERSIST repair is checked on redis below): a bucket idle past its
      // time to full reads as full.
      {"c07",
       {{"items_key", 1, 10'000, 2}},
       {{0, 1, true, {{true, 1, 10'000, 0, 10'000}}},
        {50, 1, true, {{true, 0, 19'950, 0, 9'950}}},
        {100, 1, false, {{false, 0, 19'900, 9'900, 9'900}}},
        {20'500, 1, true, {{true, 1, 10'000, 0, 10'000}}},
        {20'500, 1, true, {{true, 0, 20'000, 0, 10'000}}}}},
  };
  return cases;
}

// ---- backends -------------------------------------------------------------------------------

check_request make_request(const table_case& c, const std::string& prefix, std::int64_t cost) {
  check_request req;
  for (const auto& l : c.limits) {
    limiter::limit_check lc;
    lc.key = limiter::bucket_key(l.name, limiter::key_namespace::global, prefix + "." + c.name);
    lc.bucket = l.params();
    lc.cost = cost;
    lc.shadow = l.shadow;
    req.limits.push_back(lc);
  }
  return req;
}

// The EVAL of the script deciding `req` at store time `now_ms` under `layout`.
std::vector<std::string> check_eval(const check_request& req, std::int64_t now_ms,
                                    const lua::key_layout& layout) {
  std::vector<std::string> argv = {"EVAL", std::string(lua::check())};
  check_request timed = req;
  timed.now_ms_override = now_ms;
  lua::append_check_command(timed, layout, argv);
  return argv;
}

// The outcome in the script's reply `r` to check_eval(req, now_ms, ...).
std::optional<check_outcome> read_outcome(const redis_reply& r, const check_request& req,
                                          std::int64_t now_ms, std::string* error) {
  std::vector<std::size_t> leased;  // limits packed with a lease: their granted ends the reply
  for (std::size_t i = 0; i < req.limits.size(); ++i)
    if (lua::packs_lease(req.limits[i])) leased.push_back(i);
  if (r.type != redis_reply::kind::array ||
      r.elements.size() != 2 + 5 * req.limits.size() + leased.size()) {
    *error = "unexpected reply: " + r.str;
    return std::nullopt;
  }
  for (const auto& e : r.elements) {
    if (e.type != redis_reply::kind::integer) {
      *error = "non-integer element";
      return std::nullopt;
    }
  }
  EXPECT_EQ(r.elements[1].integer, now_ms) << "the script must report the time it decided at";
  check_outcome out;
  out.allowed = r.elements[0].integer == 1;
  for (std::size_t i = 0; i < req.limits.size(); ++i) {
    const auto* e = &r.elements[2 + 5 * i];
    limit_outcome lo;
    lo.admits = e[0].integer == 1;
    lo.limit = req.limits[i].bucket.burst;
    lo.remaining = e[1].integer;
    lo.reset_ms = e[2].integer;
    lo.retry_after_ms = e[3].integer;
    lo.next_ms = e[4].integer;
    out.limits.push_back(lo);
  }
  for (std::size_t j = 0; j < leased.size(); ++j)
    out.limits[leased[j]].granted = r.elements[2 + 5 * req.limits.size() + j].integer;
  return out;
}

// The script, run directly with EVAL on the fixture's server (a synchronous connection).
std::optional<check_outcome> run_lua(test::redis_server& server, const check_request& req,
                                     std::int64_t now_ms, std::string* error,
                                     const lua::key_layout& layout) {
  return read_outcome(server.command(check_eval(req, now_ms, layout)), req, now_ms, error);
}

// Drives an awaitable to completion on `ioc` (which may hold other work, e.g. reconnect timers).
template <class T>
T run(boost::asio::io_context& ioc, boost::asio::awaitable<T> a) {
  std::optional<T> out;
  std::exception_ptr ex;
  boost::asio::co_spawn(ioc, std::move(a), [&](std::exception_ptr e, T v) {
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

boost::asio::awaitable<bool> wait_connected(store::redis_store& s) {
  auto ex = co_await boost::asio::this_coro::executor;
  boost::asio::steady_timer timer(ex);
  for (int i = 0; i < 500 && !s.stats().connected; ++i) {
    timer.expires_after(std::chrono::milliseconds(5));
    co_await timer.async_wait(boost::asio::use_awaitable);
  }
  co_return s.stats().connected;
}

class token_bucket_table : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { server_ = new test::redis_server(); }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }
  static test::redis_server* server_;
};
test::redis_server* token_bucket_table::server_ = nullptr;

void expect_step(const table_case& c, std::size_t s, const char* backend,
                 const check_outcome& got) {
  const step& st = c.steps[s];
  SCOPED_TRACE(std::string(backend) + " " + c.name + " step " + std::to_string(s) +
               " t=" + std::to_string(st.t_ms));
  EXPECT_EQ(got.allowed, st.allowed);
  ASSERT_EQ(got.limits.size(), c.limits.size());
  for (std::size_t i = 0; i < c.limits.size(); ++i) {
    SCOPED_TRACE("limit " + c.limits[i].name);
    const expect& e = st.limits[i];
    const limit_outcome& g = got.limits[i];
    EXPECT_EQ(g.admits, e.admits);
    EXPECT_EQ(g.limit, c.limits[i].burst);
    EXPECT_EQ(g.remaining, e.remaining);
    EXPECT_EQ(g.reset_ms, e.reset_ms);
    EXPECT_EQ(g.retry_after_ms, e.retry_after_ms);
    EXPECT_EQ(g.next_ms, e.next_ms);
  }
}

TEST_F(token_bucket_table, memory_store) {
  for (const auto& c : table()) {
    std::int64_t now = 0;
    store::memory_store mem([&now] { return now; });
    for (std::size_t s = 0; s < c.steps.size(); ++s) {
      now = epoch_ms + c.steps[s].t_ms;
      expect_step(c, s, "memory", mem.decide(make_request(c, "mem", c.steps[s].cost)));
    }
  }
}

// The same table on a memory store whose bound (store.max_buckets) is exactly the case's
// number of buckets: a store at its bound that needs no room evicts nothing (an off-by-one
// in the bound would evict a live bucket of the case and change its next decision).
TEST_F(token_bucket_table, memory_store_at_its_bound) {
  for (const auto& c : table()) {
    std::int64_t now = 0;
    store::memory_store mem([&now] { return now; }, c.limits.size());
    for (std::size_t s = 0; s < c.steps.size(); ++s) {
      now = epoch_ms + c.steps[s].t_ms;
      expect_step(c, s, "memory-bound", mem.decide(make_request(c, "memb", c.steps[s].cost)));
    }
    EXPECT_EQ(mem.stats().evictions, 0u) << c.name;
  }
}

TEST_F(token_bucket_table, lua_script) {
  for (const auto& layout : {per_key, packed, all_in_one_hash}) {
    const std::string name = "lua-" + layout_name(layout);
    for (const auto& c : table()) {
      for (std::size_t s = 0; s < c.steps.size(); ++s) {
        std::string error;
        auto got = run_lua(*server_, make_request(c, name, c.steps[s].cost),
                           epoch_ms + c.steps[s].t_ms, &error, layout);
        ASSERT_TRUE(got) << c.name << " step " << s << ": " << error;
        expect_step(c, s, name.c_str(), *got);
      }
    }
  }
}

// Every case of the table through a Redis store made with `settings` (both layouts), its
// buckets named after `prefix`.
void table_on_redis(store::redis_settings settings, const std::string& prefix) {
  for (const auto& layout : {per_key, packed}) {
    boost::asio::io_context ioc;
    settings.layout = layout;
    store::redis_store rs(ioc.get_executor(), settings);
    rs.start();
    ASSERT_TRUE(run(ioc, wait_connected(rs))) << rs.failure();
    const std::string name = prefix + layout_name(layout);
    for (const auto& c : table()) {
      for (std::size_t s = 0; s < c.steps.size(); ++s) {
        check_request req = make_request(c, name, c.steps[s].cost);
        req.now_ms_override = epoch_ms + c.steps[s].t_ms;
        auto got = run(ioc, rs.check(req));
        ASSERT_TRUE(got.has_value()) << c.name << " step " << s << ": " << got.error().message();
        expect_step(c, s, name.c_str(), *got);
      }
    }
    rs.stop();
  }
}

TEST_F(token_bucket_table, redis_store) {
  store::redis_settings settings;
  settings.port = server_->port();
  settings.command_timeout = std::chrono::milliseconds(1000);
  table_on_redis(settings, "rs-");
}

// The same table through a TLS connection (a test CA, client certificates required) as an ACL
// user allowed only what the store sends (test::sluice_acl_rule, as docs/operating.md shows).
TEST_F(token_bucket_table, redis_store_over_tls_as_an_acl_user) {
  test::temp_dir dir("table-tls");
  test::redis_tls_material tls(dir.path);
  const std::uint16_t tls_port = test::free_loopback_port();
  auto args = tls.server_args(tls_port, true);
  for (auto& a : test::acl_args("sluice", "table-secret")) args.push_back(std::move(a));
  test::redis_server server(args);
  store::redis_settings settings;
  settings.port = tls_port;
  settings.command_timeout = std::chrono::milliseconds(1000);
  settings.connect_timeout = std::chrono::milliseconds(2000);
  settings.username = "sluice";
  settings.password = "table-secret";
  settings.tls.context = store::make_redis_tls_context(
      {tls.ca.cert().string(), true, tls.client.cert.string(), tls.client.key.string()});
  settings.tls.server_name = "localhost";
  table_on_redis(settings, "tls-");
}

// Peek (GET /admin/explain): before every step the same request is decided with `peek` set,
// twice: each answers exactly the step's expected outcome, and the step itself still does —
// so a peek writes nothing, on every store and layout; and the stored state of every limit
// (memory: peek_state; Redis: DUMP and PTTL of the key holding it) is the same after the
// peeks as before them.
TEST_F(token_bucket_table, peek_decides_as_the_step_and_writes_nothing) {
  auto peek_of = [](check_request req) {
    req.peek = true;
    return req;
  };
  for (const auto& c : table()) {
    std::int64_t now = 0;
    store::memory_store mem([&now] { return now; });
    for (std::size_t s = 0; s < c.steps.size(); ++s) {
      now = epoch_ms + c.steps[s].t_ms;
      const auto req = make_request(c, "peek-mem", c.steps[s].cost);
      std::vector<std::optional<std::string>> before;
      for (const auto& l : req.limits) before.push_back(mem.peek_state(l.key));
      expect_step(c, s, "memory peek", mem.decide(peek_of(req)));
      expect_step(c, s, "memory peek again", mem.decide(peek_of(req)));
      for (std::size_t i = 0; i < req.limits.size(); ++i) {
        EXPECT_EQ(mem.peek_state(req.limits[i].key), before[i])
            << c.name << " step " << s << ": a peek changed " << req.limits[i].key;
      }
      expect_step(c, s, "memory", mem.decide(req));
    }
  }
  for (const auto& layout : {per_key, packed}) {
    const std::string name = "peek-lua-" + layout_name(layout);
    for (const auto& c : table()) {
      for (std::size_t s = 0; s < c.steps.size(); ++s) {
        const auto req = make_request(c, name, c.steps[s].cost);
        const test::bucket_view view{*server_, layout};
        auto stored = [&] {
          std::vector<std::string> out;
          for (const auto& l : req.limits) out.push_back(view.snapshot(l.key, false));
          return out;
        };
        const auto before = stored();
        for (const bool peek : {true, true, false}) {
          std::string error;
          auto got = run_lua(*server_, peek ? peek_of(req) : req, epoch_ms + c.steps[s].t_ms,
                             &error, layout);
          ASSERT_TRUE(got) << c.name << " step " << s << ": " << error;
          expect_step(c, s, peek ? "lua peek" : "lua", *got);
          if (peek) EXPECT_EQ(stored(), before) << c.name << " step " << s << ": a peek wrote";
        }
      }
    }
  }
}

// The memory store and the script agree on the stored state itself, not only on the outcome.
// One clock: each step's state is read in the transaction that ran the script, and the keys
// expire at the store time the script armed them for (test::store_time_keys), never on
// Redis's own clock — so a bucket the memory store holds is in Redis too, exactly.
TEST_F(token_bucket_table, stored_state_matches) {
  for (const auto& layout : {per_key, packed}) {
    const test::bucket_view view{*server_, layout};
    const std::string name = "same-" + layout_name(layout);
    for (const auto& c : table()) {
      std::int64_t now = 0;
      store::memory_store mem([&now] { return now; });
      test::store_time_keys keys(*server_);
      for (std::size_t s = 0; s < c.steps.size(); ++s) {
        SCOPED_TRACE(c.name + " step " + std::to_string(s));
        now = epoch_ms + c.steps[s].t_ms;
        const auto req_m = make_request(c, name, c.steps[s].cost);
        mem.decide(req_m);
        keys.expire_until(now);
        std::vector<std::vector<std::string>> reads;
        std::vector<std::string> armed;
        for (const auto& l : req_m.limits) {
          reads.push_back(view.read_command(l.key));
          armed.push_back(view.where(l.key).key);
        }
        const auto replies = keys.step(check_eval(req_m, now, layout), reads, armed);
        ASSERT_EQ(replies.size(), 1 + reads.size()) << replies.front().str;
        std::string error;
        const auto got = read_outcome(replies[0], req_m, now, &error);
        ASSERT_TRUE(got) << error;
        for (std::size_t i = 0; i < req_m.limits.size(); ++i) {
          const auto& l = req_m.limits[i];
          auto m = mem.peek(l.key);
          auto r = view.decode(replies[1 + i], l.key);
          if (!m) {
            EXPECT_EQ(r.type, redis_reply::kind::nil) << l.key;
          } else {
            ASSERT_EQ(r.type, redis_reply::kind::string) << l.key << ": in memory, not in Redis";
            EXPECT_EQ(same_bucket(r.str, *m, l.bucket, now), "") << l.key;
          }
          // (A hash field expires by its own store-time stamp; a key by store_time_keys.)
          if (!layout.packed) keys.armed(armed[i], now, got->limits[i].reset_ms);
        }
      }
    }
  }
}

// Randomised differential run: random rates (up to 2^53 capacity, periods up to 30 days),
// costs, shadow flags and time steps (including steps back) — the memory store and the script
// must agree on every outcome and every stored state; and every outcome keeps its promises:
// waiting retry_after_ms admits the cost, waiting 1 ms less does not; next_ms brings one more
// whole token; reset_ms refills to full.
TEST_F(token_bucket_table, random_sequences_agree_and_keep_promises) {
  std::mt19937_64 rng(20261130);
  auto pick = [&rng](std::int64_t lo, std::int64_t hi) {
    return std::uniform_int_distribution<std::int64_t>(lo, hi)(rng);
  };
  for (int round = 0; round < 40; ++round) {
    // Even rounds a key per bucket, odd rounds packed into hashes.
    const lua::key_layout layout = round % 2 ? packed : per_key;
    const test::bucket_view view{*server_, layout};
    table_case c;
    c.name = "random" + std::to_string(round);
    const auto n_limits = pick(1, 3);
    for (std::int64_t i = 0; i < n_limits; ++i) {
      limit_spec l{"l" + std::to_string(i), 0, 0, 0, i > 0 && pick(0, 3) == 0};
      const std::int64_t periods[] = {1, 7, 1'000, 60'000, 3'600'000, 86'400'000, 2'592'000'000};
      l.period_ms = periods[pick(0, 6)];
      l.n = pick(0, 1) ? pick(1, 10) : pick(1, 1'000'000);
      l.burst = pick(0, 1) ? pick(1, 10) : pick(1, 100'000);
      // Keep the capacity within 2^53 (config validation does the same).
      while (l.params().capacity() > config::max_exact_integer || l.params().capacity() < 0) {
        l.burst = std::max<std::int64_t>(1, l.burst / 16);
      }
      c.limits.push_back(l);
    }
    std::int64_t min_burst = c.limits[0].burst;
    for (const auto& l : c.limits) min_burst = std::min(min_burst, l.burst);

    std::int64_t now = epoch_ms;
    store::memory_store mem([&now] { return now; });
    for (int s = 0; s < 25; ++s) {
      const int kind = static_cast<int>(pick(0, 9));
      now += kind == 0 ? -pick(0, 5'000) : kind < 4 ? 0 : pick(0, kind < 8 ? 50 : 5'000'000);
      const std::int64_t cost = pick(1, min_burst);
      const auto req = make_request(c, "rnd", cost);
      // Start the script from the memory store's state (Redis expires keys in real time, the
      // simulated clock here runs faster): copy it over with a long TTL, then decide on both.
      for (const auto& lc : req.limits) {
        if (auto st = mem.peek(lc.key)) {
          view.set(lc.key, std::to_string(st->first) + " " + std::to_string(st->second),
                   30LL * 86'400'000, now);
        } else {
          view.del(lc.key);
        }
      }
      const auto m = mem.decide(req);
      std::string error;
      const auto l = run_lua(*server_, req, now, &error, layout);
      ASSERT_TRUE(l) << error;
      SCOPED_TRACE(c.name + " step " + std::to_string(s));
      ASSERT_EQ(m.allowed, l->allowed);
      for (std::size_t i = 0; i < req.limits.size(); ++i) {
        const auto& a = m.limits[i];
        const auto& b = l->limits[i];
        ASSERT_EQ(a.admits, b.admits);
        ASSERT_EQ(a.remaining, b.remaining);
        ASSERT_EQ(a.reset_ms, b.reset_ms);
        ASSERT_EQ(a.retry_after_ms, b.retry_after_ms);
        ASSERT_EQ(a.next_ms, b.next_ms);
        auto state = mem.peek(req.limits[i].key);
        auto stored = view.get(req.limits[i].key);
        if (state) {
          const auto ttl =
              limiter::ttl_ms(state->first, req.limits[i].bucket);  // what the script armed
          const auto pttl = view.pttl(req.limits[i].key);
          if (stored.type == redis_reply::kind::nil || pttl == -2) {
            // Redis expires in real time: only a key with a tiny TTL may be gone already.
            EXPECT_LE(ttl, 100);
          } else {
            ASSERT_EQ(same_bucket(stored.str, *state, req.limits[i].bucket, now), "");
            // A debited key's expiry is the bucket's time to full; a hash's, and a refused
            // key's (a refusal that changes nothing writes nothing), is at least that (it
            // only rises; the value copied in above came with a long one).
            const bool debited = req.limits[i].shadow ? a.admits : m.allowed;
            if (!layout.packed && debited) {
              EXPECT_LE(pttl, ttl);
            }
            EXPECT_GE(pttl, std::max<std::int64_t>(0, ttl - 1'000));
          }
          // Promises, from the stored state with no further traffic.
          const limiter::bucket_state st{state->first, state->second};
          const auto& p = req.limits[i].bucket;
          const std::int64_t need = cost * p.units_per_token;
          EXPECT_EQ(limiter::refilled_level(&st, p, now + a.reset_ms), p.capacity());
          if (a.reset_ms > 0) {
            EXPECT_LT(limiter::refilled_level(&st, p, now + a.reset_ms - 1), p.capacity());
          }
          if (a.next_ms > 0) {
            EXPECT_GE(limiter::refilled_level(&st, p, now + a.next_ms) / p.units_per_token,
                      a.remaining + 1);
            EXPECT_EQ(limiter::refilled_level(&st, p, now + a.next_ms - 1) / p.units_per_token,
                      a.remaining);
          }
          if (!a.admits) {
            EXPECT_GE(limiter::refilled_level(&st, p, now + a.retry_after_ms), need);
            EXPECT_LT(limiter::refilled_level(&st, p, now + a.retry_after_ms - 1), need);
          }
          EXPECT_GE(a.remaining, 0);
          EXPECT_LE(a.remaining, p.burst);
        } else {
          ASSERT_EQ(stored.type, redis_reply::kind::nil);
          EXPECT_EQ(a.remaining, c.limits[i].burst);  // full
        }
      }
    }
  }
}

// ---- redis-only checks of the stored state and its expiry -------------------------------------

struct lua_runner {
  test::redis_server& server;
  table_case c;
  std::string prefix;
  lua::key_layout layout = per_key;

  check_outcome at(std::int64_t t_ms, std::int64_t cost = 1) {
    std::string error;
    auto got = run_lua(server, make_request(c, prefix, cost), epoch_ms + t_ms, &error, layout);
    EXPECT_TRUE(got) << error;
    return got.value_or(check_outcome{});
  }
  /// The bucket_key() of limit i.
  std::string key(std::size_t i = 0) const { return make_request(c, prefix, 1).limits[i].key; }
  test::bucket_view view() const { return {server, layout}; }
};

const table_case& find_case(const std::string& name) {
  for (const auto& c : table()) {
    if (c.name == name) return c;
  }
  throw std::runtime_error("no case " + name);
}

// Each of these runs under both layouts: the stored state is the bucket's (a key's value or a
// hash field) and the expiry is its key's (the bucket's own key, or its group hash).
TEST_F(token_bucket_table, c03_stored_state_keeps_fractions) {
  for (const auto& layout : {per_key, packed}) {
    SCOPED_TRACE(layout_name(layout));
    lua_runner r{*server_, find_case("c03_b"), "state-" + layout_name(layout), layout};
    for (std::int64_t t : {0, 400, 800, 1'200, 1'600}) r.at(t);
    // 0.4 tokens (400 units of 1000 per token) at t = 1.6 — never 0 tokens at t = 1.6. (The
    // refusal at t = 1.6 changed nothing, so the state written at t = 1.2, 0 units, stays.)
    EXPECT_EQ(r.view().get(r.key()).str, "0 " + std::to_string(epoch_ms + 1'200) + " 1000");
    EXPECT_EQ(same_bucket(r.view().get(r.key()).str, {400, epoch_ms + 1'600},
                          r.c.limits[0].params(), epoch_ms + 1'600),
              "");
    // The key's expiry is the time to full armed by the last write (1 s at t = 1.2; the
    // refusal only makes sure it is not below 0.6 s); a hash's is never lowered and rises
    // with up to 0.5 s of slack.
    const auto pttl = r.view().pttl(r.key());
    EXPECT_GT(pttl, 500);
    EXPECT_LE(pttl, layout.packed ? 1'500 : 1'000);
  }
}

TEST_F(token_bucket_table, c04_balance_and_pttl) {
  for (const auto& layout : {per_key, packed}) {
    SCOPED_TRACE(layout_name(layout));
    lua_runner r{*server_, find_case("c04"), "state-" + layout_name(layout), layout};
    r.at(0, 4);
    r.at(100, 4);
    r.at(200, 4);
    r.at(300, 1);
    // 1.3 tokens, never negative; PTTL = the time to full, 8.7 s.
    EXPECT_EQ(r.view().get(r.key()).str, "1300 " + std::to_string(epoch_ms + 300) + " 1000");
    const auto pttl = r.view().pttl(r.key());
    EXPECT_GT(pttl, 8'600);
    EXPECT_LE(pttl, layout.packed ? 8'700 + 500 : 8'700);  // a hash's rises with slack
  }
}

TEST_F(token_bucket_table, c06_pttl_long_period_and_high_rate) {
  for (const auto& layout : {per_key, packed}) {
    SCOPED_TRACE(layout_name(layout));
    const std::string prefix = "state-" + layout_name(layout);
    lua_runner a{*server_, find_case("c06_a"), prefix, layout};
    a.at(0);
    const auto pttl_a = a.view().pttl(a.key());
    EXPECT_GE(pttl_a, 2'591'999'000);
    EXPECT_LE(pttl_a, 2'592'000'000 + (layout.packed ? 500 : 0));  // slack

    lua_runner b{*server_, find_case("c06_b"), prefix, layout};
    b.at(0);
    const auto pttl_b = b.view().pttl(b.key());
    // 1 ms (a hash: 2 ms, with slack): the key is gone already (-2) or expires within that.
    const long long most_b = layout.packed ? 2 : 1;
    EXPECT_TRUE(pttl_b == -2 || (pttl_b >= 0 && pttl_b <= most_b)) << pttl_b;

    lua_runner d{*server_, find_case("c06_d"), prefix, layout};
    d.at(0);
    EXPECT_LE(d.view().pttl(d.key()), layout.packed ? 10'500 : 10'000);
    d.at(5'500);
    const auto pttl_d = d.view().pttl(d.key());
    EXPECT_GE(pttl_d, 14'400);
    EXPECT_LE(pttl_d, layout.packed ? 15'000 : 14'500);
    d.at(10'500);
    d.at(10'500);
    EXPECT_EQ(d.view().get(d.key()).str, "500 " + std::to_string(epoch_ms + 10'500) + " 10000");
  }
}

TEST_F(token_bucket_table, c07_persisted_key_is_repaired_by_a_refusal) {
  for (const auto& layout : {per_key, packed}) {
    SCOPED_TRACE(layout_name(layout));
    lua_runner r{*server_, find_case("c07"), "state-" + layout_name(layout), layout};
    EXPECT_EQ(r.at(0).limits[0].remaining, 1);
    EXPECT_EQ(r.at(50).limits[0].remaining, 0);
    ASSERT_EQ(r.view().persist(r.key()), 1);
    ASSERT_EQ(r.view().pttl(r.key()), -1);
    auto refused = r.at(100);
    EXPECT_FALSE(refused.allowed);
    EXPECT_EQ(refused.limits[0].retry_after_ms, 9'900);
    const auto pttl = r.view().pttl(r.key());
    EXPECT_GT(pttl, 0);
    EXPECT_LE(pttl, layout.packed ? 19'900 + 500 : 19'900);
    EXPECT_EQ(r.at(20'500).limits[0].remaining, 1);
    EXPECT_EQ(r.at(20'500).limits[0].remaining, 0);
  }
}

TEST_F(token_bucket_table, full_bucket_key_is_deleted) {
  for (const auto& layout : {per_key, packed}) {
    SCOPED_TRACE(layout_name(layout));
    lua_runner r{*server_, find_case("multi_refusal_debits_nothing"), "del-" + layout_name(layout),
                 layout};
    for (std::int64_t t : {0, 10, 20, 30, 1'000}) r.at(t);
    EXPECT_TRUE(r.view().exists(r.key(0)));
    // t = 1.1 s: `per_second` has refilled to full, `slow` refuses, so nothing is debited and
    // the full bucket is deleted (full == missing), while `slow` keeps its state.
    auto out = r.at(1'100);
    EXPECT_FALSE(out.allowed);
    EXPECT_EQ(out.limits[0].remaining, 10);
    EXPECT_EQ(out.limits[0].reset_ms, 0);
    EXPECT_EQ(out.limits[0].next_ms, 0);
    EXPECT_FALSE(r.view().exists(r.key(0)));
    // `slow` refused and changed nothing: its state of t = 1.0 s stays (0.1 token at 1.1 s).
    EXPECT_EQ(r.view().get(r.key(1)).str, "0 " + std::to_string(epoch_ms + 1'000) + " 1000");
    EXPECT_EQ(same_bucket(r.view().get(r.key(1)).str, {100, epoch_ms + 1'100},
                          r.c.limits[1].params(), epoch_ms + 1'100),
              "");
    // An emptied group hash is gone with its last field.
    if (layout.packed) {
      EXPECT_EQ(server_->command({"EXISTS", r.view().where(r.key(0)).key}).integer, 0);
    }
  }
}

// ---- the hash layout's own rules ----------------------------------------------------------------

// Buckets that share a hash: the hash's expiry is the latest Reset of its fields (raised,
// never lowered), and an idle field is deleted by the sweep of a later field's creation while
// live fields stay.
TEST_F(token_bucket_table, shared_hash_expiry_rises_and_sweep_deletes_only_idle_fields) {
  const test::bucket_view view{*server_, all_in_one_hash};
  auto request = [](const std::string& limit, const std::string& who, std::int64_t period_ms) {
    table_case c;
    c.name = who;
    c.limits.push_back({limit, 1, period_ms, 2});
    return make_request(c, "sweep", 1);
  };
  std::string error;
  // Expiry: a slow bucket (1 per 60 s, burst 2: 60 s to full after one request), then a fast
  // one (1 per 1 s) of the same limit (as after a reload that changed its rate) in the hash.
  const auto slow = request("expiry_limit", "slow", 60'000);
  ASSERT_TRUE(run_lua(*server_, slow, epoch_ms, &error, all_in_one_hash)) << error;
  const std::string expiry_hash = view.where(slow.limits[0].key).key;
  EXPECT_GT(server_->command({"PTTL", expiry_hash}).integer, 59'000);
  ASSERT_TRUE(
      run_lua(*server_, request("expiry_limit", "fast", 1'000), epoch_ms, &error, all_in_one_hash))
      << error;
  EXPECT_GT(server_->command({"PTTL", expiry_hash}).integer, 59'000) << "never lowered";
  EXPECT_EQ(server_->command({"HLEN", expiry_hash}).integer, 2);

  // Sweep: `idle` (1 per 1 s, burst 2) is debited at t = 0 and expires (full again) at
  // t = 1 s; at t = 30 s `live` is debited under a plan's slower rate (1 per 60 s: not full
  // for 60 s, though it would read as full under the others' rate), then new buckets (1 per
  // 1 s) are made one by one. Each creation samples 2 fields: `idle` goes; `live` and every new
  // bucket stay — a field's own expiry stamp decides, not the sampling request's rate.
  const auto idle = request("sweep_limit", "idle", 1'000);
  ASSERT_TRUE(run_lua(*server_, idle, epoch_ms, &error, all_in_one_hash)) << error;
  const std::int64_t later = epoch_ms + 30'000;
  const auto live = request("sweep_limit", "live", 60'000);
  ASSERT_TRUE(run_lua(*server_, live, later, &error, all_in_one_hash)) << error;
  const std::string hash = view.where(idle.limits[0].key).key;
  int created = 0;
  while (created < 40 && view.exists(idle.limits[0].key)) {
    ASSERT_TRUE(run_lua(*server_, request("sweep_limit", "new" + std::to_string(created++), 1'000),
                        later, &error, all_in_one_hash))
        << error;
  }
  EXPECT_FALSE(view.exists(idle.limits[0].key)) << "an idle field is swept";
  EXPECT_TRUE(view.exists(live.limits[0].key));
  for (int i = 0; i < created; ++i)
    EXPECT_TRUE(view.exists(request("sweep_limit", "new" + std::to_string(i), 1'000).limits[0].key))
        << i;
  EXPECT_EQ(server_->command({"HLEN", hash}).integer, created + 1);
  auto again = run_lua(*server_, live, later, &error, all_in_one_hash);
  ASSERT_TRUE(again) << error;
  EXPECT_EQ(again->limits[0].remaining, 0) << "the live bucket kept its balance";
}

// A hash field past its expiry reads as missing (a full bucket) whatever rate and burst the
// reader has — exactly as an expired key does, and as the memory store forgets it — even when
// under the reader's parameters the stored level would still be refilling.
TEST_F(token_bucket_table, expired_field_reads_as_missing_under_new_parameters) {
  table_case before{"expired", {{"grow_limit", 1, 1'000, 10}}, {}};
  table_case after{"expired", {{"grow_limit", 1, 1'000, 20}}, {}};  // burst raised by a reload
  std::int64_t now = epoch_ms;
  store::memory_store mem([&now] { return now; });
  std::string error;
  // 5 of 10 spent: full again (expired) in 5 s.
  const auto spend = make_request(before, "exp", 5);
  mem.decide(spend);
  ASSERT_TRUE(run_lua(*server_, spend, now, &error, packed)) << error;
  // 6 s later, under burst 20: the bucket is gone, so a fresh one: 20 - 1 left.
  now = epoch_ms + 6'000;
  const auto one = make_request(after, "exp", 1);
  const auto m = mem.decide(one);
  const auto l = run_lua(*server_, one, now, &error, packed);
  ASSERT_TRUE(l) << error;
  EXPECT_EQ(m.limits[0].remaining, 19);
  EXPECT_EQ(l->limits[0].remaining, 19);
  // 4 s in, it has not expired: it refills towards the new burst from its stored level.
  table_case again{"again", {{"grow_limit", 1, 1'000, 10}}, {}};
  now = epoch_ms + 100'000;
  mem.decide(make_request(again, "exp", 5));
  ASSERT_TRUE(run_lua(*server_, make_request(again, "exp", 5), now, &error, packed)) << error;
  now += 4'000;
  table_case again_after{"again", {{"grow_limit", 1, 1'000, 20}}, {}};
  const auto m2 = mem.decide(make_request(again_after, "exp", 1));
  const auto l2 = run_lua(*server_, make_request(again_after, "exp", 1), now, &error, packed);
  ASSERT_TRUE(l2) << error;
  EXPECT_EQ(m2.limits[0].remaining, l2->limits[0].remaining);
  EXPECT_EQ(l2->limits[0].remaining, 8);  // 5 + 4 refilled, minus 1
}

// A hash-layout bucket whose group key holds another type (a string left by an operator or
// another layout) replaces it instead of failing the check.
TEST_F(token_bucket_table, group_key_of_another_type_is_replaced) {
  const test::bucket_view view{*server_, packed};
  const auto req = make_request(find_case("c02"), "wrongtype", 1);
  const std::string hash = view.where(req.limits[0].key).key;
  server_->command({"SET", hash, "junk"});
  std::string error;
  auto out = run_lua(*server_, req, epoch_ms, &error, packed);
  ASSERT_TRUE(out) << error;
  EXPECT_TRUE(out->allowed);
  EXPECT_EQ(server_->command({"TYPE", hash}).str, "hash");
  EXPECT_GT(server_->command({"PTTL", hash}).integer, 0);
}

TEST_F(token_bucket_table, script_rejects_bad_arguments) {
  const std::string script(lua::check());
  // A missing field argument, and parameters that are not 48 bytes, are refused.
  auto r = server_->command(
      {"EVAL", script, "1", "k", "-1", "-1", lua::pack_limit(0, 1, 1, 1, 1, false)});
  EXPECT_EQ(r.type, redis_reply::kind::error);
  auto shortp = server_->command({"EVAL", script, "1", "{bad}:k", "-1", "-1", "0 1 1 1 1 0", ""});
  EXPECT_EQ(shortp.type, redis_reply::kind::error);
  // A zero refill, a NaN, and a capacity above 2^53 (2 * 2^52 + 2^52 units), are refused
  // unwritten.
  auto zero = server_->command(
      {"EVAL", script, "1", "{bad}:k", "-1", "-1", lua::pack_limit(0, 0, 1, 1, 1, false), ""});
  EXPECT_EQ(zero.type, redis_reply::kind::error);
  std::string nan = lua::pack_limit(0, 1, 1, 1, 1, false);
  const double q = std::numeric_limits<double>::quiet_NaN();
  std::memcpy(nan.data() + 8, &q, sizeof q);
  auto not_a_number = server_->command({"EVAL", script, "1", "{bad}:k", "-1", "-1", nan, ""});
  EXPECT_EQ(not_a_number.type, redis_reply::kind::error);
  auto huge = server_->command({"EVAL", script, "1", "{bad}:k", "-1", "-1",
                                lua::pack_limit(0, 1, 4503599627370496, 3, 1, false), ""});
  EXPECT_EQ(huge.type, redis_reply::kind::error) << huge.str;
  EXPECT_EQ(server_->command({"EXISTS", "{bad}:k"}).integer, 0);
}

// A check run after its stale bound (the gateway gave up on it) writes nothing and answers
// "STALE ... now <ms>"; before the bound it runs. The bound is on Redis's own clock (TIME),
// whatever time the check is decided at.
TEST_F(token_bucket_table, script_refuses_a_stale_check_unwritten) {
  const auto host_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                           std::chrono::system_clock::now().time_since_epoch())
                           .count();
  for (const auto& layout : {per_key, packed}) {
    check_request req = make_request(find_case("c02"), "stale-" + layout_name(layout), 1);
    req.now_ms_override = epoch_ms + 1'000;
    req.stale_after_ms = host_ms - 10'000;
    std::vector<std::string> argv = {"EVAL", std::string(lua::check())};
    lua::append_check_command(req, layout, argv);
    auto r = server_->command(argv);
    ASSERT_EQ(r.type, redis_reply::kind::error) << r.str;
    EXPECT_EQ(r.str.rfind("STALE sluice check: now ", 0), 0u) << r.str;
    const test::bucket_view view{*server_, layout};
    EXPECT_FALSE(view.exists(req.limits[0].key));
    req.stale_after_ms = host_ms + 60'000;
    argv = {"EVAL", std::string(lua::check())};
    lua::append_check_command(req, layout, argv);
    r = server_->command(argv);
    ASSERT_EQ(r.type, redis_reply::kind::array) << r.str;
    EXPECT_TRUE(view.exists(req.limits[0].key));
  }
}

TEST_F(token_bucket_table, script_uses_redis_time_without_override) {
  check_request req = make_request(find_case("c02"), "time", 1);
  std::vector<std::string> argv = {"EVAL",
                                   std::string(lua::check()),
                                   "1",
                                   req.limits[0].key,
                                   "-1",
                                   "-1",
                                   lua::pack_limit(0, 1, 10000, 2, 1, false),
                                   ""};
  auto r = server_->command(argv);
  ASSERT_EQ(r.type, redis_reply::kind::array);
  const auto host_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                           std::chrono::system_clock::now().time_since_epoch())
                           .count();
  EXPECT_NEAR(static_cast<double>(r.elements[1].integer), static_cast<double>(host_ms), 2'000.0);
  EXPECT_EQ(r.elements[3].integer, 1);  // remaining
}

// ---- token leasing (limit_check::lease and ::refund) -------------------------------------------

// One step of a leasing sequence on one limit: the request's cost, the lease it asks for and
// the tokens it returns, and what the store answers, `granted` included.
struct lease_step {
  std::int64_t t_ms;
  std::int64_t cost, lease, refund;
  expect e;
  std::int64_t granted;
};
struct lease_case {
  std::string name;
  limit_spec limit;
  std::vector<lease_step> steps;
};

const std::vector<lease_case>& lease_table() {
  static const std::vector<lease_case> cases = {
      // 10/10s burst 10 (one token per 1,000 ms; 1 unit per ms, 1,000 units per token): a
      // lease takes as many whole tokens as the bucket holds, up to the lease, never fewer
      // than the cost; an empty bucket refuses and takes nothing.
      {"lease_takes_what_the_bucket_holds",
       {"hot_key", 10, 10'000, 10},
       {{0, 1, 4, 0, {true, 6, 4'000, 0, 1'000}, 4},
        {0, 1, 4, 0, {true, 2, 8'000, 0, 1'000}, 4},
        {0, 1, 4, 0, {true, 0, 10'000, 0, 1'000}, 2},
        {0, 1, 4, 0, {false, 0, 10'000, 1'000, 1'000}, 0},
        // 3 tokens returned 500 ms later: 3.5 tokens, the 3 whole ones leased.
        {500, 1, 4, 3, {true, 0, 9'500, 0, 500}, 3},
        // A refund alone (no lease): the level never goes above the burst, the cost is taken.
        {600, 1, 0, 10, {true, 9, 1'000, 0, 1'000}, 1}}},
      // 1/1s burst 2: returned tokens stay in the bucket even when the request is refused.
      {"refund_kept_by_a_refusal",
       {"hot_key", 1, 1'000, 2},
       {{0, 2, 0, 0, {true, 0, 2'000, 0, 1'000}, 0},
        {100, 2, 0, 1, {false, 1, 900, 900, 900}, 0},
        {200, 1, 0, 0, {true, 0, 1'800, 0, 800}, 0}}},
      // A lease no larger than the cost takes the cost.
      {"lease_of_the_cost",
       {"hot_key", 5, 5'000, 5},
       {{0, 2, 2, 0, {true, 3, 2'000, 0, 1'000}, 2}}},
  };
  return cases;
}

check_request make_lease_request(const lease_case& c, const lease_step& st,
                                 const std::string& prefix) {
  limiter::limit_check lc;
  lc.key = limiter::bucket_key(c.limit.name, limiter::key_namespace::global, prefix + "." + c.name);
  lc.bucket = c.limit.params();
  lc.cost = st.cost;
  lc.lease = st.lease;
  lc.refund = st.refund;
  check_request req;
  req.limits.push_back(lc);
  return req;
}

void expect_lease_step(const lease_case& c, std::size_t s, const std::string& backend,
                       const check_outcome& got) {
  const lease_step& st = c.steps[s];
  SCOPED_TRACE(backend + " " + c.name + " step " + std::to_string(s));
  EXPECT_EQ(got.allowed, st.e.admits);
  ASSERT_EQ(got.limits.size(), 1u);
  const limit_outcome& g = got.limits[0];
  EXPECT_EQ(g.admits, st.e.admits);
  EXPECT_EQ(g.limit, c.limit.burst);
  EXPECT_EQ(g.remaining, st.e.remaining);
  EXPECT_EQ(g.reset_ms, st.e.reset_ms);
  EXPECT_EQ(g.retry_after_ms, st.e.retry_after_ms);
  EXPECT_EQ(g.next_ms, st.e.next_ms);
  // A step that asks for no lease and returns nothing is the plain 48-byte form: no granted.
  if (st.lease > 0 || st.refund > 0) {
    EXPECT_EQ(g.granted, st.granted);
  } else {
    EXPECT_EQ(g.granted, 0);
  }
}

TEST_F(token_bucket_table, leases_on_every_store) {
  for (const auto& c : lease_table()) {
    std::int64_t now = 0;
    store::memory_store mem([&now] { return now; });
    for (std::size_t s = 0; s < c.steps.size(); ++s) {
      now = epoch_ms + c.steps[s].t_ms;
      expect_lease_step(c, s, "memory", mem.decide(make_lease_request(c, c.steps[s], "lmem")));
    }
  }
  for (const auto& layout : {per_key, packed, all_in_one_hash}) {
    const std::string name = "lease-lua-" + layout_name(layout);
    for (const auto& c : lease_table()) {
      for (std::size_t s = 0; s < c.steps.size(); ++s) {
        std::string error;
        auto got = run_lua(*server_, make_lease_request(c, c.steps[s], name),
                           epoch_ms + c.steps[s].t_ms, &error, layout);
        ASSERT_TRUE(got) << c.name << " step " << s << ": " << error;
        expect_lease_step(c, s, name, *got);
      }
    }
  }
  for (const auto& layout : {per_key, packed}) {
    boost::asio::io_context ioc;
    store::redis_settings settings;
    settings.port = server_->port();
    settings.command_timeout = std::chrono::milliseconds(1000);
    settings.layout = layout;
    store::redis_store rs(ioc.get_executor(), settings);
    rs.start();
    ASSERT_TRUE(run(ioc, wait_connected(rs)));
    const std::string name = "lease-rs-" + layout_name(layout);
    for (const auto& c : lease_table()) {
      for (std::size_t s = 0; s < c.steps.size(); ++s) {
        check_request req = make_lease_request(c, c.steps[s], name);
        req.now_ms_override = epoch_ms + c.steps[s].t_ms;
        auto got = run(ioc, rs.check(req));
        ASSERT_TRUE(got.has_value()) << c.name << " step " << s << ": " << got.error().message();
        expect_lease_step(c, s, name, *got);
      }
    }
    rs.stop();
  }
}

// A lease or a refund on a window limit, or one above the burst, is a bad argument: an error
// reply before anything is written.
TEST_F(token_bucket_table, script_rejects_bad_leases) {
  limiter::limit_check lc;
  lc.key = limiter::bucket_key("bad_lease", limiter::key_namespace::global, "x");
  lc.bucket = limit_spec{"bad_lease", 5, 5'000, 5}.params();
  for (const auto& [lease, refund] :
       {std::pair<std::int64_t, std::int64_t>{6, 0}, {0, 6}, {-1, 0}}) {
    std::vector<std::string> argv = {
        "EVAL",
        std::string(lua::check()),
        "1",
        lc.key,
        "-1",
        "-1",
        lua::pack_leased_limit(1, 1'000, 5, 1, false, false, lease, refund),
        ""};
    const auto r = server_->command(argv);
    EXPECT_EQ(r.type, redis_reply::kind::error) << lease << " " << refund;
    EXPECT_NE(r.str.find("bad lease"), std::string::npos) << r.str;
  }
  std::string window = lua::pack_limit(1, 1'000, 5, 0, 1, false);
  const double extra[2] = {2.0, 0.0};
  window.append(reinterpret_cast<const char*>(extra), sizeof extra);
  const auto r =
      server_->command({"EVAL", std::string(lua::check()), "1", lc.key, "-1", "-1", window, ""});
  EXPECT_EQ(r.type, redis_reply::kind::error);
  EXPECT_NE(r.str.find("a lease needs a token bucket"), std::string::npos) << r.str;
  EXPECT_EQ(server_->command({"EXISTS", lc.key}).integer, 0);
}

}  // namespace
}  // namespace sluice
