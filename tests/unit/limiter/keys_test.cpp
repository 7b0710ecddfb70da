// SPDX-License-Identifier: Apache-2.0
#include "sluice/limiter/keys.hpp"

#include <gtest/gtest.h>

#include <random>
#include <set>

namespace sluice::limiter {
namespace {

bool safe(const std::string& key) {
  // Only the gateway's own braces: exactly one '{' at the start of the tag and one '}' at the end.
  if (key.size() > 128) return false;
  if (key.find('{') != 3 || key.rfind('{') != 3 || key.find('}') != key.size() - 1) return false;
  for (unsigned char c : key) {
    if (c <= ' ' || c >= 0x7f) return false;
  }
  return key.find(':', 3) == std::string::npos;
}

TEST(bucket_key, plain_values_are_readable) {
  EXPECT_EQ(bucket_key("items_key", key_namespace::api_key, "key-a"), "sl:{items_key|k|rkey-a}");
  EXPECT_EQ(bucket_key("login_ip", key_namespace::ip, "203.0.113.7"),
            "sl:{login_ip|i|r203.0.113.7}");
}

// Case c14: separators, braces, case, percent-encoding and Unicode never merge buckets and never
// reach the key unencoded.
TEST(bucket_key, c14_values_map_to_distinct_safe_keys) {
  std::mt19937 rng(7);
  std::string big(8000, 'a');
  for (auto& c : big) c = static_cast<char>('a' + rng() % 26);
  const std::vector<std::string> values = {"a:b",   "a_b",  "a b",  "a%3Ab", "A:B",
                                           "{a}:b", "a}b{", "ключ", "ａ:b",  big,
                                           "b",     "a\tb", "",     "a|k|b", "x00"};
  std::set<std::string> keys;
  for (const auto& v : values) {
    auto k = bucket_key("docs", key_namespace::header, v);
    EXPECT_TRUE(safe(k)) << k;
    keys.insert(k);
  }
  EXPECT_EQ(keys.size(), values.size());
  // limit `docs_a` + `b` never meets limit `docs` + `a_b`.
  EXPECT_NE(bucket_key("docs_a", key_namespace::header, "b"),
            bucket_key("docs", key_namespace::header, "a_b"));
}

TEST(bucket_key, namespaces_never_meet) {
  std::set<std::string> keys;
  for (auto ns :
       {key_namespace::api_key, key_namespace::anonymous_ip, key_namespace::user, key_namespace::ip,
        key_namespace::global, key_namespace::header, key_namespace::fallback_ip}) {
    keys.insert(bucket_key("l", ns, "203.0.113.20"));
  }
  EXPECT_EQ(keys.size(), 7u);
}

TEST(bucket_key, hashed_and_raw_forms_cannot_collide) {
  // A raw value that looks like a hash still gets the raw marker.
  auto hashed = bucket_key("l", key_namespace::header, "a:b");
  auto tail = hashed.substr(hashed.find("|x") + 2, 32);
  auto raw = bucket_key("l", key_namespace::header, "x" + tail);
  EXPECT_NE(hashed, raw);
}

// The hash layout: FNV-1a 64 of the bucket's <enc> mod the group count, in hex (values
// computed independently from the published FNV-1a parameters).
TEST(packed_address, groups_buckets_by_fnv1a_of_the_identity_part) {
  auto a = packed_address("sl:{items_key|k|rkey-a}", 65536);
  EXPECT_EQ(a.key, "sl:{items_key|k|#9746}");
  EXPECT_EQ(a.field, "rkey-a");
  EXPECT_EQ(packed_address("sl:{free_minute|k|rkey-0000001}", 65536).key,
            "sl:{free_minute|k|#2e2e}");
  EXPECT_EQ(packed_address("sl:{items_key|k|rkey-a}", 1).key, "sl:{items_key|k|#0}");
  // The whole address is a function of the bucket key: same bucket, same place.
  EXPECT_EQ(packed_address(bucket_key("l", key_namespace::ip, "::1"), 7).key,
            packed_address(bucket_key("l", key_namespace::ip, "::1"), 7).key);
}

TEST(packed_address, round_trips_and_never_meets_a_bucket_key) {
  for (const std::string& v : {std::string("key-a"), std::string("203.0.113.20"),
                               std::string("a b c"), std::string(60, 'z')}) {
    const auto key = bucket_key("docs", key_namespace::header, v);
    const auto at = packed_address(key, 1024);
    EXPECT_EQ(unpacked_key(at.key, at.field), key);
    EXPECT_NE(at.key, key);
    EXPECT_EQ(at.key.find("sl:{docs|h|#"), 0u) << at.key;
    // A group key's identity part starts with '#', which no bucket_key() part does.
    EXPECT_EQ(at.field.front() == 'r' || at.field.front() == 'x', true);
  }
}

TEST(packed_address, keys_of_another_shape_stay_whole) {
  for (const std::string k :
       {"plain", "{a}:b", "sl:{nobar}", "sl:{a|b}", "sl:{a|k|}", "x:{a|k|rv}"}) {
    const auto at = packed_address(k, 16);
    EXPECT_EQ(at.key, k);
    EXPECT_TRUE(at.field.empty()) << k;
  }
  EXPECT_EQ(unpacked_key("sl:{a|k|rv}", "f"), "sl:{a|k|rv}");  // not a group key
}

}  // namespace
}  // namespace sluice::limiter
