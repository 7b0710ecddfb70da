// SPDX-License-Identifier: Apache-2.0
#pragma once
// Private to the store room: one connection to a Redis server, used by the check client
// (redis_store), the Sentinel lookup and watch (sentinel_locator) and the cluster's topology
// query (redis_cluster_store).
//
// It carries its own bytes with Asio — a TCP socket, or an ssl::stream over one — and uses
// hiredis only as the protocol codec: redisFormatCommandArgv writes each command, a
// redisReader parses the replies (RESP2, https://redis.io/docs/reference/protocol-spec/).
// hiredis 0.14's own connections cannot speak TLS.
//
// An attempt: name resolution (an address literal as is; a name by Asio's resolver, off the
// executor's thread), TCP connect, the TLS handshake (SNI and the host-name check against the
// certificate, RFC 6125), then `AUTH [username] password` when a password is set. The whole
// attempt is bounded by `connect_timeout`. Commands may be queued from the start: they are
// written, pipelined, right behind AUTH.
//
// Callbacks, as hiredis' async API has them: a command's callback is called once, with its
// reply, or with nullptr when the connection ends first (closed, lost, or failed to connect);
// replies come in send order. on_connect is called once (ok, or not ok with the reason);
// on_disconnect once when a connection that was up ends by itself (never after close()).
// A callback may call close() or command(). Everything runs on the executor given at open();
// nothing locks. An idle probe (options::idle_probe) tells its owner when the server stops
// answering without closing the connection.

#include "sluice/store/redis_tls.hpp"

#include <boost/asio/any_io_executor.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <initializer_list>
#include <memory>
#include <string>
#include <string_view>

struct redisReply;

namespace sluice::store::detail {

/// The text of a string, status or error reply ("" for none, or a reply without text).
std::string_view reply_text(const redisReply* r);

class redis_connection : public std::enable_shared_from_this<redis_connection> {
 public:
  /// A reply (nullptr: the connection ended before it came). Never throws.
  using reply_callback = void (*)(redis_connection* c, const redisReply* r, void* privdata);
  /// `ok` false: `why` says what failed (resolution, connect, TLS, AUTH, the deadline).
  using connect_callback = void (*)(redis_connection* c, bool ok, const std::string& why);
  /// A connection that was up ended by itself (peer closed, an error, a reply that does not
  /// parse); `why` says how.
  using disconnect_callback = void (*)(redis_connection* c, const std::string& why);
  /// The idle probe's verdict: `stalled` true when a probe went unanswered for
  /// options::probe_timeout (the connection stays open: a frozen server may resume), false
  /// when a reply came after that. Never throws.
  using stall_callback = void (*)(redis_connection* c, bool stalled);

  /// Where and how to connect.
  struct options {
    std::string host;  ///< an address literal or a name
    std::uint16_t port = 6379;
    /// Bounds resolution, connect, handshake and the AUTH answer (0 = no bound).
    std::chrono::milliseconds connect_timeout{0};
    std::string username;  ///< ACL user ("" = `AUTH password`, the default user)
    std::string password;  ///< "" = no AUTH
    redis_tls tls;         ///< no context: plain TCP
    /// The idle probe: a frozen server (SIGSTOP, a stalled network) keeps its TCP connection,
    /// so with no traffic nothing would notice. While up and not subscribed, a PING goes out
    /// after `idle_probe` without a reply (0 = no probe); unanswered after `probe_timeout`,
    /// `on_stall(c, true)`; the next reply, `on_stall(c, false)`. Checked every idle_probe / 4.
    std::chrono::milliseconds idle_probe{0};
    std::chrono::milliseconds probe_timeout{0};
    stall_callback on_stall = nullptr;
  };

  /// Starts an attempt; never calls back inline. `data` is the owner's, handed back by data().
  static std::shared_ptr<redis_connection> open(boost::asio::any_io_executor ex, options o,
                                                void* data, connect_callback on_connect,
                                                disconnect_callback on_disconnect);

  redis_connection(boost::asio::any_io_executor ex, options o, void* data,
                   connect_callback on_connect, disconnect_callback on_disconnect);
  ~redis_connection();
  redis_connection(const redis_connection&) = delete;
  redis_connection& operator=(const redis_connection&) = delete;

  /// Queues one command; `cb` may be null (the reply is dropped). False (and no callback)
  /// after close() or the connection's end.
  bool command(reply_callback cb, void* privdata, int argc, const char* const* argv,
               const std::size_t* lens);
  bool command(reply_callback cb, void* privdata, std::initializer_list<std::string_view> args);
  /// SUBSCRIBE `channel`: `cb` receives the confirmation and then every message, until the
  /// connection ends (then nullptr once). Nothing else may be sent on it afterwards.
  bool subscribe(reply_callback cb, void* privdata, std::string_view channel);
  /// Ends the connection now: every command still waiting gets nullptr (inline; from inside
  /// a reply's callback, right after it returns), and no connect or disconnect callback
  /// follows. Idempotent.
  void close();

  void* data() const { return data_; }
  /// The server as "host:port" (for the log lines).
  std::string name() const;
  /// Whether the connection is up (connected, handshaken and authenticated).
  bool connected() const { return state_ == state::up; }

 private:
  enum class state { connecting, up, closed };
  struct pending {
    reply_callback cb;
    void* privdata;
  };
  struct transport;

  void start();
  void resolved(const std::string& address);
  void handshaken();
  void went_up();
  void arm_probe();
  void probe_tick();
  void heard();
  void fail(const std::string& why);
  void end(const std::string& why);
  void on_auth(const redisReply* r);
  void write_some();
  void read_some();
  void on_read(std::size_t n);
  void deliver(redisReply* r);
  void fail_pending();

  boost::asio::any_io_executor ex_;
  options o_;
  void* data_;
  connect_callback on_connect_;
  disconnect_callback on_disconnect_;
  std::unique_ptr<transport> t_;
  state state_ = state::connecting;
  bool writing_ = false;
  bool reading_ = false;
  bool subscribed_ = false;
  bool delivering_ = false;           // inside a reply's callback
  bool fail_after_delivery_ = false;  // close() was called there
  std::string out_;                   // formatted commands not yet handed to a write
  std::string writing_buf_;           // the bytes of the write in flight
  std::deque<pending> waiting_;       // callbacks of the commands sent or queued, in order
  pending subscriber_{nullptr, nullptr};
  void* reader_ = nullptr;  // redisReader*
  // The idle probe (options::idle_probe).
  std::chrono::steady_clock::time_point last_heard_{};
  std::chrono::steady_clock::time_point ping_sent_{};
  bool ping_outstanding_ = false;
  bool stalled_ = false;
};

}  // namespace sluice::store::detail
