// SPDX-License-Identifier: Apache-2.0
#include "support/gateway_fixture.hpp"

#include "sluice/config/loader.hpp"

#include <stdexcept>

namespace sluice::test {

std::string substitute(std::string text, const std::map<std::string, std::string>& vars) {
  for (const auto& [key, value] : vars) {
    for (auto pos = text.find(key); pos != std::string::npos;
         pos = text.find(key, pos + value.size())) {
      text.replace(pos, key.size(), value);
    }
  }
  return text;
}

namespace {
std::shared_ptr<const config::rules> load_or_throw(const std::string& yaml) {
  auto r = config::load_string(yaml, "rules.yaml");
  if (!r.ok()) {
    std::string all;
    for (const auto& d : r.diagnostics) all += d.to_string() + "\n";
    throw std::runtime_error("rules did not load:\n" + all);
  }
  return r.value;
}
}  // namespace

gateway_fixture::gateway_fixture(const std::string& yaml, unsigned workers) {
  app::gateway_options options;
  options.listen = "127.0.0.1:0";
  options.workers = workers;
  gateway_ = std::make_unique<app::gateway>(load_or_throw(yaml), options);
  gateway_->start();
}

gateway_fixture::~gateway_fixture() {
  gateway_->stop();
}

std::uint16_t gateway_fixture::port() const {
  return gateway_->endpoint().port();
}

std::string gateway_fixture::reload(const std::string& yaml) {
  auto r = config::load_string(yaml, "rules.yaml");
  if (!r.ok()) {
    std::string all;
    for (const auto& d : r.diagnostics) all += d.to_string() + "\n";
    gateway_->note_reload_failure();
    return all;
  }
  gateway_->reload(r.value);
  return {};
}

}  // namespace sluice::test
