// SPDX-License-Identifier: Apache-2.0
// The endpoint of a `--listen` / `--admin` override (src/app/listen_endpoint.hpp): read by
// the rules file's own address parser, so the text main checked and printed
// (config::listen_address::to_string()) is read back to the same endpoint, and anything else
// is refused with the gateway's message.
#include "app/listen_endpoint.hpp"

#include "sluice/config/loader.hpp"

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

namespace sluice::app {
namespace {

/// The message listen_endpoint() throws for `text`, "" when it does not throw.
std::string refusal(const std::string& text, const char* what = "listen") {
  try {
    (void)listen_endpoint(text, what);
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}

TEST(listen_endpoint, an_ipv4_address_and_port) {
  const auto e = listen_endpoint("127.0.0.1:8080", "listen");
  EXPECT_EQ(e.address().to_string(), "127.0.0.1");
  EXPECT_EQ(e.port(), 8080);
}

TEST(listen_endpoint, port_zero_asks_for_a_free_port) {
  EXPECT_EQ(listen_endpoint("0.0.0.0:0", "listen").port(), 0);
}

TEST(listen_endpoint, an_ipv6_address_in_brackets) {
  const auto e = listen_endpoint("[::1]:9000", "admin");
  EXPECT_TRUE(e.address().is_v6());
  EXPECT_EQ(e.address().to_string(), "::1");
  EXPECT_EQ(e.port(), 9000);
}

TEST(listen_endpoint, reads_back_what_main_printed) {
  for (const config::listen_address& a :
       {config::listen_address{"127.0.0.1", 0}, config::listen_address{"::1", 8443},
        config::listen_address{"fe80::1:2", 65535}}) {
    const auto e = listen_endpoint(a.to_string(), "listen");
    EXPECT_EQ(e.address().to_string(), a.host) << a.to_string();
    EXPECT_EQ(e.port(), a.port) << a.to_string();
  }
}

TEST(listen_endpoint, a_missing_port_is_refused) {
  EXPECT_EQ(refusal("127.0.0.1"), "bad listen address: 127.0.0.1");
  EXPECT_EQ(refusal("[::1]"), "bad listen address: [::1]");
  EXPECT_EQ(refusal("127.0.0.1:"), "bad listen address: 127.0.0.1:");
}

TEST(listen_endpoint, a_bad_port_is_refused) {
  EXPECT_EQ(refusal("127.0.0.1:99999"), "bad listen address: 127.0.0.1:99999");
  EXPECT_EQ(refusal("127.0.0.1:abc"), "bad listen address: 127.0.0.1:abc");
  EXPECT_EQ(refusal("127.0.0.1:-1"), "bad listen address: 127.0.0.1:-1");
  EXPECT_EQ(refusal("[::1]:65536", "admin"), "bad admin address: [::1]:65536");
}

TEST(listen_endpoint, an_ipv6_address_without_brackets_or_a_host_name_is_refused) {
  EXPECT_EQ(refusal("::1:8080"), "bad listen address: ::1:8080");
  EXPECT_EQ(refusal("[::1:8080"), "bad listen address: [::1:8080");
  EXPECT_EQ(refusal("localhost:8080", "admin"), "bad admin address: localhost:8080");
  EXPECT_EQ(refusal(""), "bad listen address: ");
}

}  // namespace
}  // namespace sluice::app
