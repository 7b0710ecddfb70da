// SPDX-License-Identifier: Apache-2.0
// A real Redis Sentinel group for tests (the Redis Sentinel docs: `sentinel monitor`, the
// discovery of replicas through the primary's INFO and of other Sentinels through the hello
// channel, `SENTINEL FAILOVER`).
#include "support/redis_sentinel.hpp"

#include "support/eventually.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <thread>

namespace sluice::test {
namespace {

using namespace std::chrono_literals;
using steady = std::chrono::steady_clock;

// The value of `name` in a flat [name, value, ...] reply (RESP2's form of a map), or "".
std::string flat_field(const redis_reply& r, const std::string& name) {
  for (std::size_t i = 0; i + 1 < r.elements.size(); i += 2) {
    if (r.elements[i].str == name) return r.elements[i + 1].str;
  }
  return {};
}

}  // namespace

redis_sentinel_group::redis_sentinel_group(options opts) : opts_(std::move(opts)) {
  if (opts_.tls_args) {
    primary_tls_ = free_loopback_port();
    replica_tls_ = free_loopback_port();
    auto p = opts_.tls_args(primary_tls_);
    p.insert(p.end(), {"--tls-replication", "yes"});
    primary_ = std::make_unique<redis_server>(p);
    auto r = opts_.tls_args(replica_tls_);
    r.insert(r.end(), {"--tls-replication", "yes", "--replicaof", "127.0.0.1",
                       std::to_string(primary_tls_)});
    replica_ = std::make_unique<redis_server>(r);
  } else {
    primary_ = std::make_unique<redis_server>();
    replica_ = std::make_unique<redis_server>(
        std::vector<std::string>{"--replicaof", "127.0.0.1", std::to_string(primary_->port())});
  }
  try {
    for (std::size_t i = 0; i < opts_.sentinels; ++i) spawn_sentinel(i);
    if (!eventually([&] { return ready(); }, 20s))
      throw std::runtime_error("redis_sentinel_group: the Sentinels were not ready in 20 s");
  } catch (...) {
    for (std::size_t i = 0; i < pids_.size(); ++i) stop_sentinel(i);
    for (const auto& d : dirs_) std::filesystem::remove_all(d);
    throw;
  }
}

redis_sentinel_group::~redis_sentinel_group() {
  for (std::size_t i = 0; i < pids_.size(); ++i) stop_sentinel(i);
  std::error_code ec;
  for (const auto& d : dirs_) std::filesystem::remove_all(d, ec);
}

std::uint16_t redis_sentinel_group::data_port(const redis_server& node) const {
  if (!opts_.tls_args) return node.port();
  return &node == primary_.get() ? primary_tls_ : replica_tls_;
}

void redis_sentinel_group::spawn_sentinel(std::size_t i) {
  std::string tmpl = (std::filesystem::temp_directory_path() / "sluice-sentinel-XXXXXX").string();
  if (::mkdtemp(tmpl.data()) == nullptr)
    throw std::runtime_error("redis_sentinel_group: mkdtemp failed");
  dirs_.push_back(tmpl);
  const auto conf = std::filesystem::path(tmpl) / "sentinel.conf";
  const auto& name = opts_.master_name;
  // A port can be taken between free_loopback_port() and the Sentinel's bind: try a few.
  for (int attempt = 0; attempt < 5; ++attempt) {
    const std::uint16_t port = free_loopback_port();
    const std::uint16_t tls_port = opts_.tls_args ? free_loopback_port() : 0;
    {
      std::ofstream out(conf, std::ios::trunc);
      out << "port " << port << "\nbind 127.0.0.1\ndaemonize no\ndir " << tmpl << "\nlogfile "
          << tmpl << "/sentinel.log\n";
      if (opts_.tls_args) {
        // The server arguments as config lines ("--tls-port 123" -> "tls-port 123").
        const auto args = opts_.tls_args(tls_port);
        for (std::size_t a = 0; a + 1 < args.size(); a += 2)
          out << args[a].substr(2) << " " << args[a + 1] << "\n";
        out << "tls-replication yes\n";
      }
      out << "sentinel monitor " << name << " 127.0.0.1 " << data_port(*primary_) << " "
          << opts_.quorum << "\n"
          << "sentinel down-after-milliseconds " << name << " " << opts_.down_after.count()
          << "\nsentinel failover-timeout " << name << " 10000\n"
          << "sentinel parallel-syncs " << name << " 1\n";
      if (!out) throw std::runtime_error("redis_sentinel_group: cannot write sentinel.conf");
    }
    std::string program = "redis-sentinel", conf_path = conf.string();
    std::vector<char*> argv = {program.data(), conf_path.data(), nullptr};
    const pid_t parent = ::getpid();
    const pid_t pid = ::fork();
    if (pid < 0) throw std::runtime_error("redis_sentinel_group: fork failed");
    if (pid == 0) {
      // As redis_server: die with the test process, keep its output and descriptors to itself.
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(127);
      const int null_fd = ::open("/dev/null", O_RDWR);
      if (null_fd >= 0) {
        ::dup2(null_fd, 0);
        ::dup2(null_fd, 1);
        ::dup2(null_fd, 2);
      }
      if (::close_range(3, ~0U, 0) != 0) {
        for (int fd = 3; fd < 4096; ++fd) ::close(fd);
      }
      ::execvp(argv[0], argv.data());
      ::_exit(127);
    }
    const auto deadline = steady::now() + 5s;
    while (steady::now() < deadline) {
      int status = 0;
      if (::waitpid(pid, &status, WNOHANG) == pid) break;  // exited (port taken?)
      const auto r = redis_command(port, {"PING"});
      if (r.type == redis_reply::kind::status && r.str == "PONG") {
        if (i < pids_.size()) {
          pids_[i] = pid;
          sentinel_ports_[i] = port;
          sentinel_tls_ports_[i] = tls_port;
        } else {
          pids_.push_back(pid);
          sentinel_ports_.push_back(port);
          sentinel_tls_ports_.push_back(tls_port);
        }
        return;
      }
      std::this_thread::sleep_for(10ms);
    }
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
  }
  throw std::runtime_error("redis_sentinel_group: redis-sentinel did not answer PING");
}

bool redis_sentinel_group::ready() const {
  const auto repl = replica_->command({"INFO", "replication"});
  if (repl.str.find("master_link_status:up") == std::string::npos) return false;
  for (std::size_t i = 0; i < sentinels(); ++i) {
    if (master_port(i) != data_port(*primary_)) return false;
    const auto m = sentinel_command(i, {"SENTINEL", "MASTER", opts_.master_name});
    if (flat_field(m, "flags") != "master" || flat_field(m, "num-slaves") != "1" ||
        flat_field(m, "num-other-sentinels") != std::to_string(sentinels() - 1))
      return false;
    const auto replicas = sentinel_command(i, {"SENTINEL", "REPLICAS", opts_.master_name});
    if (replicas.elements.size() != 1 || flat_field(replicas.elements[0], "flags") != "slave" ||
        flat_field(replicas.elements[0], "master-link-status") != "ok")
      return false;
  }
  return true;
}

redis_reply redis_sentinel_group::sentinel_command(std::size_t i,
                                                   const std::vector<std::string>& argv) const {
  return redis_command(sentinel_ports_.at(i), argv);
}

std::optional<std::uint16_t> redis_sentinel_group::master_port(std::size_t i) const {
  const auto r = sentinel_command(i, {"SENTINEL", "GET-MASTER-ADDR-BY-NAME", opts_.master_name});
  if (r.type != redis_reply::kind::array || r.elements.size() != 2) return std::nullopt;
  try {
    const auto port = std::stoul(r.elements[1].str);
    if (port == 0 || port > 65535) return std::nullopt;
    return static_cast<std::uint16_t>(port);
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

bool redis_sentinel_group::wait_master(std::uint16_t port, std::chrono::milliseconds limit) const {
  return eventually(
      [&] {
        bool all = true;
        for (std::size_t i = 0; all && i < sentinels(); ++i) {
          if (pids_[i] > 0) all = master_port(i) == port;
        }
        return all;
      },
      limit);
}

std::uint16_t redis_sentinel_group::failover(std::chrono::milliseconds limit) {
  const auto before = master_port(0);
  if (!before) throw std::runtime_error("redis_sentinel_group: no master to fail over");
  redis_server& next = *before == data_port(*primary_) ? *replica_ : *primary_;
  const auto deadline = steady::now() + limit;
  const auto r = sentinel_command(0, {"SENTINEL", "FAILOVER", opts_.master_name});
  if (r.type != redis_reply::kind::status || r.str != "OK")
    throw std::runtime_error("redis_sentinel_group: SENTINEL FAILOVER: " + r.str);
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - steady::now());
  if (!wait_master(data_port(next), left))
    throw std::runtime_error("redis_sentinel_group: the Sentinels did not switch in time");
  const bool promoted = eventually(
      [&] {
        const auto role = next.command({"ROLE"});
        return role.type == redis_reply::kind::array && !role.elements.empty() &&
               role.elements[0].str == "master";
      },
      std::max(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - steady::now()),
               std::chrono::milliseconds(0)));
  if (promoted) return data_port(next);
  throw std::runtime_error("redis_sentinel_group: the new master is not a master");
}

void redis_sentinel_group::stop_sentinel(std::size_t i) {
  if (i >= pids_.size() || pids_[i] <= 0) return;
  ::kill(pids_[i], SIGKILL);
  ::waitpid(pids_[i], nullptr, 0);
  pids_[i] = -1;
}

}  // namespace sluice::test
