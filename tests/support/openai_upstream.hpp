// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// An OpenAI-compatible upstream for the integration tests (tests/support/openai_upstream.py,
/// run as a child process on a free loopback port, stopped by its pid): it answers
/// `POST /v1/chat/completions` as JSON or, for `"stream": true`, as SSE chunks whose last event
/// before `data: [DONE]` holds the usage, and records what it charged per completion, so a test
/// can compare a gateway's settled totals with the upstream's. The script's docstring lists the
/// request headers that choose the usage, the pacing, a failure or a cut.

#include "support/child_process.hpp"

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::test {

/// One completion the upstream charged (one line of its record).
struct openai_charge {
  std::uint64_t n = 0;  ///< the request's number, from 0, in arrival order
  std::string id;       ///< "chatcmpl-<n>"
  bool stream = false;
  std::uint64_t prompt_tokens = 0, completion_tokens = 0, total_tokens = 0;
  bool usage_sent = false;      ///< the usage went out (false: cut, client gone, no include_usage)
  std::uint64_t in_flight = 0;  ///< completions being answered when it began, itself included
  unsigned status = 200;
};

/// The upstream process. Throws std::runtime_error when it does not start within 10 s.
class openai_upstream {
 public:
  /// Pacing defaults (requests override them with X-Test-Delay-Ms / X-Test-Chunks).
  struct settings {
    unsigned delay_ms = 20;  ///< between SSE events
    unsigned chunks = 4;     ///< content deltas per stream
  };

  /// Starts it with its record and logs in `dir`.
  openai_upstream(const std::filesystem::path& dir, settings s);
  explicit openai_upstream(const std::filesystem::path& dir) : openai_upstream(dir, settings()) {}

  std::uint16_t port() const { return port_; }
  /// "http://127.0.0.1:<port>", for a rules file's upstream.
  std::string url() const;
  pid_t pid() const { return child_.pid(); }

  /// Every charge recorded so far, in the order recorded.
  std::vector<openai_charge> charges() const;
  /// Polls the record (every 5 ms, at most `limit`) until it holds at least `n` charges;
  /// returns them (fewer when the time ran out).
  std::vector<openai_charge> wait_charges(
      std::size_t n, std::chrono::milliseconds limit = std::chrono::seconds(10)) const;
  /// The sum of total_tokens over every charge recorded so far.
  std::uint64_t total_charged() const;

  /// Stops it (SIGTERM, then SIGKILL after 2 s) and returns its exit status.
  std::optional<int> stop();

 private:
  std::filesystem::path record_;
  child_process child_;
  std::uint16_t port_ = 0;
};

/// A chat completion request body: one user message `content`, `max_tokens`, and for a
/// stream, `stream_options.include_usage`.
std::string chat_request(std::string_view content, bool stream, bool include_usage = true,
                         unsigned max_tokens = 256);

}  // namespace sluice::test
