// SPDX-License-Identifier: Apache-2.0
// sluice-test-support: redis_cluster redis_server
#include "sluice/limiter/concurrency.hpp"

#include "sluice/limiter/keys.hpp"
#include "sluice/limiter/refusal_cache.hpp"
#include "sluice/store/lua_scripts.hpp"
#include "sluice/store/memory_store.hpp"
#include "sluice/store/redis_cluster_store.hpp"
#include "sluice/store/redis_store.hpp"
#include "support/redis_cluster.hpp"
#include "support/redis_server.hpp"

#include <gtest/gtest.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

// Concurrency limits as one table of cases, decided by the memory store, by the Redis store
// on one redis-server and by the cluster store on a three-master Redis Cluster, through the
// counter_store interface the gateway uses, each at store times set by the test
// (check_request::now_ms_override): every store gives the same outcome to the slot and to the
// millisecond. The cases: acquire up to N, N+1 refused, a release frees one, a slot whose
// holder never released it is free exactly at its slot_ttl, a renewal keeps it, a refused
// request takes neither its slot nor its other limit's unit (both directions), a batch of
// releases or renewals over several keys in one request.
//
// On the cluster a request whose limits live in several hash slots is decided in two steps
// (peek, then commit): a refused one reports an admitting limit's Reset from its peek, i.e.
// after its would-be debit. The mixed cases are timed so that this Reset is the same (a refused
// acquire at the instant of the one before it; a fixed window already counting), so one table
// holds for every store.

namespace sluice {
namespace {

namespace asio = boost::asio;
using namespace std::chrono_literals;
using config::algorithm;
using limiter::check_outcome;
using limiter::check_request;
using limiter::limit_outcome;
using limiter::slot_op;

struct limit_spec {
  std::string name;
  algorithm algo;
  std::int64_t n;          // max_in_flight; the window's limit
  std::int64_t period_ms;  // slot_ttl; the window
};

struct expect {
  bool admits;
  std::int64_t remaining;
  std::int64_t reset_ms;
  std::int64_t retry_after_ms;
  std::int64_t next_ms;
};

// One request: an acquire of slot slots[0] by every limit of the case, or a release or renew
// of each slot in `slots` on each concurrency limit (slot-major), in one request.
struct step {
  std::int64_t t_ms;
  slot_op op;
  std::vector<std::string> slots;
  bool allowed;
  std::vector<expect> limits;
};

struct table_case {
  std::string name;
  std::vector<limit_spec> limits;
  std::vector<step> steps;
};

// A multiple of 60 s: t is a fixed window's offset.
constexpr std::int64_t epoch_ms = 1'700'000'040'000;
constexpr auto cc = algorithm::concurrency;
constexpr auto fw = algorithm::fixed_window;
constexpr auto acq = slot_op::acquire;
constexpr auto rel = slot_op::release;
constexpr auto ren = slot_op::renew;

const std::vector<table_case>& table() {
  static const std::vector<table_case> cases = {
      // Up to N = 3 at once; the fourth is refused with Retry-After the earliest expiry, at
      // most 1 s; a release frees one; a release of a slot not held changes nothing; a slot
      // never released (its holder died) is held until 9,999 ms and free at 10,000 exactly.
      {"acquire_to_n_release_expire",
       {{"inflight", cc, 3, 10'000}},
       {{0, acq, {"a"}, true, {{true, 2, 10'000, 0, 1'000}}},
        {100, acq, {"b"}, true, {{true, 1, 10'000, 0, 1'000}}},
        {200, acq, {"c"}, true, {{true, 0, 10'000, 0, 1'000}}},
        {300, acq, {"d"}, false, {{false, 0, 9'900, 1'000, 1'000}}},
        {400, rel, {"b"}, true, {{true, 1, 9'800, 0, 1'000}}},
        {500, acq, {"d"}, true, {{true, 0, 10'000, 0, 1'000}}},
        {600, acq, {"e"}, false, {{false, 0, 9'900, 1'000, 1'000}}},
        {700, rel, {"b"}, true, {{false, 0, 9'800, 0, 1'000}}},
        {9'999, acq, {"e"}, false, {{false, 0, 501, 1, 1}}},
        {10'000, acq, {"e"}, true, {{true, 0, 10'000, 0, 200}}}}},
      // A renewal keeps a slot past its first ttl; a slot already expired is not renewed; an
      // acquire of a slot already held admits without a second slot.
      {"renew_keeps_a_slot",
       {{"inflight", cc, 1, 10'000}},
       {{0, acq, {"a"}, true, {{true, 0, 10'000, 0, 1'000}}},
        {5'000, ren, {"a"}, true, {{true, 0, 10'000, 0, 1'000}}},
        {12'000, acq, {"b"}, false, {{false, 0, 3'000, 1'000, 1'000}}},
        {14'999, acq, {"b"}, false, {{false, 0, 1, 1, 1}}},
        {15'000, acq, {"b"}, true, {{true, 0, 10'000, 0, 1'000}}},
        {15'001, ren, {"a"}, true, {{false, 0, 9'999, 0, 1'000}}},
        {16'000, acq, {"a"}, false, {{false, 0, 9'000, 1'000, 1'000}}},
        {16'500, acq, {"b"}, true, {{true, 0, 8'500, 0, 1'000}}},
        {17'000, rel, {"b"}, true, {{true, 1, 0, 0, 0}}}}},
      // A concurrency limit refuses: the window's unit is not taken either.
      {"refused_by_slots_takes_no_unit",
       {{"calls", fw, 5, 60'000}, {"inflight", cc, 1, 10'000}},
       {{0, acq, {"a"}, true, {{true, 4, 60'000, 0, 60'000}, {true, 0, 10'000, 0, 1'000}}},
        {100, acq, {"b"}, false, {{true, 4, 59'900, 0, 59'900}, {false, 0, 9'900, 1'000, 1'000}}},
        {200, rel, {"a"}, true, {{true, 1, 0, 0, 0}}},
        {300, acq, {"b"}, true, {{true, 3, 59'700, 0, 59'700}, {true, 0, 10'000, 0, 1'000}}}}},
      // The window refuses: no slot is taken (a renewal of it finds none).
      {"refused_by_window_takes_no_slot",
       {{"calls", fw, 1, 60'000}, {"inflight", cc, 2, 10'000}},
       {{0, acq, {"a"}, true, {{true, 0, 60'000, 0, 60'000}, {true, 1, 10'000, 0, 1'000}}},
        {0, acq, {"b"}, false, {{false, 0, 60'000, 60'000, 60'000}, {true, 1, 10'000, 0, 1'000}}},
        {200, ren, {"b"}, true, {{false, 1, 9'800, 0, 1'000}}}}},
      // Two concurrency limits (per key and a shared one): all or nothing.
      {"two_concurrency_limits",
       {{"per_key", cc, 1, 10'000}, {"shared", cc, 2, 10'000}},
       {{0, acq, {"a"}, true, {{true, 0, 10'000, 0, 1'000}, {true, 1, 10'000, 0, 1'000}}},
        {0, acq, {"b"}, false, {{false, 0, 10'000, 1'000, 1'000}, {true, 1, 10'000, 0, 1'000}}},
        {200, rel, {"a"}, true, {{true, 1, 0, 0, 0}, {true, 2, 0, 0, 0}}}}},
      // A worker's slots renewed, then released, in one request each over two keys.
      {"batched_renew_and_release",
       {{"k1", cc, 3, 10'000}, {"k2", cc, 3, 10'000}},
       {{0, acq, {"a"}, true, {{true, 2, 10'000, 0, 1'000}, {true, 2, 10'000, 0, 1'000}}},
        {1'000, acq, {"b"}, true, {{true, 1, 10'000, 0, 1'000}, {true, 1, 10'000, 0, 1'000}}},
        {6'000,
         ren,
         {"a", "b"},
         true,
         {{true, 1, 10'000, 0, 1'000},
          {true, 1, 10'000, 0, 1'000},
          {true, 1, 10'000, 0, 1'000},
          {true, 1, 10'000, 0, 1'000}}},
        {15'000, acq, {"c"}, true, {{true, 0, 10'000, 0, 1'000}, {true, 0, 10'000, 0, 1'000}}},
        {15'500,
         rel,
         {"a", "b"},
         true,
         {{true, 1, 9'500, 0, 500},
          {true, 1, 9'500, 0, 500},
          {true, 2, 9'500, 0, 1'000},
          {true, 2, 9'500, 0, 1'000}}}}},
  };
  return cases;
}

limiter::limit_check make_limit(const limit_spec& l, const std::string& prefix,
                                const std::string& case_name) {
  config::limit_params p;
  p.rate.count = l.n;
  p.rate.period = std::chrono::milliseconds(l.period_ms);
  limiter::limit_check lc;
  lc.key = limiter::bucket_key(l.name, limiter::key_namespace::api_key, prefix + "." + case_name);
  lc.algorithm = l.algo;
  lc.bucket = limiter::bucket_params::from(p);
  return lc;
}

check_request make_request(const table_case& c, const step& s, const std::string& prefix) {
  check_request req;
  req.now_ms_override = epoch_ms + s.t_ms;
  if (s.op == acq) {
    for (const auto& l : c.limits) {
      req.limits.push_back(make_limit(l, prefix, c.name));
      req.limits.back().slot = s.slots.at(0);
    }
    return req;
  }
  for (const auto& id : s.slots) {
    for (const auto& l : c.limits) {
      if (l.algo != cc) continue;
      req.limits.push_back(make_limit(l, prefix, c.name));
      req.limits.back().slot = id;
      req.limits.back().op = s.op;
    }
  }
  return req;
}

void expect_step(const table_case& c, std::size_t i, const std::string& backend,
                 const check_request& req, const check_outcome& got) {
  const step& st = c.steps[i];
  SCOPED_TRACE(backend + " " + c.name + " step " + std::to_string(i) +
               " t=" + std::to_string(st.t_ms));
  EXPECT_EQ(got.allowed, st.allowed);
  EXPECT_EQ(got.now_ms, epoch_ms + st.t_ms);
  ASSERT_EQ(got.limits.size(), st.limits.size());
  for (std::size_t j = 0; j < st.limits.size(); ++j) {
    SCOPED_TRACE("limit " + std::to_string(j) + " slot " + req.limits[j].slot);
    const expect& e = st.limits[j];
    const limit_outcome& g = got.limits[j];
    EXPECT_EQ(g.admits, e.admits);
    EXPECT_EQ(g.limit, req.limits[j].bucket.window_limit);
    EXPECT_EQ(g.remaining, e.remaining);
    EXPECT_EQ(g.reset_ms, e.reset_ms);
    EXPECT_EQ(g.retry_after_ms, e.retry_after_ms);
    EXPECT_EQ(g.next_ms, e.next_ms);
  }
}

using decide_fn = std::function<std::optional<check_outcome>(check_request)>;

void run_table(const std::string& backend, const decide_fn& decide) {
  for (const auto& c : table()) {
    for (std::size_t i = 0; i < c.steps.size(); ++i) {
      const auto req = make_request(c, c.steps[i], backend);
      const auto got = decide(req);
      ASSERT_TRUE(got) << backend << " " << c.name << " step " << i << ": no decision";
      expect_step(c, i, backend, req, *got);
    }
  }
}

// Runs `s.check(req)` on `ioc` until it completes (at most 3 s).
template <class Store>
std::optional<check_outcome> check_on(asio::io_context& ioc, Store& s, check_request req) {
  std::optional<boost::system::result<check_outcome>> out;
  asio::co_spawn(ioc, s.check(std::move(req)),
                 [&](std::exception_ptr e, boost::system::result<check_outcome> r) {
                   if (!e) out.emplace(std::move(r));
                 });
  const auto deadline = std::chrono::steady_clock::now() + 3s;
  while (!out && std::chrono::steady_clock::now() < deadline) {
    if (ioc.stopped()) ioc.restart();
    ioc.run_one_for(5ms);
  }
  if (!out || !*out) return std::nullopt;
  return **out;
}

template <class Store>
bool run_until_connected(asio::io_context& ioc, Store& s) {
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  while (!s.stats().connected && std::chrono::steady_clock::now() < deadline) {
    if (ioc.stopped()) ioc.restart();
    ioc.run_one_for(5ms);
  }
  return s.stats().connected;
}

TEST(concurrency_table, memory_store) {
  store::memory_store mem([] { return epoch_ms; });
  run_table("memory", [&](check_request req) { return mem.decide(req); });
}

TEST(concurrency_table, memory_store_keeps_the_slots_it_was_told) {
  store::memory_store mem([] { return epoch_ms + 100; });
  const auto& c = table().front();
  auto req = make_request(c, c.steps[0], "state");
  mem.decide(req);
  EXPECT_EQ(mem.peek_state(req.limits[0].key), "a@" + std::to_string(epoch_ms + 10'000));
}

// The over-limit cache never keeps a concurrency refusal: the slot may free the next moment.
TEST(concurrency_table, a_refusal_is_never_cached) {
  store::memory_store mem([] { return epoch_ms; });
  const auto& c = table().front();
  for (std::size_t i = 0; i < 4; ++i) mem.decide(make_request(c, c.steps[i], "cache"));
  const auto refused_req = make_request(c, c.steps[3], "cache");
  const auto refused = mem.decide(refused_req);
  ASSERT_FALSE(refused.allowed);
  limiter::refusal_cache cache;
  cache.remember(refused_req.limits[0], refused, 1, limiter::refusal_cache::clock::now());
  EXPECT_EQ(cache.size(), 0u);
  check_outcome out;
  EXPECT_FALSE(cache.recall(refused_req, 1, limiter::refusal_cache::clock::now(), out));
}

TEST(concurrency_table, redis_store) {
  test::redis_server server;
  asio::io_context ioc;
  store::redis_settings settings;
  settings.port = server.port();
  settings.command_timeout = 500ms;
  store::redis_store s(ioc.get_executor(), settings);
  s.start();
  ASSERT_TRUE(run_until_connected(ioc, s));
  run_table("redis", [&](check_request req) { return check_on(ioc, s, std::move(req)); });
  // The slots are a sorted set at the bucket's own key (never a hash field), scored by expiry.
  const auto& c = table().front();
  const auto key = make_request(c, c.steps[0], "redis").limits[0].key;
  auto members = server.command({"ZRANGE", key, "0", "-1", "WITHSCORES"});
  ASSERT_EQ(members.elements.size(), 6u);
  EXPECT_EQ(members.elements[0].str, "c");
  EXPECT_EQ(members.elements[1].str, std::to_string(epoch_ms + 10'200));
  EXPECT_EQ(server.command({"TYPE", key}).str, "zset");
  s.stop();
}

TEST(concurrency_table, redis_cluster_store) {
  test::redis_cluster cluster;
  asio::io_context ioc;
  store::redis_cluster_settings settings;
  for (const auto p : cluster.ports()) settings.seeds.push_back({"127.0.0.1", p});
  settings.node.command_timeout = 500ms;
  store::redis_cluster_store s(ioc.get_executor(), settings);
  s.start();
  ASSERT_TRUE(run_until_connected(ioc, s));
  run_table("cluster", [&](check_request req) { return check_on(ioc, s, std::move(req)); });
  EXPECT_GT(s.cluster().split_checks, 0u);  // the mixed cases spanned several slots
  s.stop();
  ioc.poll();
}

}  // namespace
}  // namespace sluice
