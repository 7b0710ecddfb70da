// SPDX-License-Identifier: Apache-2.0
// A real Redis Cluster for tests: redis_server nodes in cluster mode, joined by
// `redis-cli --cluster create`. The resharding and failover helpers follow the Redis Cluster
// specification ("Redirection and resharding", "Replica election and promotion") and the
// CLUSTER SETSLOT docs.
#include "support/redis_cluster.hpp"

#include "support/child_process.hpp"
#include "support/eventually.hpp"
#include "support/temp_dir.hpp"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <stdexcept>
#include <thread>

namespace sluice::test {
namespace {

using namespace std::chrono_literals;
using steady = std::chrono::steady_clock;

std::string find_program(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path != nullptr ? path : "/usr/bin:/bin");
  for (std::string dir; std::getline(dirs, dir, ':');) {
    const auto candidate = std::filesystem::path(dir) / name;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate.string();
  }
  throw std::runtime_error("redis_cluster: " + name + " not found in PATH");
}

// The value of `name` in an INFO-style reply ("name:value" lines), or "".
std::string info_field(const redis_reply& r, const std::string& name) {
  if (r.type != redis_reply::kind::string) return {};
  std::istringstream lines(r.str);
  for (std::string line; std::getline(lines, line);) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.starts_with(name + ":")) return line.substr(name.size() + 1);
  }
  return {};
}

void expect_ok(const redis_reply& r, const std::string& what) {
  if (r.type != redis_reply::kind::status || r.str != "OK")
    throw std::runtime_error("redis_cluster: " + what + ": " + r.str);
}

}  // namespace

redis_cluster::redis_cluster(options opts) : opts_(opts) {
  const std::size_t n = opts_.masters * (1 + opts_.replicas_per_master);
  if (opts_.masters < 3) throw std::invalid_argument("redis_cluster: at least 3 masters");
  for (std::size_t i = 0; i < n; ++i) {
    // The bus port is picked before the node's client port; if it is taken by the time the
    // node binds it, the node exits and redis_server gives up: pick another (a few tries).
    for (int attempt = 0;; ++attempt) {
      const std::uint16_t bus = free_loopback_port();
      std::vector<std::string> args{
          "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-port",
          std::to_string(bus), "--cluster-node-timeout", std::to_string(opts_.node_timeout.count()),
          // A replica's first sync starts at once (the default waits 5 s for more replicas),
          // and its master pings it every second (default 10 s): until its replication
          // offset moves off 0, the cluster counts it as loading and CLUSTER SLOTS leaves it
          // out.
          "--repl-diskless-sync-delay", "0", "--repl-ping-replica-period", "1"};
      std::uint16_t tls_port = 0;
      if (opts_.tls_args) {
        tls_port = free_loopback_port();
        for (auto& a : opts_.tls_args(tls_port)) args.push_back(std::move(a));
        args.insert(args.end(), {"--tls-cluster", "yes", "--tls-replication", "yes"});
      }
      try {
        nodes_.push_back(std::make_unique<redis_server>(args, opts_.env));
        if (opts_.tls_args) tls_ports_.push_back(tls_port);
        break;
      } catch (const std::runtime_error&) {
        if (attempt == 2) throw;
      }
    }
  }
  for (std::size_t i = 0; i < n; ++i) {
    auto id = command(i, {"CLUSTER", "MYID"});
    if (id.type != redis_reply::kind::string || id.str.size() != 40)
      throw std::runtime_error("redis_cluster: CLUSTER MYID: " + id.str);
    ids_.push_back(id.str);
  }
  create_cluster();
}

redis_cluster::~redis_cluster() = default;

void redis_cluster::create_cluster() {
  temp_dir dir("cluster-create");
  std::vector<std::string> argv = {find_program("redis-cli"), "--cluster", "create"};
  for (const auto& node : nodes_) argv.push_back("127.0.0.1:" + std::to_string(node->port()));
  argv.insert(argv.end(),
              {"--cluster-replicas", std::to_string(opts_.replicas_per_master), "--cluster-yes"});
  child_process cli(argv, dir.path / "out", dir.path / "err");
  const auto status = cli.wait_exit(30s);
  if (status != 0)
    throw std::runtime_error("redis_cluster: redis-cli --cluster create failed (status " +
                             (status ? std::to_string(*status) : std::string("timeout")) +
                             "): " + cli.out() + cli.err());
  // redis-cli returns once the nodes agree on the configuration; wait until every node also
  // says the cluster is ok and each replica has its master's data.
  const bool became_ready = eventually(
      [&] {
        bool ready = wait_consistent(0ms);
        for (std::size_t i = 0; ready && i < size(); ++i) {
          const auto info = command(i, {"CLUSTER", "INFO"});
          ready = info_field(info, "cluster_known_nodes") == std::to_string(size());
          const auto repl = command(i, {"INFO", "replication"});
          if (info_field(repl, "role") == "slave")
            ready = ready && info_field(repl, "master_link_status") == "up";
          // Every node knows every master's replicas (CLUSTER SLOTS lists them per range; a node
          // may know all nodes and slots before it learns who replicates whom).
          const auto slots = command(i, {"CLUSTER", "SLOTS"});
          for (const auto& range : slots.elements)
            ready = ready && range.elements.size() == 3 + opts_.replicas_per_master;
        }
        return ready;
      },
      20s);
  if (!became_ready)
    throw std::runtime_error("redis_cluster: the cluster did not become ready in 20 s");
}

std::vector<std::uint16_t> redis_cluster::ports() const {
  std::vector<std::uint16_t> out;
  for (const auto& n : nodes_) out.push_back(n->port());
  return out;
}

std::string redis_cluster::store_yaml(const std::string& timeout) const {
  std::string nodes;
  for (const auto p : ports()) {
    if (!nodes.empty()) nodes += ", ";
    nodes += "\"127.0.0.1:" + std::to_string(p) + "\"";
  }
  return "{type: redis-cluster, nodes: [" + nodes + "], timeout: " + timeout + "}";
}

std::optional<std::size_t> redis_cluster::index_of_port(std::uint16_t port) const {
  for (std::size_t i = 0; i < nodes_.size(); ++i) {
    if (nodes_[i]->port() == port) return i;
  }
  return std::nullopt;
}

redis_reply redis_cluster::command(std::size_t i, const std::vector<std::string>& argv) const {
  return nodes_.at(i)->command(argv);
}

std::optional<std::size_t> redis_cluster::first_running() const {
  for (std::size_t i = 0; i < nodes_.size(); ++i) {
    if (running(i)) return i;
  }
  return std::nullopt;
}

std::vector<std::uint16_t> redis_cluster::slot_owners(std::size_t i) const {
  const auto r = command(i, {"CLUSTER", "SLOTS"});
  if (r.type != redis_reply::kind::array) return {};
  std::vector<std::uint16_t> owners(16384, 0);
  for (const auto& range : r.elements) {
    if (range.elements.size() < 3 || range.elements[2].elements.size() < 2) return {};
    const auto first = range.elements[0].integer, last = range.elements[1].integer;
    const auto port = static_cast<std::uint16_t>(range.elements[2].elements[1].integer);
    for (auto s = first; s <= last && s < 16384; ++s) owners[static_cast<std::size_t>(s)] = port;
  }
  return owners;
}

std::optional<std::size_t> redis_cluster::master_of_slot(std::uint16_t slot) const {
  const auto i = first_running();
  if (!i || slot >= 16384) return std::nullopt;
  const auto owners = slot_owners(*i);
  if (owners.empty() || owners[slot] == 0) return std::nullopt;
  return index_of_port(owners[slot]);
}

std::vector<std::size_t> redis_cluster::masters() const {
  std::set<std::size_t> out;
  if (const auto i = first_running()) {
    for (auto port : slot_owners(*i)) {
      if (port == 0) continue;
      if (auto m = index_of_port(port)) out.insert(*m);
    }
  }
  return {out.begin(), out.end()};
}

std::vector<std::size_t> redis_cluster::replicas_of(std::size_t m) const {
  std::vector<std::size_t> out;
  for (std::size_t i = 0; i < size(); ++i) {
    if (i == m || !running(i)) continue;
    const auto role = command(i, {"ROLE"});
    // A replica answers ["slave", master host, master port, state, offset].
    if (role.type == redis_reply::kind::array && role.elements.size() >= 3 &&
        role.elements[0].str == "slave" && role.elements[2].integer == port(m))
      out.push_back(i);
  }
  return out;
}

void redis_cluster::stop_node(std::size_t i) {
  nodes_.at(i)->kill();
}

void redis_cluster::restart_node(std::size_t i) {
  nodes_.at(i)->restart();
}

std::size_t redis_cluster::fail_over_master(std::size_t m, std::chrono::milliseconds limit) {
  std::vector<std::uint16_t> served;
  {
    const auto owners = slot_owners(m);
    for (std::size_t s = 0; s < owners.size(); ++s) {
      if (owners[s] == port(m)) served.push_back(static_cast<std::uint16_t>(s));
    }
  }
  if (served.empty()) throw std::runtime_error("redis_cluster: node is not a master");
  const auto candidates = replicas_of(m);
  if (candidates.empty()) throw std::runtime_error("redis_cluster: the master has no replica");
  stop_node(m);
  std::optional<std::size_t> took_over;
  const bool done = eventually(
      [&] {
        std::optional<std::size_t> promoted;
        bool agreed = true;
        for (std::size_t i = 0; agreed && i < size(); ++i) {
          if (!running(i)) continue;
          const auto owners = slot_owners(i);
          const auto info = command(i, {"CLUSTER", "INFO"});
          if (owners.empty() || info_field(info, "cluster_state") != "ok") {
            agreed = false;
            break;
          }
          for (auto s : served) {
            const auto owner = index_of_port(owners[s]);
            if (!owner || *owner == m || (promoted && *owner != *promoted)) {
              agreed = false;
              break;
            }
            promoted = owner;
          }
        }
        if (!agreed || !promoted) return false;
        took_over = promoted;
        return true;
      },
      limit);
  if (done) return *took_over;
  throw std::runtime_error("redis_cluster: no replica took over in time");
}

std::size_t redis_cluster::begin_slot_migration(std::uint16_t slot, std::size_t to) {
  const auto from = master_of_slot(slot);
  if (!from) throw std::runtime_error("redis_cluster: slot has no master");
  if (*from == to) throw std::runtime_error("redis_cluster: the slot is on that node already");
  const auto s = std::to_string(slot);
  expect_ok(command(to, {"CLUSTER", "SETSLOT", s, "IMPORTING", node_id(*from)}), "IMPORTING");
  expect_ok(command(*from, {"CLUSTER", "SETSLOT", s, "MIGRATING", node_id(to)}), "MIGRATING");
  return *from;
}

void redis_cluster::finish_slot_migration(std::uint16_t slot, std::size_t from, std::size_t to) {
  const auto s = std::to_string(slot);
  // Keys in batches of 100; a slot holds a handful in tests, and the loop is bounded anyway.
  for (int batch = 0;; ++batch) {
    if (batch == 1000) throw std::runtime_error("redis_cluster: too many keys to migrate");
    const auto keys = command(from, {"CLUSTER", "GETKEYSINSLOT", s, "100"});
    if (keys.type != redis_reply::kind::array)
      throw std::runtime_error("redis_cluster: GETKEYSINSLOT: " + keys.str);
    if (keys.elements.empty()) break;
    std::vector<std::string> migrate = {"MIGRATE", "127.0.0.1", std::to_string(port(to)), "", "0",
                                        "5000",    "KEYS"};
    for (const auto& k : keys.elements) migrate.push_back(k.str);
    const auto r = command(from, migrate);
    if (r.type != redis_reply::kind::status)
      throw std::runtime_error("redis_cluster: MIGRATE: " + r.str);
  }
  // The target first, then the source, then every other master (the CLUSTER SETSLOT docs).
  expect_ok(command(to, {"CLUSTER", "SETSLOT", s, "NODE", node_id(to)}), "SETSLOT NODE (target)");
  expect_ok(command(from, {"CLUSTER", "SETSLOT", s, "NODE", node_id(to)}), "SETSLOT NODE (source)");
  for (auto m : masters()) {
    if (m != to && m != from && running(m))
      expect_ok(command(m, {"CLUSTER", "SETSLOT", s, "NODE", node_id(to)}), "SETSLOT NODE");
  }
  const bool agreed_on_it = eventually(
      [&] {
        bool agreed = true;
        for (std::size_t i = 0; agreed && i < size(); ++i) {
          if (!running(i)) continue;
          const auto owners = slot_owners(i);
          agreed = !owners.empty() && owners[slot] == port(to);
        }
        return agreed;
      },
      10s);
  if (!agreed_on_it)
    throw std::runtime_error("redis_cluster: the nodes did not agree on the moved slot");
}

void redis_cluster::move_slot(std::uint16_t slot, std::size_t to) {
  const auto from = begin_slot_migration(slot, to);
  finish_slot_migration(slot, from, to);
}

bool redis_cluster::wait_consistent(std::chrono::milliseconds limit) const {
  return eventually(
      [&] {
        bool ok = true;
        std::vector<std::uint16_t> reference;
        for (std::size_t i = 0; ok && i < size(); ++i) {
          if (!running(i)) continue;
          const auto info = command(i, {"CLUSTER", "INFO"});
          if (info_field(info, "cluster_state") != "ok") {
            ok = false;
            break;
          }
          auto owners = slot_owners(i);
          if (owners.empty()) {
            ok = false;
          } else if (reference.empty()) {
            reference = std::move(owners);
          } else {
            ok = owners == reference;
          }
        }
        return ok;
      },
      limit);
}

std::string redis_cluster::log(std::size_t i) const {
  std::ifstream in(std::filesystem::path(nodes_.at(i)->dir()) / "redis.log");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace sluice::test
