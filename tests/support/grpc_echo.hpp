// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// Test helper: the gRPC echo service of tests/support/grpc_echo.py (Debian's python3-grpcio)
/// as a child process on a free loopback port (h2c), its log of the calls it saw read back.
/// Header-only; the test links sluice_support_redis_server (free_loopback_port).

#include "support/child_process.hpp"
#include "support/redis_server.hpp"
#include "support/temp_dir.hpp"

#include <chrono>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace sluice::test {

/// Debian's python3, which runs the service and the clients.
inline const std::string grpc_python = "/usr/bin/python3";
/// The service's and the client's script.
inline const std::string grpc_echo_script =
    std::string(SLUICE_SOURCE_DIR) + "/tests/support/grpc_echo.py";

/// Whether python3 with python3-grpcio is there (else the tests that need it are skipped).
inline bool have_grpcio() {
  if (!std::filesystem::exists(grpc_python)) return false;
  temp_dir dir{"grpcio-check"};
  child_process p({grpc_python, "-c", "import grpc"}, dir.path / "o", dir.path / "e");
  return p.wait_exit(std::chrono::seconds(30)) == 0;
}

/// The echo service on a free loopback port; its output lists the calls it saw. Throws
/// std::runtime_error when it does not print `ready` within 30 s.
struct echo_service {
  echo_service() : port(free_loopback_port()) {
    proc = std::make_unique<child_process>(
        std::vector<std::string>{grpc_python, grpc_echo_script, "server", std::to_string(port)},
        dir.path / "server.out", dir.path / "server.err");
    if (!eventually([&] { return proc->out().find("ready") != std::string::npos; },
                    std::chrono::seconds(30)))
      throw std::runtime_error("the echo service did not start: " + proc->err());
  }
  /// Calls the service has seen.
  std::size_t calls() const {
    const auto out = proc->out();
    std::size_t n = 0;
    for (auto at = out.find("call "); at != std::string::npos; at = out.find("call ", at + 1)) ++n;
    return n;
  }
  /// The service's URL, for an `http2: true` upstream.
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port); }
  temp_dir dir{"grpc-echo"};
  std::uint16_t port;
  std::unique_ptr<child_process> proc;
};

}  // namespace sluice::test
