// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// Test helpers: a child process whose stdout and stderr go to files (read back by the test),
/// stopped by its pid when the object goes, and the real `sluice` binary run as one. Every wait
/// has a deadline. Header-only.

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "support/eventually.hpp"

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace sluice::test {

/// A child process running `argv` (argv[0] is a path, not looked up in PATH), stdout and stderr
/// written to `out` and `err`. The destructor sends SIGTERM, then SIGKILL after 2 s, and reaps.
class child_process {
 public:
  child_process(const std::vector<std::string>& argv, std::filesystem::path out,
                std::filesystem::path err)
      : out_(std::move(out)), err_(std::move(err)) {
    if (argv.empty()) throw std::invalid_argument("child_process: empty argv");
    // Everything the child needs is prepared before fork: after it, only exec-safe calls.
    const int out_fd = ::open(out_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    const int err_fd = ::open(err_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (out_fd < 0 || err_fd < 0) throw std::runtime_error("child_process: cannot open log files");
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    pid_ = ::fork();
    if (pid_ == 0) {
      ::dup2(out_fd, 1);
      ::dup2(err_fd, 2);
      ::closefrom(3);  // no test socket or listener is inherited
      ::execv(args[0], args.data());
      ::_exit(127);
    }
    ::close(out_fd);
    ::close(err_fd);
    if (pid_ < 0) throw std::runtime_error("child_process: fork failed");
  }

  ~child_process() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGTERM);
    if (!wait_exit(std::chrono::seconds(2))) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  child_process(const child_process&) = delete;
  child_process& operator=(const child_process&) = delete;

  pid_t pid() const { return pid_; }

  /// Sends `sig` to the child (nothing once it has been reaped).
  void signal(int sig) const {
    if (pid_ > 0) ::kill(pid_, sig);
  }

  /// Whether the child is still running (reaps it when it has ended).
  bool running() { return pid_ > 0 && !poll(); }

  /// Waits up to `limit` (scaled by SLUICE_TEST_TIME_FACTOR) for the child to end: its exit
  /// status (128 + N when killed by signal N), or nullopt while it still runs.
  std::optional<int> wait_exit(std::chrono::milliseconds limit) {
    if (eventually([this] { return poll(); }, limit)) return status_;
    return std::nullopt;
  }

  /// What the child wrote to stdout / stderr so far.
  std::string out() const { return slurp(out_); }
  std::string err() const { return slurp(err_); }

 private:
  /// True when the child has ended (status_ set).
  bool poll() {
    if (pid_ <= 0) return true;
    int status = 0;
    const pid_t r = ::waitpid(pid_, &status, WNOHANG);
    if (r == 0) return false;
    status_ = r < 0 ? -1 : WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    pid_ = -1;
    return true;
  }

  static std::string slurp(const std::filesystem::path& p) {
    std::ifstream in(p);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }

  std::filesystem::path out_, err_;
  pid_t pid_ = -1;
  std::optional<int> status_;
};

/// `sluice --config FILE --listen 127.0.0.1:0 --admin 127.0.0.1:0 --workers N --no-watch` as a
/// child process; the ports it bound are read from its start-up log lines. `prefix`, when
/// given, runs before it (e.g. `/usr/bin/env NAME=VALUE...` to set the child's environment).
class sluice_process {
 public:
  sluice_process(const std::filesystem::path& config, const std::filesystem::path& dir,
                 unsigned workers = 2, std::vector<std::string> prefix = {})
      : child_(command(config, workers, std::move(prefix)), dir / "sluice.out",
               dir / "sluice.err") {}

  /// Waits (10 s at most) for the gateway's and the admin listener's "listening on" lines and
  /// reads their ports; false when they did not come (the process may have refused its file).
  bool wait_listening() {
    bool listening = false, ended = false;
    (void)eventually(
        [&] {
          const auto text = log();
          const std::string gw_mark = " listening on 127.0.0.1:";
          const std::string admin_mark = "admin listening on 127.0.0.1:";
          const auto a = text.find(admin_mark);
          const auto g = text.find(gw_mark);
          if (a != std::string::npos && g != std::string::npos && g < a) {
            port = static_cast<std::uint16_t>(std::stoul(text.substr(g + gw_mark.size())));
            admin_port = static_cast<std::uint16_t>(std::stoul(text.substr(a + admin_mark.size())));
            listening = true;
          } else {
            ended = !child_.running();
          }
          return listening || ended;
        },
        std::chrono::seconds(10));
    return listening;
  }

  /// Everything the process logged (stdout, then stderr; the logs go to stderr).
  std::string log() const { return child_.out() + child_.err(); }
  /// What it wrote to stderr.
  std::string err() const { return child_.err(); }

  void signal(int sig) const { child_.signal(sig); }
  bool running() { return child_.running(); }
  /// Its process id (-1 once reaped).
  pid_t pid() const { return child_.pid(); }
  /// Its exit status once it ended within `limit` (128 + N when killed by signal N).
  std::optional<int> wait_exit(std::chrono::milliseconds limit) { return child_.wait_exit(limit); }

  std::uint16_t port = 0;
  std::uint16_t admin_port = 0;

 private:
  static std::vector<std::string> command(const std::filesystem::path& config, unsigned workers,
                                          std::vector<std::string> argv) {
    for (std::string a :
         {std::string(SLUICE_BINARY), std::string("--config"), config.string(),
          std::string("--listen"), std::string("127.0.0.1:0"), std::string("--admin"),
          std::string("127.0.0.1:0"), std::string("--workers"), std::to_string(workers),
          std::string("--no-watch")})
      argv.push_back(std::move(a));
    return argv;
  }

  child_process child_;
};

}  // namespace sluice::test
