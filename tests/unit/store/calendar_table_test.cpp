// SPDX-License-Identifier: Apache-2.0
// sluice-test-support: redis_cluster redis_server
#include "sluice/limiter/calendar.hpp"

#include "sluice/errc.hpp"
#include "sluice/limiter/decision.hpp"
#include "sluice/limiter/keys.hpp"
#include "sluice/store/lua_scripts.hpp"
#include "sluice/store/memory_store.hpp"
#include "sluice/store/redis_cluster_store.hpp"
#include "sluice/store/redis_store.hpp"
#include "support/bucket_view.hpp"
#include "support/redis_cluster.hpp"
#include "support/redis_server.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>

#include <gtest/gtest.h>

#include <ctime>
#include <optional>
#include <string>
#include <vector>

// Calendar quotas (algorithm calendar): one table of cases decided by the memory store, by the
// check script run directly on a real redis-server (every key layout), by the Redis store and
// by the cluster store on a real three-master Redis Cluster; every store must give the same
// outcome to the unit and the millisecond. The expected instants are written as civil UTC
// times and converted by the C library's timegm(), not by the code under test.

namespace sluice {
namespace {

namespace asio = boost::asio;
using config::algorithm;
using config::calendar_unit;
using limiter::bucket_params;
using limiter::check_outcome;
using limiter::check_request;
using limiter::limit_outcome;
using test::redis_reply;

/// Store time (ms since the Unix epoch) of the UTC civil time y-mo-d h:mi:s.ms.
std::int64_t utc(int y, int mo, int d, int h = 0, int mi = 0, int s = 0, int ms = 0) {
  std::tm t{};
  t.tm_year = y - 1900;
  t.tm_mon = mo - 1;
  t.tm_mday = d;
  t.tm_hour = h;
  t.tm_min = mi;
  t.tm_sec = s;
  return static_cast<std::int64_t>(::timegm(&t)) * 1000 + ms;
}

constexpr std::int64_t day_ms = 86'400'000;
constexpr std::int64_t hour_ms = 3'600'000;

struct limit_spec {
  std::string name;
  algorithm algo;
  std::int64_t n;
  calendar_unit unit = calendar_unit::none;  // calendar
  std::int32_t offset = 0;                   // calendar: minutes east of UTC
  std::int64_t period_ms = 1000;             // token bucket

  bucket_params params() const {
    config::limit_params p;
    p.rate.count = n;
    p.rate.period = std::chrono::milliseconds(unit == calendar_unit::none
                                                  ? period_ms
                                                  : day_ms * (unit == calendar_unit::day    ? 1
                                                              : unit == calendar_unit::week ? 7
                                                                                            : 31));
    p.rate.unit = unit;
    p.rate.utc_offset_minutes = offset;
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
  std::int64_t at_ms;  // store time
  std::int64_t cost;
  bool allowed;
  std::vector<expect> limits;
};

struct table_case {
  std::string name;
  std::vector<limit_spec> limits;
  std::vector<step> steps;
};

constexpr auto cal = algorithm::calendar;
constexpr auto month = calendar_unit::month;
constexpr auto week = calendar_unit::week;
constexpr auto day = calendar_unit::day;

const std::vector<table_case>& table() {
  static const std::vector<table_case> cases = {
      // The last second of January and the first of February: the count resets at
      // Feb 1 00:00:00.000 exactly, and February is 28 days long in 2027. (A state that a
      // later step reads is written seconds of store time before its boundary: Redis expires
      // keys in real time, at the state's Reset, while these steps run on an overridden clock.)
      {"month_end_jan_feb",
       {{"monthly", cal, 3, month}},
       {{utc(2027, 1, 31, 23, 59, 50), 1, true, {{true, 2, 10'000, 0, 10'000}}},
        {utc(2027, 1, 31, 23, 59, 55), 2, true, {{true, 0, 5'000, 0, 5'000}}},
        {utc(2027, 1, 31, 23, 59, 59, 999), 1, false, {{false, 0, 1, 1, 1}}},
        {utc(2027, 2, 1), 1, true, {{true, 2, 28 * day_ms, 0, 28 * day_ms}}},
        {utc(2027, 2, 1, 0, 0, 0, 1), 2, true, {{true, 0, 28 * day_ms - 1, 0, 28 * day_ms - 1}}},
        {utc(2027, 2, 14), 1, false, {{false, 0, 15 * day_ms, 15 * day_ms, 15 * day_ms}}}}},
      // February of a leap year (2028) has a 29th; 2000 is leap (divisible by 400), 2100 is
      // not (by 100 only), and 2027 is not.
      {"february_2028_leap",
       {{"monthly", cal, 2, month}},
       {{utc(2028, 2, 28, 12), 1, true, {{true, 1, 36 * hour_ms, 0, 36 * hour_ms}}},
        {utc(2028, 2, 29, 23, 59, 59, 999), 1, true, {{true, 0, 1, 0, 1}}},
        {utc(2028, 3, 1), 1, true, {{true, 1, 31 * day_ms, 0, 31 * day_ms}}}}},
      {"february_2027_not_leap",
       {{"monthly", cal, 2, month}},
       {{utc(2027, 2, 28, 12), 1, true, {{true, 1, 12 * hour_ms, 0, 12 * hour_ms}}},
        {utc(2027, 3, 1), 1, true, {{true, 1, 31 * day_ms, 0, 31 * day_ms}}}}},
      {"february_2100_not_leap",
       {{"monthly", cal, 2, month}},
       {{utc(2100, 2, 28, 23), 1, true, {{true, 1, hour_ms, 0, hour_ms}}},
        {utc(2100, 3, 1), 1, true, {{true, 1, 31 * day_ms, 0, 31 * day_ms}}}}},
      {"february_2000_leap",
       {{"monthly", cal, 2, month}},
       {{utc(2000, 2, 28, 23), 1, true, {{true, 1, 25 * hour_ms, 0, 25 * hour_ms}}},
        {utc(2000, 2, 29, 12), 1, true, {{true, 0, 12 * hour_ms, 0, 12 * hour_ms}}},
        {utc(2000, 2, 29, 13), 1, false, {{false, 0, 11 * hour_ms, 11 * hour_ms, 11 * hour_ms}}}}},
      // Dec 31 -> Jan 1: a daily and a monthly quota in one check, both reset at midnight.
      {"new_year",
       {{"daily", cal, 1, day}, {"monthly", cal, 5, month}},
       {{utc(2026, 12, 31, 23, 59, 55),
         1,
         true,
         {{true, 0, 5'000, 0, 5'000}, {true, 4, 5'000, 0, 5'000}}},
        {utc(2026, 12, 31, 23, 59, 59, 999), 1, false, {{false, 0, 1, 1, 1}, {true, 4, 1, 0, 1}}},
        {utc(2027, 1, 1),
         1,
         true,
         {{true, 0, day_ms, 0, day_ms}, {true, 4, 31 * day_ms, 0, 31 * day_ms}}}}},
      // ISO weeks: Sunday 2027-01-03 ends a week, Monday 2027-01-04 00:00 starts the next.
      {"week_sunday_to_monday",
       {{"weekly", cal, 2, week}},
       {{utc(2027, 1, 3, 23, 59, 50), 1, true, {{true, 1, 10'000, 0, 10'000}}},
        {utc(2027, 1, 3, 23, 59, 59, 200), 2, false, {{false, 1, 800, 800, 800}}},
        {utc(2027, 1, 4), 2, true, {{true, 0, 7 * day_ms, 0, 7 * day_ms}}},
        // Wednesday noon: 4.5 days to the next Monday.
        {utc(2027, 1, 6, 12),
         1,
         false,
         {{false, 0, 108 * hour_ms, 108 * hour_ms, 108 * hour_ms}}}}},
      // +05:30: local midnight is 18:30 UTC the day before.
      {"day_at_plus_0530",
       {{"daily", cal, 2, day, 330}},
       {{utc(2027, 3, 14, 18, 29, 50), 2, true, {{true, 0, 10'000, 0, 10'000}}},
        {utc(2027, 3, 14, 18, 29, 59, 999), 1, false, {{false, 0, 1, 1, 1}}},
        {utc(2027, 3, 14, 18, 30), 1, true, {{true, 1, day_ms, 0, day_ms}}}}},
      // -08:00: local midnight is 08:00 UTC; Feb 1 07:59 UTC is still January 31 locally.
      {"day_at_minus_0800",
       {{"daily", cal, 1, day, -480}},
       {{utc(2027, 3, 15, 7, 59, 59, 999), 1, true, {{true, 0, 1, 0, 1}}},
        {utc(2027, 3, 15, 8), 1, true, {{true, 0, day_ms, 0, day_ms}}}}},
      {"month_at_minus_0800",
       {{"monthly", cal, 3, month, -480}},
       {{utc(2027, 2, 1, 7, 59, 50), 3, true, {{true, 0, 10'000, 0, 10'000}}},
        {utc(2027, 2, 1, 7, 59, 59, 500), 1, false, {{false, 0, 500, 500, 500}}},
        {utc(2027, 2, 1, 8), 1, true, {{true, 2, 28 * day_ms, 0, 28 * day_ms}}}}},
      // The store's clock stepped back into January after a February count: no time elapses
      // (the stored period stays current, read at its start).
      {"clock_stepped_back",
       {{"monthly", cal, 3, month}},
       {{utc(2027, 2, 1, 0, 0, 1),
         1,
         true,
         {{true, 2, 28 * day_ms - 1'000, 0, 28 * day_ms - 1'000}}},
        {utc(2027, 1, 31, 23), 1, true, {{true, 1, 28 * day_ms, 0, 28 * day_ms}}}}},
      // All or nothing with a token bucket: the exhausted quota refuses, the bucket keeps
      // its tokens; a cost above what is left is refused while a smaller one fits.
      {"mixed_with_token_bucket",
       {{"daily", cal, 3, day},
        {"tb", algorithm::token_bucket, 10, calendar_unit::none, 0, hour_ms}},
       {{utc(2027, 6, 1, 12),
         2,
         true,
         {{true, 1, 12 * hour_ms, 0, 12 * hour_ms}, {true, 8, 720'000, 0, 360'000}}},
        {utc(2027, 6, 1, 12),
         2,
         false,
         {{false, 1, 12 * hour_ms, 12 * hour_ms, 12 * hour_ms}, {true, 8, 720'000, 0, 360'000}}},
        {utc(2027, 6, 1, 12),
         1,
         true,
         {{true, 0, 12 * hour_ms, 0, 12 * hour_ms}, {true, 7, 1'080'000, 0, 360'000}}}}},
  };
  return cases;
}

check_request make_request(const table_case& c, const std::string& prefix, const step& st) {
  check_request req;
  for (const auto& l : c.limits) {
    limiter::limit_check lc;
    lc.key = limiter::bucket_key(l.name, limiter::key_namespace::global, prefix + "." + c.name);
    lc.algorithm = l.algo;
    lc.bucket = l.params();
    lc.cost = st.cost;
    req.limits.push_back(lc);
  }
  req.now_ms_override = st.at_ms;
  return req;
}

void expect_step(const table_case& c, std::size_t s, const std::string& backend,
                 const check_outcome& got) {
  const step& st = c.steps[s];
  SCOPED_TRACE(backend + " " + c.name + " step " + std::to_string(s));
  EXPECT_EQ(got.allowed, st.allowed);
  ASSERT_EQ(got.limits.size(), c.limits.size());
  for (std::size_t i = 0; i < c.limits.size(); ++i) {
    SCOPED_TRACE("limit " + c.limits[i].name);
    const expect& e = st.limits[i];
    const limit_outcome& g = got.limits[i];
    EXPECT_EQ(g.admits, e.admits);
    EXPECT_EQ(g.remaining, e.remaining);
    EXPECT_EQ(g.reset_ms, e.reset_ms);
    EXPECT_EQ(g.retry_after_ms, e.retry_after_ms);
    EXPECT_EQ(g.next_ms, e.next_ms);
  }
}

// Runs `check` (an awaitable factory) to completion on `ioc`.
template <class Store>
boost::system::result<check_outcome> run_check(asio::io_context& ioc, Store& s, check_request req) {
  std::optional<boost::system::result<check_outcome>> out;
  asio::co_spawn(ioc, s.check(std::move(req)),
                 [&](std::exception_ptr e, boost::system::result<check_outcome> r) {
                   if (!e) out.emplace(std::move(r));
                 });
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (!out && std::chrono::steady_clock::now() < deadline) {
    if (ioc.stopped()) ioc.restart();
    ioc.run_one_for(std::chrono::milliseconds(5));
  }
  if (!out) return make_error_code(sluice::errc::store_unavailable);
  return *out;
}

template <class Store>
bool wait_connected(asio::io_context& ioc, Store& s) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!s.stats().connected && std::chrono::steady_clock::now() < deadline) {
    if (ioc.stopped()) ioc.restart();
    ioc.run_one_for(std::chrono::milliseconds(5));
  }
  return s.stats().connected;
}

TEST(calendar_arithmetic, civil_dates_round_trip_and_agree_with_timegm) {
  // Every day from 1900-01-01 to 2200-12-31: days_from_civil(civil_from_days(d)) == d, and
  // each day's civil date is timegm's.
  for (std::int64_t d = utc(1900, 1, 1) / day_ms; d <= utc(2200, 12, 31) / day_ms; ++d) {
    const auto c = limiter::civil_from_days(d);
    ASSERT_EQ(limiter::days_from_civil(c.year, c.month, c.day), d);
    ASSERT_EQ(utc(static_cast<int>(c.year), c.month, c.day), d * day_ms);
  }
}

TEST(calendar_arithmetic, periods_and_their_texts) {
  const auto p = limiter::calendar_period_at(month, 330, utc(2027, 2, 28, 18, 30));
  EXPECT_EQ(p.start_ms, utc(2027, 2, 28, 18, 30));  // March 1st 00:00 at +05:30
  EXPECT_EQ(p.end_ms, utc(2027, 3, 31, 18, 30));
  EXPECT_EQ(limiter::local_time_text(p.start_ms, 330), "2027-03-01T00:00:00+05:30");
  EXPECT_EQ(limiter::local_time_text(utc(2027, 1, 1), -480), "2026-12-31T16:00:00-08:00");
  EXPECT_EQ(limiter::utc_offset_text(0), "+00:00");
  EXPECT_EQ(limiter::utc_offset_text(-840), "-14:00");
  const auto w = limiter::calendar_period_at(week, 0, utc(2027, 1, 1, 12));  // a Friday
  EXPECT_EQ(w.start_ms, utc(2026, 12, 28));                                  // Monday
  EXPECT_EQ(w.end_ms, utc(2027, 1, 4));
}

TEST(calendar_headers, policy_window_is_the_current_period_and_retry_after_rounds_up) {
  limiter::applied_limit l{"monthly", cal, limit_spec{"monthly", cal, 10, month}.params(), false};
  check_outcome o;
  o.allowed = false;
  o.now_ms = utc(2027, 2, 28, 23, 59, 58, 500);
  o.limits.push_back({false, 10, 0, 1'500, 1'500, 1'500, 0});
  const std::vector<limiter::applied_limit> ls{l};
  const auto h = limiter::quota_headers(ls, o, config::header_sets{});
  ASSERT_EQ(h.size(), 5u);
  EXPECT_EQ(h[0].second, "10");
  EXPECT_EQ(h[1].second, "0");
  EXPECT_EQ(h[2].second, "2");
  EXPECT_EQ(h[3].second, "\"monthly\";q=10;w=2419200");  // February 2027: 28 days
  EXPECT_EQ(h[4].second, "\"monthly\";r=0;t=2");
  EXPECT_EQ(limiter::retry_after_seconds(ls, o), 2);
  o.now_ms = utc(2027, 3, 1);
  EXPECT_EQ(limiter::quota_headers(ls, o, config::header_sets{})[3].second,
            "\"monthly\";q=10;w=2678400");  // March: 31 days
}

TEST(calendar_table, memory_store) {
  for (const auto& c : table()) {
    store::memory_store mem([] { return std::int64_t{0}; });
    for (std::size_t s = 0; s < c.steps.size(); ++s)
      expect_step(c, s, "memory", mem.decide(make_request(c, "mem", c.steps[s])));
  }
}

class calendar_redis : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { server_ = new test::redis_server(); }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }
  static test::redis_server* server_;
};
test::redis_server* calendar_redis::server_ = nullptr;

TEST_F(calendar_redis, lua_script_every_layout) {
  for (const auto& layout : {test::per_key, test::packed, test::all_in_one_hash}) {
    const std::string name = "lua-" + test::layout_name(layout);
    for (const auto& c : table()) {
      for (std::size_t s = 0; s < c.steps.size(); ++s) {
        const check_request req = make_request(c, name, c.steps[s]);
        std::vector<std::string> argv = {"EVAL", std::string(lua::check())};
        lua::append_check_command(req, layout, argv);
        const redis_reply r = server_->command(argv);
        ASSERT_EQ(r.type, redis_reply::kind::array) << c.name << " step " << s << ": " << r.str;
        ASSERT_EQ(r.elements.size(), 2 + 5 * req.limits.size());
        check_outcome out;
        out.allowed = r.elements[0].integer == 1;
        for (std::size_t i = 0; i < req.limits.size(); ++i) {
          const auto* e = &r.elements[2 + 5 * i];
          out.limits.push_back(
              {e[0].integer == 1, 0, e[1].integer, e[2].integer, e[3].integer, e[4].integer, 0});
        }
        expect_step(c, s, name, out);
      }
    }
  }
}

TEST_F(calendar_redis, redis_store) {
  asio::io_context ioc;
  store::redis_settings settings;
  settings.port = server_->port();
  settings.command_timeout = std::chrono::milliseconds(1000);
  store::redis_store rs(ioc.get_executor(), settings);
  rs.start();
  ASSERT_TRUE(wait_connected(ioc, rs));
  for (const auto& c : table()) {
    for (std::size_t s = 0; s < c.steps.size(); ++s) {
      auto got = run_check(ioc, rs, make_request(c, "rs", c.steps[s]));
      ASSERT_TRUE(got.has_value()) << c.name << " step " << s << ": " << got.error().message();
      expect_step(c, s, "redis", *got);
      EXPECT_EQ(got->limits[0].limit, c.limits[0].n);
    }
  }
  rs.stop();
}

TEST_F(calendar_redis, script_rejects_bad_calendar_arguments) {
  auto run = [](std::int64_t unit, std::int64_t offset) {
    std::vector<std::string> argv = {"EVAL",
                                     std::string(lua::check()),
                                     "1",
                                     "sl:{bad|g|rx}",
                                     "1700000000000",
                                     "-1",
                                     lua::pack_limit(4, unit, 10, offset, 1, false),
                                     ""};
    return server_->command(argv);
  };
  EXPECT_NE(run(0, 0).str.find("bad calendar unit"), std::string::npos) << run(0, 0).str;
  EXPECT_NE(run(4, 0).str.find("bad calendar unit"), std::string::npos);
  EXPECT_NE(run(3, 841).str.find("bad calendar offset"), std::string::npos);
  EXPECT_EQ(run(3, -840).type, redis_reply::kind::array);
}

// A count stored under another unit or offset (the limit changed on reload) reads as
// nothing, on both stores: a day's count is not a month's.
TEST_F(calendar_redis, a_count_of_another_zone_reads_as_nothing) {
  const table_case day_case{"zone_change", {{"z", cal, 3, day}}, {{utc(2027, 5, 5), 3, true, {}}}};
  table_case month_case = day_case;  // (a copy: the same key, another unit)
  month_case.limits[0].unit = month;
  store::memory_store mem([] { return std::int64_t{0}; });
  EXPECT_TRUE(mem.decide(make_request(day_case, "zone", day_case.steps[0])).allowed);
  EXPECT_TRUE(mem.decide(make_request(month_case, "zone", month_case.steps[0])).allowed);
  for (const auto& layout : {test::per_key, test::packed}) {
    for (const table_case* c : std::initializer_list<const table_case*>{&day_case, &month_case}) {
      std::vector<std::string> argv = {"EVAL", std::string(lua::check())};
      lua::append_check_command(make_request(*c, "zone-" + test::layout_name(layout), c->steps[0]),
                                layout, argv);
      const redis_reply r = server_->command(argv);
      ASSERT_EQ(r.type, redis_reply::kind::array) << r.str;
      EXPECT_EQ(r.elements[0].integer, 1) << c->limits[0].name;
    }
  }
}

TEST(calendar_cluster, cluster_store_on_three_masters) {
  test::redis_cluster::options opts;
  opts.replicas_per_master = 0;
  test::redis_cluster cluster(opts);
  asio::io_context ioc;
  store::redis_cluster_settings settings;
  for (const auto p : cluster.ports()) settings.seeds.push_back({"127.0.0.1", p});
  settings.node.command_timeout = std::chrono::milliseconds(500);
  store::redis_cluster_store cs(ioc.get_executor(), settings);
  cs.start();
  ASSERT_TRUE(wait_connected(ioc, cs));
  for (const auto& c : table()) {
    // Its two limits live in two slots: a refused request is a split check, whose token
    // bucket reports the Reset of the first step's peek as if debited (redis_cluster_store,
    // documented in docs/operating.md, "Redis Cluster"): not the one-call table's value.
    if (c.name == "mixed_with_token_bucket") continue;
    for (std::size_t s = 0; s < c.steps.size(); ++s) {
      auto got = run_check(ioc, cs, make_request(c, "cluster", c.steps[s]));
      ASSERT_TRUE(got.has_value()) << c.name << " step " << s << ": " << got.error().message();
      expect_step(c, s, "cluster", *got);
    }
  }
  cs.stop();
  ioc.poll();
}

}  // namespace
}  // namespace sluice
