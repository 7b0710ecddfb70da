// SPDX-License-Identifier: Apache-2.0
#include "sluice/errc.hpp"

#include <string>

namespace sluice {
namespace {

class category final : public boost::system::error_category {
 public:
  const char* name() const noexcept override { return "sluice"; }
  std::string message(int ev) const override {
    switch (static_cast<errc>(ev)) {
      case errc::ok:
        return "ok";
      case errc::store_unavailable:
        return "counter store unavailable";
      case errc::store_timeout:
        return "counter store deadline exceeded";
      case errc::store_error:
        return "counter store error reply";
      case errc::store_protocol:
        return "unexpected counter store reply";
      case errc::noscript:
        return "script not loaded in the store (NOSCRIPT)";
      case errc::bad_request:
        return "bad request";
      case errc::not_found:
        return "no route matches";
      case errc::upstream_unreachable:
        return "upstream unreachable";
      case errc::upstream_timeout:
        return "upstream timed out";
      case errc::upstream_protocol:
        return "malformed upstream response";
      case errc::upstream_tls:
        return "upstream TLS handshake failed";
      case errc::config_invalid:
        return "invalid rules file";
      case errc::conflicting_values:
        return "conflicting identity values";
      case errc::malformed_value:
        return "malformed identity value";
      case errc::unknown_key:
        return "unknown API key";
    }
    return "unknown sluice error";
  }
};

}  // namespace

const boost::system::error_category& error_category() noexcept {
  static const category instance;
  return instance;
}

}  // namespace sluice
