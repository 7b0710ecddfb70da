// The accuracy harness, short version (issue 5): K = 2 gateway instances on one Redis, 12
// clients on 3 keys for 3 s with mixed costs (1 and 3), every admitted request's store
// decision time recorded at the upstream (`decision_time_header`). The clients are greedy
// (as fast as answers come). Fails when a ratio of bench/accuracy_analysis.hpp is above its
// bound: 1.00 for the token bucket, the sliding log and the fixed window (per aligned window);
// for the sliding counter, its stated guarantee (under 2x in any rolling window; greedy
// traffic measures about 1.15x; bench/accuracy.sh measures paced traffic against 1.10).
// bench/accuracy.sh is the long version (K = 1, 2, 4; adversarial traffic; bench/RESULTS.md).
// sluice-test-support: gateway_fixture redis_server upstream_server http_client

#include "harness.hpp"

#include "../../bench/accuracy_analysis.hpp"

#include <atomic>
#include <random>

namespace sluice::test {
namespace {

struct run_spec {
  const char* name;
  bench::algo algo;
  const char* limit;
  double bound;
};

const run_spec runs[] = {
    {"token_bucket", bench::algo::token_bucket,
     "{name: acc, by: \"header:X-Client\", rate: 20/1s, burst: 10}", 1.00},
    {"fixed_window", bench::algo::fixed_window,
     "{name: acc, by: \"header:X-Client\", algorithm: fixed_window, rate: 20/1s}", 1.00},
    {"sliding_window", bench::algo::sliding_window,
     "{name: acc, by: \"header:X-Client\", algorithm: sliding_window, rate: 20/1s}", 2.00},
    {"sliding_log", bench::algo::sliding_log,
     "{name: acc, by: \"header:X-Client\", algorithm: sliding_log, rate: 20/1s}", 1.00},
};

std::string rules(const std::string& limit) {
  return R"(
store: STORE
decision_time_header: X-Sluice-Decided-At
upstreams: {api: {url: UPSTREAM_URL}}
routes:
  - {name: light, match: {path_prefix: /a}, upstream: api, cost: 1, on_store_failure: fail_closed,
     limits: [)" + limit + R"(]}
  - {name: heavy, match: {path_prefix: /b}, upstream: api, cost: 3, on_store_failure: fail_closed,
     limits: [)" + limit + "]}\n";
}

TEST(accuracy, short_run_two_instances_one_redis_within_bounds) {
  for (const auto& run : runs) {
    SCOPED_TRACE(run.name);
    world w(store_kind::redis, rules(run.limit), 1);
    gateway_fixture second(w.render(rules(run.limit)), 1);
    const std::vector<std::uint16_t> ports = {w.port(), second.port()};
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(3);
    std::atomic<int> admitted{0}, other{0};
    std::vector<std::thread> clients;
    for (int c = 0; c < 12; ++c) {
      clients.emplace_back([&, c] {
        std::mt19937 rng(static_cast<unsigned>(c) + 1);
        http_connection conn(ports[static_cast<std::size_t>(c) % ports.size()]);
        while (std::chrono::steady_clock::now() < deadline) {
          const bool heavy = rng() % 4 == 0;
          auto r = conn.request("GET", heavy ? "/b" : "/a",
                                {{"X-Client", "client-" + std::to_string(rng() % 3)}});
          if (r.status == 200) {
            ++admitted;
          } else if (r.status != 429) {
            ++other;
          }
        }
      });
    }
    for (auto& t : clients) t.join();

    std::map<std::string, std::vector<bench::admitted>> per_key;
    for (const auto& req : w.upstream.requests()) {
      const auto decided = req.header("X-Sluice-Decided-At");
      ASSERT_FALSE(decided.empty()) << "every admitted request carries its decision time";
      per_key[req.header("X-Client")].push_back(
          {std::stoll(decided), req.target.starts_with("/b") ? 3 : 1});
    }
    const auto r = bench::analyse(per_key, run.algo, 20, 1'000, 10);
    std::printf("accuracy %s: admitted %d requests, %lld units; ratio %.3f, rolling %.3f\n",
                run.name, admitted.load(), static_cast<long long>(r.units), r.ratio,
                r.rolling_ratio);
    EXPECT_EQ(other.load(), 0);
    EXPECT_GT(admitted.load(), 30) << "the run must actually exercise the limit";
    EXPECT_LE(r.ratio, run.bound) << "worst key " << r.worst_key;
  }
}

}  // namespace
}  // namespace sluice::test
