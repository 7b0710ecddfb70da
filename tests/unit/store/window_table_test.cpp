// SPDX-License-Identifier: Apache-2.0
// sluice-test-support: redis_server
#include "sluice/limiter/token_bucket.hpp"
#include "sluice/limiter/window.hpp"

#include "sluice/store/lua_scripts.hpp"
#include "sluice/store/memory_store.hpp"
#include "support/bucket_view.hpp"
#include "support/redis_server.hpp"
#include "support/store_time.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <optional>
#include <random>
#include <string>
#include <vector>

// One table of cases per window algorithm (fixed window, sliding window counter, sliding log),
// and mixes of every algorithm in one check, decided by the memory store and by the check
// script run directly on a real redis-server: both must give the same outcomes, to the unit
// and to the millisecond, and keep the same stored state. A randomised run then holds both to
// each other and to the header promises (Remaining, Reset, Retry-After, next).

namespace sluice {
namespace {

using test::all_in_one_hash;
using test::layout_name;
using test::packed;
using test::per_key;

using config::algorithm;
using limiter::bucket_params;
using limiter::check_outcome;
using limiter::check_request;
using limiter::limit_outcome;
using test::redis_reply;

struct limit_spec {
  std::string name;
  algorithm algo;
  std::int64_t n;          // units per period (window limit; token-bucket rate)
  std::int64_t period_ms;  // window length; token-bucket period
  std::int64_t burst = 0;  // token bucket only
  bool shadow = false;

  bucket_params params() const {
    config::limit_params p;
    p.rate.count = n;
    p.rate.period = std::chrono::milliseconds(period_ms);
    p.burst = burst;
    return bucket_params::from(p);
  }
  std::int64_t quota() const { return params().quota(algo); }
};

struct expect {
  bool admits;
  std::int64_t remaining;
  std::int64_t reset_ms;
  std::int64_t retry_after_ms;
  std::int64_t next_ms;
};

struct step {
  std::int64_t t_ms;  // store time since the case's (window-aligned) epoch
  std::int64_t cost;
  bool allowed;
  std::vector<expect> limits;
};

struct table_case {
  std::string name;
  std::vector<limit_spec> limits;
  std::vector<step> steps;
};

// 2023-11-14T22:14:00Z: a multiple of 60 s (so of 1 s and 10 s too): t is a window offset.
constexpr std::int64_t epoch_ms = 1'700'000'040'000;
constexpr auto fw = algorithm::fixed_window;
constexpr auto sw = algorithm::sliding_window;
constexpr auto sl = algorithm::sliding_log;
constexpr auto tb = algorithm::token_bucket;

const std::vector<table_case>& table() {
  static const std::vector<table_case> cases = {
      // c01, fixed-window main table: 5/1m at offsets 5.2 .. 5.7 s, then the next window.
      {"c01_fw",
       {{"items_key", fw, 5, 60'000}},
       {{5'200, 1, true, {{true, 4, 54'800, 0, 54'800}}},
        {5'300, 1, true, {{true, 3, 54'700, 0, 54'700}}},
        {5'400, 1, true, {{true, 2, 54'600, 0, 54'600}}},
        {5'500, 1, true, {{true, 1, 54'500, 0, 54'500}}},
        {5'600, 1, true, {{true, 0, 54'400, 0, 54'400}}},
        {5'700, 1, false, {{false, 0, 54'300, 54'300, 54'300}}},
        {59'999, 1, false, {{false, 0, 1, 1, 1}}},
        {60'000, 1, true, {{true, 4, 60'000, 0, 60'000}}}}},
      // c07, fixed-window variant: 3/10s.
      {"c07_fw",
       {{"items_key", fw, 3, 10'000}},
       {{0, 1, true, {{true, 2, 10'000, 0, 10'000}}},
        {100, 1, true, {{true, 1, 9'900, 0, 9'900}}},
        {200, 1, true, {{true, 0, 9'800, 0, 9'800}}},
        {300, 1, false, {{false, 0, 9'700, 9'700, 9'700}}},
        {10'000, 1, true, {{true, 2, 10'000, 0, 10'000}}}}},
      // Costs: a refused cost of 3 debits nothing; a cost of 2 still fits.
      {"fw_costs",
       {{"k", fw, 5, 60'000}},
       {{0, 3, true, {{true, 2, 60'000, 0, 60'000}}},
        {10, 3, false, {{false, 2, 59'990, 59'990, 59'990}}},
        {20, 2, true, {{true, 0, 59'980, 0, 59'980}}}}},
      // The clock stepped back into an earlier window: no time elapses (the stored window
      // stays current, read at its start).
      {"fw_clock_stepped_back",
       {{"k", fw, 3, 10'000}},
       {{15'000, 1, true, {{true, 2, 5'000, 0, 5'000}}},
        {5'000, 1, true, {{true, 1, 10'000, 0, 10'000}}}}},
      // c09, sliding counter 3/1m: three at offset 10 s, a fourth refused with
      // Retry-After ceil(80 − 10.3) = 70 s; then the previous window's 3 decay.
      {"c09_sw",
       {{"cluster_sw", sw, 3, 60'000}},
       {{10'000, 1, true, {{true, 2, 110'000, 0, 110'000}}},
        {10'100, 1, true, {{true, 1, 109'900, 0, 79'900}}},
        {10'200, 1, true, {{true, 0, 109'800, 0, 69'800}}},
        {10'300, 1, false, {{false, 0, 109'700, 69'700, 69'700}}},
        {70'000, 1, false, {{false, 0, 50'000, 10'000, 10'000}}},
        {80'000, 1, true, {{true, 0, 100'000, 0, 20'000}}},
        // Two windows later nothing counts.
        {200'000, 1, true, {{true, 2, 100'000, 0, 100'000}}}}},
      // Sliding counter with costs: 10/1s; 6 in window 0, then at offset 500 of window 1 the
      // estimate is 6·0.5 = 3, so 7 fit and 8 do not.
      {"sw_costs",
       {{"k", sw, 10, 1'000}},
       {{0, 6, true, {{true, 4, 2'000, 0, 1'167}}},
        {1'500, 8, false, {{false, 7, 500, 167, 167}}},
        {1'500, 7, true, {{true, 0, 1'500, 0, 167}}}}},
      // Sliding log 3/10s: exact over the rolling window.
      {"sl_basic",
       {{"k", sl, 3, 10'000}},
       {{0, 1, true, {{true, 2, 10'000, 0, 10'000}}},
        {1'000, 1, true, {{true, 1, 10'000, 0, 9'000}}},
        {2'000, 1, true, {{true, 0, 10'000, 0, 8'000}}},
        {3'000, 1, false, {{false, 0, 9'000, 7'000, 7'000}}},
        {10'000, 1, true, {{true, 0, 10'000, 0, 1'000}}},
        {10'500, 1, false, {{false, 0, 9'500, 500, 500}}},
        {11'000, 1, true, {{true, 0, 10'000, 0, 1'000}}}}},
      // Sliding log with costs: one stamp per unit.
      {"sl_costs",
       {{"k", sl, 5, 1'000}},
       {{0, 3, true, {{true, 2, 1'000, 0, 1'000}}},
        {500, 3, false, {{false, 2, 500, 500, 500}}},
        {1'000, 3, true, {{true, 2, 1'000, 0, 1'000}}}}},
      // Every algorithm in one check: when the fixed window refuses, nothing is debited
      // anywhere (the token bucket's key is even deleted: it is full again).
      {"mixed_all_or_nothing",
       {{"tb", tb, 10, 1'000, 10}, {"fw", fw, 2, 1'000}, {"sl", sl, 3, 1'000}},
       {{0,
         1,
         true,
         {{true, 9, 100, 0, 100}, {true, 1, 1'000, 0, 1'000}, {true, 2, 1'000, 0, 1'000}}},
        {100, 1, true, {{true, 9, 100, 0, 100}, {true, 0, 900, 0, 900}, {true, 1, 1'000, 0, 900}}},
        {200, 1, false, {{true, 10, 0, 0, 0}, {false, 0, 800, 800, 800}, {true, 1, 900, 0, 800}}},
        {1'000,
         1,
         true,
         {{true, 9, 100, 0, 100}, {true, 1, 1'000, 0, 1'000}, {true, 1, 1'000, 0, 100}}}}},
      // A shadow window limit is evaluated alone and never refuses the request.
      {"shadow_window",
       {{"enforced", fw, 5, 1'000}, {"shadow", sl, 1, 1'000, 0, true}},
       {{0, 1, true, {{true, 4, 1'000, 0, 1'000}, {true, 0, 1'000, 0, 1'000}}},
        {100, 1, true, {{true, 3, 900, 0, 900}, {false, 0, 900, 900, 900}}}}},
  };
  return cases;
}

check_request make_request(const table_case& c, const std::string& prefix, std::int64_t cost) {
  check_request req;
  for (const auto& l : c.limits) {
    limiter::limit_check lc;
    lc.key = limiter::bucket_key(l.name, limiter::key_namespace::global, prefix + "." + c.name);
    lc.algorithm = l.algo;
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

// The outcome in the script's reply `r` to check_eval(req, ...).
std::optional<check_outcome> read_outcome(const redis_reply& r, const check_request& req,
                                          std::string* error) {
  if (r.type != redis_reply::kind::array || r.elements.size() != 2 + 5 * req.limits.size()) {
    *error = "unexpected reply: " + r.str;
    return std::nullopt;
  }
  check_outcome out;
  out.allowed = r.elements[0].integer == 1;
  for (std::size_t i = 0; i < req.limits.size(); ++i) {
    const auto* e = &r.elements[2 + 5 * i];
    limit_outcome lo;
    lo.admits = e[0].integer == 1;
    lo.limit = req.limits[i].bucket.quota(req.limits[i].algorithm);
    lo.remaining = e[1].integer;
    lo.reset_ms = e[2].integer;
    lo.retry_after_ms = e[3].integer;
    lo.next_ms = e[4].integer;
    out.limits.push_back(lo);
  }
  return out;
}

std::optional<check_outcome> run_lua(test::redis_server& server, const check_request& req,
                                     std::int64_t now_ms, std::string* error,
                                     const lua::key_layout& layout) {
  return read_outcome(server.command(check_eval(req, now_ms, layout)), req, error);
}

// The command reading the stored state of `key` (LRANGE of a sliding log, never packed).
std::vector<std::string> state_read(const test::bucket_view& view, const std::string& key,
                                    algorithm a) {
  if (a == sl) return {"LRANGE", key, "0", "-1"};
  return view.read_command(key);
}

// A reply of state_read() in the memory store's peek_state format.
std::optional<std::string> state_of(const test::bucket_view& view, const redis_reply& r,
                                    const std::string& key, algorithm a) {
  if (a == sl) {
    if (r.elements.empty()) return std::nullopt;
    std::string out;
    for (const auto& e : r.elements) out += (out.empty() ? "" : ",") + e.str;
    return out;
  }
  auto d = view.decode(r, key, a == algorithm::token_bucket ? 0 : ':');
  if (d.type == redis_reply::kind::nil) return std::nullopt;
  return d.str;
}

// The stored state in the memory store's peek_state format.
std::optional<std::string> redis_state(test::redis_server& server, const std::string& key,
                                       algorithm a, const lua::key_layout& layout) {
  const test::bucket_view view{server, layout};
  return state_of(view, server.command(state_read(view, key, a)), key, a);
}

// Whether two token-bucket states "<level> <stamp> <units per token>" are the same bucket: the
// same level at `now`, neither stamped after it (the level refills linearly to the capacity,
// so they then agree at every later time).
bool same_token_bucket(const std::string& x, const std::string& y, const bucket_params& p,
                       std::int64_t now) {
  long long l1 = 0, s1 = 0, u1 = 0, l2 = 0, s2 = 0, u2 = 0;
  if (std::sscanf(x.c_str(), "%lld %lld %lld", &l1, &s1, &u1) != 3 ||
      std::sscanf(y.c_str(), "%lld %lld %lld", &l2, &s2, &u2) != 3 || u1 != u2) {
    return false;
  }
  const limiter::bucket_state a{l1, s1, u1}, b{l2, s2, u2};
  return s1 <= now && s2 <= now &&
         limiter::refilled_level(&a, p, now) == limiter::refilled_level(&b, p, now);
}

// Copies a memory-store state into redis (with a TTL of a day): Redis expires keys in real
// time, while the simulated clock of these tests runs much faster.
void seed_redis(test::redis_server& server, const std::string& key,
                const std::optional<std::string>& state, algorithm a, const lua::key_layout& layout,
                std::int64_t now) {
  if (a != sl) {
    const test::bucket_view view{server, layout};
    view.del(key);
    if (state) view.set(key, *state, 86'400'000, now);
    return;
  }
  server.command({"DEL", key});
  if (!state) return;
  std::vector<std::string> argv = {"RPUSH", key};
  std::string::size_type pos = 0;
  while (pos <= state->size()) {
    auto comma = state->find(',', pos);
    if (comma == std::string::npos) comma = state->size();
    argv.push_back(state->substr(pos, comma - pos));
    pos = comma + 1;
  }
  server.command(argv);
}

class window_table : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { server_ = new test::redis_server(); }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }
  static test::redis_server* server_;
};
test::redis_server* window_table::server_ = nullptr;

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
    EXPECT_EQ(g.limit, c.limits[i].quota());
    EXPECT_EQ(g.remaining, e.remaining);
    EXPECT_EQ(g.reset_ms, e.reset_ms);
    EXPECT_EQ(g.retry_after_ms, e.retry_after_ms);
    EXPECT_EQ(g.next_ms, e.next_ms);
  }
}

TEST_F(window_table, memory_store) {
  for (const auto& c : table()) {
    std::int64_t now = 0;
    store::memory_store mem([&now] { return now; });
    for (std::size_t s = 0; s < c.steps.size(); ++s) {
      now = epoch_ms + c.steps[s].t_ms;
      expect_step(c, s, "memory", mem.decide(make_request(c, "mem", c.steps[s].cost)));
    }
  }
}

TEST_F(window_table, lua_script) {
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

// Peek (GET /admin/explain): before every step the same request is decided with `peek` set,
// twice: each answers exactly the step's expected outcome, and the step itself still does —
// so a peek writes nothing, on every store and layout; and the stored state of every limit
// (memory: peek_state; Redis: DUMP and PTTL of the key holding it) is the same after the
// peeks as before them.
TEST_F(window_table, peek_decides_as_the_step_and_writes_nothing) {
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
          for (const auto& l : req.limits) out.push_back(view.snapshot(l.key, l.algorithm == sl));
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

// One clock: each step's state is read in the transaction that ran the script, and the keys
// expire at the store time the script armed them for (test::store_time_keys), never on
// Redis's own clock.
TEST_F(window_table, stored_state_matches) {
  for (const auto& layout : {per_key, packed}) {
    const std::string name = "same-" + layout_name(layout);
    const test::bucket_view view{*server_, layout};
    for (const auto& c : table()) {
      std::int64_t now = 0;
      store::memory_store mem([&now] { return now; });
      test::store_time_keys keys(*server_);
      for (std::size_t s = 0; s < c.steps.size(); ++s) {
        SCOPED_TRACE(c.name + " step " + std::to_string(s));
        now = epoch_ms + c.steps[s].t_ms;
        const auto req = make_request(c, name, c.steps[s].cost);
        mem.decide(req);
        std::vector<std::vector<std::string>> reads;
        std::vector<std::string> armed;
        for (const auto& l : req.limits) {
          reads.push_back(state_read(view, l.key, l.algorithm));
          const bool log = l.algorithm == sl;
          armed.push_back(view.where(l.key, log).key);
        }
        // (A hash field expires by its own store-time stamp; a key — a sliding log is one
        // under either layout — by store_time_keys.)
        keys.expire_until(now);
        const auto replies = keys.step(check_eval(req, now, layout), reads, armed);
        ASSERT_EQ(replies.size(), 1 + reads.size()) << replies.front().str;
        std::string error;
        const auto got = read_outcome(replies[0], req, &error);
        ASSERT_TRUE(got) << error;
        for (std::size_t i = 0; i < req.limits.size(); ++i) {
          const auto& l = req.limits[i];
          EXPECT_EQ(mem.peek_state(l.key), state_of(view, replies[1 + i], l.key, l.algorithm))
              << l.key;
          if (!layout.packed || l.algorithm == sl)
            keys.armed(armed[i], now, got->limits[i].reset_ms);
        }
      }
    }
  }
}

// c07 for every window algorithm: a key found without a TTL is re-armed by the next call (a
// refusal too), to at most its Reset; a fixed window's key is gone after its window.
TEST_F(window_table, persisted_keys_are_re_armed) {
  for (const auto& layout : {per_key, packed}) {
    for (auto a : {fw, sw, sl}) {
      SCOPED_TRACE(layout_name(layout));
      table_case c{"persist" + std::to_string(static_cast<int>(a)), {{"k", a, 2, 10'000}}, {}};
      const auto req = make_request(c, "ttl-" + layout_name(layout), 1);
      // The key holding the bucket: its own, or its group hash (never for the sliding log).
      const std::string key =
          test::bucket_view{*server_, layout}.where(req.limits[0].key, a == sl).key;
      std::string error;
      // The start of a 10 s window, so that every Reset here is about a whole window and the
      // key cannot expire between the call and the PTTL however slow the machine (a time
      // late in a window left a Reset of a few milliseconds: the key was gone, PTTL -2).
      const auto wall_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                               std::chrono::system_clock::now().time_since_epoch())
                               .count();
      const auto host_ms = wall_ms - wall_ms % 10'000;
      ASSERT_TRUE(run_lua(*server_, req, host_ms, &error, layout)) << error;
      ASSERT_EQ(server_->command({"PERSIST", key}).integer, 1);
      ASSERT_EQ(server_->command({"PTTL", key}).integer, -1);
      auto second = run_lua(*server_, req, host_ms + 10, &error, layout);
      ASSERT_TRUE(second) << error;
      auto third = run_lua(*server_, req, host_ms + 20, &error, layout);  // refused: 2 per window
      ASSERT_TRUE(third);
      EXPECT_FALSE(third->allowed);
      const auto pttl = server_->command({"PTTL", key}).integer;
      EXPECT_GT(pttl, 0) << key;
      // A write arms a key to its Reset; a refusal that changes nothing only makes sure it is
      // not below: the largest armed. A hash's expiry is never lowered and is raised with
      // slack (at most 0.5 s).
      const auto largest = std::max(second->limits[0].reset_ms, third->limits[0].reset_ms);
      const auto armed = a == sl         ? third->limits[0].reset_ms
                         : layout.packed ? largest + 500
                                         : largest;
      EXPECT_LE(pttl, armed) << key;
    }
  }
}

// A key left by another algorithm (a limit whose algorithm changed on reload) reads as empty
// and is replaced, never a script error.
TEST_F(window_table, key_of_another_type_is_replaced) {
  server_->command({"RPUSH", "{type}:k", "1"});
  table_case c{"type", {{"k", fw, 2, 10'000}}, {}};
  auto req = make_request(c, "x", 1);
  req.limits[0].key = "{type}:k";
  std::string error;
  auto got = run_lua(*server_, req, epoch_ms, &error, per_key);
  ASSERT_TRUE(got) << error;
  EXPECT_EQ(got->limits[0].remaining, 1);
  server_->command({"SET", "{type}:l", "5 7"});
  req.limits[0].algorithm = sl;
  req.limits[0].key = "{type}:l";
  got = run_lua(*server_, req, epoch_ms, &error, per_key);
  ASSERT_TRUE(got) << error;
  EXPECT_EQ(got->limits[0].remaining, 1);
}

TEST_F(window_table, script_rejects_bad_window_arguments) {
  const std::string s(lua::check());
  // Window 0 ms, limit 0, unknown algorithm, N·P above 2^53 for the sliding counter.
  for (const std::string& params :
       {lua::pack_limit(1, 0, 5, 0, 1, false), lua::pack_limit(1, 1000, 0, 0, 1, false),
        lua::pack_limit(9, 1000, 5, 0, 1, false),
        lua::pack_limit(2, 86400000, 200000000, 0, 1, false)}) {
    auto r = server_->command({"EVAL", s, "1", "{bad}:w", "-1", "-1", params, ""});
    EXPECT_EQ(r.type, redis_reply::kind::error);
  }
  EXPECT_EQ(server_->command({"EXISTS", "{bad}:w"}).integer, 0);
}

// Randomised differential run over every algorithm, mixed in one check, with random windows,
// limits, costs, shadow flags and time steps (some back): the memory store and the script
// agree on every outcome and every stored state; on forward steps every outcome keeps its
// promises, probed on a replay of the same history: Remaining n admits exactly n more units
// at once; Retry-After admits the cost and 1 ms earlier does not; next admits Remaining + 1;
// Reset admits the whole Limit and 1 ms earlier does not.
TEST_F(window_table, random_sequences_agree_and_keep_promises) {
  std::mt19937_64 rng(20261201);
  auto pick = [&rng](std::int64_t lo, std::int64_t hi) {
    return std::uniform_int_distribution<std::int64_t>(lo, hi)(rng);
  };
  for (int round = 0; round < 30; ++round) {
    // Rounds alternate: a key per bucket, packed into hashes, all of a limit in one hash.
    const lua::key_layout layout = round % 3 == 0   ? per_key
                                   : round % 3 == 1 ? packed
                                                    : all_in_one_hash;
    table_case c;
    c.name = "rnd" + std::to_string(round);
    const auto n_limits = pick(1, 3);
    const algorithm algos[] = {tb, fw, sw, sl};
    for (std::int64_t i = 0; i < n_limits; ++i) {
      limit_spec l{"l" + std::to_string(i), algos[pick(0, 3)], pick(1, 12), 0, 0,
                   i > 0 && pick(0, 3) == 0};
      const std::int64_t periods[] = {1, 7, 100, 1'000, 60'000};
      l.period_ms = periods[pick(0, 4)];
      if (l.algo == tb) l.burst = pick(1, 12);
      c.limits.push_back(l);
    }
    std::int64_t min_quota = c.limits[0].quota();
    for (const auto& l : c.limits) min_quota = std::min(min_quota, l.quota());

    std::vector<std::pair<std::int64_t, check_request>> history;
    std::int64_t now = epoch_ms + pick(0, 60'000);
    std::int64_t high = now;
    store::memory_store mem([&now] { return now; });
    for (int s = 0; s < 20; ++s) {
      const int kind = static_cast<int>(pick(0, 9));
      now += kind == 0 ? -pick(0, 2'000) : kind < 4 ? 0 : pick(0, kind < 8 ? 50 : 70'000);
      const bool forward = now >= high;
      high = std::max(high, now);
      const auto req = make_request(c, "rnd", pick(1, min_quota));
      for (const auto& lc : req.limits)
        seed_redis(*server_, lc.key, mem.peek_state(lc.key), lc.algorithm, layout, now);
      const auto m = mem.decide(req);
      history.emplace_back(now, req);
      std::string error;
      const auto l = run_lua(*server_, req, now, &error, layout);
      ASSERT_TRUE(l) << error;
      SCOPED_TRACE(c.name + " step " + std::to_string(s) + " " + layout_name(layout));
      ASSERT_EQ(m.allowed, l->allowed);
      for (std::size_t i = 0; i < req.limits.size(); ++i) {
        const auto& a = m.limits[i];
        const auto& b = l->limits[i];
        SCOPED_TRACE("limit " + std::to_string(i) + " algo " +
                     std::to_string(static_cast<int>(req.limits[i].algorithm)));
        ASSERT_EQ(a.admits, b.admits);
        ASSERT_EQ(a.remaining, b.remaining);
        ASSERT_EQ(a.reset_ms, b.reset_ms);
        ASSERT_EQ(a.retry_after_ms, b.retry_after_ms);
        ASSERT_EQ(a.next_ms, b.next_ms);
        const auto stored =
            redis_state(*server_, req.limits[i].key, req.limits[i].algorithm, layout);
        if (stored && req.limits[i].algorithm == algorithm::token_bucket) {
          // A refusal that changes a bucket writes nothing, where the memory store rewrites it
          // stamped now: the same bucket when both give the same level now and after.
          EXPECT_TRUE(same_token_bucket(*stored, mem.peek_state(req.limits[i].key).value_or(""),
                                        req.limits[i].bucket, now))
              << *stored << " vs " << mem.peek_state(req.limits[i].key).value_or("-");
        } else if (stored) {
          EXPECT_EQ(mem.peek_state(req.limits[i].key), stored);
        } else {
          // Redis expires in real time: only a key with a tiny TTL may be gone already.
          EXPECT_LE(a.reset_ms, 100) << mem.peek_state(req.limits[i].key).value_or("-");
        }
        if (!forward) continue;

        // Promises, probed alone on a replayed store with no traffic after this step.
        auto probe = [&](std::int64_t at, std::int64_t cost) {
          std::int64_t t = 0;
          store::memory_store replay([&t] { return t; });
          for (const auto& [when, r] : history) {
            t = when;
            replay.decide(r);
          }
          t = at;
          check_request one;
          one.limits.push_back(req.limits[i]);
          one.limits[0].cost = cost;
          one.limits[0].shadow = false;
          return replay.decide(one).allowed;
        };
        const std::int64_t quota = c.limits[i].quota();
        const std::int64_t cost = req.limits[i].cost;
        if (!a.admits) {
          EXPECT_TRUE(probe(now + a.retry_after_ms, cost));
          EXPECT_FALSE(probe(now + a.retry_after_ms - 1, cost));
        }
        if (a.remaining > 0) {
          EXPECT_TRUE(probe(now, a.remaining));
        }
        if (a.remaining < quota) {
          EXPECT_FALSE(probe(now, a.remaining + 1));
          EXPECT_GT(a.next_ms, 0);
          EXPECT_TRUE(probe(now + a.next_ms, a.remaining + 1));
          EXPECT_FALSE(probe(now + a.next_ms - 1, a.remaining + 1));
        } else {
          EXPECT_EQ(a.next_ms, 0);
        }
        EXPECT_TRUE(probe(now + a.reset_ms, quota));
        if (a.reset_ms > 0) {
          EXPECT_FALSE(probe(now + a.reset_ms - 1, quota));
        }
      }
    }
  }
}

}  // namespace
}  // namespace sluice
