// SPDX-License-Identifier: Apache-2.0
// Redis Cluster slot routing. The rules are the Redis Cluster specification's ("Key
// distribution model", "Hash tags", "Redirection and resharding"); the reply shapes are those
// the CLUSTER SLOTS and CLUSTER SHARDS command docs give for RESP2 (hiredis 0.14 speaks only
// RESP2).
#include "sluice/store/cluster_slots.hpp"

#include "sluice/limiter/keys.hpp"

#include <algorithm>
#include <charconv>
#include <stdexcept>

namespace sluice::store {
namespace {

// The CRC16 table for polynomial 0x1021, most significant bit first, computed at compile time
// (one entry per value of the byte shifted in), so the loop below does one lookup a byte.
constexpr std::array<std::uint16_t, 256> make_crc16_table() {
  std::array<std::uint16_t, 256> table{};
  for (unsigned byte = 0; byte < 256; ++byte) {
    auto crc = static_cast<std::uint16_t>(byte << 8);
    for (int bit = 0; bit < 8; ++bit) {
      crc = (crc & 0x8000) != 0 ? static_cast<std::uint16_t>((crc << 1) ^ 0x1021)
                                : static_cast<std::uint16_t>(crc << 1);
    }
    table[byte] = crc;
  }
  return table;
}

constexpr auto crc16_table = make_crc16_table();

// Parses 1..digits decimal digits (no sign, no spaces) into [0, max].
template <typename T>
std::optional<T> parse_decimal(std::string_view text, unsigned max_digits, unsigned long max) {
  if (text.empty() || text.size() > max_digits) return std::nullopt;
  unsigned long v = 0;
  const auto* end = text.data() + text.size();
  auto [p, ec] = std::from_chars(text.data(), end, v);
  if (ec != std::errc{} || p != end || v > max) return std::nullopt;
  return static_cast<T>(v);
}

bool valid_host(std::string_view host) {
  if (host.empty()) return false;
  for (unsigned char c : host) {
    // `?` is what Redis prints for an endpoint it was told to prefer but does not have.
    if (c <= ' ' || c >= 0x7f || c == '[' || c == ']' || c == '@' || c == '/' || c == '?')
      return false;
  }
  return true;
}

std::string_view str(const redisReply& r) {
  return {r.str, r.len};
}

std::string range_name(long long first, long long last) {
  return "range " + std::to_string(first) + "-" + std::to_string(last);
}

// An endpoint field of a reply: nil or empty is the asked host, `?` is unknown (an error).
std::optional<std::string> endpoint_host(const redisReply* r, std::string_view asked_host) {
  if (r == nullptr || r->type == REDIS_REPLY_NIL || (r->type == REDIS_REPLY_STRING && r->len == 0))
    return asked_host.empty() ? std::nullopt : std::optional<std::string>(asked_host);
  if (r->type != REDIS_REPLY_STRING || !valid_host(str(*r))) return std::nullopt;
  return std::string(str(*r));
}

std::optional<std::uint16_t> port_value(const redisReply* r) {
  if (r == nullptr) return std::nullopt;
  if (r->type == REDIS_REPLY_INTEGER) {
    if (r->integer < 1 || r->integer > 65535) return std::nullopt;
    return static_cast<std::uint16_t>(r->integer);
  }
  if (r->type == REDIS_REPLY_STRING) {
    auto p = parse_decimal<std::uint16_t>(str(*r), 5, 65535);
    if (p && *p != 0) return p;
  }
  return std::nullopt;
}

std::optional<long long> integer_value(const redisReply* r) {
  if (r == nullptr) return std::nullopt;
  if (r->type == REDIS_REPLY_INTEGER) return r->integer;
  if (r->type == REDIS_REPLY_STRING) {
    auto v = parse_decimal<long long>(str(*r), 18, 999'999'999'999'999'999UL);
    if (v) return v;
  }
  return std::nullopt;
}

// The value of `name` in a flat `[name, value, ...]` list (RESP2's form of a map), or nullptr.
const redisReply* field(const redisReply& list, std::string_view name) {
  for (std::size_t i = 0; i + 1 < list.elements; i += 2) {
    const redisReply* k = list.element[i];
    if (k != nullptr && (k->type == REDIS_REPLY_STRING || k->type == REDIS_REPLY_STATUS) &&
        str(*k) == name)
      return list.element[i + 1];
  }
  return nullptr;
}

}  // namespace

void throw_exception_from_error(const topology_error& e, const boost::source_location&) {
  throw std::runtime_error(e.message);
}

std::uint16_t crc16(std::string_view data) noexcept {
  std::uint16_t crc = 0;
  for (unsigned char c : data) {
    crc = static_cast<std::uint16_t>((crc << 8) ^ crc16_table[((crc >> 8) ^ c) & 0xff]);
  }
  return crc;
}

std::string_view hash_tag(std::string_view key) noexcept {
  const auto open = key.find('{');
  if (open == std::string_view::npos) return key;
  const auto close = key.find('}', open + 1);
  if (close == std::string_view::npos || close == open + 1) return key;
  return key.substr(open + 1, close - open - 1);
}

std::uint16_t key_hash_slot(std::string_view key) noexcept {
  // 16384 is a power of two: mod is a mask (the specification writes `& 16383`).
  return static_cast<std::uint16_t>(crc16(hash_tag(key)) & (cluster_slot_count - 1));
}

std::string node_address::to_string() const {
  std::string out;
  const bool v6 = host.find(':') != std::string::npos;
  out.reserve(host.size() + 8);
  if (v6) out.push_back('[');
  out.append(host);
  if (v6) out.push_back(']');
  out.push_back(':');
  out.append(std::to_string(port));
  return out;
}

std::optional<node_address> parse_node_address(std::string_view text, std::string_view asked_host) {
  std::string_view host, port;
  if (!text.empty() && text.front() == '[') {
    const auto close = text.find(']');
    if (close == std::string_view::npos || close + 1 >= text.size() || text[close + 1] != ':')
      return std::nullopt;
    host = text.substr(1, close - 1);
    port = text.substr(close + 2);
    if (host.find(':') == std::string_view::npos) return std::nullopt;  // brackets are for IPv6
  } else {
    const auto colon = text.rfind(':');
    if (colon == std::string_view::npos) return std::nullopt;
    host = text.substr(0, colon);
    port = text.substr(colon + 1);
    if (host.empty()) host = asked_host;
  }
  if (!valid_host(host)) return std::nullopt;
  auto p = parse_decimal<std::uint16_t>(port, 5, 65535);
  if (!p || *p == 0) return std::nullopt;
  return node_address{std::string(host), *p};
}

slot_map::slot_map() : slots_(cluster_slot_count, no_master) {}

const cluster_master* slot_map::master_of(std::uint16_t slot) const noexcept {
  const auto i = master_index(slot);
  return i == no_master ? nullptr : &masters_[i];
}

std::uint16_t slot_map::find_master(const node_address& a) const noexcept {
  for (std::size_t i = 0; i < masters_.size(); ++i) {
    if (masters_[i].address == a) return static_cast<std::uint16_t>(i);
  }
  return no_master;
}

std::uint16_t slot_map::add_master(cluster_master m) {
  for (std::size_t i = 0; i < masters_.size(); ++i) {
    const bool same = m.id.empty() || masters_[i].id.empty() ? masters_[i].address == m.address
                                                             : masters_[i].id == m.id;
    if (same) return static_cast<std::uint16_t>(i);
  }
  masters_.push_back(std::move(m));
  return static_cast<std::uint16_t>(masters_.size() - 1);
}

std::uint16_t slot_map::assign(std::uint16_t slot, const node_address& to) {
  auto i = find_master(to);
  if (i == no_master) {
    if (masters_.size() >= no_master) return no_master;  // bounded: indices stay below no_master
    i = add_master(cluster_master{to, {}, {}});
  }
  if (slot >= cluster_slot_count) return i;
  if (slots_[slot] == no_master) ++covered_;
  slots_[slot] = i;
  return i;
}

boost::system::result<slot_map, topology_error> slot_map::from_cluster_slots(
    const redisReply& reply, std::string_view asked_host) {
  if (reply.type != REDIS_REPLY_ARRAY)
    return topology_error{"CLUSTER SLOTS: the reply is not an array"};
  slot_map map;
  for (std::size_t r = 0; r < reply.elements; ++r) {
    const redisReply* range = reply.element[r];
    if (range == nullptr || range->type != REDIS_REPLY_ARRAY || range->elements < 3 ||
        range->element[0]->type != REDIS_REPLY_INTEGER ||
        range->element[1]->type != REDIS_REPLY_INTEGER)
      return topology_error{"CLUSTER SLOTS: entry " + std::to_string(r) +
                            " is not [first, last, master, ...]"};
    const long long first = range->element[0]->integer, last = range->element[1]->integer;
    const auto where = "CLUSTER SLOTS: " + range_name(first, last);
    if (first < 0 || last >= cluster_slot_count || first > last)
      return topology_error{where + ": not a range of slots 0..16383"};
    std::vector<node_address> nodes;
    std::string master_id;
    for (std::size_t n = 2; n < range->elements; ++n) {
      const redisReply* node = range->element[n];
      if (node == nullptr || node->type != REDIS_REPLY_ARRAY || node->elements < 2)
        return topology_error{where + ": node " + std::to_string(n - 2) +
                              " is not [endpoint, port, ...]"};
      auto host = endpoint_host(node->element[0], asked_host);
      auto port = port_value(node->element[1]);
      if (!host || !port)
        return topology_error{where + ": node " + std::to_string(n - 2) +
                              " has no usable endpoint"};
      nodes.push_back({std::move(*host), *port});
      if (n == 2 && node->elements >= 3 && node->element[2]->type == REDIS_REPLY_STRING)
        master_id.assign(str(*node->element[2]));
    }
    cluster_master m{nodes.front(), std::move(master_id), {nodes.begin() + 1, nodes.end()}};
    const auto index = map.add_master(std::move(m));
    for (auto s = first; s <= last; ++s) {
      if (map.slots_[s] != no_master)
        return topology_error{where + ": slot " + std::to_string(s) + " is in two ranges"};
      map.slots_[s] = index;
      ++map.covered_;
    }
  }
  return map;
}

boost::system::result<slot_map, topology_error> slot_map::from_cluster_shards(
    const redisReply& reply, std::string_view asked_host, bool tls) {
  if (reply.type != REDIS_REPLY_ARRAY)
    return topology_error{"CLUSTER SHARDS: the reply is not an array"};
  slot_map map;
  for (std::size_t s = 0; s < reply.elements; ++s) {
    const auto where = "CLUSTER SHARDS: shard " + std::to_string(s);
    const redisReply* shard = reply.element[s];
    if (shard == nullptr || shard->type != REDIS_REPLY_ARRAY)
      return topology_error{where + " is not a list of fields"};
    const redisReply* slots = field(*shard, "slots");
    const redisReply* nodes = field(*shard, "nodes");
    if (slots == nullptr || slots->type != REDIS_REPLY_ARRAY || slots->elements % 2 != 0 ||
        nodes == nullptr || nodes->type != REDIS_REPLY_ARRAY)
      return topology_error{where + " has no slots (pairs) or no nodes"};
    std::optional<cluster_master> master;
    std::vector<node_address> replicas;
    for (std::size_t n = 0; n < nodes->elements; ++n) {
      const redisReply* node = nodes->element[n];
      if (node == nullptr || node->type != REDIS_REPLY_ARRAY)
        return topology_error{where + ": node " + std::to_string(n) + " is not a list of fields"};
      const redisReply* endpoint = field(*node, "endpoint");
      if (endpoint == nullptr) endpoint = field(*node, "ip");
      const char* preferred = tls ? "tls-port" : "port";
      const redisReply* port_field = field(*node, preferred);
      if (port_field == nullptr) port_field = field(*node, tls ? "port" : "tls-port");
      auto host = endpoint_host(endpoint, asked_host);
      auto port = port_value(port_field);
      const redisReply* role = field(*node, "role");
      const redisReply* health = field(*node, "health");
      const redisReply* id = field(*node, "id");
      if (!host || !port || role == nullptr || role->type != REDIS_REPLY_STRING)
        return topology_error{where + ": node " + std::to_string(n) +
                              " has no usable endpoint or role"};
      node_address a{std::move(*host), *port};
      if (str(*role) == "master") {
        if (master) return topology_error{where + " has two masters"};
        master = cluster_master{std::move(a), {}, {}};
        if (id != nullptr && id->type == REDIS_REPLY_STRING) master->id.assign(str(*id));
      } else if (health == nullptr || health->type != REDIS_REPLY_STRING ||
                 str(*health) != "failed") {
        replicas.push_back(std::move(a));
      }
    }
    if (!master) continue;  // its slots stay not covered
    master->replicas = std::move(replicas);
    const auto index = map.add_master(std::move(*master));
    for (std::size_t i = 0; i < slots->elements; i += 2) {
      const auto first = integer_value(slots->element[i]);
      const auto last = integer_value(slots->element[i + 1]);
      if (!first || !last || *first < 0 || *last >= cluster_slot_count || *first > *last)
        return topology_error{where + ": slots entry " + std::to_string(i / 2) +
                              " is not a range of 0..16383"};
      for (auto slot = *first; slot <= *last; ++slot) {
        if (map.slots_[slot] != no_master)
          return topology_error{where + ": slot " + std::to_string(slot) + " is in two shards"};
        map.slots_[slot] = index;
        ++map.covered_;
      }
    }
  }
  return map;
}

std::optional<redirect> parse_redirect(std::string_view error, std::string_view asked_host) {
  redirect out;
  std::string_view rest;
  if (error.starts_with("MOVED ")) {
    out.type = redirect::kind::moved;
    rest = error.substr(6);
  } else if (error.starts_with("ASK ")) {
    out.type = redirect::kind::ask;
    rest = error.substr(4);
  } else {
    return std::nullopt;
  }
  const auto space = rest.find(' ');
  if (space == std::string_view::npos) return std::nullopt;
  auto slot = parse_decimal<std::uint16_t>(rest.substr(0, space), 5, cluster_slot_count - 1);
  if (!slot) return std::nullopt;
  auto to = parse_node_address(rest.substr(space + 1), asked_host);
  if (!to) return std::nullopt;
  out.slot = *slot;
  out.to = std::move(*to);
  return out;
}

key_routing route_keys(const slot_map& map, std::span<const std::string> keys) {
  key_routing out;
  for (std::size_t i = 0; i < keys.size(); ++i) {
    const auto slot = key_hash_slot(keys[i]);
    const auto master = map.master_index(slot);
    if (master == slot_map::no_master) {
      out.uncovered.push_back(i);
      continue;
    }
    auto m = std::find_if(out.masters.begin(), out.masters.end(),
                          [&](const master_batch& b) { return b.master == master; });
    if (m == out.masters.end()) {
      out.masters.push_back({master, {}});
      m = std::prev(out.masters.end());
    }
    auto s = std::find_if(m->slots.begin(), m->slots.end(),
                          [&](const slot_batch& b) { return b.slot == slot; });
    if (s == m->slots.end()) {
      m->slots.push_back({slot, {}});
      s = std::prev(m->slots.end());
    }
    s->keys.push_back(i);
  }
  return out;
}

std::vector<std::string> spread_shard_keys(const config::limit& l, const lua::key_layout& layout) {
  std::vector<std::string> keys;
  const unsigned parts = std::clamp(l.shards, 1u, 64u);
  limiter::limit_check probe;
  probe.algorithm = l.algorithm;
  for (unsigned i = 0; i < l.shards; ++i) {
    const unsigned part = i % parts;
    // A part is hit within a few times `parts` tries; the cap only bounds a pathological
    // layout (the shard then keeps its first key).
    for (unsigned v = 0; v < 256 * parts; ++v) {
      probe.key = limiter::bucket_key(l.name, limiter::key_namespace::global,
                                      limiter::shard_value("*", i, v));
      if (v == 0) keys.push_back(probe.key);
      // The middle quarter of the part: whatever the master count, shard i lands near the
      // middle of the i-th of `parts` equal parts, so the shards spread as evenly as they can.
      const unsigned slot = key_hash_slot(lua::redis_key(probe, layout));
      const unsigned eighth = slot * parts * 8 / cluster_slot_count;  // eighths of parts
      if (eighth / 8 == part && (eighth % 8 == 3 || eighth % 8 == 4)) {
        keys.back() = probe.key;
        break;
      }
    }
  }
  return keys;
}

}  // namespace sluice::store
