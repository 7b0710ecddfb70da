// SPDX-License-Identifier: Apache-2.0
// Redis error replies by kind (include/sluice/store/counter_store.hpp).
// Prefixes: https://redis.io/docs/reference/protocol-spec/#simple-errors and the replication,
// persistence and ACL documentation for READONLY, LOADING, MASTERDOWN and NOPERM.

#include "sluice/store/counter_store.hpp"

#include <array>

namespace sluice::store {
namespace {

constexpr std::array<std::string_view, error_kind_count> names{
    "READONLY", "LOADING",   "MASTERDOWN", "OOM",         "BUSY",
    "NOPERM",   "WRONGTYPE", "NOSCRIPT",   "STALE",       "MOVED",
    "ASK",      "CROSSSLOT", "TRYAGAIN",   "CLUSTERDOWN", "other"};

}  // namespace

std::string_view error_kind_name(error_kind k) {
  return names[static_cast<std::size_t>(k)];
}

error_kind classify_error_reply(std::string_view text) {
  // FCALL of a function that is not loaded (FUNCTION FLUSH, a server restarted without its
  // data) is EVALSHA's NOSCRIPT under another name.
  if (text.starts_with("ERR Function not found")) return error_kind::noscript;
  const std::string_view word = text.substr(0, text.find(' '));
  for (std::size_t i = 0; i + 1 < names.size(); ++i) {
    if (word == names[i]) return static_cast<error_kind>(i);
  }
  return error_kind::other;
}

bool is_wrong_node(error_kind k) {
  return k == error_kind::readonly || k == error_kind::loading || k == error_kind::masterdown;
}

}  // namespace sluice::store
