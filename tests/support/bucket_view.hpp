// SPDX-License-Identifier: Apache-2.0
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

#include <algorithm>
#include <bit>
#include <cstring>
#include <set>
#include <string>
#include <string_view>
#include <vector>

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
  /// The stored state (nil when absent) as text, in the memory store's peek_state form: the
  /// script keeps it packed (doubles, lua/common.lua), a hash field after its 8-byte expiry
  /// stamp. Two numbers (a fixed window) read "<index>:<count>"; three read "<level> <stamp>
  /// <units per token>" (a token bucket), or joined by `sep` when given (':' for a sliding
  /// window). A state that is not packed (text) is returned as it is.
  redis_reply get(const std::string& key, char sep = 0) const { return decode(raw(key), key, sep); }
  /// The command raw() runs (GET of the key, or HGET of its group hash's field), to run it
  /// inside a transaction (redis_server::transaction); decode() reads its reply as get() does.
  std::vector<std::string> read_command(const std::string& key) const {
    const auto at = where(key);
    if (at.field.empty()) return {"GET", at.key};
    return {"HGET", at.key, at.field};
  }
  /// A reply of read_command(`key`) in get()'s form.
  redis_reply decode(redis_reply r, const std::string& key, char sep = 0) const {
    if (r.type != redis_reply::kind::string) return r;
    std::string_view bytes = r.str;
    if (!where(key).field.empty()) bytes.remove_prefix(std::min<std::size_t>(8, bytes.size()));
    const auto values = unpack(bytes);
    if (values.empty()) {
      r.str = std::string(bytes);
      return r;
    }
    if (sep == 0) sep = values.size() == 2 ? ':' : ' ';
    std::string out;
    for (const auto v : values) {
      if (!out.empty()) out.push_back(sep);
      out += std::to_string(v);
    }
    r.str = out;
    return r;
  }
  /// The stored value as it is: a key's value, or a hash field's packed expiry and state.
  redis_reply raw(const std::string& key) const { return server.command(read_command(key)); }
  /// The expiry stamp (ms of store time) of a hash field, or -1 (a key, or absent).
  long long field_expiry(const std::string& key) const {
    if (where(key).field.empty()) return -1;
    auto r = raw(key);
    if (r.type != redis_reply::kind::string || r.str.size() < 8) return -1;
    const auto v = unpack(std::string_view(r.str).substr(0, 8));
    return v.empty() ? -1 : v[0];
  }
  /// `text` ("<n> <n>[ <n>]" or "<n>:<n>[:<n>]") packed as the script stores it; a token
  /// bucket's "<level> <stamp>" gets units per token 0 (read in the current units).
  static std::string pack(const std::string& text) {
    std::vector<long long> values;
    std::size_t pos = 0;
    while (pos <= text.size()) {
      auto end = text.find_first_of(" :", pos);
      if (end == std::string::npos) end = text.size();
      values.push_back(std::stoll(text.substr(pos, end - pos)));
      pos = end + 1;
    }
    if (text.find(' ') != std::string::npos && values.size() == 2) values.push_back(0);
    std::string out;
    for (const auto v : values) out += pack_double(static_cast<double>(v));
    return out;
  }
  /// 8 little-endian bytes of `v` (struct.pack('<d') of the script).
  static std::string pack_double(double v) {
    static_assert(std::endian::native == std::endian::little);
    std::string out(8, '\0');
    std::memcpy(out.data(), &v, 8);
    return out;
  }
  /// The doubles of packed `bytes` as integers (empty when its size is not a multiple of 8).
  static std::vector<long long> unpack(std::string_view bytes) {
    std::vector<long long> out;
    if (bytes.empty() || bytes.size() % 8 != 0) return out;
    for (std::size_t i = 0; i < bytes.size(); i += 8) {
      double v;
      std::memcpy(&v, bytes.data() + i, 8);
      out.push_back(static_cast<long long>(v));
    }
    return out;
  }
  /// Everything Redis holds for the bucket: DUMP of the key holding it (the whole group hash
  /// under the hash layout; `log`: a sliding log, never packed) and its PTTL, as text; "nil"
  /// when absent. Two snapshots are equal when nothing was written between them (a PTTL that
  /// only ran down is rounded to whole seconds, and a write re-arms it).
  std::string snapshot(const std::string& key, bool log = false) const {
    const auto at = where(key, log);
    const auto dump = server.command({"DUMP", at.key});
    if (dump.type != redis_reply::kind::string) return "nil";
    const auto pttl = server.command({"PTTL", at.key}).integer;
    return dump.str + " pttl " + std::to_string(pttl < 0 ? pttl : (pttl + 999) / 1000);
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
  /// Stores `value` (text, as get() renders it; see pack()) as the bucket's state, to expire
  /// `px_ms` after store time `now_ms`: a key gets PX px_ms (Redis counts it in real time); a hash
  /// field gets the stamp now_ms + px_ms and its hash an expiry of at least px_ms.
  void set(const std::string& key, const std::string& value, long long px_ms,
           long long now_ms) const {
    const auto at = where(key);
    if (at.field.empty()) {
      server.command({"SET", at.key, pack(value), "PX", std::to_string(px_ms)});
      return;
    }
    // Lift the hash's expiry first: one about to expire must not take the new field with it
    // between the HSET and the PEXPIRE. (Tests use a px_ms above any expiry the script sets.)
    server.command({"PEXPIRE", at.key, std::to_string(px_ms)});
    server.command(
        {"HSET", at.key, at.field, pack_double(static_cast<double>(now_ms + px_ms)) + pack(value)});
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
