// SPDX-License-Identifier: Apache-2.0
// A real redis-server for tests (STYLE.md, "Tests": free loopback port found by binding port 0,
// started and stopped by pid, nothing off loopback).
#include "support/redis_server.hpp"

#include "support/eventually.hpp"

#include <hiredis/hiredis.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <stdexcept>
#include <thread>

namespace sluice::test {
namespace {

redis_reply copy(const redisReply* r);

}  // namespace

// Another process could take the port before redis-server binds it; the ephemeral range makes
// that unlikely enough for tests.
std::uint16_t free_loopback_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) throw std::runtime_error("redis_server: socket() failed");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof addr;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    ::close(fd);
    throw std::runtime_error("redis_server: cannot find a free port");
  }
  ::close(fd);
  return ntohs(addr.sin_port);
}

namespace {

redis_reply copy(const redisReply* r) {
  redis_reply out;
  switch (r->type) {
    case REDIS_REPLY_INTEGER:
      out.type = redis_reply::kind::integer;
      out.integer = r->integer;
      break;
    case REDIS_REPLY_STRING:
      out.type = redis_reply::kind::string;
      out.str.assign(r->str, r->len);
      break;
    case REDIS_REPLY_STATUS:
      out.type = redis_reply::kind::status;
      out.str.assign(r->str, r->len);
      break;
    case REDIS_REPLY_ERROR:
      out.type = redis_reply::kind::error;
      out.str.assign(r->str, r->len);
      break;
    case REDIS_REPLY_ARRAY:
      out.type = redis_reply::kind::array;
      for (std::size_t i = 0; i < r->elements; ++i) out.elements.push_back(copy(r->element[i]));
      break;
    default:
      out.type = redis_reply::kind::nil;
  }
  return out;
}

}  // namespace

redis_server::redis_server(std::vector<std::string> extra_args)
    : redis_server(std::move(extra_args), {}) {}

redis_server::redis_server(std::vector<std::string> extra_args, std::vector<std::string> env)
    : extra_args_(std::move(extra_args)), env_(std::move(env)) {
  for (std::size_t i = 0; i + 1 < extra_args_.size(); ++i) {
    if (extra_args_[i] == "--requirepass") password_ = extra_args_[i + 1];
  }
  std::string tmpl = (std::filesystem::temp_directory_path() / "sluice-redis-XXXXXX").string();
  if (::mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("redis_server: mkdtemp failed");
  dir_ = tmpl;
  // A port can be taken between free_port() and redis' bind: try a few.
  for (int attempt = 0; attempt < 5; ++attempt) {
    port_ = free_loopback_port();
    spawn();
    if (wait_ready(5000)) return;
    kill();
  }
  std::filesystem::remove_all(dir_);
  throw std::runtime_error("redis_server: redis-server did not answer PING");
}

redis_server::~redis_server() {
  kill();
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
}

void redis_server::spawn() {
  std::vector<std::string> args = {
      "redis-server", "--port",    std::to_string(port_), "--bind",      "127.0.0.1",
      "--save",       "",          "--appendonly",        "no",          "--dir",
      dir_,           "--logfile", dir_ + "/redis.log",   "--daemonize", "no"};
  args.insert(args.end(), extra_args_.begin(), extra_args_.end());
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  // The environment, made before fork (the child only execs): ours plus env_.
  std::vector<char*> envp;
  for (char** e = environ; *e != nullptr; ++e) envp.push_back(*e);
  for (auto& e : env_) envp.push_back(e.data());
  envp.push_back(nullptr);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error("redis_server: fork failed");
  if (pid == 0) {
    // Child: only async-signal-safe calls until exec. Die with the test process (a crashed
    // test must not leave servers behind), and keep the test's stdout/stderr to itself.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);
    int null_fd = ::open("/dev/null", O_RDWR);
    if (null_fd >= 0) {
      ::dup2(null_fd, 0);
      ::dup2(null_fd, 1);
      ::dup2(null_fd, 2);
    }
    // Nothing else of the test's crosses exec: an inherited listening socket (an upstream
    // fixture's, say) would stay open in redis-server after the test closed it, and a client
    // would then connect to a port nobody serves and hang.
    if (::close_range(3, ~0U, 0) != 0) {
      for (int fd = 3; fd < 4096; ++fd) ::close(fd);
    }
    ::execvpe("redis-server", argv.data(), envp.data());
    ::_exit(127);
  }
  pid_ = pid;
  paused_ = false;
}

bool redis_server::wait_ready(int timeout_ms) const {
  bool exited = false;
  const bool answered = eventually(
      [&] {
        int status = 0;
        if (::waitpid(pid_, &status, WNOHANG) == pid_) {
          exited = true;  // (its port taken?)
          return true;
        }
        const auto r = command({"PING"});
        return r.type == redis_reply::kind::status && r.str == "PONG";
      },
      std::chrono::milliseconds(timeout_ms));
  return answered && !exited;
}

redis_reply redis_server::command(const std::vector<std::string>& argv) const {
  return redis_command(port_, argv, password_);
}

redis_reply redis_command(std::uint16_t port, const std::vector<std::string>& argv,
                          const std::string& password) {
  return redis_commands(port, {argv}, password).front();
}

std::vector<redis_reply> redis_commands(std::uint16_t port,
                                        const std::vector<std::vector<std::string>>& commands,
                                        const std::string& password) {
  std::vector<redis_reply> out(commands.size());
  auto fail_from = [&](std::size_t i, const std::string& why) {
    for (; i < out.size(); ++i) {
      out[i].type = redis_reply::kind::io_error;
      out[i].str = why;
    }
  };
  timeval tv{1, 0};
  redisContext* c = redisConnectWithTimeout("127.0.0.1", port, tv);
  if (c == nullptr || c->err) {
    fail_from(0, c ? c->errstr : "cannot allocate redis context");
    if (c) redisFree(c);
    return out;
  }
  redisSetTimeout(c, tv);
  if (!password.empty()) {
    auto* a = static_cast<redisReply*>(redisCommand(c, "AUTH %s", password.c_str()));
    if (a) freeReplyObject(a);
  }
  for (const auto& argv : commands) {
    std::vector<const char*> ptrs;
    std::vector<std::size_t> lens;
    for (const auto& a : argv) {
      ptrs.push_back(a.data());
      lens.push_back(a.size());
    }
    redisAppendCommandArgv(c, static_cast<int>(argv.size()), ptrs.data(), lens.data());
  }
  for (std::size_t i = 0; i < commands.size(); ++i) {
    void* reply = nullptr;
    if (redisGetReply(c, &reply) != REDIS_OK || reply == nullptr) {
      fail_from(i, c->errstr);
      break;
    }
    auto* r = static_cast<redisReply*>(reply);
    out[i] = copy(r);
    freeReplyObject(r);
  }
  redisFree(c);
  return out;
}

std::vector<redis_reply> redis_server::transaction(
    const std::vector<std::vector<std::string>>& commands) const {
  std::vector<std::vector<std::string>> all;
  all.reserve(commands.size() + 2);
  all.push_back({"MULTI"});
  all.insert(all.end(), commands.begin(), commands.end());
  all.push_back({"EXEC"});
  auto replies = redis_commands(port_, all, password_);
  auto exec = std::move(replies.back());
  if (exec.type == redis_reply::kind::array) return std::move(exec.elements);
  for (const auto& r : replies) {
    if (r.is_error()) return {r};  // the first refusal says why EXEC did not run
  }
  return {exec};
}

void redis_server::kill() {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGCONT);
  ::kill(pid_, SIGKILL);
  int status = 0;
  ::waitpid(pid_, &status, 0);
  pid_ = -1;
  paused_ = false;
}

void redis_server::restart() {
  kill();
  spawn();
  if (!wait_ready(5000)) throw std::runtime_error("redis_server: restart failed");
}

void redis_server::pause() {
  if (pid_ > 0 && !paused_) {
    ::kill(pid_, SIGSTOP);
    paused_ = true;
  }
}

void redis_server::resume() {
  if (pid_ > 0 && paused_) {
    ::kill(pid_, SIGCONT);
    paused_ = false;
  }
}

}  // namespace sluice::test
