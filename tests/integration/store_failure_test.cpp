// SPDX-License-Identifier: Apache-2.0
// sluice-test-support: gateway_fixture redis_server upstream_server http_client tcp_delay_proxy
// sluice-test-serial
// When Redis is slow, down or restarted (issue 3; cases c10 and c11): a real redis-server
// controlled by the test — killed, restarted, frozen with SIGSTOP, paused with CLIENT PAUSE,
// its script cache flushed, behind a delaying or black-holing TCP proxy, or replaced by a
// listener that never answers — during traffic, with the exact outcome of every failure policy
// (fail_open, fail_closed, local) asserted through real HTTP, and recovery timed.

#include "harness.hpp"
#include "support/stopped_clock.hpp"
#include "support/tcp_delay_proxy.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <mutex>
#include <thread>
#include <vector>

namespace sluice::test {
namespace {

using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;
using ms = std::chrono::milliseconds;

ms since(clock_type::time_point t) {
  return std::chrono::duration_cast<ms>(clock_type::now() - t);
}

// c11's rules (with a `local` route for the third policy).
const char* const c11_rules = R"(
store: STORE
identity: {api_key: {header: X-API-Key}}
plans: {free: {limits: []}}
api_keys: {key-a: free}
upstreams: {api: {url: UPSTREAM_URL}}
routes:
  - name: open
    match: {path_prefix: /v1/open}
    upstream: api
    on_store_failure: fail_open
    limits:
      - {name: open_key, by: api_key, rate: 100/1m, burst: 100}
  - name: closed
    match: {path_prefix: /v1/closed}
    upstream: api
    on_store_failure: fail_closed
    limits:
      - {name: closed_key, by: api_key, rate: 100/1m, burst: 100}
  - name: local
    match: {path_prefix: /v1/local}
    upstream: api
    on_store_failure: local
    limits:
      - {name: local_key, by: api_key, rate: 10/1m, burst: 10}
)";

// c10's rules.
const char* const c10_rules = R"(
store: STORE
identity: {api_key: {header: X-API-Key}}
plans: {free: {limits: []}}
api_keys: {key-a: free, key-b: free}
upstreams: {api: {url: UPSTREAM_URL}}
routes:
  - name: items
    match: {path_prefix: /v1/items}
    upstream: api
    on_store_failure: fail_open
    limits:
      - {name: items_key, by: api_key, rate: 3/1m, burst: 3}
)";

/// Upstream, redis-server, optionally a delaying proxy in front of it, and a gateway whose
/// store (timeout 50 ms, as in c10/c11) points at the proxy or the server, or at `address`.
struct fault_world {
  struct options {
    std::vector<std::string> redis_args;
    std::vector<std::string> redis_env;  // added to redis-server's environment (a clock preload)
    bool proxied = false;
    unsigned workers = 1;          // c11: the 5 requests in flight share one store connection
    std::string address;           // overrides the store address ("" = the server or the proxy)
    std::string store_extra;       // appended inside the store mapping
    std::string timeout = "50ms";  // store.timeout
  };

  fault_world(const std::string& yaml, options o) : redis(o.redis_args, o.redis_env) {
    if (o.proxied) proxy = std::make_unique<tcp_delay_proxy>(redis.port());
    std::string address = o.address;
    if (address.empty()) {
      address = "127.0.0.1:" + std::to_string(proxy ? proxy->port() : redis.port());
    }
    const std::string store =
        "{type: redis, address: \"" + address + "\", timeout: " + o.timeout + o.store_extra + "}";
    gateway = std::make_unique<gateway_fixture>(
        substitute(yaml, {{"UPSTREAM_URL", upstream.url()}, {"STORE", store}}), o.workers);
  }

  std::uint16_t port() const { return gateway->port(); }
  app::gateway_stats stats() const { return gateway->gateway().stats(); }
  client_response get(const std::string& target, const std::string& key = "key-a") const {
    return test::get(port(), target, {{"X-API-Key", key}});
  }
  std::size_t upstream_hits(const std::string& prefix) const {
    std::size_t n = 0;
    for (const auto& r : upstream.requests()) n += r.target.starts_with(prefix) ? 1 : 0;
    return n;
  }

  upstream_server upstream;
  redis_server redis;
  std::unique_ptr<tcp_delay_proxy> proxy;
  std::unique_ptr<gateway_fixture> gateway;
};

fault_world::options proxied() {
  fault_world::options o;
  o.proxied = true;
  return o;
}
fault_world::options workers(unsigned n) {
  fault_world::options o;
  o.workers = n;
  return o;
}
fault_world::options with_store(std::string extra) {
  fault_world::options o;
  o.store_extra = std::move(extra);
  return o;
}
fault_world::options redis_args(std::vector<std::string> args) {
  fault_world::options o;
  o.redis_args = std::move(args);
  return o;
}

/// One timed request of a load.
struct sample {
  unsigned status = 0;  // 0: the request failed (timeout, reset)
  bool quota_fields = false;
  std::string retry_after;
  std::string content_type;
  ms took{0};
};

/// c11's load: `total` GETs of `target` with key-a, `in_flight` at a time (one keep-alive
/// connection each, all sent together), in waves spread over `span`.
std::vector<sample> load(std::uint16_t port, const std::string& target, int total = 20,
                         int in_flight = 5, ms span = 2000ms) {
  std::vector<sample> out(static_cast<std::size_t>(total));
  const int waves = total / in_flight;
  const auto start = clock_type::now();
  std::vector<std::thread> threads;
  for (int t = 0; t < in_flight; ++t) {
    threads.emplace_back([&, t] {
      std::unique_ptr<http_connection> c;
      for (int w = 0; w < waves; ++w) {
        std::this_thread::sleep_until(start + span * w / waves);
        sample& s = out[static_cast<std::size_t>(w * in_flight + t)];
        const auto sent = clock_type::now();
        try {
          if (!c) c = std::make_unique<http_connection>(port, 2000ms);
          auto r = c->request("GET", target, {{"X-API-Key", "key-a"}});
          s.status = r.status;
          s.quota_fields = r.has("X-RateLimit-Remaining") || r.has("X-RateLimit-Reset") ||
                           r.has("X-RateLimit-Limit");
          s.retry_after = r.header("Retry-After");
          s.content_type = r.header("Content-Type");
        } catch (const std::exception&) {
          c.reset();
        }
        s.took = since(sent);
      }
    });
  }
  for (auto& th : threads) th.join();
  return out;
}

void print_latencies(const char* what, const std::vector<sample>& samples) {
  std::string line;
  for (const auto& s : samples) line += std::to_string(s.took.count()) + " ";
  std::printf("%s latencies (ms): %s\n", what, line.c_str());
}

// c11 on /v1/open: every request 200, no quota fields, within 50 + 30 ms.
void expect_fail_open(const std::vector<sample>& samples) {
  for (std::size_t i = 0; i < samples.size(); ++i) {
    SCOPED_TRACE("request " + std::to_string(i));
    EXPECT_EQ(samples[i].status, 200u);
    EXPECT_FALSE(samples[i].quota_fields) << "no quota to report";
    EXPECT_LE(samples[i].took, scaled(80ms)) << "timeouts must not stack";
  }
}

// c11 on /v1/closed: every request 503 with Retry-After: 1 and a problem body, within 80 ms.
void expect_fail_closed(const std::vector<sample>& samples) {
  for (std::size_t i = 0; i < samples.size(); ++i) {
    SCOPED_TRACE("request " + std::to_string(i));
    EXPECT_EQ(samples[i].status, 503u);
    EXPECT_EQ(samples[i].retry_after, "1");
    EXPECT_EQ(samples[i].content_type, "application/problem+json");
    EXPECT_LE(samples[i].took, scaled(80ms));
  }
}

// Once the breaker is open requests skip the store: the later half of the load pays no deadline.
void expect_store_skipped(const std::vector<sample>& samples) {
  std::size_t fast = 0;
  for (std::size_t i = samples.size() / 2; i < samples.size(); ++i) {
    fast += samples[i].took < 40ms ? 1 : 0;
  }
  EXPECT_EQ(fast, samples.size() - samples.size() / 2) << "the breaker did not skip the store";
}

// Polls GET /v1/open (a fresh connection each, so every worker is reached) every 10 ms until
// `streak` answers in a row carry X-RateLimit-Remaining; returns the time from `from` to the
// first of them, or 10 s on failure. Each decided answer must take < 100 ms.
ms recovery(const fault_world& w, clock_type::time_point from, int streak = 6) {
  int in_row = 0;
  clock_type::time_point first{};
  while (since(from) < 3000ms) {
    const auto sent = clock_type::now();
    auto r = w.get("/v1/open");
    if (r.status == 200 && r.has("X-RateLimit-Remaining")) {
      EXPECT_LT(since(sent), scaled(100ms));
      if (in_row++ == 0) first = sent;
      if (in_row == streak) return std::chrono::duration_cast<ms>(first - from);
    } else {
      EXPECT_EQ(r.status, 200u);
      in_row = 0;
    }
    std::this_thread::sleep_for(10ms);
  }
  return 10s;
}

// c11 on the load of both policy routes at once (the shared store connection of each worker
// carries both).
void c11_load_and_expect(fault_world& w) {
  const auto before = w.stats();
  const auto open_hits = w.upstream_hits("/v1/open");
  std::vector<sample> open, closed;
  std::thread t([&] { closed = load(w.port(), "/v1/closed"); });
  open = load(w.port(), "/v1/open");
  t.join();
  print_latencies("fail_open", open);
  print_latencies("fail_closed", closed);
  expect_fail_open(open);
  expect_fail_closed(closed);
  expect_store_skipped(open);
  expect_store_skipped(closed);
  const auto after = w.stats();
  EXPECT_EQ(after.fail_open - before.fail_open, 20u);
  EXPECT_EQ(after.fail_closed - before.fail_closed, 20u);
  EXPECT_EQ(after.rejected, before.rejected) << "a store failure is not a quota 429";
  EXPECT_GT(after.store.timeouts, before.store.timeouts);
  EXPECT_GE(after.store.breaker_opens, 1u);
  EXPECT_GT(after.store.unavailable, before.store.unavailable) << "refused at once while open";
  EXPECT_EQ(w.upstream_hits("/v1/closed"), 0u);
  EXPECT_EQ(w.upstream_hits("/v1/open") - open_hits, 20u);
}

// c11 scenario A: CLIENT PAUSE ... ALL. (CLIENT UNPAUSE is itself held by a pause of ALL
// clients on Redis 7.0, so the pause is 2.6 s and recovery is timed from its end.)
// The key directory lives in the store: when it cannot be read, a valid key is never told it
// is invalid (401) nor quietly made anonymous — the route's store failure policy applies:
// fail_open forwards, fail_closed answers 503, local limits the caller on this instance as
// anonymous (by client address: an unverified key buys no bucket of its own).
TEST(store_failure, directory_unreachable_applies_the_route_policy_not_401) {
  const std::string rules = R"(
store: STORE
identity:
  api_key: {header: X-API-Key}
  unknown_key: reject
  directory: {type: redis, hash: "sluice:api_keys", cache_ttl: 1s, negative_ttl: 1s}
plans: {free: {limits: []}, anonymous: {limits: [{name: anon, by: api_key, rate: 2/1h, burst: 2}]}}
upstreams: {api: {url: UPSTREAM_URL}}
routes:
  - {name: open, match: {path_prefix: /v1/open}, upstream: api, on_store_failure: fail_open,
     limits: [{name: open_key, by: api_key, rate: 100/1m, burst: 100}]}
  - {name: closed, match: {path_prefix: /v1/closed}, upstream: api, on_store_failure: fail_closed,
     limits: [{name: closed_key, by: api_key, rate: 100/1m, burst: 100}]}
  - {name: local, match: {path_prefix: /v1/local}, upstream: api, on_store_failure: local}
)";
  fault_world w(rules, workers(1));
  ASSERT_EQ(w.redis.command({"HSET", "sluice:api_keys", "good-key", "free"}).integer, 1);
  EXPECT_EQ(w.get("/v1/open", "good-key").status, 200u);
  EXPECT_EQ(w.get("/v1/open", "bad-key").status, 401u);  // the directory says: no such key
  std::this_thread::sleep_for(1200ms);                   // both cache entries expire
  w.redis.kill();
  auto open = w.get("/v1/open", "good-key");
  EXPECT_EQ(open.status, 200u) << open.body;
  EXPECT_FALSE(open.has("X-RateLimit-Remaining"));  // nothing true can be said of the quota
  auto closed = w.get("/v1/closed", "good-key");
  EXPECT_EQ(closed.status, 503u) << closed.body;
  EXPECT_EQ(closed.header("Retry-After"), "1");
  // local: the anonymous plan's 2, on this instance, keyed by the client address.
  EXPECT_EQ(w.get("/v1/local", "good-key").status, 200u);
  EXPECT_EQ(w.get("/v1/local", "other-key").status, 200u);
  EXPECT_EQ(w.get("/v1/local", "good-key").status, 429u);
  const auto st = w.stats();
  EXPECT_EQ(st.bad_requests, 1u);  // only the real 401 above
  EXPECT_EQ(st.fail_open, 1u);
  EXPECT_EQ(st.fail_closed, 1u);
  EXPECT_EQ(st.local, 3u);
}

TEST(store_failure, c11_a_client_pause) {
  fault_world w(c11_rules, fault_world::options{});
  ASSERT_EQ(w.get("/v1/open").header("X-RateLimit-Remaining"), "99");
  const auto paused = clock_type::now();
  ASSERT_EQ(w.redis.command({"CLIENT", "PAUSE", "2600", "ALL"}).str, "OK");
  c11_load_and_expect(w);
  ASSERT_LT(since(paused), scaled(2500ms)) << "the load outlasted the pause";
  const auto unpaused = paused + 2600ms;
  std::this_thread::sleep_until(unpaused);
  const auto took = recovery(w, unpaused);
  std::printf("c11 A: decided by the store %lld ms after the pause ended\n",
              static_cast<long long>(took.count()));
  EXPECT_LE(took, scaled(1000ms));
  EXPECT_EQ(w.stats().store.breaker, store::breaker_state::closed);
}

// c11 scenario B: the store's port black-holed (a proxy that accepts and forwards nothing, no
// RST — packets held, as dropped packets are retransmitted later), then the rule removed.
TEST(store_failure, c11_b_black_hole) {
  fault_world w(c11_rules, proxied());
  ASSERT_EQ(w.get("/v1/open").header("X-RateLimit-Remaining"), "99");
  w.proxy->set_hold(true);
  c11_load_and_expect(w);
  const auto accepts = w.proxy->accepts();
  EXPECT_GT(accepts, 2u) << "stalled connections were replaced by bounded attempts";
  w.proxy->set_hold(false);
  const auto released = clock_type::now();
  const auto took = recovery(w, released);
  std::printf("c11 B: decided by the store %lld ms after the drop rule was removed\n",
              static_cast<long long>(took.count()));
  EXPECT_LE(took, scaled(1000ms));
}

// SIGSTOP then SIGCONT during traffic: the three policies, then recovery within 1 s.
TEST(store_failure, sigstop_then_sigcont) {
  fault_world w(c11_rules, with_store(", local_share: 0.5"));
  ASSERT_EQ(w.get("/v1/local").header("X-RateLimit-Remaining"), "9");
  w.redis.pause();
  const auto stopped = clock_type::now();
  c11_load_and_expect(w);
  // `local`: the per-instance bucket at half the limit (burst 5, 5/1m) decides with its
  // headers: 5 admitted (Remaining 4..0), then 429 — all within the deadline bound.
  for (int i = 0; i < 6; ++i) {
    const auto sent = clock_type::now();
    auto r = w.get("/v1/local");
    EXPECT_LE(since(sent), scaled(80ms));
    if (i < 5) {
      expect_row(r, 200, 5, 4 - i, -1, -1, "local " + std::to_string(i));
    } else {
      expect_row(r, 429, 5, 0, -1, 12, "local over the local share");
    }
  }
  EXPECT_EQ(w.stats().local, 6u);
  w.redis.resume();
  const auto resumed = clock_type::now();
  const auto took = recovery(w, resumed);
  std::printf("SIGSTOP %lld ms; decided by the store %lld ms after SIGCONT\n",
              static_cast<long long>(std::chrono::duration_cast<ms>(resumed - stopped).count()),
              static_cast<long long>(took.count()));
  EXPECT_LE(took, scaled(1000ms));
  // The store's bucket was untouched by the local decisions: 9 - 1 (this request).
  EXPECT_EQ(w.get("/v1/local").header("X-RateLimit-Remaining"), "8");
}

// Checks that missed their deadline while Redis was frozen stay queued on the connection
// (fewer than the breaker's 5 failures keep it open) and reach the script when Redis resumes:
// they must not run then — the requests were already answered 503. The script refuses a
// check past its stale bound (deadline + 500 ms, in Redis time) and writes nothing.
TEST(store_failure, checks_queued_during_a_freeze_do_not_charge_after_it) {
  fault_world w(c10_rules, workers(1));  // 3/1m, burst 3, fail_open
  expect_row(w.get("/v1/items"), 200, 3, 2, -1, -1, "before the freeze");
  w.redis.pause();
  for (int i = 0; i < 2; ++i) {
    auto r = w.get("/v1/items");
    EXPECT_EQ(r.status, 200u) << i;  // forwarded unlimited
    EXPECT_FALSE(r.has("X-RateLimit-Remaining"));
  }
  std::this_thread::sleep_for(1500ms);  // well past every queued check's stale bound
  w.redis.resume();
  // The two queued checks' answers come back after their deadlines, and are dropped.
  EXPECT_EVENTUALLY(2s, w.stats().store.late_replies >= 2u);
  // The two queued checks charged nothing: 3 - 1 (before) - 1 (this one); had they run, this
  // request would find 0 tokens.
  expect_row(w.get("/v1/items"), 200, 3, 1, -1, -1, "after the freeze");
  EXPECT_EQ(w.stats().fail_open, 2u);
}

// With no traffic, a frozen Redis keeps its TCP connection and no check times out: the idle
// PING (after 1 s of silence, unanswered within the 50 ms deadline) marks the store not
// connected, so readiness (/readyz) says 503 (within ~1.5 s); it answers again after SIGCONT.
// What saw the freeze is the idle probe: a stall counted, and no check was sent meanwhile.
TEST(store_failure, idle_freeze_is_seen_by_readiness) {
  fault_world w(c11_rules, workers(2));
  ASSERT_TRUE(w.gateway->gateway().wait_for_store(std::chrono::milliseconds(0)));
  const auto before = w.stats().store;
  EXPECT_EQ(before.idle_stalls, 0u);
  w.redis.pause();
  const auto frozen = clock_type::now();
  EXPECT_EVENTUALLY(3s, !w.gateway->gateway().wait_for_store(std::chrono::milliseconds(0)))
      << "still ready " << since(frozen).count() << " ms into the freeze";
  const auto during = w.stats().store;
  EXPECT_GE(during.idle_stalls, 1u);
  EXPECT_EQ(during.checks, before.checks);
  EXPECT_EQ(during.timeouts, 0u);
  w.redis.resume();
  EXPECT_TRUE(w.gateway->gateway().wait_for_store(std::chrono::milliseconds(3000)));
  expect_row(w.get("/v1/closed"), 200, 100, 99, -1, -1, "decided by the store again");
}

// `store.local_share` is a store setting a reload changes (docs/operating.md): the local bucket
// decided after a store failure follows the new share at once.
TEST(store_failure, local_share_follows_a_reload) {
  fault_world w(c11_rules, workers(1));
  const std::string store = "{type: redis, address: \"127.0.0.1:" + std::to_string(w.redis.port()) +
                            "\", timeout: 50ms, local_share: 0.5}";
  ASSERT_EQ(w.gateway->reload(
                substitute(c11_rules, {{"UPSTREAM_URL", w.upstream.url()}, {"STORE", store}})),
            "");
  w.redis.kill();
  // local_key is 10/1m, burst 10: half of it on this instance, 5.
  for (int i = 0; i < 5; ++i) expect_row(w.get("/v1/local"), 200, 5, 4 - i, -1, -1, "local");
  expect_row(w.get("/v1/local"), 429, 5, 0, -1, 12, "over the local share");
}

// Killed during traffic, then restarted: fail_open answers 200 throughout (never a 5xx),
// fail_closed 503 without reaching the upstream, and decisions come back within 1 s of Redis
// accepting connections.
TEST(store_failure, killed_then_restarted_during_traffic) {
  fault_world w(c11_rules, workers(2));
  ASSERT_EQ(w.get("/v1/open").header("X-RateLimit-Remaining"), "99");
  std::atomic<bool> done{false};
  std::mutex m;
  std::vector<sample> background;
  std::thread traffic([&] {
    while (!done) {
      sample s;
      const auto sent = clock_type::now();
      try {
        auto r = w.get("/v1/open");
        s.status = r.status;
      } catch (const std::exception&) {
      }
      s.took = since(sent);
      {
        std::lock_guard lock(m);
        background.push_back(s);
      }
      std::this_thread::sleep_for(5ms);
    }
  });
  // Traffic before the kill.
  EXPECT_EVENTUALLY(2s, [&] {
    std::lock_guard lock(m);
    return background.size() >= 5u;
  }());
  w.redis.kill();
  const auto closed_hits = w.upstream_hits("/v1/closed");
  for (int i = 0; i < 10; ++i) {
    const auto sent = clock_type::now();
    auto r = w.get("/v1/closed");
    EXPECT_LE(since(sent), scaled(80ms));
    EXPECT_EQ(r.status, 503u);
    EXPECT_EQ(r.header("Retry-After"), "1");
    auto o = w.get("/v1/open");
    EXPECT_EQ(o.status, 200u);
    EXPECT_FALSE(o.has("X-RateLimit-Remaining"));
    std::this_thread::sleep_for(20ms);
  }
  EXPECT_EQ(w.upstream_hits("/v1/closed"), closed_hits);
  std::this_thread::sleep_for(700ms);  // the reconnect backoff reaches its ceiling
  w.redis.restart();
  const auto accepting = clock_type::now();
  const auto took = recovery(w, accepting);
  done = true;
  traffic.join();
  std::printf("killed: decided by the store %lld ms after the restart\n",
              static_cast<long long>(took.count()));
  EXPECT_LE(took, scaled(1000ms));
  std::size_t not_200 = 0, slow = 0;
  for (const auto& s : background) {
    not_200 += s.status == 200 ? 0 : 1;
    slow += s.took >= 1000ms ? 1 : 0;
  }
  EXPECT_GT(background.size(), 50u);
  EXPECT_EQ(not_200, 0u) << "fail_open must never answer a 5xx";
  EXPECT_EQ(slow, 0u);
  // Both workers reconnect; the one the recovery probe did not reach may take another
  // backoff step, so allow it up to a second more.
  EXPECT_EVENTUALLY(1000ms, w.stats().store.reconnects >= 2u);
}

// c10 on one clock: redis-server runs on a stopped wall clock (test::stopped_clock) that the
// test moves to each step's time, so the store decides every step at exactly the case's t —
// the Retry-After is exact however slowly the machine runs the steps, and no key expires in
// real time. With appendonly and appendfsync always (part 3 restarts it from its AOF). A
// store deadline of 2 s (scaled by SLUICE_TEST_TIME_FACTOR): with appendfsync always, the
// function library's reload is fsynced before the re-sent check runs, and a shared disk took
// longer than 50 ms (a fail-open).
fault_world::options c10_on_a_stopped_clock(const test::stopped_clock& clock) {
  auto o = redis_args({"--appendonly", "yes", "--appendfsync", "always"});
  o.redis_env = clock.env();
  o.timeout = std::to_string(scaled(2000ms).count()) + "ms";
  return o;
}

// The store time c10's t = 0 is at: a whole second (any time would do).
constexpr std::int64_t c10_start_ms = 1'700'000'000'000;

// c10 part 1: after SCRIPT FLUSH and FUNCTION FLUSH the check's code is loaded again once and
// the check decided from the store's state (not by fail-open).
TEST(store_failure, c10_script_flush_reloads_once_and_decides_from_the_store) {
  test::stopped_clock clock(SLUICE_CLOCK_STEP_PRELOAD, c10_start_ms);
  fault_world w(c10_rules, c10_on_a_stopped_clock(clock));
  const header_list a = {{"X-API-Key", "key-a"}};
  auto at = [&](double t) { clock.set(c10_start_ms + static_cast<std::int64_t>(t * 1000)); };
  const auto loads = w.stats().store.script_loads;
  expect_row(get(w.port(), "/v1/items", a), 200, 3, 2, -1, -1, "t=0.0");
  at(0.5);
  // The check's code is lost: FUNCTION FLUSH (the store loads it as a function library; a
  // SCRIPT FLUSH, which the library does not need, as well).
  ASSERT_EQ(w.redis.command({"SCRIPT", "FLUSH"}).str, "OK");
  ASSERT_EQ(w.redis.command({"FUNCTION", "FLUSH"}).str, "OK");
  at(1.0);
  expect_row(get(w.port(), "/v1/items", a), 200, 3, 1, -1, -1, "t=1.0 after FUNCTION FLUSH");
  EXPECT_EQ(w.stats().store.script_loads, loads + 1);
  EXPECT_EQ(w.stats().fail_open, 0u) << "decided from the store's state, not by fail-open";
  at(1.1);
  expect_row(get(w.port(), "/v1/items", a), 200, 3, 0, -1, -1, "t=1.1");
  at(1.2);
  expect_row(get(w.port(), "/v1/items", a), 429, 3, 0, -1, 19, "t=1.2");
  EXPECT_EQ(w.stats().fail_open, 0u);
  EXPECT_EQ(w.stats().upstream_errors, 0u);
}

// c10 part 3: a restart with AOF keeps the bucket: 429 with Remaining 0 and the same
// Retry-After, never a 5xx or a refilled bucket.
TEST(store_failure, c10_restart_with_aof_keeps_the_bucket) {
  test::stopped_clock clock(SLUICE_CLOCK_STEP_PRELOAD, c10_start_ms);
  fault_world w(c10_rules, c10_on_a_stopped_clock(clock));
  const header_list a = {{"X-API-Key", "key-a"}};
  for (long remaining : {2, 1, 0})
    expect_row(get(w.port(), "/v1/items", a), 200, 3, remaining, -1, -1, "spending at t=0");
  clock.set(c10_start_ms + 1200);
  expect_row(get(w.port(), "/v1/items", a), 429, 3, 0, -1, 19, "t=1.2, before the restart");
  w.redis.restart();
  ASSERT_TRUE(w.gateway->gateway().wait_for_store(scaled(5000ms)));
  expect_row(get(w.port(), "/v1/items", a), 429, 3, 0, -1, 19, "t=1.2, after the restart");
  EXPECT_EQ(w.stats().fail_open, 0u);
  EXPECT_EQ(w.stats().upstream_errors, 0u);
}

// c10 part 2: replies delayed 200 ms by a proxy; the timed-out check is not replayed and its
// late reply never answers a later request: Remaining 1 at t = 0.5.
TEST(store_failure, c10_no_replay_after_a_timeout) {
  fault_world w(c10_rules, proxied());
  const header_list b = {{"X-API-Key", "key-b"}};
  w.proxy->set_reply_delay(200ms);
  schedule at;
  const auto sent = clock_type::now();
  auto first = get(w.port(), "/v1/items", b);
  EXPECT_LE(since(sent), scaled(80ms));
  EXPECT_EQ(first.status, 200u);
  EXPECT_FALSE(first.has("X-RateLimit-Remaining")) << "fail-open has no quota to report";
  EXPECT_EQ(w.stats().fail_open, 1u);
  w.proxy->set_reply_delay(0ms);
  at.at(0.5);
  expect_row(get(w.port(), "/v1/items", b), 200, 3, 1, -1, -1, "t=0.5");
  EXPECT_EQ(w.stats().store.late_replies, 1u);
  EXPECT_EQ(w.stats().store.timeouts, 1u);
}

// A black-hole peer: a loopback listener that never accepts. The first connection completes
// in the kernel's queue and is never answered, later ones never complete the handshake; each
// attempt ends at the connect timeout and no request waits for one.
TEST(store_failure, black_hole_peer) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  ASSERT_EQ(::listen(fd, 0), 0);
  {
    auto o = fault_world::options{};
    o.address = "127.0.0.1:" + std::to_string(ntohs(addr.sin_port));
    fault_world w(c11_rules, o);
    for (int i = 0; i < 5; ++i) {
      auto sent = clock_type::now();
      auto o = w.get("/v1/open");
      EXPECT_LE(since(sent), scaled(80ms));
      EXPECT_EQ(o.status, 200u);
      EXPECT_FALSE(o.has("X-RateLimit-Remaining"));
      sent = clock_type::now();
      auto c = w.get("/v1/closed");
      EXPECT_LE(since(sent), scaled(80ms));
      EXPECT_EQ(c.status, 503u);
    }
    const auto s = w.stats();
    EXPECT_FALSE(s.store.connected);
    EXPECT_GE(s.store.connect_failures, 4u);  // 2 s of start-up wait, 250 ms per attempt
    EXPECT_EQ(s.store.timeouts, 0u);
    EXPECT_EQ(s.fail_open, 5u);
    EXPECT_EQ(s.fail_closed, 5u);
    EXPECT_EQ(w.upstream_hits("/v1/closed"), 0u);
  }
  ::close(fd);
}

// A wrong password (AUTH refused): never connected, counted; each policy applies at once.
TEST(store_failure, wrong_password) {
  ::setenv("SLUICE_TEST_WRONG_PASSWORD", "not-the-password", 1);
  auto o = redis_args({"--requirepass", "s3cret"});
  o.store_extra = ", password_env: SLUICE_TEST_WRONG_PASSWORD";
  fault_world w(c11_rules, o);
  auto sent = clock_type::now();
  auto c = w.get("/v1/closed");
  EXPECT_LE(since(sent), scaled(80ms));
  EXPECT_EQ(c.status, 503u);
  EXPECT_EQ(c.header("Retry-After"), "1");
  EXPECT_EQ(w.get("/v1/open").status, 200u);
  const auto s = w.stats();
  EXPECT_FALSE(s.store.connected);
  EXPECT_GE(s.store.connect_failures, 2u);
  EXPECT_EQ(w.upstream_hits("/v1/closed"), 0u);
}

// A failover behind a TCP forwarder (issue 10): the replica is promoted and the primary
// demoted while traffic runs. While the forwarder still leads to the demoted node, every
// check there gets READONLY: each such connection is dropped and made again, the fail_open
// route keeps answering 200, and readiness (/readyz) goes away. Once the forwarder leads to
// the new primary, checks are decided by it within a second and readiness comes back.
TEST(store_failure, failover_behind_a_forwarder_is_followed) {
  auto o = proxied();
  o.redis_args = {"--repl-diskless-sync-delay", "0"};  // (the default waits 5 s to sync)
  fault_world w(c11_rules, o);
  redis_server replica({"--replicaof", "127.0.0.1", std::to_string(w.redis.port()),
                        "--repl-diskless-sync-delay", "0"});
  ASSERT_EVENTUALLY(
      5s, w.redis.command({"INFO", "replication"}).str.find("state=online") != std::string::npos)
      << "the replica never synced";
  ASSERT_EQ(w.get("/v1/closed").status, 200u);
  ASSERT_TRUE(w.gateway->gateway().wait_for_store(0ms));

  // fail_open traffic all along, from another thread: never a 5xx.
  std::atomic<bool> done{false};
  std::atomic<int> open_5xx{0}, open_total{0};
  std::thread traffic([&] {
    const auto until = clock_type::now() + 15s;  // bounded
    while (!done && clock_type::now() < until) {
      const auto r = w.get("/v1/open", "key-a");
      if (r.status >= 500 || r.status == 0) ++open_5xx;
      ++open_total;
      std::this_thread::sleep_for(5ms);
    }
  });

  EXPECT_EVENTUALLY(3s, open_total.load() >= 20);  // traffic before the failover
  ASSERT_FALSE(replica.command({"REPLICAOF", "NO", "ONE"}).is_error());
  ASSERT_FALSE(
      w.redis.command({"REPLICAOF", "127.0.0.1", std::to_string(replica.port())}).is_error());
  const auto demoted = clock_type::now();
  EXPECT_TRUE(eventually_that(
      "readiness gone after the primary was demoted",
      [&] {
        w.get("/v1/closed");  // checks reach the demoted node and fail
        return !w.gateway->gateway().wait_for_store(0ms);
      },
      3s))
      << "still ready " << since(demoted).count() << " ms after the primary was demoted";
  const auto stuck = w.stats().store;
  EXPECT_GE(stuck.error_replies[static_cast<std::size_t>(store::error_kind::readonly)], 1u);
  EXPECT_GE(stuck.wrong_node_drops, 1u) << "a connection to the demoted node was kept";

  w.proxy->set_target(replica.port());
  const auto moved = clock_type::now();
  const bool decided = eventually([&] { return w.get("/v1/closed").status == 200u; }, 3s);
  const auto took = since(moved);
  std::printf("decided by the new primary %lld ms after the forwarder moved\n",
              static_cast<long long>(took.count()));
  EXPECT_TRUE(decided);
  EXPECT_LT(took, scaled(1000ms));
  EXPECT_TRUE(w.gateway->gateway().wait_for_store(scaled(2000ms))) << "readiness did not come back";
  const int after = open_total.load();
  EXPECT_EVENTUALLY(3s, open_total.load() >= after + 20);  // and traffic after it
  done = true;
  traffic.join();
  EXPECT_GT(open_total.load(), 20);
  EXPECT_EQ(open_5xx.load(), 0) << "the fail_open route answered 5xx during the failover";
}

}  // namespace
}  // namespace sluice::test
