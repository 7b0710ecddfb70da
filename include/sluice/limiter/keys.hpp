// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// Store keys of buckets: one function builds every key, injectively, under a gateway-chosen
/// Redis Cluster hash tag (no two keys collide).

#include "sluice/config/rules.hpp"

#include <cstdint>
#include <string>
#include <string_view>

namespace sluice::limiter {

/// Namespaces of an identity value inside a key. Each kind has its own, so an API key whose
/// text is an address never meets the anonymous-by-IP bucket of that address (an empty id).
enum class key_namespace : char {
  api_key = 'k',       ///< a directory API key
  anonymous_ip = 'a',  ///< an anonymous caller keyed by client address
  user = 'u',
  ip = 'i',
  global = 'g',
  header = 'h',
  fallback_ip = 'f',  ///< `by: user|header:NAME` whose value is absent: the client address
  descriptor = 'd',   ///< a rate limit service descriptor (domain and entries; src/rls/)
};

/// Builds the key of limit `limit_name` for identity `value` in namespace `ns`:
/// `sl:{<limit>|<ns>|<enc>}` where <enc> is `r` + the value when it is 1..48 bytes of
/// `[A-Za-z0-9._-]`, and otherwise `x` + hex of the value's SHA-256 truncated to 128 bits.
/// Limit names are validated to `[A-Za-z0-9_-]{1,64}`, so keys are at most 128 bytes and
/// never contain a caller-supplied `:`, `{`, `}`, whitespace or non-ASCII byte. The whole
/// bucket identity is the hash tag, so every key of a bucket lands in one cluster slot.
std::string bucket_key(std::string_view limit_name, key_namespace ns, std::string_view value);

/// An identity value of shard `shard` of a sharded `by: global` limit (`shards: S`):
/// "shard-<shard>", or with `variant` > 0 "shard-<shard>.<variant>", so each shard is its own
/// bucket_key(). app::snapshot picks for each shard the first variant whose store key lands
/// in that shard's part of the Redis Cluster slot space, so that the shards spread over the
/// masters; `value` (the global identity) is not part of it.
std::string shard_value(std::string_view value, unsigned shard, unsigned variant = 0);

/// The prefix every sluice key starts with (for SCAN in tests and operations).
inline constexpr std::string_view key_prefix = "sl:";

/// Where a bucket's state lives in Redis: the string value of `key` (`field` empty), or
/// field `field` of the hash `key`.
struct store_address {
  std::string key;
  std::string field;
};

/// The hash layout (`store.layout: hash`, the default): the bucket `sl:{<limit>|<ns>|<enc>}`
/// (a bucket_key()) lives as field `<enc>` of the hash `sl:{<limit>|<ns>|#<g>}`, where <g> is
/// the lower-case hex of FNV-1a-64(<enc>) mod `groups` (FNV-1a: Fowler, Noll, Vo; 64-bit
/// offset basis 0xcbf29ce484222325, prime 0x100000001b3). Small hashes are stored by Redis
/// as listpacks, so a bucket costs its field and value plus a share of the hash instead of
/// a key, a value object and two dict entries. '#' never starts an <enc> (which starts with
/// `r` or `x`), so a group key never equals a bucket key of the key layout. `groups` >= 1;
/// a key not shaped like a bucket_key() is returned unpacked (`field` empty).
store_address packed_address(std::string_view bucket_key, std::uint32_t groups);

/// Inverse of packed_address() for listing buckets: the bucket_key() of field `field` of the
/// group hash `group_key`; `group_key` itself when it is not a group key.
std::string unpacked_key(std::string_view group_key, std::string_view field);

}  // namespace sluice::limiter
