// SPDX-License-Identifier: Apache-2.0
#include "fixture.hpp"

#include <cstdio>
#include <cstdlib>

namespace sluice::micro {

const config::rules& bench_rules() {
  static const std::shared_ptr<const config::rules> rules = [] {
    auto loaded = config::load_string(rules_yaml, "micro.yaml");
    if (!loaded.ok()) {
      for (const auto& d : loaded.diagnostics) std::fprintf(stderr, "%s\n", d.to_string().c_str());
      std::abort();
    }
    return loaded.value;
  }();
  return *rules;
}

http::request make_request(boost::beast::http::verb method, std::string_view target,
                           std::string_view host) {
  http::request req{method, target, 11};
  if (!host.empty()) req.set(boost::beast::http::field::host, host);
  req.set(boost::beast::http::field::user_agent, "micro/1");
  req.set(boost::beast::http::field::accept, "application/json");
  return req;
}

boost::asio::ip::address address(std::string_view text) {
  boost::system::error_code ec;
  auto a = boost::asio::ip::make_address(text, ec);
  if (ec) std::abort();
  return a;
}

const config::route& route_named(std::string_view name) {
  for (const auto& r : bench_rules().routes) {
    if (r.name == name) return r;
  }
  std::abort();
}

}  // namespace sluice::micro
