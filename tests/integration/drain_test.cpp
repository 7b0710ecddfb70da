// SPDX-License-Identifier: Apache-2.0
// sluice-test-serial
// sluice-test-support: upstream_server http_client
// Graceful stop of the real `sluice` binary: on SIGTERM /readyz answers 503 at once, new
// connections are refused, idle keep-alive connections are closed, requests in flight finish
// (with `Connection: close`) and the process exits 0; `drain_timeout` bounds the drain; a
// second signal stops at once. And a SIGHUP under traffic drops no connection. The tests
// assert latency bounds, so they run alone.

#include "support/child_process.hpp"
#include "support/eventually.hpp"
#include "support/http_client.hpp"
#include "support/temp_dir.hpp"
#include "support/upstream_server.hpp"

#include <gtest/gtest.h>
#include <boost/beast/core/string.hpp>

#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <mutex>
#include <regex>
#include <string>
#include <thread>
#include <vector>

namespace sluice::test {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using steady = std::chrono::steady_clock;

long long ms_since(steady::time_point t0) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(steady::now() - t0).count();
}

/// Polls `pred` for at most `limit` (scaled: support/eventually.hpp); whether it became true.
template <typename F>
bool wait_until(F pred, std::chrono::milliseconds limit) {
  return eventually(pred, limit);
}

/// A recording upstream and a `sluice` process forwarding every path to it.
struct drain_world {
  /// Writes the rules (`top_level` lines first) and starts sluice; "" when it runs.
  std::string start(const std::string& top_level = "", const std::string& comment = "") {
    write_rules(top_level, comment);
    gateway = std::make_unique<sluice_process>(file, dir.path);
    if (!gateway->wait_listening()) return "sluice did not start:\n" + gateway->log();
    return "";
  }

  void write_rules(const std::string& top_level, const std::string& comment = "") {
    std::ofstream(file) << top_level << "# " << comment
                        << "\nstore: {type: memory}\n"
                           "upstreams: {api: {url: \""
                        << upstream.url()
                        << "\"}}\n"
                           "routes:\n"
                           "  - {name: all, match: {path_prefix: /}, upstream: api}\n";
  }

  /// The upstream answers every request after `delay`.
  void delay(std::chrono::milliseconds d) {
    canned_response slow;
    slow.body = "slow\n";
    slow.delay = d;
    upstream.set_response(slow);
  }

  temp_dir dir{"drain"};
  fs::path file = dir.path / "rules.yaml";
  upstream_server upstream;
  std::unique_ptr<sluice_process> gateway;
};

/// What one client got.
struct outcome {
  unsigned status = 0;
  std::string connection;  ///< its Connection field
  std::string error;       ///< the client's error when it got no response
  steady::time_point done;
};

std::string describe(const outcome& o) {
  return o.error.empty() ? std::to_string(o.status) + " (Connection: " + o.connection + ")"
                         : o.error;
}

bool closes(const outcome& o) {
  return o.error.empty() && o.status == 200 && boost::beast::iequals(o.connection, "close");
}

/// `n` requests, each on its own connection (all connected before any is sent), each on its
/// own thread, started at once.
class in_flight {
 public:
  in_flight(std::uint16_t port, int n, std::chrono::milliseconds timeout) : out_(n) {
    for (int i = 0; i < n; ++i) conns_.push_back(std::make_unique<http_connection>(port, timeout));
    for (int i = 0; i < n; ++i) {
      threads_.emplace_back([this, i] {
        try {
          auto r = conns_[i]->request("GET", "/slow/" + std::to_string(i));
          out_[i].status = r.status;
          out_[i].connection = r.header("Connection");
        } catch (const std::exception& e) {
          out_[i].error = e.what();
        }
        out_[i].done = steady::now();
      });
    }
  }
  ~in_flight() { join(); }

  /// Waits for every client (each is bounded by its timeout) and returns what they got.
  const std::vector<outcome>& join() {
    for (auto& t : threads_) {
      if (t.joinable()) t.join();
    }
    return out_;
  }

 private:
  std::vector<std::unique_ptr<http_connection>> conns_;
  std::vector<outcome> out_;
  std::vector<std::thread> threads_;
};

/// What a new connection to `port` gets: "refused", "closed" (accepted, then closed without a
/// response), "answered N", or "no answer" (accepted and left waiting 500 ms).
std::string new_connection_fate(std::uint16_t port) {
  std::unique_ptr<http_connection> c;
  try {
    c = std::make_unique<http_connection>(port, 500ms);
  } catch (const std::exception&) {
    return "refused";
  }
  try {
    auto r = c->request("GET", "/new-after-signal");
    return "answered " + std::to_string(r.status);
  } catch (const std::exception& e) {
    return std::string(e.what()).find("timeout") != std::string::npos ? "no answer" : "closed";
  }
}

/// Polls /readyz from just after `t0` until it answers 503, for at most `limit`: the
/// milliseconds after t0 of the first 503, or -1; `seen` collects the other answers.
long long readyz_503_after(std::uint16_t admin_port, steady::time_point t0,
                           std::chrono::milliseconds limit, std::string& seen) {
  while (steady::now() - t0 < limit) {
    try {
      http_connection c(admin_port, 100ms);
      auto r = c.request("GET", "/readyz");
      if (r.status == 503) return ms_since(t0);
      if (seen.size() < 300) seen += std::to_string(r.status) + " ";
    } catch (const std::exception& e) {
      if (seen.size() < 300) seen += std::string("[") + e.what() + "] ";
    }
    std::this_thread::sleep_for(2ms);
  }
  return -1;
}

void report(const std::string& what, long long ms) {
  std::cout << "[ drain    ] " << what << ": " << ms << " ms\n";
}

// 50 requests in flight on 50 connections when SIGTERM comes: /readyz says 503 at once, a new
// connection is refused, all 50 finish with 200 and `Connection: close`, and the process
// exits 0 soon after.
TEST(drain, sigterm_finishes_requests_in_flight_and_exits_0) {
  drain_world w;
  w.delay(1500ms);
  ASSERT_EQ(w.start(), "");
  in_flight clients(w.gateway->port, 50, 10s);
  ASSERT_TRUE(wait_until([&] { return w.upstream.request_count() == 50; }, 5s))
      << w.upstream.request_count() << " of 50 requests reached the upstream";

  const auto t0 = steady::now();
  w.gateway->signal(SIGTERM);
  std::string seen;
  const auto ready_ms = readyz_503_after(w.gateway->admin_port, t0, 100ms, seen);
  EXPECT_GE(ready_ms, 0) << "/readyz did not answer 503 within 100 ms of SIGTERM; it answered: "
                         << seen;
  report("/readyz 503 after SIGTERM", ready_ms);

  std::this_thread::sleep_until(t0 + 200ms);
  const auto fate = new_connection_fate(w.gateway->port);
  EXPECT_TRUE(fate == "refused" || fate == "closed")
      << "a new connection 200 ms after SIGTERM: " << fate;

  const auto& got = clients.join();
  int ok = 0;
  steady::time_point last = t0;
  std::string failures;
  for (std::size_t i = 0; i < got.size(); ++i) {
    last = std::max(last, got[i].done);
    if (closes(got[i])) {
      ++ok;
    } else if (failures.size() < 600) {
      failures += "\n  request " + std::to_string(i) + ": " + describe(got[i]);
    }
  }
  EXPECT_EQ(ok, 50) << "in-flight requests that did not finish with 200 and Connection: close:"
                    << failures;
  const auto exit = w.gateway->wait_exit(
      std::chrono::duration_cast<std::chrono::milliseconds>(last + 3s - steady::now()));
  ASSERT_TRUE(exit.has_value()) << "still running 3 s after the last request finished\n"
                                << w.gateway->log();
  EXPECT_EQ(*exit, 0) << w.gateway->log();
  report("exit after SIGTERM", ms_since(t0));
}

// `drain_timeout: 1s` with requests that would take 5 s: the process exits 0 about 1 s after
// SIGTERM, not at once and not when the requests end.
TEST(drain, drain_timeout_bounds_the_drain) {
  drain_world w;
  w.delay(5000ms);
  ASSERT_EQ(w.start("drain_timeout: 1s\n"), "");
  in_flight clients(w.gateway->port, 5, 8s);
  ASSERT_TRUE(wait_until([&] { return w.upstream.request_count() == 5; }, 5s));

  const auto t0 = steady::now();
  w.gateway->signal(SIGTERM);
  const auto exit = w.gateway->wait_exit(2500ms);
  const auto took = ms_since(t0);
  ASSERT_TRUE(exit.has_value()) << "still running 2.5 s after SIGTERM with drain_timeout: 1s\n"
                                << w.gateway->log();
  EXPECT_EQ(*exit, 0) << w.gateway->log();
  EXPECT_GE(took, 800) << "exited " << took << " ms after SIGTERM: it did not drain";
  report("exit after SIGTERM (drain_timeout: 1s)", took);
  const auto& got = clients.join();
  for (std::size_t i = 0; i < got.size(); ++i) {
    std::cout << "[ drain    ] request cut by the deadline " << i << ": " << describe(got[i])
              << "\n";
  }
}

// A second SIGTERM during the drain stops at once and says how many requests it cut.
TEST(drain, a_second_signal_stops_at_once) {
  drain_world w;
  w.delay(5000ms);
  ASSERT_EQ(w.start(), "");
  in_flight clients(w.gateway->port, 3, 8s);
  ASSERT_TRUE(wait_until([&] { return w.upstream.request_count() == 3; }, 5s));

  w.gateway->signal(SIGTERM);
  std::this_thread::sleep_for(300ms);
  EXPECT_TRUE(w.gateway->running()) << "the first SIGTERM must drain (3 requests in flight)\n"
                                    << w.gateway->log();
  const auto t1 = steady::now();
  w.gateway->signal(SIGTERM);
  const auto exit = w.gateway->wait_exit(500ms);
  ASSERT_TRUE(exit.has_value()) << "still running 500 ms after the second SIGTERM";
  report("exit after the second SIGTERM", ms_since(t1));
  std::cout << "[ drain    ] exit status after the second signal: " << *exit << "\n";
  const auto err = w.gateway->err();
  EXPECT_NE(err.find("requests cut"), std::string::npos) << err;
  clients.join();
}

// Idle keep-alive connections are closed by the server right after SIGTERM, while a request
// in flight keeps the process draining (and then finishes).
TEST(drain, idle_keep_alive_connections_are_closed_at_once) {
  drain_world w;
  ASSERT_EQ(w.start(), "");
  std::vector<std::unique_ptr<http_connection>> idle;
  for (int i = 0; i < 3; ++i) {
    idle.push_back(std::make_unique<http_connection>(w.gateway->port, 5s));
    auto r = idle.back()->request("GET", "/warm/" + std::to_string(i));
    ASSERT_EQ(r.status, 200u);
  }
  w.delay(1500ms);
  in_flight busy(w.gateway->port, 1, 8s);
  ASSERT_TRUE(wait_until([&] { return w.upstream.request_count() == 4; }, 5s));

  const auto t0 = steady::now();
  w.gateway->signal(SIGTERM);
  for (std::size_t i = 0; i < idle.size(); ++i) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(t0 + 500ms - steady::now());
    EXPECT_TRUE(idle[i]->closed_by_peer(std::max(left, 1ms)))
        << "idle connection " << i << " still open 500 ms after SIGTERM";
  }
  report("idle connections closed after SIGTERM", ms_since(t0));
  std::this_thread::sleep_until(t0 + 500ms);  // the request in flight ends about 1.5 s in
  EXPECT_TRUE(w.gateway->running()) << "a request in flight must keep the process draining\n"
                                    << w.gateway->log();

  const auto& got = busy.join();
  EXPECT_TRUE(closes(got[0])) << describe(got[0]);
  const auto exit = w.gateway->wait_exit(3s);
  ASSERT_TRUE(exit.has_value()) << "still running 3 s after the last request";
  EXPECT_EQ(*exit, 0) << w.gateway->log();
}

// SIGHUP under traffic: a keep-alive connection sending requests before, during and after two
// reloads gets 200 for every one on the same connection, and so do fresh connections.
TEST(drain, a_reload_during_traffic_drops_no_connection) {
  drain_world w;
  ASSERT_EQ(w.start("", "v1"), "");
  std::atomic<bool> stop{false};
  std::vector<std::string> errors;
  std::mutex errors_mutex;
  auto note = [&](const std::string& e) {
    std::lock_guard lock(errors_mutex);
    errors.push_back(e);
  };
  std::atomic<int> kept_ok{0};
  std::atomic<int> fresh_ok{0};
  std::thread kept([&] {
    try {
      http_connection c(w.gateway->port, 2s);
      for (int i = 0; !stop && i < 2000; ++i) {
        auto r = c.request("GET", "/kept/" + std::to_string(i));
        if (r.status == 200) {
          ++kept_ok;
        } else {
          note("kept connection: " + std::to_string(r.status));
        }
        std::this_thread::sleep_for(5ms);
      }
    } catch (const std::exception& e) {
      note(std::string("kept connection: ") + e.what());
    }
  });
  std::thread fresh([&] {
    for (int i = 0; !stop && i < 2000; ++i) {
      try {
        auto r = get(w.gateway->port, "/fresh/" + std::to_string(i));
        if (r.status == 200) {
          ++fresh_ok;
        } else {
          note("fresh connection: " + std::to_string(r.status));
        }
      } catch (const std::exception& e) {
        note(std::string("fresh connection: ") + e.what());
      }
      std::this_thread::sleep_for(5ms);
    }
  });

  // Each phase waits for its state, not for a time: 20 more answers on each kind of
  // connection (traffic before, between and after the reloads), and the reload applied.
  auto traffic_went_on = [&](const char* when) {
    const int kept_before = kept_ok.load(), fresh_before = fresh_ok.load();
    EXPECT_TRUE(eventually_that(std::string("20 more answers on each connection ") + when, [&] {
      return kept_ok.load() >= kept_before + 20 && fresh_ok.load() >= fresh_before + 20;
    }));
  };
  auto generation_now = [&] {
    static const std::regex number(R"re("generation":(\d+))re");
    const auto body = get(w.gateway->admin_port, "/admin/config").body;
    std::smatch m;
    return std::regex_search(body, m, number) ? std::stoll(m[1].str()) : -1LL;
  };
  traffic_went_on("before the reloads");
  w.write_rules("", "v2");
  w.gateway->signal(SIGHUP);
  EXPECT_EVENTUALLY(5s, generation_now() == 2) << "the first SIGHUP did not reload";
  traffic_went_on("after the first reload");
  w.write_rules("", "v3");
  w.gateway->signal(SIGHUP);
  EXPECT_EVENTUALLY(5s, generation_now() == 3) << "the second SIGHUP did not reload";
  traffic_went_on("after the second reload");
  stop = true;
  kept.join();
  fresh.join();

  EXPECT_TRUE(errors.empty()) << errors.size()
                              << " failures, first: " << (errors.empty() ? "" : errors.front());
  EXPECT_GT(kept_ok.load(), 20);
  EXPECT_GT(fresh_ok.load(), 20);
  std::cout << "[ drain    ] through two SIGHUPs: " << kept_ok << " requests on one connection, "
            << fresh_ok << " on fresh ones\n";

  auto cfg = get(w.gateway->admin_port, "/admin/config");
  static const std::regex generation(R"re("generation":(\d+))re");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(cfg.body, m, generation)) << cfg.body;
  EXPECT_EQ(m[1], "3") << "both SIGHUPs reloaded";

  w.gateway->signal(SIGTERM);
  const auto exit = w.gateway->wait_exit(3s);
  ASSERT_TRUE(exit.has_value());
  EXPECT_EQ(*exit, 0);
}

}  // namespace
}  // namespace sluice::test
