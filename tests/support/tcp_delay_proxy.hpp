// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// Test fixture: a TCP proxy on a free loopback port in front of another loopback port, on its
/// own thread, that can delay the server's replies (c10 part 2) or hold all traffic in both
/// directions (c11 scenario B: a peer that accepts connections and answers nothing, without a
/// reset — packets dropped and retransmitted later). Nothing is ever lost or reordered: held
/// and delayed bytes are delivered, in order, once released or due.

#include <chrono>
#include <cstdint>
#include <memory>

namespace sluice::test {

/// The proxy. Thread-safe: the setters are posted to the proxy's thread.
class tcp_delay_proxy {
 public:
  /// Binds 127.0.0.1:0 and forwards every accepted connection to 127.0.0.1:`target_port`.
  /// Throws std::runtime_error when it cannot bind.
  explicit tcp_delay_proxy(std::uint16_t target_port);
  /// Closes every connection and joins the thread.
  ~tcp_delay_proxy();
  tcp_delay_proxy(const tcp_delay_proxy&) = delete;
  tcp_delay_proxy& operator=(const tcp_delay_proxy&) = delete;

  /// The port it listens on.
  std::uint16_t port() const;

  /// Bytes read from the server from now on reach the client `delay` after they were read
  /// (0 = at once). Returns once the proxy's thread has applied it.
  void set_reply_delay(std::chrono::milliseconds delay);

  /// true: from now on nothing is forwarded in either direction (new connections are still
  /// accepted, bytes are queued); false: everything queued is delivered. Returns once applied.
  void set_hold(bool hold);

  /// Connections accepted from now on go to 127.0.0.1:`port` (a failover behind a forwarder
  /// or virtual IP); the open ones stay where they are. Returns once applied.
  void set_target(std::uint16_t port);

  /// TCP connections accepted so far.
  std::size_t accepts() const;

  struct impl;  ///< defined in the .cpp (public so that its coroutines can name it)

 private:
  std::unique_ptr<impl> impl_;
};

}  // namespace sluice::test
