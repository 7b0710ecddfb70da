// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// Test fixture: a real `redis-server` on a free loopback port, started and stopped by pid.
///
/// The server runs with no persistence (`--save "" --appendonly no`, unless extra arguments
/// say otherwise) in a private temporary directory, bound to 127.0.0.1 only. Construction
/// throws std::runtime_error if the server does not answer PING within 5 s.

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

namespace sluice::test {

/// One reply of the synchronous command helper (a copy of a hiredis redisReply).
struct redis_reply {
  enum class kind { nil, integer, string, status, error, array, io_error };
  kind type = kind::nil;
  long long integer = 0;
  std::string str;                    ///< string, status or error text
  std::vector<redis_reply> elements;  ///< array elements

  bool is_error() const { return type == kind::error || type == kind::io_error; }
};

/// A TCP port the kernel just handed out for 127.0.0.1 (bind port 0, read it, close). Another
/// process could take it before the caller binds it: callers retry. Throws std::runtime_error.
std::uint16_t free_loopback_port();

/// Runs one command synchronously on a fresh connection to 127.0.0.1:port (1 s timeout; AUTH
/// first when `password` is not empty); I/O failures come back as kind::io_error with the
/// message in `str`.
redis_reply redis_command(std::uint16_t port, const std::vector<std::string>& argv,
                          const std::string& password = {});

/// Runs `commands` one after the other on one fresh connection (sent together, then their
/// replies read in order); the replies, one per command. An I/O failure makes that reply and
/// every later one kind::io_error.
std::vector<redis_reply> redis_commands(std::uint16_t port,
                                        const std::vector<std::vector<std::string>>& commands,
                                        const std::string& password = {});

/// A redis-server child process on 127.0.0.1:port().
class redis_server {
 public:
  /// Starts the server; `extra_args` are appended to its command line (e.g. {"--appendonly",
  /// "yes"}). Throws std::runtime_error when it cannot be started.
  explicit redis_server(std::vector<std::string> extra_args = {});
  /// The same, with `env` ("NAME=VALUE" entries) added to the server's environment (e.g. a
  /// libfaketime preload that steps its clock).
  redis_server(std::vector<std::string> extra_args, std::vector<std::string> env);
  /// Stops the server (SIGCONT then SIGKILL, by pid) and removes its directory.
  ~redis_server();

  redis_server(const redis_server&) = delete;
  redis_server& operator=(const redis_server&) = delete;

  /// The TCP port it listens on (loopback only).
  std::uint16_t port() const { return port_; }
  /// Its process id, or -1 while killed.
  pid_t pid() const { return pid_; }
  /// Its private directory (working directory; its log is `redis.log` there).
  const std::string& dir() const { return dir_; }

  /// Runs one command synchronously on a fresh connection (1 s timeout; AUTH first when the
  /// server was started with --requirepass); I/O failures come back as kind::io_error with the
  /// message in `str`.
  redis_reply command(const std::vector<std::string>& argv) const;

  /// Runs `commands` as one transaction (MULTI, the commands, EXEC on one connection): no
  /// other client's command runs between them, and Redis reads its clock once for the whole
  /// of it, so no key expires between them (a key a script wrote with a 1 ms expiry is still
  /// there for the next command). Returns EXEC's replies, one per command; an EXEC that did
  /// not run (a command refused while queued, an I/O error) returns one reply: its error.
  std::vector<redis_reply> transaction(const std::vector<std::vector<std::string>>& commands) const;

  /// SIGKILLs the server and reaps it (the port stops answering at once).
  void kill();
  /// Starts the server again on the same port and directory; waits for PING.
  void restart();
  /// SIGSTOP: the server keeps its sockets open but answers nothing (a network stall).
  void pause();
  /// SIGCONT after pause().
  void resume();

 private:
  void spawn();
  bool wait_ready(int timeout_ms) const;

  std::vector<std::string> extra_args_;
  std::vector<std::string> env_;
  std::string dir_;
  std::string password_;  // from --requirepass, used by command()
  std::uint16_t port_ = 0;
  pid_t pid_ = -1;
  bool paused_ = false;
};

}  // namespace sluice::test
