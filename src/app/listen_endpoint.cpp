// SPDX-License-Identifier: Apache-2.0
#include "app/listen_endpoint.hpp"

#include "sluice/config/loader.hpp"

#include <boost/asio/ip/address.hpp>

#include <stdexcept>

namespace sluice::app {

boost::asio::ip::tcp::endpoint listen_endpoint(const std::string& text, const char* what) {
  std::string error;
  const auto a = config::parse_listen_address(text, error);
  if (!a) throw std::runtime_error(std::string("bad ") + what + " address: " + text);
  // parse_listen_address() has checked the host is an IP literal.
  return {boost::asio::ip::make_address(a->host), a->port};
}

}  // namespace sluice::app
