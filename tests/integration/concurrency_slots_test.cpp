// SPDX-License-Identifier: Apache-2.0
// sluice-test-serial
// sluice-test-support: redis_cluster http_client scripted_upstream
// Concurrency slots end to end (algorithm: concurrency): K = 3 `sluice` processes on one Redis
// in front of a slow upstream that samples how many requests it holds at once. 50 clients on
// one key with max_in_flight 4: the upstream never holds more than 4, the rest get 429 with
// qu="concurrent-requests" and an honest Retry-After, every admitted request releases its slot
// when it ends; slots are renewed while requests outlive slot_ttl; a gateway killed with
// SIGKILL while holding 4 slots gives them back within slot_ttl + the renewal period. Both
// again on a three-master Redis Cluster. A client gone mid-response releases its slot; a
// WebSocket tunnel holds its slot until it closes.
// Serial: the kill's check is bounded by the stated time.

#include "support/child_process.hpp"
#include "support/eventually.hpp"
#include "support/http_client.hpp"
#include "support/redis_cluster.hpp"
#include "support/redis_server.hpp"
#include "support/scripted_upstream.hpp"
#include "support/temp_dir.hpp"

#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <fstream>
#include <memory>
#include <mutex>
#include <regex>
#include <string>
#include <thread>
#include <vector>

namespace sluice::test {
namespace {

using namespace std::chrono_literals;
using steady = std::chrono::steady_clock;

/// Polls `pred` every 10 ms for at most `limit`; whether it became true.
template <typename F>
bool wait_until(F pred, std::chrono::milliseconds limit) {
  return eventually(pred, limit);  // (support/eventually.hpp: scaled, with a short backoff)
}

/// An upstream that holds every request for `hold` (or until let_go()), then answers 200 and
/// closes; it records how many requests it holds now and the most it held at once. One thread
/// per connection. Its other modes: `stream` sends a head and an endless body (a piece every
/// 20 ms) until the gateway stops reading; `upgrade` answers 101 and keeps the tunnel open
/// until the gateway closes it.
class holding_upstream {
 public:
  enum class mode { hold, stream, upgrade };

  holding_upstream() {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd_ < 0 || ::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
        ::listen(fd_, 256) != 0)
      throw std::runtime_error("holding_upstream: cannot listen");
    socklen_t len = sizeof a;
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port = ntohs(a.sin_port);
    acceptor_ = std::thread([this] { accept_loop(); });
  }
  ~holding_upstream() {
    {
      std::lock_guard lock(mutex_);
      stop_ = true;
    }
    wake_.notify_all();
    acceptor_.join();
    for (auto& t : served_) t.join();
    ::close(fd_);
  }

  /// How long each later request is held.
  void set_hold(std::chrono::milliseconds d) {
    std::lock_guard lock(mutex_);
    hold_ = d;
  }
  void set_mode(mode m) {
    std::lock_guard lock(mutex_);
    mode_ = m;
  }
  /// Answers every request held now.
  void let_go() {
    {
      std::lock_guard lock(mutex_);
      ++round_;
    }
    wake_.notify_all();
  }
  int holding() const {
    std::lock_guard lock(mutex_);
    return current_;
  }
  int peak() const {
    std::lock_guard lock(mutex_);
    return peak_;
  }

  std::uint16_t port = 0;

 private:
  void accept_loop() {
    for (;;) {
      {
        std::lock_guard lock(mutex_);
        if (stop_) return;
      }
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 20) <= 0) continue;
      const int c = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (c < 0) continue;
      std::lock_guard lock(mutex_);
      served_.emplace_back([this, c] { serve(c); });
    }
  }
  void serve(int c) {
    std::string head;
    char buf[4096];
    while (head.find("\r\n\r\n") == std::string::npos) {
      pollfd p{c, POLLIN, 0};
      if (::poll(&p, 1, 5000) <= 0) break;
      const auto n = ::recv(c, buf, sizeof buf, 0);
      if (n <= 0) break;
      head.append(buf, static_cast<std::size_t>(n));
    }
    std::unique_lock lock(mutex_);
    const mode m = mode_;
    lock.unlock();
    if (head.find("\r\n\r\n") != std::string::npos && m != mode::hold) {
      {
        std::lock_guard counted(mutex_);
        peak_ = std::max(peak_, ++current_);
      }
      const std::string res = m == mode::stream
                                  ? "HTTP/1.1 200 OK\r\nContent-Length: 1000000000\r\n\r\n"
                                  : "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                                    "Connection: Upgrade\r\n"
                                    "Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\n";
      bool open = ::send(c, res.data(), res.size(), MSG_NOSIGNAL) > 0;
      const std::string piece(1024, 'x');
      while (open) {
        {
          std::lock_guard stopping(mutex_);
          if (stop_) break;
        }
        if (m == mode::stream) {
          open = ::send(c, piece.data(), piece.size(), MSG_NOSIGNAL) > 0;
          std::this_thread::sleep_for(20ms);
        } else {
          pollfd p{c, POLLIN, 0};
          if (::poll(&p, 1, 20) > 0) open = ::recv(c, buf, sizeof buf, 0) > 0;
        }
      }
      std::lock_guard counted(mutex_);
      --current_;
    } else if (head.find("\r\n\r\n") != std::string::npos) {
      lock.lock();
      peak_ = std::max(peak_, ++current_);
      const auto round = round_;
      wake_.wait_for(lock, hold_, [&] { return stop_ || round_ != round; });
      --current_;
      lock.unlock();
      const std::string res =
          "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nConnection: close\r\n\r\nok\n";
      (void)::send(c, res.data(), res.size(), MSG_NOSIGNAL);
    }
    ::close(c);
  }

  int fd_ = -1;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;
  std::uint64_t round_ = 0;
  std::chrono::milliseconds hold_{1000};
  mode mode_ = mode::hold;
  int current_ = 0, peak_ = 0;
  std::thread acceptor_;
  std::vector<std::thread> served_;
};

/// The value of the metric line `series` (name and labels as exposed), 0 when absent.
double metric(const std::string& text, const std::string& series) {
  const auto at = text.find("\n" + series + " ");
  if (at == std::string::npos) return 0;
  return std::stod(text.substr(at + series.size() + 2));
}

/// Where the gateways of a slots_world keep their slots.
enum class slots_store { memory, redis, cluster };

struct slots_world {
  /// `instances` gateways (at most 3), each limit admitting `max_in_flight` of one key, on one
  /// Redis server, a three-master cluster (no replicas) or each on its own memory store.
  explicit slots_world(int n = 3, int max_in_flight = 4, slots_store store = slots_store::redis)
      : instances(n) {
    if (store == slots_store::redis) redis = std::make_unique<redis_server>();
    if (store == slots_store::cluster)
      cluster = std::make_unique<redis_cluster>(
          redis_cluster::options{.replicas_per_master = 0, .env = {}});
    up.set_hold(1000ms);  // a slow upstream: one second per answer
    std::ofstream(dirs[0].path / "rules.yaml")
        << "store: "
        << (redis ? "{type: redis, address: \"127.0.0.1:" + std::to_string(redis->port()) +
                        "\", timeout: 500ms}"
            : cluster ? cluster->store_yaml("500ms")
                      : std::string("{type: memory}"))
        << "\n"
        << "identity: {api_key: {header: X-API-Key}}\n"
           "plans: {free: {limits: []}}\n"
           "api_keys: {key-a: free}\n"
           "upstreams: {slow: {url: \"http://127.0.0.1:"
        << up.port
        << "\", timeout: 60s}}\n"
           "routes:\n"
           "  - name: completions\n"
           "    match: {path_prefix: /v1/}\n"
           "    upstream: slow\n"
           "    limits:\n"
           "      - {name: inflight, by: api_key, algorithm: concurrency, max_in_flight: "
        << max_in_flight << ", slot_ttl: 1s}\n";
    for (int i = 0; i < instances; ++i) {
      gateways.push_back(std::make_unique<sluice_process>(dirs[0].path / "rules.yaml",
                                                          dirs[static_cast<std::size_t>(i)].path));
    }
  }
  ::testing::AssertionResult started() {
    for (auto& g : gateways)
      if (!g->wait_listening()) return ::testing::AssertionFailure() << g->log();
    return ::testing::AssertionSuccess();
  }

  /// The slots held in the store now (the key's sorted set; the key expires with its last
  /// slot), on the one Redis or on whichever node of the cluster holds the key.
  long long slots_in_redis() const {
    long long n = 0;
    const auto count = [&n](const auto& run) {
      const auto keys = run(std::vector<std::string>{"KEYS", "sl:{inflight|*"});
      for (const auto& k : keys.elements)
        n += run(std::vector<std::string>{"ZCARD", k.str}).integer;
    };
    if (redis) count([&](const std::vector<std::string>& argv) { return redis->command(argv); });
    for (std::size_t i = 0; cluster && i < cluster->size(); ++i)
      count([&](const std::vector<std::string>& argv) { return cluster->command(i, argv); });
    return n;
  }

  client_response call(int gateway) const {
    return get(gateways[static_cast<std::size_t>(gateway)]->port, "/v1/chat/completions",
               {{"X-API-Key", "key-a"}});
  }

  /// The admin listener's /metrics of gateway `i`.
  std::string metrics(int i = 0) const {
    return get(gateways[static_cast<std::size_t>(i)]->admin_port, "/metrics").body;
  }

  int instances;
  std::unique_ptr<redis_server> redis;
  std::unique_ptr<redis_cluster> cluster;
  holding_upstream up;
  temp_dir dirs[3] = {temp_dir("slots0"), temp_dir("slots1"), temp_dir("slots2")};
  std::vector<std::unique_ptr<sluice_process>> gateways;
};

/// 50 clients on the three gateways of `w` (max_in_flight 4).
void fifty_clients_never_pass_four_and_release_every_slot(slots_world& w) {
  ASSERT_TRUE(w.started());
  constexpr int clients = 50;
  std::vector<client_response> got(clients);
  std::vector<std::thread> threads;
  for (int c = 0; c < clients; ++c)
    threads.emplace_back([&, c] { got[static_cast<std::size_t>(c)] = w.call(c % w.instances); });
  for (auto& t : threads) t.join();

  int ok = 0, refused = 0;
  for (const auto& r : got) {
    if (r.status == 200) {
      ++ok;
    } else {
      ASSERT_EQ(r.status, 429u) << r.body;
      ++refused;
      EXPECT_EQ(r.header("RateLimit-Policy"), "\"inflight\";q=4;qu=\"concurrent-requests\"");
      EXPECT_GE(std::stoi(r.header("Retry-After")), 1);
    }
  }
  EXPECT_LE(w.up.peak(), 4);  // sampled at the upstream
  EXPECT_GE(ok, 4);
  EXPECT_GE(refused, 1);

  // Every admitted request gave its slot back when its response ended (released, counted
  // by reason), and Redis holds none.
  EXPECT_TRUE(wait_until([&] { return w.slots_in_redis() == 0; }, 2000ms));
  double released = 0;
  for (const auto& g : w.gateways) {
    const auto text = get(g->admin_port, "/metrics").body;
    released += metric(text, "sluice_concurrency_releases_total{reason=\"complete\"}");
    EXPECT_EQ(metric(text, "sluice_concurrency_slots_held{limit=\"inflight\"}"), 0);
  }
  EXPECT_EQ(released, ok);
}

TEST(ConcurrencySlots, FiftyClientsOnThreeGatewaysNeverPassFourAndReleaseEverySlot) {
  slots_world w;
  fifty_clients_never_pass_four_and_release_every_slot(w);
}

TEST(ConcurrencySlots, OnAClusterFiftyClientsOnThreeGatewaysNeverPassFourAndReleaseEverySlot) {
  slots_world w(3, 4, slots_store::cluster);
  fifty_clients_never_pass_four_and_release_every_slot(w);
}

/// Four requests held on gateway 0 of `w`, renewed past slot_ttl, then the gateway killed.
void slots_are_renewed_and_a_killed_gateways_slots_come_back(slots_world& w) {
  ASSERT_TRUE(w.started());
  w.up.set_hold(60s);  // held until let go
  std::vector<std::thread> held;
  std::vector<client_response> got(4);
  for (std::size_t c = 0; c < 4; ++c)
    held.emplace_back([&, c] {
      try {
        got[c] = w.call(0);
      } catch (const std::exception&) {
        // the gateway is killed under this request
      }
    });
  ASSERT_TRUE(wait_until([&] { return w.up.holding() == 4; }, 3000ms));
  ASSERT_TRUE(wait_until([&] { return w.slots_in_redis() == 4; }, 1000ms));
  // Renewed while the requests outlive slot_ttl (1 s): still 4 after three slot_ttls, and
  // another gateway refuses the key meanwhile.
  const auto until = steady::now() + 3000ms;
  while (steady::now() < until) {
    ASSERT_EQ(w.slots_in_redis(), 4);
    std::this_thread::sleep_for(50ms);
  }
  const auto refused = w.call(1);
  EXPECT_EQ(refused.status, 429u);

  // SIGKILL: no release is sent; the slots expire slot_ttl (1 s) after their last renewal,
  // which came at most a renewal period (slot_ttl / 3) before the kill.
  w.gateways[0]->signal(SIGKILL);
  const auto killed = steady::now();
  ASSERT_TRUE(w.gateways[0]->wait_exit(2000ms).has_value());
  EXPECT_TRUE(wait_until([&] { return w.slots_in_redis() == 0; }, 1000ms + 334ms + 200ms))
      << "slots still held "
      << std::chrono::duration_cast<std::chrono::milliseconds>(steady::now() - killed).count()
      << " ms after the kill";
  w.up.set_hold(0ms);
  w.up.let_go();
  for (auto& t : held) t.join();
  EXPECT_EQ(w.call(1).status, 200u);  // the key's slots are free again
}

TEST(ConcurrencySlots, SlotsAreRenewedAndAKilledGatewaysSlotsComeBackWithinTheStatedTime) {
  slots_world w;
  slots_are_renewed_and_a_killed_gateways_slots_come_back(w);
}

TEST(ConcurrencySlots, OnAClusterSlotsAreRenewedAndAKilledGatewaysSlotsComeBack) {
  slots_world w(3, 4, slots_store::cluster);
  slots_are_renewed_and_a_killed_gateways_slots_come_back(w);
}

// A client that goes away mid-response gives its slot back (reason client_gone) and the key
// admits again.
TEST(ConcurrencySlots, AClientGoneMidResponseReleasesItsSlot) {
  slots_world w(1, 1);
  ASSERT_TRUE(w.started());
  w.up.set_mode(holding_upstream::mode::stream);
  {
    auto c = raw_socket::connect(w.gateways[0]->port);
    ASSERT_TRUE(c.write(
        "GET /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nX-API-Key: key-a\r\n\r\n"));
    const auto head = c.read_until("\r\n\r\n", 3000ms);
    ASSERT_TRUE(head.has_value());
    EXPECT_EQ(head->rfind("HTTP/1.1 200", 0), 0u) << *head;
    EXPECT_EQ(w.slots_in_redis(), 1);
    EXPECT_EQ(metric(w.metrics(), "sluice_concurrency_slots_held{limit=\"inflight\"}"), 1);
    EXPECT_EQ(w.call(0).status, 429u);  // the one slot is held
    c.reset();
  }
  EXPECT_TRUE(wait_until(
      [&] {
        return metric(w.metrics(), "sluice_concurrency_releases_total{reason=\"client_gone\"}") ==
               1;
      },
      3000ms));
  EXPECT_EQ(w.slots_in_redis(), 0);
  EXPECT_EQ(metric(w.metrics(), "sluice_concurrency_slots_held{limit=\"inflight\"}"), 0);
  EXPECT_EQ(w.slots_in_redis(), 0);
}

// A WebSocket tunnel holds its slot for as long as it is open (renewed past slot_ttl), and
// gives it back when it closes (reason tunnel_closed).
TEST(ConcurrencySlots, AWebSocketTunnelHoldsItsSlotUntilItCloses) {
  slots_world w(1, 1);
  ASSERT_TRUE(w.started());
  w.up.set_mode(holding_upstream::mode::upgrade);
  const std::string handshake =
      "GET /v1/realtime HTTP/1.1\r\nHost: 127.0.0.1\r\nX-API-Key: key-a\r\n"
      "Connection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\n"
      "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n";
  {
    auto c = raw_socket::connect(w.gateways[0]->port);
    ASSERT_TRUE(c.write(handshake));
    const auto head = c.read_until("\r\n\r\n", 3000ms);
    ASSERT_TRUE(head.has_value());
    EXPECT_EQ(head->rfind("HTTP/1.1 101", 0), 0u) << *head;
    // Past two slot_ttls the tunnel still holds its slot: a second tunnel is refused.
    const auto until = steady::now() + 2200ms;
    while (steady::now() < until) {
      ASSERT_EQ(w.slots_in_redis(), 1);
      std::this_thread::sleep_for(50ms);
    }
    auto second = raw_socket::connect(w.gateways[0]->port);
    ASSERT_TRUE(second.write(handshake));
    const auto refused = second.read_until("\r\n\r\n", 3000ms);
    ASSERT_TRUE(refused.has_value());
    EXPECT_EQ(refused->rfind("HTTP/1.1 429", 0), 0u) << *refused;
    c.close();
  }
  EXPECT_TRUE(wait_until(
      [&] {
        return metric(w.metrics(), "sluice_concurrency_releases_total{reason=\"tunnel_closed\"}") ==
               1;
      },
      3000ms));
  EXPECT_EQ(w.slots_in_redis(), 0);
  EXPECT_EQ(metric(w.metrics(), "sluice_concurrency_slots_lost_total"), 0);
}

// On the memory store (one instance): the slot is held while the upstream answers and given
// back when the response ends.
TEST(ConcurrencySlots, OnTheMemoryStoreASlotIsHeldUntilTheResponseEnds) {
  slots_world w(1, 1, slots_store::memory);
  ASSERT_TRUE(w.started());
  w.up.set_hold(60s);
  client_response first;
  std::thread held([&] { first = w.call(0); });
  ASSERT_TRUE(wait_until([&] { return w.up.holding() == 1; }, 3000ms));
  EXPECT_EQ(metric(w.metrics(), "sluice_concurrency_slots_held{limit=\"inflight\"}"), 1);
  const auto refused = w.call(0);
  EXPECT_EQ(refused.status, 429u);
  EXPECT_EQ(refused.header("RateLimit-Policy"), "\"inflight\";q=1;qu=\"concurrent-requests\"");
  w.up.set_hold(0ms);
  w.up.let_go();
  held.join();
  EXPECT_EQ(first.status, 200u);
  // (Released just after the response's last byte is written: polled.)
  EXPECT_TRUE(wait_until(
      [&] {
        return metric(w.metrics(), "sluice_concurrency_releases_total{reason=\"complete\"}") == 1;
      },
      2000ms));
  EXPECT_EQ(metric(w.metrics(), "sluice_concurrency_slots_held{limit=\"inflight\"}"), 0);
  EXPECT_EQ(w.call(0).status, 200u);
}

}  // namespace
}  // namespace sluice::test
