// SPDX-License-Identifier: Apache-2.0
// sluice-test-support: redis_sentinel redis_server
// The Sentinel fixture against real Sentinels: three Sentinels name the primary, and after
// SENTINEL FAILOVER the replica, which then answers as a master; an unknown master name gets
// nil, never an address.
#include "support/redis_sentinel.hpp"
#include "support/eventually.hpp"

#include <gtest/gtest.h>

namespace sluice::test {
namespace {

std::string role(redis_server& node) {
  const auto r = node.command({"ROLE"});
  return r.type == redis_reply::kind::array && !r.elements.empty() ? r.elements[0].str : r.str;
}

// The run_id of the server on `port` ("" when nothing answers there).
std::string run_id(std::uint16_t port) {
  const auto info = redis_command(port, {"INFO", "server"});
  if (info.type != redis_reply::kind::string) return {};
  const auto at = info.str.find("run_id:");
  if (at == std::string::npos) return {};
  const auto end = info.str.find_first_of("\r\n", at);
  return info.str.substr(at + 7, end == std::string::npos ? std::string::npos : end - at - 7);
}

TEST(redis_sentinel, the_sentinels_name_the_primary_then_the_promoted_replica) {
  std::vector<std::uint16_t> sentinel_ports;
  std::vector<std::string> sentinel_ids;  // each Sentinel's run_id (INFO server)
  {
    redis_sentinel_group group;
    ASSERT_EQ(group.sentinels(), 3u);
    for (std::size_t i = 0; i < group.sentinels(); ++i) {
      const auto r =
          group.sentinel_command(i, {"SENTINEL", "GET-MASTER-ADDR-BY-NAME", group.master_name()});
      ASSERT_EQ(r.type, redis_reply::kind::array) << r.str;
      ASSERT_EQ(r.elements.size(), 2u);
      EXPECT_EQ(r.elements[0].str, "127.0.0.1");
      EXPECT_EQ(r.elements[1].str, std::to_string(group.primary().port()));
      const auto unknown =
          group.sentinel_command(i, {"SENTINEL", "GET-MASTER-ADDR-BY-NAME", "no-such-master"});
      EXPECT_EQ(unknown.type, redis_reply::kind::nil) << unknown.str;
    }
    EXPECT_EQ(role(group.primary()), "master");
    EXPECT_EQ(role(group.replica()), "slave");
    ASSERT_EQ(group.primary().command({"SET", "before", "1"}).type, redis_reply::kind::status);
    // (WAIT's own timeout, scaled: on a loaded machine the replica's ack may take a while.)
    const auto acked = group.primary().command(
        {"WAIT", "1", std::to_string(scaled(std::chrono::milliseconds(2000)).count())});
    ASSERT_EQ(acked.integer, 1) << "the replica has the write";

    const auto promoted = group.failover();
    EXPECT_EQ(promoted, group.replica().port());
    for (std::size_t i = 0; i < group.sentinels(); ++i) {
      EXPECT_EQ(group.master_port(i), group.replica().port()) << "Sentinel " << i;
    }
    EXPECT_EQ(role(group.replica()), "master");
    EXPECT_EQ(group.replica().command({"GET", "before"}).str, "1");
    EXPECT_EQ(group.replica().command({"SET", "after", "1"}).type, redis_reply::kind::status);
    for (std::size_t i = 0; i < group.sentinels(); ++i) {
      sentinel_ports.push_back(group.sentinel_port(i));
      sentinel_ids.push_back(run_id(group.sentinel_port(i)));
      ASSERT_FALSE(sentinel_ids.back().empty()) << "Sentinel " << i;
    }
  }
  // The fixture stopped every Sentinel: nothing answers on its port, or what answers is
  // another server (a test running beside this one may have been given the port since).
  for (std::size_t i = 0; i < sentinel_ports.size(); ++i) {
    EXPECT_NE(run_id(sentinel_ports[i]), sentinel_ids[i]) << "Sentinel " << i;
  }
}

}  // namespace
}  // namespace sluice::test
