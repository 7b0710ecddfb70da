#pragma once
/// @file
/// Test helper: reads and pokes a bucket's stored state in a real Redis under either key
/// layout (`store.layout`), so one test body checks both. A bucket is named by its
/// bucket_key(); under the hash layout it is a field of a group hash (limiter::packed_address),
/// and "the bucket's key" (PTTL, PERSIST) is that hash. Sliding-log buckets are never packed.
/// Header-only; link redis_server.

#include "sluice/limiter/keys.hpp"
#include "sluice/store/lua_scripts.hpp"
#include "support/redis_server.hpp"

#include <set>
#include <string>

namespace sluice::test {

/// The layouts the Redis-side tests run under: a key per bucket; packed into hashes (the
/// default); and every bucket of a limit in one hash (fields sharing a hash).
inline const lua::key_layout per_key{false, 65536};
inline const lua::key_layout packed{true, 65536};
inline const lua::key_layout all_in_one_hash{true, 1};

/// A short name of a layout for traces and key prefixes: key, hash, hash1.
inline std::string layout_name(const lua::key_layout& l) {
  return !l.packed ? "key" : l.hash_groups == 1 ? "hash1" : "hash";
}

/// A view of the buckets of one Redis under `layout`.
struct bucket_view {
  const redis_server& server;
  lua::key_layout layout;

  /// Where the bucket `key` lives (per key, or field of a group hash).
  limiter::store_address where(const std::string& key, bool log = false) const {
    if (!layout.packed || log) return {key, {}};
    return limiter::packed_address(key, layout.hash_groups);
  }
  /// The stored state (nil when absent): a key's value, or a hash field's value without its
  /// "@<expires at>" stamp (see raw() for the whole field).
  redis_reply get(const std::string& key) const {
    auto r = raw(key);
    if (r.type == redis_reply::kind::string && !where(key).field.empty()) {
      const auto at = r.str.rfind('@');
      if (at != std::string::npos) r.str.resize(at);
    }
    return r;
  }
  /// The stored value as it is: a key's value, or a hash field's "<state>@<expires at ms>".
  redis_reply raw(const std::string& key) const {
    const auto at = where(key);
    if (at.field.empty()) return server.command({"GET", at.key});
    return server.command({"HGET", at.key, at.field});
  }
  /// PTTL of the Redis key holding the bucket.
  long long pttl(const std::string& key) const {
    return server.command({"PTTL", where(key).key}).integer;
  }
  /// PERSIST of the Redis key holding the bucket (1 when an expiry was removed).
  long long persist(const std::string& key) const {
    return server.command({"PERSIST", where(key).key}).integer;
  }
  /// Whether the bucket itself is stored (EXISTS, or HEXISTS of its field).
  bool exists(const std::string& key) const {
    const auto at = where(key);
    if (at.field.empty()) return server.command({"EXISTS", at.key}).integer == 1;
    return server.command({"HEXISTS", at.key, at.field}).integer == 1;
  }
  /// Stores `value` as the bucket's state, to expire `px_ms` after store time `now_ms`: a key
  /// gets PX px_ms (Redis counts it in real time); a hash field gets the stamp
  /// now_ms + px_ms and its hash an expiry of at least px_ms.
  void set(const std::string& key, const std::string& value, long long px_ms,
           long long now_ms) const {
    const auto at = where(key);
    if (at.field.empty()) {
      server.command({"SET", at.key, value, "PX", std::to_string(px_ms)});
      return;
    }
    // Lift the hash's expiry first: one about to expire must not take the new field with it
    // between the HSET and the PEXPIRE. (Tests use a px_ms above any expiry the script sets.)
    server.command({"PEXPIRE", at.key, std::to_string(px_ms)});
    server.command({"HSET", at.key, at.field, value + "@" + std::to_string(now_ms + px_ms)});
    server.command({"PEXPIRE", at.key, std::to_string(px_ms)});
  }
  /// Removes the bucket's state.
  void del(const std::string& key) const {
    const auto at = where(key);
    if (at.field.empty())
      server.command({"DEL", at.key});
    else
      server.command({"HDEL", at.key, at.field});
  }
  /// Every bucket stored under keys matching `pattern` (SCAN), as bucket_key()s: the fields
  /// of group hashes are listed as the buckets they hold.
  std::set<std::string> buckets(const std::string& pattern = "sl:*") const {
    std::set<std::string> out;
    std::string cursor = "0";
    do {
      auto r = server.command({"SCAN", cursor, "MATCH", pattern, "COUNT", "1000"});
      if (r.type != redis_reply::kind::array || r.elements.size() != 2) break;
      cursor = r.elements[0].str;
      for (const auto& k : r.elements[1].elements) {
        if (server.command({"TYPE", k.str}).str != "hash") {
          out.insert(k.str);
          continue;
        }
        for (const auto& f : server.command({"HKEYS", k.str}).elements)
          out.insert(limiter::unpacked_key(k.str, f.str));
      }
    } while (cursor != "0");
    return out;
  }
};

}  // namespace sluice::test
