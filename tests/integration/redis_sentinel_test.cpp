// SPDX-License-Identifier: Apache-2.0
// sluice-test-support: redis_sentinel redis_server
// The Sentinel fixture against real Sentinels: three Sentinels name the primary, and after
// SENTINEL FAILOVER the replica, which then answers as a master; an unknown master name gets
// nil, never an address.
#include "support/redis_sentinel.hpp"

#include <gtest/gtest.h>

namespace sluice::test {
namespace {

std::string role(redis_server& node) {
  const auto r = node.command({"ROLE"});
  return r.type == redis_reply::kind::array && !r.elements.empty() ? r.elements[0].str : r.str;
}

TEST(redis_sentinel, the_sentinels_name_the_primary_then_the_promoted_replica) {
  std::vector<std::uint16_t> sentinel_ports;
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
    const auto acked = group.primary().command({"WAIT", "1", "2000"});
    ASSERT_EQ(acked.integer, 1) << "the replica has the write";

    const auto promoted = group.failover();
    EXPECT_EQ(promoted, group.replica().port());
    for (std::size_t i = 0; i < group.sentinels(); ++i) {
      EXPECT_EQ(group.master_port(i), group.replica().port()) << "Sentinel " << i;
    }
    EXPECT_EQ(role(group.replica()), "master");
    EXPECT_EQ(group.replica().command({"GET", "before"}).str, "1");
    EXPECT_EQ(group.replica().command({"SET", "after", "1"}).type, redis_reply::kind::status);
    for (std::size_t i = 0; i < group.sentinels(); ++i)
      sentinel_ports.push_back(group.sentinel_port(i));
  }
  // The fixture stopped every Sentinel.
  for (auto port : sentinel_ports) {
    EXPECT_EQ(redis_command(port, {"PING"}).type, redis_reply::kind::io_error);
  }
}

}  // namespace
}  // namespace sluice::test
