// SPDX-License-Identifier: Apache-2.0
// sluice-test-support: redis_cluster redis_server upstream_server http_client
// sluice-test-serial (three gateway processes, a cluster and 12 closed-loop clients at once)
// The accuracy harness on Redis Cluster, short version (issue 11): K = 3 gateway processes
// (the real `sluice` binary, one worker each) on a real cluster of three masters, every admitted
// request's store decision time recorded at the upstream, measured with
// bench/accuracy_analysis.hpp. A token bucket and a sliding log (20 units per 1 s; exact modes)
// side by side under greedy traffic (12 clients, 2 s, a quarter of requests costing 3) on 3 keys
// each, the keys chosen so that each limit's buckets live on all three masters. Fails when a
// ratio is above 1.00, when a request is answered with anything but 200 or 429 (a store error
// on a fail_closed route is a 503), or when the buckets are not on at least two masters.
// bench/accuracy.sh's `cluster` runs are the long version.

#include "support/child_process.hpp"
#include "support/http_client.hpp"
#include "support/redis_cluster.hpp"
#include "support/temp_dir.hpp"
#include "support/upstream_server.hpp"

#include "../../bench/accuracy_analysis.hpp"

#include "sluice/limiter/keys.hpp"
#include "sluice/store/cluster_slots.hpp"
#include "sluice/store/lua_scripts.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace sluice::test {
namespace {

using namespace std::chrono_literals;

struct measured_limit {
  const char* name;  // the limit's name (its buckets' keys start with it)
  const char* path;  // routes <path>/a (cost 1) and <path>/b (cost 3)
  bench::algo algo;
  config::algorithm store_algo;  // (a sliding log is a key of its own, not a hash field)
  const char* yaml;              // the limit, without its name
};

const measured_limit limits[] = {
    {"acc_tb", "/tb", bench::algo::token_bucket, config::algorithm::token_bucket,
     "rate: 20/1s, burst: 10"},
    {"acc_log", "/log", bench::algo::sliding_log, config::algorithm::sliding_log,
     "algorithm: sliding_log, rate: 20/1s"},
};

// The slot of limit `l`'s bucket for `X-Client: value`, under the default (hash) layout.
std::uint16_t slot_of(const measured_limit& l, const std::string& value) {
  limiter::limit_check lc;
  lc.algorithm = l.store_algo;
  lc.key = limiter::bucket_key(l.name, limiter::key_namespace::header, value);
  return store::key_hash_slot(lua::redis_key(lc, lua::key_layout{}));
}

TEST(accuracy_cluster, three_gateway_processes_on_a_three_master_cluster_within_1_00) {
  redis_cluster::options opts;
  opts.replicas_per_master = 0;  // replicas change nothing here; three masters do
  redis_cluster cluster(opts);
  ASSERT_EQ(cluster.masters().size(), 3u);
  upstream_server upstream;
  temp_dir dir("accuracy-cluster");

  // Per limit, three X-Client values whose buckets are on three different masters.
  std::map<std::string, std::vector<std::string>> keys;
  for (const auto& l : limits) {
    std::set<std::size_t> used;
    for (int i = 0; i < 200 && used.size() < 3; ++i) {
      const std::string value = "client-" + std::to_string(i);
      const auto m = cluster.master_of_slot(slot_of(l, value));
      if (m && used.insert(*m).second) keys[l.name].push_back(value);
    }
    ASSERT_EQ(keys[l.name].size(), 3u) << l.name << ": no three keys on three masters";
  }

  std::string nodes;
  for (const auto p : cluster.ports())
    nodes += (nodes.empty() ? "" : ", ") + std::string("\"127.0.0.1:") + std::to_string(p) + "\"";
  std::string rules = "store: {type: redis-cluster, nodes: [" + nodes +
                      "], timeout: 250ms}\n"
                      "decision_time_header: X-Sluice-Decided-At\n"
                      "upstreams: {api: {url: \"" +
                      upstream.url() + "\"}}\nroutes:\n";
  for (const auto& l : limits) {
    for (const auto& [suffix, cost] : {std::pair{"a", 1}, std::pair{"b", 3}}) {
      rules += "  - {name: " + std::string(l.name) + "_" + suffix +
               ", match: {path_prefix: " + l.path + "/" + suffix +
               "}, upstream: api, cost: " + std::to_string(cost) +
               ", on_store_failure: fail_closed, limits: [{name: " + l.name +
               ", by: \"header:X-Client\", " + l.yaml + "}]}\n";
    }
  }
  const auto rules_file = dir.path / "rules.yaml";
  std::ofstream(rules_file) << rules;

  // Three gateway processes, one worker each, ready (every master's connection up).
  std::vector<std::unique_ptr<sluice_process>> gateways;
  std::vector<std::uint16_t> ports;
  for (int g = 0; g < 3; ++g) {
    const auto gdir = dir.path / ("gw" + std::to_string(g));
    std::filesystem::create_directories(gdir);
    gateways.push_back(std::make_unique<sluice_process>(rules_file, gdir, 1));
    ASSERT_TRUE(gateways.back()->wait_listening()) << gateways.back()->log();
    ports.push_back(gateways.back()->port);
  }
  for (auto& gw : gateways) {
    (void)eventually([&] { return get(gw->admin_port, "/readyz").status == 200u; }, 5s);
    ASSERT_EQ(get(gw->admin_port, "/readyz").status, 200u) << gw->log();
  }

  // Greedy traffic: 12 closed-loop clients, 4 per gateway, a random limit, key and cost.
  const auto deadline = std::chrono::steady_clock::now() + 2s;
  std::atomic<int> admitted{0}, refused{0}, other{0};
  std::vector<std::thread> clients;
  for (int c = 0; c < 12; ++c) {
    clients.emplace_back([&, c] {
      std::mt19937 rng(static_cast<unsigned>(c) + 1);
      http_connection conn(ports[static_cast<std::size_t>(c) % ports.size()]);
      while (std::chrono::steady_clock::now() < deadline) {
        const auto& l = limits[rng() % 2];
        const auto& key = keys[l.name][rng() % 3];
        const bool heavy = rng() % 4 == 0;
        const auto r =
            conn.request("GET", std::string(l.path) + (heavy ? "/b" : "/a"), {{"X-Client", key}});
        if (r.status == 200) {
          ++admitted;
        } else if (r.status == 429) {
          ++refused;
        } else {
          ++other;
        }
      }
    });
  }
  for (auto& t : clients) t.join();

  // The admissions, per limit and key, at their store decision times.
  std::map<std::string, std::map<std::string, std::vector<bench::admitted>>> per_limit;
  for (const auto& req : upstream.requests()) {
    const auto decided = req.header("X-Sluice-Decided-At");
    ASSERT_FALSE(decided.empty()) << "every admitted request carries its decision time";
    for (const auto& l : limits) {
      if (!req.target.starts_with(std::string(l.path) + "/")) continue;
      const std::int64_t units = req.target.starts_with(std::string(l.path) + "/b") ? 3 : 1;
      per_limit[l.name][req.header("X-Client")].push_back({std::stoll(decided), units});
    }
  }
  EXPECT_EQ(other.load(), 0) << "only 200 and 429 (a store failure answers 503 here)";
  EXPECT_GT(refused.load(), 0);
  for (const auto& l : limits) {
    SCOPED_TRACE(l.name);
    const auto r = bench::analyse(per_limit[l.name], l.algo, 20, 1'000, 10);
    std::printf(
        "accuracy on the cluster, %s (3 gateway processes): %lld units admitted, "
        "ratio %.3f (worst key %s), rolling %.3f, overshoot %.1f units\n",
        l.name, static_cast<long long>(r.units), r.ratio, r.worst_key.c_str(), r.rolling_ratio,
        r.overshoot_units);
    EXPECT_GT(r.units, 3 * 20) << "the run must actually exercise the limit on every key";
    EXPECT_EQ(per_limit[l.name].size(), 3u) << "every key admitted something";
    EXPECT_LE(r.ratio, 1.00) << "worst key " << r.worst_key;
  }

  // Where the buckets are: each limit's keys on every master, as chosen.
  for (const auto& l : limits) {
    std::size_t holding = 0;
    for (const auto m : cluster.masters()) {
      const auto k = cluster.command(m, {"KEYS", "sl:{" + std::string(l.name) + "|*"});
      std::printf("%s: master %zu (port %u) holds %zu keys\n", l.name, m, cluster.port(m),
                  k.elements.size());
      holding += k.elements.empty() ? 0 : 1;
    }
    EXPECT_EQ(holding, 3u) << l.name << ": the buckets must be spread over the masters";
  }
  for (auto& gw : gateways) {
    const auto log = gw->log();
    EXPECT_EQ(log.find("CROSSSLOT"), std::string::npos) << log;
  }
}

}  // namespace
}  // namespace sluice::test
