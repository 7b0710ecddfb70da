// SPDX-License-Identifier: Apache-2.0
// sluice-test-support: gateway_fixture redis_cluster http_client scripted_upstream openai_upstream
// Costs known after the response (`charge:`) through the gateway, on the memory store, one
// real redis-server and a real three-master Redis Cluster:
// - failed logins: a login upstream that answers 401 to a wrong password and 200 otherwise,
//   behind `fixed_window 5/10m` with `charge: {when_status: [401, 403]}` per client IP: 200s
//   are never counted, the 6th request after five 401s is a 429 for that IP only and never
//   reaches the upstream, another IP is unaffected; exact headers.
// - AI tokens: the OpenAI-compatible upstream behind a 10,000/1h token budget per key,
//   `reserve: {header: X-Max-Tokens, max: 4000}`, `settle: {json: usage.total_tokens}`: JSON
//   and SSE answers; each response reports the balance after its reservation, the next one
//   the settled balance, and explain (a peek) reads back what the store holds; the settled
//   total never exceeds the budget; the SSE events reach the client as they are sent; a
//   reservation header that is not a number is a 400 naming it.

#include "support/eventually.hpp"
#include "support/gateway_fixture.hpp"
#include "support/http_client.hpp"
#include "support/openai_upstream.hpp"
#include "support/redis_cluster.hpp"
#include "support/redis_server.hpp"
#include "support/scripted_upstream.hpp"
#include "support/temp_dir.hpp"

#include "sluice/app/gateway.hpp"
#include "sluice/limiter/keys.hpp"
#include "sluice/observability/admin.hpp"
#include "sluice/store/cluster_slots.hpp"
#include "sluice/store/lua_scripts.hpp"

#include <gtest/gtest.h>
#include <boost/json.hpp>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <utility>

namespace sluice::test {
namespace {

using namespace std::chrono_literals;

enum class store_kind { memory, redis, cluster };

std::string store_name(const testing::TestParamInfo<store_kind>& info) {
  switch (info.param) {
    case store_kind::memory:
      return "memory";
    case store_kind::redis:
      return "redis";
    case store_kind::cluster:
      return "cluster";
  }
  return "?";
}

/// The store a case runs on: nothing, a redis-server or a three-master cluster (no
/// replicas: the cases need no failover), started by the constructor and stopped with it.
struct store_under_test {
  explicit store_under_test(store_kind kind) {
    if (kind == store_kind::redis) redis = std::make_unique<redis_server>();
    if (kind == store_kind::cluster)
      cluster = std::make_unique<redis_cluster>(
          redis_cluster::options{.replicas_per_master = 0, .env = {}});
  }
  /// The `store:` of a rules file.
  std::string line() const {
    if (cluster) return cluster->store_yaml();
    if (redis)
      return "{type: redis, address: \"127.0.0.1:" + std::to_string(redis->port()) +
             "\", timeout: 250ms}";
    return "{type: memory}";
  }

  std::unique_ptr<redis_server> redis;
  std::unique_ptr<redis_cluster> cluster;
};

const auto every_store =
    ::testing::Values(store_kind::memory, store_kind::redis, store_kind::cluster);

/// A login upstream: `X-Password: right` is a 200, anything else a 401. Counts the requests
/// it answered.
class login_upstream {
 public:
  login_upstream()
      : server_([this](raw_socket& s, std::size_t) {
          for (;;) {
            const auto head = read_head(s, 5s);
            if (!head) return;
            if (!read_request_body(s, *head, 5s)) return;
            answered_.fetch_add(1);
            const bool right = head->header("X-Password") == "right";
            const std::string res = right ? "HTTP/1.1 200 OK\r\nContent-Length: 8\r\n\r\nwelcome\n"
                                          : "HTTP/1.1 401 Unauthorized\r\nContent-Length: 6\r\n"
                                            "\r\nwrong\n";
            if (!s.write(res)) return;
          }
        }) {}
  std::string url() const { return server_.url(); }
  int answered() const { return answered_.load(); }

 private:
  std::atomic<int> answered_{0};
  scripted_upstream server_;
};

const char* const login_rules = R"(
listen: 127.0.0.1:0
store: STORE
upstreams: {api: {url: UPSTREAM_URL}}
routes:
  - name: login
    match: {path_prefix: /login}
    upstream: api
    on_store_failure: fail_closed
    limits:
      - name: failed_logins
        by: ip
        algorithm: fixed_window
        rate: 5/10m
        charge: {when_status: [401, 403]}
)";

class failed_logins : public ::testing::TestWithParam<store_kind> {};

TEST_P(failed_logins, five_401s_then_429_for_that_ip_only) {
  login_upstream login;
  const store_under_test st(GetParam());
  const std::string store = st.line();
  // One worker, one keep-alive connection per client: a response's settlement is made (or
  // sent first on the worker's store connection) before the next request is read.
  gateway_fixture gw(substitute(login_rules, {{"STORE", store}, {"UPSTREAM_URL", login.url()}}), 1);
  http_connection a(gw.port());                   // 127.0.0.1
  http_connection b(gw.port(), "127.203.113.7");  // another client address
  std::uint64_t oks = 0;                          // 200s answered (each gets its unit back)
  auto attempt = [&oks](http_connection& c, bool right) {
    auto r = c.request("POST", "/login", {{"X-Password", right ? "right" : "wrong"}}, "user=u");
    if (r.status == 200u) ++oks;
    return r;
  };

  // Keep the five 401s inside one 10-minute window of the store's clock.
  auto first = attempt(a, true);
  ASSERT_EQ(first.status, 200u) << first.body;
  if (std::stoll(first.header("X-RateLimit-Reset")) < 10) {
    std::this_thread::sleep_for(
        std::chrono::seconds(std::stoll(first.header("X-RateLimit-Reset"))));
    first = attempt(a, true);
  }
  // A 200 holds its unit while it is answered (Remaining 4), and gets it back at its end.
  EXPECT_EQ(first.header("X-RateLimit-Limit"), "5");
  EXPECT_EQ(first.header("X-RateLimit-Remaining"), "4");
  EXPECT_EQ(first.header("RateLimit-Policy"), "\"failed_logins\";q=5;w=600");
  for (int i = 0; i < 3; ++i) {
    const auto ok = attempt(a, true);
    EXPECT_EQ(ok.status, 200u);
    EXPECT_EQ(ok.header("X-RateLimit-Remaining"), "4") << "a 200 was counted";
  }
  for (int i = 0; i < 5; ++i) {
    const auto bad = attempt(a, false);
    EXPECT_EQ(bad.status, 401u);
    EXPECT_EQ(bad.header("X-RateLimit-Limit"), "5");
    EXPECT_EQ(bad.header("X-RateLimit-Remaining"), std::to_string(4 - i)) << "401 no. " << i + 1;
  }
  const int reached = login.answered();
  // The 6th: refused for this address, even with the right password, before the upstream.
  const auto sixth = attempt(a, true);
  ASSERT_EQ(sixth.status, 429u) << sixth.body;
  EXPECT_EQ(sixth.header("X-RateLimit-Limit"), "5");
  EXPECT_EQ(sixth.header("X-RateLimit-Remaining"), "0");
  EXPECT_EQ(sixth.header("Retry-After"), sixth.header("X-RateLimit-Reset"));
  EXPECT_LE(std::stoll(sixth.header("Retry-After")), 600);
  EXPECT_EQ(sixth.header("RateLimit-Policy"), "\"failed_logins\";q=5;w=600");
  EXPECT_EQ(sixth.header("RateLimit"),
            "\"failed_logins\";r=0;t=" + sixth.header("X-RateLimit-Reset"));
  EXPECT_EQ(sixth.header("Content-Type"), "application/problem+json");
  EXPECT_NE(sixth.body.find("\"violated-policies\":[\"failed_logins\"]"), std::string::npos)
      << sixth.body;
  EXPECT_EQ(login.answered(), reached) << "a refused login reached the upstream";

  // Another address is unaffected, for 200s and 401s alike.
  const auto other = attempt(b, true);
  EXPECT_EQ(other.status, 200u);
  EXPECT_EQ(other.header("X-RateLimit-Remaining"), "4");
  const auto other_bad = attempt(b, false);
  EXPECT_EQ(other_bad.status, 401u);
  EXPECT_EQ(other_bad.header("X-RateLimit-Remaining"), "4");
  EXPECT_EQ(attempt(b, true).header("X-RateLimit-Remaining"), "3");  // its one 401 counted

  // Settlements by outcome: 5 + 1 matched 401s kept their unit; every 200 got its unit back.
  // (The last exchange ends just after its client has the response: poll for its count.)
  observability::metrics_sample sample;
  std::map<std::string, std::uint64_t> by;
  (void)eventually(
      [&] {
        sample = gw.gateway().sample();
        for (const auto& [outcome, n] : sample.settlements) by[outcome] = n;
        return by["refunded"] == oks;
      },
      2s);  // (asserted below)
  EXPECT_EQ(by["settled"], 6u);
  EXPECT_EQ(by["refunded"], oks);
  EXPECT_EQ(sample.settle_failures, 0u);
}

INSTANTIATE_TEST_SUITE_P(stores, failed_logins, every_store, store_name);

const char* const token_rules = R"(
listen: 127.0.0.1:0
store: STORE
identity: {api_key: {header: X-API-Key}, unknown_key: reject}
plans: {free: {limits: []}}
api_keys: {key-a: free}
upstreams: {ai: {url: UPSTREAM_URL}}
routes:
  - name: chat
    match: {path_prefix: /v1/chat/completions, methods: [POST]}
    upstream: ai
    on_store_failure: fail_closed
    limits:
      - name: tokens
        by: api_key
        algorithm: fixed_window
        rate: 10000/1h
        charge:
          reserve: {header: X-Max-Tokens, max: 4000}
          settle: {json: usage.total_tokens}
)";

class ai_tokens : public ::testing::TestWithParam<store_kind> {};

TEST_P(ai_tokens, reserve_then_settle_json_and_sse) {
  temp_dir dir("charge-ai");
  openai_upstream up(dir.path, {200, 4});  // SSE events 200 ms apart
  const store_under_test st(GetParam());
  const std::string store = st.line();
  gateway_fixture gw(substitute(token_rules, {{"STORE", store}, {"UPSTREAM_URL", up.url()}}), 1);
  http_connection c(gw.port(), 10s);
  auto complete = [&](const std::string& reserve, unsigned total, bool stream = false) {
    header_list h{{"Content-Type", "application/json"},
                  {"X-API-Key", "key-a"},
                  {"X-Test-Total-Tokens", std::to_string(total)}};
    if (!reserve.empty()) h.emplace_back("X-Max-Tokens", reserve);
    return c.request("POST", "/v1/chat/completions", h, chat_request("hello", stream));
  };
  /// Explain's `now` of key-a's limit, asked with a 1-unit reservation (empty: no answer).
  auto explained = [&] {
    observability::explain_query q;
    q.method = "POST";
    q.path = "/v1/chat/completions";
    q.api_key = "key-a";
    q.headers = {{"X-Max-Tokens", "1"}};
    const auto text = gw.gateway().explain(q);
    if (!text) return boost::json::object{};
    const auto e = boost::json::parse(*text).as_object();
    return e.at("limits").as_array().at(0).as_object().at("now").as_object();
  };
  /// What the store holds for key-a: explain's Remaining for a 1-unit reservation, plus 1.
  auto held = [&] {
    const auto now = explained();
    if (now.empty()) return std::int64_t{-1};
    return now.at("remaining").to_number<std::int64_t>() + (now.at("admits").as_bool() ? 1 : 0);
  };
  /// This gateway's reservations outstanding on key-a's bucket: {requests, units}.
  auto outstanding = [&] {
    const auto now = explained();
    if (now.empty()) return std::pair<std::int64_t, std::int64_t>{-1, -1};
    const auto& o = now.at("reservations_outstanding").as_object();
    EXPECT_EQ(o.at("scope"), "this gateway");
    return std::pair{o.at("requests").to_number<std::int64_t>(),
                     o.at("units").to_number<std::int64_t>()};
  };
  using held_units = std::pair<std::int64_t, std::int64_t>;

  // JSON: 1000 reserved (the response says 9000 left), 400 used: 600 refunded.
  auto r = complete("1000", 400);
  ASSERT_EQ(r.status, 200u) << r.body;
  if (std::stoll(r.header("X-RateLimit-Reset")) < 30) {
    GTEST_SKIP() << "the hour's window of the store clock ends within 30 s";
  }
  EXPECT_EQ(r.header("X-RateLimit-Limit"), "10000");
  EXPECT_EQ(r.header("X-RateLimit-Remaining"), "9000");
  EXPECT_EQ(held(), 9600);
  held_units open{-1, -1};
  (void)eventually([&] { return (open = outstanding()) == held_units{0, 0}; }, 2s);
  EXPECT_EQ(open, (held_units{0, 0})) << "settled when the JSON answer ended";

  // SSE: 1000 reserved, 1500 used (500 charged on top). The events arrive as they are sent:
  // the first is read before the upstream has recorded the completion, which it does just
  // before the stream's last bytes.
  {
    raw_socket s = raw_socket::connect(gw.port());
    const std::string body = chat_request("hello", true);
    ASSERT_TRUE(
        s.write("POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                "Content-Type: application/json\r\nX-API-Key: key-a\r\n"
                "X-Max-Tokens: 1000\r\nX-Test-Total-Tokens: 1500\r\nContent-Length: " +
                std::to_string(body.size()) + "\r\n\r\n" + body));
    const auto head = read_head(s, 5s);
    ASSERT_TRUE(head);
    EXPECT_EQ(head->status(), 200u);
    EXPECT_EQ(head->header("X-RateLimit-Remaining"), "8600");
    ASSERT_TRUE(s.read_until("data: ", 5s));
    EXPECT_EQ(up.charges().size(), 1u) << "the first event came after the stream had ended";
    // Mid-stream: the reservation is outstanding on this gateway until the stream ends.
    EXPECT_EQ(outstanding(), (held_units{1, 1000}));
    ASSERT_TRUE(s.read_until("data: [DONE]", 10s));
    ASSERT_TRUE(s.read_until("0\r\n\r\n", 5s));
  }
  ASSERT_EQ(up.wait_charges(2).size(), 2u);
  // (Another connection: its settlement is sent when the stream ends; poll for it.)
  std::int64_t now = -1;
  (void)eventually([&] { return (now = held()) == 8100; }, 2s);
  EXPECT_EQ(now, 8100);
  EXPECT_EQ(outstanding(), (held_units{0, 0}));

  // A reservation that is not a number: 400 naming the header, nothing reaches the upstream.
  r = complete("lots", 100);
  EXPECT_EQ(r.status, 400u);
  EXPECT_EQ(r.header("Content-Type"), "application/problem+json");
  EXPECT_NE(r.body.find("X-Max-Tokens"), std::string::npos) << r.body;
  EXPECT_EQ(up.charges().size(), 2u);

  // The next response reports the settled balance less its own reservation (capped at 4000).
  r = complete("9999", 100);
  ASSERT_EQ(r.status, 200u) << r.body;
  EXPECT_EQ(r.header("X-RateLimit-Remaining"), "4100");
  EXPECT_EQ(held(), 8000);

  // Spend the rest at exactly the reservation; then the balance cannot cover one: refused
  // before the upstream spends anything (no header: the max is reserved).
  for (int i = 0; i < 2; ++i) {
    r = complete("4000", 4000);
    ASSERT_EQ(r.status, 200u) << r.body;
  }
  EXPECT_EQ(held(), 0);
  const std::size_t upstream_seen = up.charges().size();
  r = complete("", 10);
  EXPECT_EQ(r.status, 429u);
  EXPECT_EQ(r.header("X-RateLimit-Remaining"), "0");
  EXPECT_EQ(r.header("Retry-After"), r.header("X-RateLimit-Reset"));
  EXPECT_EQ(up.charges().size(), upstream_seen);

  // Never above the budget: every reservation covered its cost.
  EXPECT_LE(up.total_charged(), 10'000u);
  EXPECT_EQ(up.total_charged(), 400u + 1500u + 100u + 8000u);
  const auto sample = gw.gateway().sample();
  std::map<std::string, std::uint64_t> by;
  for (const auto& [outcome, n] : sample.settlements) by[outcome] = n;
  EXPECT_EQ(by["refunded"], 2u);
  EXPECT_EQ(by["charged"], 1u);
  EXPECT_EQ(by["settled"], 2u);
  EXPECT_EQ(by["fallback"], 0u);
}

// Two charged limits whose buckets are on two masters of a cluster (a key's token budget and
// an address's): a reservation is taken from both, each settles on its own master, and a
// request the address's limit refuses charges the key's nothing (the split check peeks first).
TEST(ai_tokens_cluster, a_charge_split_over_two_masters_settles_on_each) {
  redis_cluster cluster({.replicas_per_master = 0, .env = {}});
  const auto master_of = [&](const std::string& limit, limiter::key_namespace ns,
                             const std::string& value) {
    limiter::limit_check lc;
    lc.key = limiter::bucket_key(limit, ns, value);
    return cluster.master_of_slot(store::key_hash_slot(lua::redis_key(lc, lua::key_layout{})));
  };
  const auto key_master = master_of("tokens", limiter::key_namespace::api_key, "key-a");
  std::string ip_limit;
  for (int i = 0; ip_limit.empty() && i < 100; ++i) {
    const std::string name = "ip_tokens_" + std::to_string(i);
    if (master_of(name, limiter::key_namespace::ip, "127.0.0.1") != key_master) ip_limit = name;
  }
  ASSERT_FALSE(ip_limit.empty());
  temp_dir dir("charge-split");
  openai_upstream up(dir.path);
  std::string rules =
      substitute(token_rules, {{"STORE", cluster.store_yaml()}, {"UPSTREAM_URL", up.url()}});
  rules += "      - {name: " + ip_limit +
           ", by: ip, algorithm: fixed_window, rate: 5000/1h,\n"
           "         charge: {reserve: {header: X-Max-Tokens, max: 4000},"
           " settle: {json: usage.total_tokens}}}\n";
  gateway_fixture gw(rules, 1);
  http_connection c(gw.port(), 10s);
  auto complete = [&](const std::string& reserve, unsigned total) {
    return c.request("POST", "/v1/chat/completions",
                     {{"Content-Type", "application/json"},
                      {"X-API-Key", "key-a"},
                      {"X-Max-Tokens", reserve},
                      {"X-Test-Total-Tokens", std::to_string(total)}},
                     chat_request("hello", false));
  };
  /// What each master holds for `limit`: explain's Remaining for a 1-unit reservation, plus 1.
  auto held = [&](const std::string& limit) {
    observability::explain_query q;
    q.method = "POST";
    q.path = "/v1/chat/completions";
    q.api_key = "key-a";
    q.headers = {{"X-Max-Tokens", "1"}};
    const auto text = gw.gateway().explain(q);
    if (!text) return std::int64_t{-1};
    const auto doc = boost::json::parse(*text);
    for (const auto& l : doc.as_object().at("limits").as_array()) {
      if (l.as_object().at("name").as_string() != limit) continue;
      const auto& now = l.as_object().at("now").as_object();
      return now.at("remaining").to_number<std::int64_t>() + (now.at("admits").as_bool() ? 1 : 0);
    }
    return std::int64_t{-2};
  };

  // 1000 reserved from both (the address's 4000 left is the lower), 400 used.
  auto r = complete("1000", 400);
  ASSERT_EQ(r.status, 200u) << r.body;
  if (std::stoll(r.header("X-RateLimit-Reset")) < 30) {
    GTEST_SKIP() << "the hour's window of the store clock ends within 30 s";
  }
  EXPECT_EQ(r.header("X-RateLimit-Limit"), "5000");
  EXPECT_EQ(r.header("X-RateLimit-Remaining"), "4000");
  std::int64_t key_left = -1, ip_left = -1;
  (void)eventually(
      [&] {
        key_left = held("tokens");
        ip_left = held(ip_limit);
        return key_left == 9600 && ip_left == 4600;
      },
      2s);  // (asserted below)
  EXPECT_EQ(key_left, 9600);
  EXPECT_EQ(ip_left, 4600);

  // 4000 reserved, 4600 used: 600 charged on top on both masters; the address's is spent.
  r = complete("4000", 4600);
  ASSERT_EQ(r.status, 200u) << r.body;
  EXPECT_EQ(r.header("X-RateLimit-Remaining"), "600");
  (void)eventually(
      [&] {
        key_left = held("tokens");
        ip_left = held(ip_limit);
        return key_left == 5000 && ip_left == 0;
      },
      2s);  // (asserted below)
  EXPECT_EQ(key_left, 5000);
  EXPECT_EQ(ip_left, 0);

  // Refused by the address's limit before the upstream; the key's budget is not touched.
  const std::size_t upstream_seen = up.charges().size();
  r = complete("100", 100);
  EXPECT_EQ(r.status, 429u);
  EXPECT_EQ(r.header("X-RateLimit-Remaining"), "0");
  EXPECT_EQ(r.header("Retry-After"), r.header("X-RateLimit-Reset"));
  EXPECT_NE(r.body.find(ip_limit), std::string::npos) << r.body;
  EXPECT_EQ(up.charges().size(), upstream_seen);
  EXPECT_EQ(held("tokens"), 5000);
  EXPECT_EQ(held(ip_limit), 0);
}

INSTANTIATE_TEST_SUITE_P(stores, ai_tokens, every_store, store_name);

// A near-limit warning on a charged limit counts the crossing of what the request took — its
// reservation, not the route's cost: 40 reserved of 100 is 40 used (below the 50 % threshold),
// the second request's 40 more take it to 80 (the crossing, counted once), and a third does not
// fit (80 + 40 > 100). The upstream states no cost: each settles at its reservation.
TEST(charge_warnings, the_crossing_counts_the_reservation) {
  login_upstream upstream;
  gateway_fixture gw(substitute(R"(
listen: 127.0.0.1:0
store: {type: memory}
upstreams: {api: {url: UPSTREAM_URL}}
routes:
  - name: chat
    match: {path_prefix: /chat}
    upstream: api
    limits:
      - {name: tokens, by: ip, algorithm: fixed_window, rate: 100/1h, warn_at: 50%,
         charge: {reserve: 40, settle: {header: X-Usage-Tokens}}}
)",
                                {{"UPSTREAM_URL", upstream.url()}}),
                     1);
  http_connection c(gw.port());
  auto first = c.request("GET", "/chat", {{"X-Password", "right"}});
  ASSERT_EQ(first.status, 200u) << first.body;
  if (std::stoll(first.header("X-RateLimit-Reset")) < 10) GTEST_SKIP() << "at a window's end";
  EXPECT_EQ(first.header("X-RateLimit-Remaining"), "60");
  EXPECT_EQ(first.header("X-RateLimit-Warning"), "");
  const auto second = c.request("GET", "/chat", {{"X-Password", "right"}});
  ASSERT_EQ(second.status, 200u) << second.body;
  EXPECT_EQ(second.header("X-RateLimit-Remaining"), "20");
  EXPECT_EQ(second.header("X-RateLimit-Warning"), "\"tokens\"");
  const auto third = c.request("GET", "/chat", {{"X-Password", "right"}});
  EXPECT_EQ(third.status, 429u);
  std::map<std::string, std::uint64_t> warned;
  for (const auto& [limit, n] : gw.gateway().sample().quota_warnings) warned[limit] = n;
  EXPECT_EQ(warned["tokens"], 1u);
}

}  // namespace
}  // namespace sluice::test
