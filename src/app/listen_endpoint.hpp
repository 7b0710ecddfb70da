// SPDX-License-Identifier: Apache-2.0
#pragma once
// The endpoint of a `--listen` or `--admin` override, private to the app room: main checks
// the option with config::parse_listen_address() and hands it on as text
// (config::listen_address::to_string()); the gateway and the runtime read that text back with
// the same parser, so what is bound is what was checked.

#include <boost/asio/ip/tcp.hpp>

#include <string>

namespace sluice::app {

/// The endpoint `text` names: `host:port` or `[v6]:port`, the host an IP literal, the port
/// 0..65535 (0: a free port chosen at bind time), read by config::parse_listen_address().
/// Throws std::runtime_error("bad WHAT address: TEXT") when it names none (`what`: "listen",
/// "admin").
boost::asio::ip::tcp::endpoint listen_endpoint(const std::string& text, const char* what);

}  // namespace sluice::app
