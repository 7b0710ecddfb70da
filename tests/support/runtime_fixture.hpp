// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// Test fixture: the whole runtime — gateway and admin listener, both on 127.0.0.1 port 0 —
/// from a rules text written to a file of its own (so `POST /admin/reload` re-reads it), with
/// one worker unless told otherwise.

#include "support/http_client.hpp"
#include "support/temp_dir.hpp"

#include "sluice/app/runtime.hpp"

#include <filesystem>
#include <memory>
#include <string>

namespace sluice::test {

class runtime_fixture {
 public:
  /// Writes `yaml` to `rules.yaml` in a temporary directory, loads and starts it, and waits
  /// up to 5 s for the store. Throws std::runtime_error with the first diagnostic when the
  /// text does not load.
  explicit runtime_fixture(const std::string& yaml, unsigned workers = 1);
  ~runtime_fixture();

  /// The gateway's and the admin listener's ports.
  std::uint16_t port() const;
  std::uint16_t admin_port() const;
  /// A request to the admin listener.
  client_response admin(const std::string& target, const std::string& method = "GET") const;
  app::gateway& gateway() { return rt_->gateway(); }
  app::runtime& runtime() { return *rt_; }
  /// The rules file (rewrite it, then `POST /admin/reload`).
  const std::filesystem::path& file() const { return file_; }

 private:
  temp_dir dir_;
  std::filesystem::path file_;
  std::unique_ptr<app::runtime> rt_;
};

}  // namespace sluice::test
