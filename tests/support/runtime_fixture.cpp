// SPDX-License-Identifier: Apache-2.0
#include "support/runtime_fixture.hpp"

#include "sluice/config/loader.hpp"

#include <chrono>
#include <fstream>
#include <stdexcept>

namespace sluice::test {

runtime_fixture::runtime_fixture(const std::string& yaml, unsigned workers)
    : dir_("runtime"), file_(dir_.path / "rules.yaml") {
  std::ofstream(file_) << yaml;
  auto loaded = config::load_file(file_.string());
  if (!loaded.ok()) throw std::runtime_error(loaded.diagnostics.front().to_string());
  app::runtime_options options;
  options.gateway.listen = "127.0.0.1:0";
  options.gateway.admin = "127.0.0.1:0";
  options.gateway.workers = workers;
  options.watch = false;  // reloads come from the test (POST /admin/reload)
  rt_ = std::make_unique<app::runtime>(file_.string(), loaded.value, options);
  rt_->start();
  rt_->gateway().wait_for_store(std::chrono::seconds(5));
}

runtime_fixture::~runtime_fixture() = default;

std::uint16_t runtime_fixture::port() const {
  return rt_->gateway().endpoint().port();
}

std::uint16_t runtime_fixture::admin_port() const {
  return rt_->admin_endpoint()->port();
}

client_response runtime_fixture::admin(const std::string& target, const std::string& method) const {
  http_connection c(admin_port());
  return c.request(method, target);
}

}  // namespace sluice::test
