// SPDX-License-Identifier: Apache-2.0
// sluice-accuracy: the accuracy harness's load and measurement (bench/accuracy.sh runs it).
//
//   sluice-accuracy --gateways HOST:PORT[,HOST:PORT...] --upstream-port PORT
//                   --algorithm token_bucket|fixed_window|sliding_window|sliding_log|
//                               calendar|concurrency
//                   --rate N --period-ms P [--burst B] [--clients C] [--keys M] [--seconds T]
//                   [--mode greedy|even|edge|stall] [--offered X] [--edge-ms E]
//                   [--stall-quiet-ms Q] [--stall-burst-ms D] [--stall-rest-ms R]
//                   [--warmup-ms W] [--start-phase-ms S] [--dump FILE]
//                   [--global 1] [--bound-units U] [--calendar-boundary-ms B]
//                   [--settle-reserve R --settle-costs LO-HI] [--hold-ms H]
//                   [--refused-pause-ms Q]
//
// It is the upstream (a keep-alive HTTP/1.1 server on 127.0.0.1:PORT that records, for every
// forwarded request, its X-Client key, its units (path /b costs 3, any other path 1) and the
// store time of its decision from `X-Sluice-Decided-At`, which the gateways send with
// `decision_time_header: X-Sluice-Decided-At`), and the C clients (one keep-alive connection
// each). Traffic:
// - `greedy`: each client sends as fast as answers come, a random key of M and a random route
//   per request (a quarter cost 3), round robin over the gateways.
// - `even`: each key's requests arrive evenly spaced at a constant rate (the schedule of
//   bench/accuracy_analysis.hpp) offering X times the limit (default 2.5): one request every
//   g = 1.5·P/(X·N) ms, the j-th at start + j·g, a quarter of them costing 3 (heavy_turn: mean
//   1.5 units). Client c serves key c mod M (C must be a multiple of M) and the C/M clients of
//   a key take turns, each sending every g·C/M ms; a key's clients are spread round robin over
//   the gateways, so every gateway decides every key.
// - `edge`: adversarial traffic for window algorithms: clients send (as in greedy) only in the
//   last E ms of each aligned window (all of a window's requests at its end).
// - `stall`: leases filled, then stalled (token leasing's worst case): rounds of Q + D + R ms
//   from the common start. At a round's start client g (g < the number of gateways; client c
//   talks to gateway c mod K) sends one request of cost 1 for each key in turn, so every
//   gateway takes a lease of every key; then nobody sends until Q ms into the round (the
//   gateways hold their leases unspent while the bucket refills: pick Q longer than the refill
//   of K leases and shorter than `lease_time`); then every client sends as in greedy for D ms
//   (the gateways spend what they hold while the bucket gives its burst again: the other
//   gateways take the rest); then nobody sends for R ms (leases end, the bucket fills).
// Every client starts at the same instant; with --start-phase-ms S that instant is S ms into an
// aligned window of P on the host's real-time clock (the store's clock on loopback: Redis TIME
// and the memory store read the same clock), so a run's cold start is reproducible.
// After T seconds it prints one line: the ratios of bench/accuracy_analysis.hpp for the whole
// run (`ratio`, `rolling_ratio`: the cold start included) and for the steady state after the
// warm-up W (default 2 windows; `steady_ratio`, `steady_rolling`), the worst rolling windows
// ("U@+Oms(B|A)/pP": U units from O ms into an aligned window, B before the boundary it spans
// and A after, and the key's pause of P ms between its previous admission and this window), and
// `max_send_gap_ms`: the longest time between two sends of one key after the warm-up (even traffic
// is even only if that stays near g). --dump FILE writes every send
// ("send KEY CLOCK_MS UNITS STATUS", host clock at the send) and every admission ("admit KEY
// STORE_MS UNITS") for reading a worst window request by request.
// An admitted request without `X-Sluice-Decided-At` is measured at its arrival at the upstream
// (host clock) and counted in `untimed`.
// --global 1 measures every admission as one key (a `by: global` limit: one bucket, or S
// sharded buckets that together promise the limit) whatever X-Client the clients send.
// Every line also has `overshoot_units` and `steady_overshoot_units` (the most units admitted
// above the promise, bench/accuracy_analysis.hpp); with --bound-units U, the stated bound of an
// approximate mode in units (token leasing's lease × workers × instances), `bound_units=U` and
// `within_bound=yes|no` (the whole run's overshoot against U).
// --calendar-boundary-ms B (algorithm calendar, a quota of N = --rate per period, a run that
// spans the period boundary B, ms of store time): instead of the window ratios, one line with
// the most units one key got before B (`before_max`) and from B on (`after_max`), each to be
// at most N (`exact=yes|no`), `late_ms`: the largest delay over keys between B and the key's
// first admission from B on (the quota reopens at the boundary: a greedy key is admitted
// within a round trip of it).
// --settle-reserve R --settle-costs LO-HI (algorithm fixed_window, a limit with `charge:
// {reserve: R, settle: {header: X-Usage-Tokens}}`): the upstream answers each request with
// `X-Usage-Tokens: <cost>`, the cost uniform in [LO, HI] from a hash of the client and its
// request number (the clients send them as `X-Acc-Seq: C.N`), so a run repeats; one line with
// the settled total per key per aligned window (the reported costs of the requests decided in
// it) against N = --rate: `ratio` (at most 1.000 when HI <= R), `overshoot_units` (the most
// units above N), `largest_excess` (the largest reported cost above R), `in_flight` (C: each
// client has at most one request in flight) and `bound_units` = in_flight x largest_excess, the
// stated bound of a settled cost; exit 1 when the overshoot is above it.
// --algorithm concurrency (a limit `algorithm: concurrency, max_in_flight: N`, N = --rate): the
// upstream counts each key's requests it holds now, sampled at every arrival (this one included;
// a request leaves the count just before its answer is written, while its slot is still held),
// and the line reports `in_flight_max` (at most N: `within_bound=yes`, else exit 1),
// `in_flight_mean` over the samples, and the admitted and refused counts. --hold-ms H: the
// upstream holds every answer H ms (a slow upstream); --refused-pause-ms Q: a client waits Q ms
// after a 429 before its next request.
// Exit status: 0 with a line measured (and, for settle, concurrency and --bound-units, within
// the bound); 1 when a run broke its bound; 3 when the run measured nothing (no request
// sent, none admitted, no admission recorded at the upstream; a calendar run whose keys were not
// admitted on both sides of B), with the reason on stderr; 2 for bad options.

#include "accuracy_analysis.hpp"

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = beast::http;
using tcp = asio::ip::tcp;
using steady = std::chrono::steady_clock;

struct recorder {
  std::mutex mutex;
  std::map<std::string, std::vector<sluice::bench::admitted>> per_key;
  std::atomic<std::uint64_t> requests{0}, without_time{0};
  // Set before the upstream starts:
  bool global = false;
  std::int64_t settle_lo = -1, settle_hi = -1;  // the reported costs' range, or -1: no cost header
  std::int64_t hold_ms = 0;                     // how long each answer is held
  // Concurrency (under `mutex`): requests of a key here now, and every arrival's sample of it.
  std::map<std::string, std::int64_t> in_flight;
  std::int64_t in_flight_max = 0, in_flight_samples = 0, in_flight_sum = 0;
};

void serve_connection(tcp::socket socket, recorder& rec) {
  beast::flat_buffer buf;
  beast::error_code ec;
  for (;;) {
    bhttp::request<bhttp::string_body> req;
    bhttp::read(socket, buf, req, ec);
    if (ec) return;
    const std::string key = rec.global ? std::string("global") : std::string(req["X-Client"]);
    const auto decided = req["X-Sluice-Decided-At"];
    std::int64_t units = req.target().starts_with("/b") ? 3 : 1;
    if (rec.settle_lo >= 0) {
      // The cost this request's answer reports, from the client's "C.N" sequence header.
      const std::string seq(req["X-Acc-Seq"]);
      const auto dot = seq.find('.');
      const std::uint64_t c = dot == std::string::npos ? 0 : std::stoull(seq.substr(0, dot));
      const std::uint64_t n = dot == std::string::npos ? 0 : std::stoull(seq.substr(dot + 1));
      units = sluice::bench::settle_cost(c, n, rec.settle_lo, rec.settle_hi);
    }
    ++rec.requests;
    std::int64_t at = 0;
    if (decided.empty()) {
      // Admitted without a store decision (a token spent from a local lease, if the gateway
      // sends no time for it): measured at its arrival here, on the host clock, which is the
      // store's on loopback. Counted as `untimed`.
      ++rec.without_time;
      at = std::chrono::duration_cast<std::chrono::milliseconds>(
               std::chrono::system_clock::now().time_since_epoch())
               .count();
    } else {
      at = std::stoll(std::string(decided));
    }
    {
      std::lock_guard lock(rec.mutex);
      rec.per_key[key].push_back({at, units});
      // The key's requests here now, this one included, sampled at every arrival.
      const std::int64_t now_in = ++rec.in_flight[key];
      rec.in_flight_max = std::max(rec.in_flight_max, now_in);
      ++rec.in_flight_samples;
      rec.in_flight_sum += now_in;
    }
    if (rec.hold_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(rec.hold_ms));
    {
      // Left before the answer is written: the gateway's slot is held until it has relayed
      // the answer, so this count never runs ahead of the slots.
      std::lock_guard lock(rec.mutex);
      --rec.in_flight[key];
    }
    bhttp::response<bhttp::string_body> res{bhttp::status::ok, req.version()};
    if (rec.settle_lo >= 0) res.set("X-Usage-Tokens", std::to_string(units));
    res.body() = "ok";
    res.keep_alive(true);
    res.prepare_payload();
    bhttp::write(socket, res, ec);
    if (ec) return;
  }
}

std::int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

struct options {
  std::vector<std::pair<std::string, std::string>> gateways;
  unsigned short upstream_port = 0;
  std::string algorithm = "token_bucket";
  std::int64_t rate = 20, period_ms = 1000, burst = 0;
  int clients = 16, keys = 4, seconds = 5;
  std::string mode = "greedy";
  std::int64_t edge_ms = 100;
  std::int64_t stall_quiet_ms = 200, stall_burst_ms = 300, stall_rest_ms = 1000;  // stall
  double offered = 2.5;
  std::int64_t warmup_ms = -1;                // -1: two windows
  std::int64_t start_phase_ms = -1;           // -1: start at once
  std::string dump;                           // file for every send and admission, or empty
  bool global = false;                        // every admission counted as one key
  double bound_units = -1;                    // the stated bound in units, or -1: none stated
  std::int64_t calendar_boundary_ms = -1;     // a calendar run's period boundary, store ms
  std::int64_t settle_reserve = -1;           // a settled-cost run's reservation, or -1
  std::int64_t settle_lo = 1, settle_hi = 1;  // the costs the upstream reports
  std::int64_t hold_ms = 0;                   // the upstream holds each answer this long
  std::int64_t refused_pause_ms = 0;          // a client's pause after a 429
};

/// One send of one key: ms since the common start (for max_send_gap_ms), the host clock.
struct send_record {
  int key;
  double t_ms;
  std::int64_t clock_ms;
  int units;
  unsigned status;
};

}  // namespace

int main(int argc, char** argv) {
  options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--gateways") {
      std::size_t pos = 0;
      while (pos <= v.size()) {
        auto comma = v.find(',', pos);
        if (comma == std::string::npos) comma = v.size();
        const std::string hp = v.substr(pos, comma - pos);
        const auto colon = hp.rfind(':');
        o.gateways.emplace_back(hp.substr(0, colon), hp.substr(colon + 1));
        pos = comma + 1;
      }
    } else if (k == "--upstream-port") {
      o.upstream_port = static_cast<unsigned short>(std::stoi(v));
    } else if (k == "--algorithm") {
      o.algorithm = v;
    } else if (k == "--rate") {
      o.rate = std::stoll(v);
    } else if (k == "--period-ms") {
      o.period_ms = std::stoll(v);
    } else if (k == "--burst") {
      o.burst = std::stoll(v);
    } else if (k == "--clients") {
      o.clients = std::stoi(v);
    } else if (k == "--keys") {
      o.keys = std::stoi(v);
    } else if (k == "--seconds") {
      o.seconds = std::stoi(v);
    } else if (k == "--mode") {
      o.mode = v;
    } else if (k == "--offered") {
      o.offered = std::stod(v);
    } else if (k == "--edge-ms") {
      o.edge_ms = std::stoll(v);
    } else if (k == "--stall-quiet-ms") {
      o.stall_quiet_ms = std::stoll(v);
    } else if (k == "--stall-burst-ms") {
      o.stall_burst_ms = std::stoll(v);
    } else if (k == "--stall-rest-ms") {
      o.stall_rest_ms = std::stoll(v);
    } else if (k == "--warmup-ms") {
      o.warmup_ms = std::stoll(v);
    } else if (k == "--start-phase-ms") {
      o.start_phase_ms = std::stoll(v);
    } else if (k == "--dump") {
      o.dump = v;
    } else if (k == "--global") {
      o.global = v == "1";
    } else if (k == "--bound-units") {
      o.bound_units = std::stod(v);
    } else if (k == "--calendar-boundary-ms") {
      o.calendar_boundary_ms = std::stoll(v);
    } else if (k == "--settle-reserve") {
      o.settle_reserve = std::stoll(v);
    } else if (k == "--settle-costs") {
      const auto dash = v.find('-');
      o.settle_lo = std::stoll(v.substr(0, dash));
      o.settle_hi = dash == std::string::npos ? o.settle_lo : std::stoll(v.substr(dash + 1));
    } else if (k == "--hold-ms") {
      o.hold_ms = std::stoll(v);
    } else if (k == "--refused-pause-ms") {
      o.refused_pause_ms = std::stoll(v);
    } else {
      std::cerr << "sluice-accuracy: unknown option " << k << '\n';
      return 2;
    }
  }
  if (o.gateways.empty() || o.upstream_port == 0) {
    std::cerr << "sluice-accuracy: --gateways and --upstream-port are required\n";
    return 2;
  }
  if (o.mode != "greedy" && o.mode != "even" && o.mode != "edge" && o.mode != "stall") {
    std::cerr << "sluice-accuracy: --mode is greedy, even, edge or stall\n";
    return 2;
  }
  if (o.mode == "stall" && (o.stall_quiet_ms < 1 || o.stall_burst_ms < 1 || o.stall_rest_ms < 0 ||
                            o.clients < static_cast<int>(o.gateways.size()) || o.keys < 1)) {
    std::cerr << "sluice-accuracy: --mode stall needs --stall-quiet-ms and --stall-burst-ms "
                 "above 0, --stall-rest-ms at least 0 and a client per gateway at least\n";
    return 2;
  }
  if (o.mode == "even" && (o.keys < 1 || o.clients % o.keys != 0 || !(o.offered > 0))) {
    std::cerr << "sluice-accuracy: --mode even needs --clients a multiple of --keys and "
                 "--offered above 0\n";
    return 2;
  }
  if (o.settle_reserve >= 0 &&
      (o.algorithm != "fixed_window" || o.settle_lo < 0 || o.settle_hi < o.settle_lo)) {
    std::cerr << "sluice-accuracy: --settle-reserve needs --algorithm fixed_window and "
                 "--settle-costs LO-HI with 0 <= LO <= HI\n";
    return 2;
  }
  sluice::bench::algo a = sluice::bench::algo::token_bucket;
  if (o.algorithm == "fixed_window") a = sluice::bench::algo::fixed_window;
  if (o.algorithm == "sliding_window") a = sluice::bench::algo::sliding_window;
  if (o.algorithm == "sliding_log") a = sluice::bench::algo::sliding_log;
  if (o.burst == 0) o.burst = o.rate;
  if (o.warmup_ms < 0) o.warmup_ms = 2 * o.period_ms;

  // The upstream.
  recorder rec;
  rec.global = o.global;
  rec.hold_ms = o.hold_ms;
  if (o.settle_reserve >= 0) {
    rec.settle_lo = o.settle_lo;
    rec.settle_hi = o.settle_hi;
  }
  asio::io_context ioc;
  tcp::acceptor acceptor(ioc, {asio::ip::make_address("127.0.0.1"), o.upstream_port});
  std::thread([&] {
    for (;;) {
      beast::error_code ec;
      tcp::socket s(ioc);
      acceptor.accept(s, ec);
      if (ec) return;
      std::thread(serve_connection, std::move(s), std::ref(rec)).detach();
    }
  }).detach();

  // The common start: 200 ms from now for the connections, then at the chosen phase.
  auto start = steady::now() + std::chrono::milliseconds(200);
  if (o.start_phase_ms >= 0) {
    const std::int64_t at = now_ms() + 200;
    const std::int64_t wait =
        ((o.start_phase_ms - at % o.period_ms) % o.period_ms + o.period_ms) % o.period_ms;
    start += std::chrono::milliseconds(wait);
  }
  const auto deadline = start + std::chrono::seconds(o.seconds);
  const int per_key_clients = o.clients / std::max(1, o.keys);
  // Even traffic: one request of a key every gap_us.
  const std::int64_t gap_us = sluice::bench::even_gap_us(o.rate, o.period_ms, o.offered);

  // The clients.
  std::atomic<std::uint64_t> sent{0}, ok{0}, refused{0}, other{0};
  std::mutex sends_mutex;
  std::vector<send_record> sends;
  std::vector<std::thread> clients;
  for (int c = 0; c < o.clients; ++c) {
    clients.emplace_back([&, c] {
      std::mt19937_64 rng(static_cast<std::uint64_t>(c) * 7919 + 1);
      asio::io_context cio;
      const bool even = o.mode == "even";
      const int own_key = c % std::max(1, o.keys);
      const int turn = c / std::max(1, o.keys);  // this client's turn among its key's clients
      const std::size_t g = static_cast<std::size_t>(even ? turn : c) % o.gateways.size();
      const auto& gw = o.gateways[g];
      tcp::resolver resolver(cio);
      tcp::socket sock(cio);
      beast::error_code ec;
      asio::connect(sock, resolver.resolve(gw.first, gw.second), ec);
      beast::flat_buffer buf;
      std::vector<send_record> mine;
      std::int64_t took_round = -1;  // stall: the last round whose leases this client took
      int take_next = 0;             // stall: the next key it takes a lease of in this round
      std::this_thread::sleep_until(start);
      for (std::int64_t n = 0; !ec && steady::now() < deadline; ++n) {
        int key = 0;
        bool heavy = false;
        if (o.mode == "stall") {
          // The round's phase: take (client < K, one request per key), quiet, burst, rest.
          const bool taker = static_cast<std::size_t>(c) < o.gateways.size();
          const std::int64_t round_ms = o.stall_quiet_ms + o.stall_burst_ms + o.stall_rest_ms;
          bool send = false;
          while (!send && steady::now() < deadline) {
            const auto since =
                std::chrono::duration_cast<std::chrono::milliseconds>(steady::now() - start)
                    .count();
            const std::int64_t round = since / round_ms, off = since % round_ms;
            const auto at = [&](std::int64_t ms) {
              return start + std::chrono::milliseconds(round * round_ms + ms);
            };
            if (off < o.stall_quiet_ms) {
              if (taker && took_round != round) {
                key = take_next++;
                if (take_next == o.keys) {
                  take_next = 0;
                  took_round = round;
                }
                send = true;  // cost 1: the lease holds N - 1 tokens ahead
              } else {
                std::this_thread::sleep_until(std::min(at(o.stall_quiet_ms), deadline));
              }
            } else if (off < o.stall_quiet_ms + o.stall_burst_ms) {
              key = static_cast<int>(rng() % static_cast<std::uint64_t>(o.keys));
              heavy = rng() % 4 == 0;
              send = true;
            } else {
              std::this_thread::sleep_until(std::min(at(round_ms), deadline));
            }
          }
          if (!send) break;
        } else if (even) {
          // The key's j-th request, j = turn + n·(clients per key), at start + j·gap.
          const std::int64_t j = turn + n * per_key_clients;
          std::this_thread::sleep_until(start + std::chrono::microseconds(j * gap_us));
          if (steady::now() >= deadline) break;
          key = own_key;
          heavy = sluice::bench::heavy_turn(static_cast<std::uint64_t>(key), j);
        } else {
          if (o.mode == "edge") {
            // Wait for the last edge_ms of the current aligned window.
            const std::int64_t t = now_ms();
            const std::int64_t off = t % o.period_ms;
            if (off < o.period_ms - o.edge_ms)
              std::this_thread::sleep_for(std::chrono::milliseconds(o.period_ms - o.edge_ms - off));
          }
          key = static_cast<int>(rng() % static_cast<std::uint64_t>(o.keys));
          heavy = rng() % 4 == 0;  // a quarter of requests cost 3
        }
        bhttp::request<bhttp::empty_body> req{bhttp::verb::get, heavy ? "/b" : "/a", 11};
        req.set(bhttp::field::host, "accuracy");
        req.set("X-Client", "client-" + std::to_string(key));
        req.set("X-Acc-Seq", std::to_string(c) + "." + std::to_string(n));
        send_record rec_send{
            key, std::chrono::duration<double, std::milli>(steady::now() - start).count(), now_ms(),
            heavy ? 3 : 1, 0};
        bhttp::write(sock, req, ec);
        if (ec) break;
        bhttp::response<bhttp::string_body> res;
        bhttp::read(sock, buf, res, ec);
        if (ec) break;
        rec_send.status = res.result_int();
        mine.push_back(rec_send);
        ++sent;
        if (res.result_int() == 200) {
          ++ok;
        } else if (res.result_int() == 429) {
          ++refused;
          if (o.refused_pause_ms > 0)
            std::this_thread::sleep_for(std::chrono::milliseconds(o.refused_pause_ms));
        } else {
          ++other;
        }
      }
      std::lock_guard lock(sends_mutex);
      sends.insert(sends.end(), mine.begin(), mine.end());
    });
  }
  for (auto& t : clients) t.join();
  std::this_thread::sleep_for(std::chrono::milliseconds(200));

  // The longest pause between two sends of one key after the warm-up (the client's view).
  std::map<int, std::vector<double>> send_times;
  for (const auto& s : sends) send_times[s.key].push_back(s.t_ms);
  double max_gap = 0;
  for (auto& [key, ts] : send_times) {
    std::sort(ts.begin(), ts.end());
    for (std::size_t i = 1; i < ts.size(); ++i)
      if (ts[i - 1] >= static_cast<double>(o.warmup_ms))
        max_gap = std::max(max_gap, ts[i] - ts[i - 1]);
  }

  std::map<std::string, std::vector<sluice::bench::admitted>> per_key;
  {
    std::lock_guard lock(rec.mutex);
    per_key = rec.per_key;
  }
  if (!o.dump.empty()) {
    if (std::FILE* f = std::fopen(o.dump.c_str(), "w")) {
      for (const auto& s : sends)
        std::fprintf(f, "send client-%d %lld %d %u\n", s.key, static_cast<long long>(s.clock_ms),
                     s.units, s.status);
      for (const auto& [key, ev] : per_key)
        for (const auto& e : ev)
          std::fprintf(f, "admit %s %lld %lld\n", key.c_str(), static_cast<long long>(e.t_ms),
                       static_cast<long long>(e.units));
      std::fclose(f);
    }
  }
  // Nothing measured (no request sent, none admitted, or no admission recorded at the
  // upstream): a run that says nothing must not pass for one that held its limit.
  const char* nothing = sent.load() == 0 ? "no request was sent"
                        : ok.load() == 0
                            ? "no request was admitted (every gateway refused or failed)"
                        : per_key.empty() ? "the upstream recorded no admission"
                                          : nullptr;
  if (nothing) {
    std::fprintf(
        stderr,
        "sluice-accuracy: measured nothing: %s (sent=%llu admitted=%llu refused=%llu other=%llu)\n",
        nothing, static_cast<unsigned long long>(sent.load()),
        static_cast<unsigned long long>(ok.load()), static_cast<unsigned long long>(refused.load()),
        static_cast<unsigned long long>(other.load()));
    std::fflush(stderr);
    std::_Exit(3);
  }
  if (o.algorithm == "concurrency") {
    // At most N = --rate of a key's requests at the upstream at once, sampled at every arrival.
    std::int64_t max_in = 0, samples = 0, sum = 0;
    {
      std::lock_guard lock(rec.mutex);
      max_in = rec.in_flight_max;
      samples = rec.in_flight_samples;
      sum = rec.in_flight_sum;
    }
    const bool within = max_in <= o.rate;
    std::printf(
        "algorithm=concurrency K=%zu C=%d M=%d T=%d max_in_flight=%lld hold_ms=%lld sent=%llu "
        "admitted=%llu refused=%llu other=%llu samples=%lld in_flight_max=%lld "
        "in_flight_mean=%.2f within_bound=%s\n",
        o.gateways.size(), o.clients, o.keys, o.seconds, static_cast<long long>(o.rate),
        static_cast<long long>(o.hold_ms), static_cast<unsigned long long>(sent.load()),
        static_cast<unsigned long long>(ok.load()), static_cast<unsigned long long>(refused.load()),
        static_cast<unsigned long long>(other.load()), static_cast<long long>(samples),
        static_cast<long long>(max_in),
        samples > 0 ? static_cast<double>(sum) / static_cast<double>(samples) : 0.0,
        within ? "yes" : "no");
    std::fflush(stdout);
    std::_Exit(within ? 0 : 1);
  }
  if (o.settle_reserve >= 0) {
    // Settled costs on a fixed window: the costs the upstream reported for a key's admissions
    // in each aligned window (of their decisions), against N and the stated bound.
    const auto r = sluice::bench::analyse(per_key, sluice::bench::algo::fixed_window, o.rate,
                                          o.period_ms, o.rate);
    const std::int64_t excess = sluice::bench::largest_excess(per_key, o.settle_reserve);
    // Requests in flight: at most one per client (closed loop).
    const std::int64_t in_flight = o.clients;
    const std::int64_t bound = sluice::bench::settle_bound_units(in_flight, excess);
    const bool within = r.overshoot_units <= static_cast<double>(bound);
    std::printf(
        "algorithm=fixed_window charge=settle K=%zu C=%d M=%d T=%d rate=%lld/%lldms "
        "reserve=%lld costs=%lld-%lld sent=%llu admitted=%llu refused=%llu other=%llu "
        "untimed=%llu settled_units=%lld ratio=%.3f worst_key=%s overshoot_units=%.0f "
        "largest_excess=%lld in_flight=%lld bound_units=%lld within_bound=%s\n",
        o.gateways.size(), o.clients, o.keys, o.seconds, static_cast<long long>(o.rate),
        static_cast<long long>(o.period_ms), static_cast<long long>(o.settle_reserve),
        static_cast<long long>(o.settle_lo), static_cast<long long>(o.settle_hi),
        static_cast<unsigned long long>(sent.load()), static_cast<unsigned long long>(ok.load()),
        static_cast<unsigned long long>(refused.load()),
        static_cast<unsigned long long>(other.load()),
        static_cast<unsigned long long>(rec.without_time.load()), static_cast<long long>(r.units),
        r.ratio, r.worst_key.c_str(), r.overshoot_units, static_cast<long long>(excess),
        static_cast<long long>(in_flight), static_cast<long long>(bound), within ? "yes" : "no");
    std::fflush(stdout);
    std::_Exit(within ? 0 : 1);
  }
  if (o.calendar_boundary_ms >= 0) {
    // A calendar quota: at most N units per key on each side of the boundary, and the
    // first admission after it soon after it.
    const std::int64_t b = o.calendar_boundary_ms;
    std::int64_t before_max = 0, after_max = 0, late_ms = -1, keys_after = 0;
    for (const auto& [key, ev] : per_key) {
      std::int64_t before = 0, after = 0, first_after = -1;
      for (const auto& e : ev) {
        if (e.t_ms < b) {
          before += e.units;
        } else {
          after += e.units;
          if (first_after < 0 || e.t_ms < first_after) first_after = e.t_ms;
        }
      }
      before_max = std::max(before_max, before);
      after_max = std::max(after_max, after);
      if (first_after >= 0) {
        ++keys_after;
        late_ms = std::max(late_ms, first_after - b);
      }
    }
    std::printf(
        "algorithm=calendar K=%zu C=%d M=%d T=%d rate=%lld boundary_ms=%lld sent=%llu "
        "admitted=%llu refused=%llu other=%llu untimed=%llu before_max=%lld after_max=%lld "
        "keys_admitted_after=%lld late_ms=%lld exact=%s\n",
        o.gateways.size(), o.clients, o.keys, o.seconds, static_cast<long long>(o.rate),
        static_cast<long long>(b), static_cast<unsigned long long>(sent.load()),
        static_cast<unsigned long long>(ok.load()), static_cast<unsigned long long>(refused.load()),
        static_cast<unsigned long long>(other.load()),
        static_cast<unsigned long long>(rec.without_time.load()),
        static_cast<long long>(before_max), static_cast<long long>(after_max),
        static_cast<long long>(keys_after), static_cast<long long>(late_ms),
        before_max <= o.rate && after_max <= o.rate ? "yes" : "no");
    std::fflush(stdout);
    if (before_max == 0 || keys_after == 0) {
      // The boundary was not crossed inside the run (or the quota never reopened): the run
      // measured one side only.
      std::fprintf(stderr,
                   "sluice-accuracy: measured nothing across the boundary (before_max=%lld "
                   "keys_admitted_after=%lld)\n",
                   static_cast<long long>(before_max), static_cast<long long>(keys_after));
      std::fflush(stderr);
      std::_Exit(3);
    }
    std::_Exit(0);
  }
  const auto r = sluice::bench::analyse(per_key, a, o.rate, o.period_ms, o.burst, o.warmup_ms);
  const auto where = [&](const sluice::bench::rolling_window& w) {
    return std::to_string(w.units) + "@+" + std::to_string(w.start_ms % o.period_ms) + "ms(" +
           std::to_string(w.before_edge) + "|" + std::to_string(w.units - w.before_edge) + ")/p" +
           std::to_string(w.pause_before_ms);
  };
  std::string offered = "-";
  if (o.mode == "even") {
    char buf[32];
    // units per key per window ÷ N: (P / gap) requests of 1.5 units on average.
    std::snprintf(buf, sizeof buf, "%.2fx",
                  1.5 * static_cast<double>(o.period_ms) * 1000.0 / static_cast<double>(gap_us) /
                      static_cast<double>(o.rate));
    offered = buf;
  }
  std::string bound;
  if (o.bound_units >= 0) {
    char buf[96];
    std::snprintf(buf, sizeof buf, " bound_units=%g within_bound=%s", o.bound_units,
                  r.overshoot_units <= o.bound_units ? "yes" : "no");
    bound = buf;
  }
  std::printf(
      "algorithm=%s K=%zu C=%d M=%d T=%d mode=%s offered=%s rate=%lld/%lldms burst=%lld "
      "sent=%llu admitted=%llu refused=%llu other=%llu untimed=%llu units=%lld ratio=%.3f "
      "rolling_ratio=%.3f worst_key=%s worst_window=%s warmup_ms=%lld steady_ratio=%.3f "
      "steady_rolling=%.3f steady_worst_key=%s steady_window=%s max_send_gap_ms=%.1f "
      "overshoot_units=%.1f steady_overshoot_units=%.1f%s\n",
      o.algorithm.c_str(), o.gateways.size(), o.clients, o.keys, o.seconds, o.mode.c_str(),
      offered.c_str(), static_cast<long long>(o.rate), static_cast<long long>(o.period_ms),
      static_cast<long long>(o.burst), static_cast<unsigned long long>(sent.load()),
      static_cast<unsigned long long>(ok.load()), static_cast<unsigned long long>(refused.load()),
      static_cast<unsigned long long>(other.load()),
      static_cast<unsigned long long>(rec.without_time.load()), static_cast<long long>(r.units),
      r.ratio, r.rolling_ratio, r.worst_key.c_str(), where(r.worst_window).c_str(),
      static_cast<long long>(r.warmup_ms), r.steady_ratio, r.steady_rolling_ratio,
      r.steady_worst_key.c_str(), where(r.steady_worst_window).c_str(), max_gap, r.overshoot_units,
      r.steady_overshoot_units, bound.c_str());
  std::fflush(stdout);
  // Detached upstream threads may still be blocked in read: _Exit. A stated bound broken: 1.
  std::_Exit(o.bound_units >= 0 && r.overshoot_units > o.bound_units ? 1 : 0);
}
