// SPDX-License-Identifier: Apache-2.0
// Prometheus exposition of a metrics_sample.
//
// The families are assembled from the sample on every scrape and serialised with
// prometheus-cpp's TextSerializer, instead of keeping prometheus::Counter objects that the
// workers would update: those are shared atomics (a compare-and-swap loop on a double), which
// every worker would contend for on every request. Here the request path only touches its
// own worker's counters, and the cost of summing them is paid by the scraper, once.
//
// Names follow the Prometheus conventions (https://prometheus.io/docs/practices/naming/):
// one `sluice_` prefix (and the `process_` families every client library exports), `_total` on
// counters, base units (seconds), labels bounded by the
// rules file (route names, decisions, policies), never by callers.

#include "sluice/observability/metrics.hpp"

#include "sluice/version.hpp"

#include <prometheus/metric_family.h>
#include <prometheus/text_serializer.h>

#include <sys/resource.h>
#include <unistd.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace sluice::observability {

std::uint64_t histogram_counts::count() const noexcept {
  std::uint64_t n = 0;
  for (auto b : buckets) n += b;
  return n;
}

void histogram_counts::add(const histogram_counts& other) noexcept {
  for (std::size_t i = 0; i < buckets.size(); ++i) buckets[i] += other.buckets[i];
  sum_seconds += other.sum_seconds;
}

namespace {

// The bounds in nanoseconds, so that observe() compares integers.
constexpr auto bounds_ns = [] {
  std::array<std::int64_t, duration_bounds_seconds.size()> ns{};
  for (std::size_t i = 0; i < ns.size(); ++i)
    ns[i] = static_cast<std::int64_t>(duration_bounds_seconds[i] * 1e9 + 0.5);
  return ns;
}();

}  // namespace

void duration_histogram::observe(std::chrono::nanoseconds d) noexcept {
  const std::int64_t ns = d.count() < 0 ? 0 : d.count();
  std::size_t i = 0;
  while (i < bounds_ns.size() && ns > bounds_ns[i]) ++i;  // `le`: a value on a bound is in it
  buckets_[i].add();
  sum_ns_.add(static_cast<std::uint64_t>(ns));
}

void shared_duration_histogram::observe(std::chrono::nanoseconds d) noexcept {
  const std::int64_t ns = d.count() < 0 ? 0 : d.count();
  std::size_t i = 0;
  while (i < bounds_ns.size() && ns > bounds_ns[i]) ++i;
  buckets_[i].fetch_add(1, std::memory_order_relaxed);
  sum_ns_.fetch_add(static_cast<std::uint64_t>(ns), std::memory_order_relaxed);
}

histogram_counts shared_duration_histogram::read() const noexcept {
  histogram_counts h;
  for (std::size_t i = 0; i < buckets_.size(); ++i)
    h.buckets[i] = buckets_[i].load(std::memory_order_relaxed);
  h.sum_seconds = static_cast<double>(sum_ns_.load(std::memory_order_relaxed)) / 1e9;
  return h;
}

void tls_handshake_counts::add(const http::tls_counters& c) noexcept {
  completed += c.handshakes.load(std::memory_order_relaxed);
  for (std::size_t i = 0; i < failed.size(); ++i)
    failed[i] += c.failures[i].load(std::memory_order_relaxed);
}

histogram_counts duration_histogram::read() const noexcept {
  histogram_counts h;
  for (std::size_t i = 0; i < buckets_.size(); ++i) h.buckets[i] = buckets_[i].value();
  h.sum_seconds = static_cast<double>(sum_ns_.value()) / 1e9;
  return h;
}

namespace {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;

MetricFamily family(std::string name, std::string help, MetricType type) {
  return MetricFamily{std::move(name), std::move(help), type, {}};
}

void add_counter(MetricFamily& f, double value, std::vector<ClientMetric::Label> labels = {}) {
  ClientMetric m;
  m.label = std::move(labels);
  m.counter.value = value;
  f.metric.push_back(std::move(m));
}

void add_gauge(MetricFamily& f, double value, std::vector<ClientMetric::Label> labels = {}) {
  ClientMetric m;
  m.label = std::move(labels);
  m.gauge.value = value;
  f.metric.push_back(std::move(m));
}

MetricFamily counter(std::string name, std::string help, double value) {
  auto f = family(std::move(name), std::move(help), MetricType::Counter);
  add_counter(f, value);
  return f;
}

MetricFamily gauge(std::string name, std::string help, double value) {
  auto f = family(std::move(name), std::move(help), MetricType::Gauge);
  add_gauge(f, value);
  return f;
}

double d(std::uint64_t v) {
  return static_cast<double>(v);
}

/// A family with one label: one sample per (label value, number) of `pairs`, in their order;
/// counters or gauges by `type`.
template <class Pairs>
MetricFamily labelled(std::string name, std::string help, MetricType type, const char* label,
                      const Pairs& pairs) {
  auto f = family(std::move(name), std::move(help), type);
  for (const auto& [value, n] : pairs) {
    if (type == MetricType::Gauge) {
      add_gauge(f, static_cast<double>(n), {{label, value}});
    } else {
      add_counter(f, static_cast<double>(n), {{label, value}});
    }
  }
  return f;
}

/// Adds `h` to histogram family `f` (cumulative buckets on duration_bounds_seconds, then +Inf).
void add_histogram(MetricFamily& f, const histogram_counts& h,
                   std::vector<ClientMetric::Label> labels = {}) {
  ClientMetric m;
  m.label = std::move(labels);
  std::uint64_t cumulative = 0;
  for (std::size_t i = 0; i < h.buckets.size(); ++i) {
    cumulative += h.buckets[i];
    const double bound = i < duration_bounds_seconds.size()
                             ? duration_bounds_seconds[i]
                             : std::numeric_limits<double>::infinity();
    m.histogram.bucket.push_back({cumulative, bound});
  }
  m.histogram.sample_count = cumulative;  // equal to the +Inf bucket, as the format requires
  m.histogram.sample_sum = h.sum_seconds;
  f.metric.push_back(std::move(m));
}

// ---- the store's families, from its counter list (store/store_counters.hpp) ----------------

/// A row's label value: a fixed string (a member counted alone) or one per element (an array).
struct store_label_value {
  explicit constexpr store_label_value(const char* text) : fixed(text) {}
  explicit constexpr store_label_value(std::string_view (*label_of)(std::size_t)) : of(label_of) {}
  std::string at(std::size_t k) const { return of != nullptr ? std::string(of(k)) : fixed; }
  const char* fixed = "";
  std::string_view (*of)(std::size_t) = nullptr;
};

/// The counts of a counter type of the list: 1, or an array's size.
template <class T>
constexpr std::size_t counts_in = 1;
template <std::size_t N>
constexpr std::size_t counts_in<std::array<std::uint64_t, N>> = N;

constexpr std::uint64_t count_at(std::uint64_t v, std::size_t) {
  return v;
}
template <std::size_t N>
constexpr std::uint64_t count_at(const std::array<std::uint64_t, N>& a, std::size_t k) {
  return a[k];
}

/// One row of SLUICE_STORE_COUNTERS as /metrics shows it.
struct store_row {
  const char* family;
  const char* help;  ///< "" = a further sample of the family of the row above
  store::exposed_as exposed;
  const char* label;  ///< "" = no label
  store_label_value value;
  std::size_t width;  ///< samples: 1, or an array's size
  std::uint64_t (*count)(const store::store_stats&, std::size_t);  ///< element k of the member
};

#define SLUICE_STORE_ROW(member, type, exposed, family, label, value, help) \
  store_row{family,                                                         \
            help,                                                           \
            store::exposed_as::exposed,                                     \
            label,                                                          \
            store_label_value(value),                                       \
            counts_in<type>,                                                \
            [](const store::store_stats& st, std::size_t k) { return count_at(st.member, k); }},
const store_row store_rows[] = {SLUICE_STORE_COUNTERS(SLUICE_STORE_ROW)};
#undef SLUICE_STORE_ROW

/// The rows by member name, to name a range of them.
enum class store_row_id : std::size_t {
#define SLUICE_STORE_ROW_ID(member, ...) member,
  SLUICE_STORE_COUNTERS(SLUICE_STORE_ROW_ID)
#undef SLUICE_STORE_ROW_ID
      end
};

/// Adds the families of rows [from, to) of the store's counter list, with `st`'s values.
void add_store_families(std::vector<MetricFamily>& out, const store::store_stats& st,
                        store_row_id from, store_row_id to) {
  std::uint64_t above = 0;  // the count of the row above (exposed_as::counter_plus_above)
  for (auto r = static_cast<std::size_t>(from); r < static_cast<std::size_t>(to); ++r) {
    const store_row& row = store_rows[r];
    const bool gauge = row.exposed == store::exposed_as::gauge;
    if (*row.help != '\0')
      out.push_back(family(row.family, row.help, gauge ? MetricType::Gauge : MetricType::Counter));
    for (std::size_t k = 0; k < row.width; ++k) {
      std::uint64_t n = row.count(st, k);
      if (row.exposed == store::exposed_as::counter_plus_above) n += above;
      std::vector<ClientMetric::Label> labels;
      if (*row.label != '\0') labels.push_back({row.label, row.value.at(k)});
      if (gauge) {
        add_gauge(out.back(), d(n), std::move(labels));
      } else {
        add_counter(out.back(), d(n), std::move(labels));
      }
    }
    above = row.count(st, 0);
  }
}

std::vector<MetricFamily> families(const metrics_sample& s) {
  std::vector<MetricFamily> out;

  // Client-facing exchanges, per route and status class.
  {
    auto duration = family("sluice_http_request_duration_seconds",
                           "Client-facing exchanges from the request head read to the last "
                           "response byte written, by route (\"\": no route matched), status "
                           "class (none: the connection ended before a status was written) and "
                           "client protocol (http/1.1, h2).",
                           MetricType::Histogram);
    auto received = family("sluice_http_received_bytes_total",
                           "Request body bytes read from clients, by route.", MetricType::Counter);
    auto sent =
        family("sluice_http_sent_bytes_total",
               "Bytes written to clients (heads and bodies), by route.", MetricType::Counter);
    for (const auto& e : s.exchanges) {
      for (std::size_t p = 0; p < e.duration.size(); ++p)
        for (std::size_t k = 0; k < e.duration[p].size(); ++k)
          add_histogram(duration, e.duration[p][k],
                        {{"route", e.route},
                         {"code_class", code_classes[k]},
                         {"protocol", http::protocol_label(static_cast<http::protocol>(p))}});
      add_counter(received, d(e.bytes_in), {{"route", e.route}});
      add_counter(sent, d(e.bytes_out), {{"route", e.route}});
    }
    out.push_back(std::move(duration));
    out.push_back(std::move(received));
    out.push_back(std::move(sent));
  }

  // The process (the names every Prometheus client library's process collector uses).
  out.push_back(counter("process_cpu_seconds_total",
                        "Total user and system CPU time spent in seconds.", s.process.cpu_seconds));
  out.push_back(gauge("process_resident_memory_bytes", "Resident memory size in bytes.",
                      s.process.resident_bytes));
  out.push_back(gauge("process_virtual_memory_bytes", "Virtual memory size in bytes.",
                      s.process.virtual_bytes));
  out.push_back(gauge("process_open_fds", "Number of open file descriptors.", s.process.open_fds));
  out.push_back(
      gauge("process_max_fds", "Maximum number of open file descriptors.", s.process.max_fds));
  out.push_back(gauge("process_start_time_seconds",
                      "Start time of the process since unix epoch in seconds.",
                      s.process.start_time_seconds));

  // Requests, per route (DESIGN.md: every degraded mode has a counter, and a fail_closed 503
  // is told apart from a quota 429).
  {
    auto requests = family("sluice_requests_total",
                           "Requests that matched a route, by route, by what they came to "
                           "(a decision of the local limiter counts as allowed or limited) and "
                           "by client protocol (http/1.1, h2).",
                           MetricType::Counter);
    auto policy = family("sluice_failure_policy_applied_total",
                         "Store checks that failed and were answered by the route's failure "
                         "policy.",
                         MetricType::Counter);
    auto shadow = family("sluice_shadow_limited_total",
                         "Requests a shadow limit would have refused (the decision is "
                         "unchanged).",
                         MetricType::Counter);
    auto upstream = family("sluice_upstream_errors_total",
                           "Requests answered 502 (upstream unreachable or malformed) or 504 "
                           "(upstream timeout) by the gateway.",
                           MetricType::Counter);
    for (const auto& r : s.routes) {
      auto by = [&](const char* label, const char* value) {
        return std::vector<ClientMetric::Label>{{"route", r.route}, {label, value}};
      };
      for (std::size_t p = 0; p < r.by_protocol.size(); ++p) {
        const char* proto = http::protocol_label(static_cast<http::protocol>(p));
        const auto& c = r.by_protocol[p];
        auto of = [&](const char* decision) {
          return std::vector<ClientMetric::Label>{
              {"route", r.route}, {"decision", decision}, {"protocol", proto}};
        };
        add_counter(requests, d(c.allowed), of("allowed"));
        add_counter(requests, d(c.limited), of("limited"));
        add_counter(requests, d(c.unlimited), of("unlimited"));
        add_counter(requests, d(c.fail_open), of("fail_open"));
        add_counter(requests, d(c.fail_closed), of("fail_closed"));
      }
      add_counter(policy, d(r.fail_open), by("policy", "fail_open"));
      add_counter(policy, d(r.fail_closed), by("policy", "fail_closed"));
      add_counter(policy, d(r.local), by("policy", "local"));
      add_counter(shadow, d(r.shadow_limited), {{"route", r.route}});
      add_counter(upstream, d(r.bad_gateway), by("status", "502"));
      add_counter(upstream, d(r.gateway_timeout), by("status", "504"));
    }
    out.push_back(std::move(requests));
    out.push_back(std::move(policy));
    out.push_back(labelled("sluice_blocks_started_total",
                           "Blocks (penalty box, block:) started by a limit's refusal of a caller.",
                           MetricType::Counter, "limit", s.blocks_started));
    out.push_back(labelled("sluice_settlements_total",
                           "Charged limits (charge:) settled after the response, by outcome.",
                           MetricType::Counter, "outcome", s.settlements));
    out.push_back(counter("sluice_settle_failures_total",
                          "Settle calls (charge:) the store did not confirm.",
                          d(s.settle_failures)));
    out.push_back(labelled("sluice_concurrency_slots_held",
                           "Concurrency slots (algorithm: concurrency) this instance's requests "
                           "hold now, by limit.",
                           MetricType::Gauge, "limit", s.slots_held));
    out.push_back(labelled("sluice_concurrency_releases_total",
                           "Requests whose concurrency slots were released, by how the exchange "
                           "ended (complete, client_gone, upstream_failed, tunnel_closed, "
                           "not_forwarded, aborted).",
                           MetricType::Counter, "reason", s.slot_releases));
    out.push_back(std::move(shadow));
    out.push_back(std::move(upstream));
  }
  out.push_back(labelled("sluice_quota_warnings_total",
                         "Requests that took a limit from below its warn_at threshold to at or "
                         "above it (the first response carrying X-RateLimit-Warning for it), by "
                         "limit name.",
                         MetricType::Counter, "limit", s.quota_warnings));
  out.push_back(counter("sluice_bad_requests_total",
                        "Requests the gateway refused before any limit was decided (400 "
                        "malformed or ambiguous, 401 unknown API key, 403 upgrade not allowed "
                        "on the route, 404 no route, 413 declared body over max_request_body).",
                        d(s.bad_requests)));

  out.push_back(labelled("sluice_client_address_fallbacks_total",
                         "Requests from a trusted proxy keyed on that proxy's own address, by "
                         "why the forwarding header named no client (no_header, all_trusted, "
                         "unreadable, syntax_error, unknown, obfuscated).",
                         MetricType::Counter, "reason", s.client_address_fallbacks));
  {
    auto latency = family("sluice_upstream_response_duration_seconds",
                          "Time from sending the request head to an upstream to reading its "
                          "response head, by upstream (nginx's $upstream_header_time), seconds.",
                          MetricType::Histogram);
    auto failures =
        family("sluice_upstream_failures_total",
               "Exchanges with an upstream that failed, by upstream and cause "
               "(unreachable, timeout, closed, malformed, too_large, body_failed, tls).",
               MetricType::Counter);
    for (const auto& u : s.upstreams) {
      add_histogram(latency, u.response, {{"upstream", u.upstream}});
      for (std::size_t k = 0; k < u.failures.size(); ++k) {
        add_counter(
            failures, d(u.failures[k]),
            {{"upstream", u.upstream},
             {"cause", http::upstream_failure_name(static_cast<http::upstream_failure>(k))}});
      }
    }
    out.push_back(std::move(latency));
    out.push_back(std::move(failures));
  }
  out.push_back(gauge("sluice_upstream_idle_connections",
                      "Idle keep-alive upstream connections pooled now, over every upstream "
                      "and worker.",
                      d(s.upstream.idle)));
  out.push_back(counter("sluice_upstream_connections_opened_total",
                        "TCP connections opened to upstreams.", d(s.upstream.connects)));
  out.push_back(counter("sluice_upstream_connection_reuses_total",
                        "Requests sent on a pooled keep-alive upstream connection.",
                        d(s.upstream.reuses)));
  {
    auto retries = family("sluice_upstream_retries_total",
                          "Requests sent again, once, on a fresh connection after a pooled one "
                          "closed under them, by reason (not_sent: nothing of the request had "
                          "been sent; idempotent: an idempotent request without a body).",
                          MetricType::Counter);
    add_counter(retries, d(s.upstream.retries_not_sent), {{"reason", "not_sent"}});
    add_counter(retries, d(s.upstream.retries_idempotent), {{"reason", "idempotent"}});
    out.push_back(std::move(retries));
    out.push_back(counter("sluice_upstream_stale_failures_total",
                          "Requests answered 502 after a pooled connection closed under them "
                          "once part of a request that may not be repeated had been sent.",
                          d(s.upstream.stale_failures)));
    auto dropped = family("sluice_upstream_idle_dropped_total",
                          "Idle pooled upstream connections dropped as their outstanding read "
                          "completed, by reason (closed: the upstream closed or reset it; "
                          "stray_bytes: it sent bytes nobody asked for).",
                          MetricType::Counter);
    add_counter(dropped, d(s.upstream.idle_closed), {{"reason", "closed"}});
    add_counter(dropped, d(s.upstream.idle_stray), {{"reason", "stray_bytes"}});
    out.push_back(std::move(dropped));
  }
  out.push_back(gauge("sluice_tunnels_open",
                      "Upgraded connections (WebSocket...) being tunnelled now.",
                      static_cast<double>(s.tunnels_open)));
  out.push_back(counter("sluice_tunnels_total", "Upgrades relayed to an upstream since start.",
                        d(s.tunnels_total)));

  // TLS handshakes, by side; failures by reason (a fixed set: http::tls_failure).
  {
    auto done = family("sluice_tls_handshakes_total",
                       "TLS handshakes completed, by side (listener: client connections; "
                       "upstream: connections to https upstreams).",
                       MetricType::Counter);
    auto failed = family("sluice_tls_handshake_failures_total",
                         "TLS handshakes that failed, by side and reason (timeout, closed, "
                         "not_tls, protocol_version, no_shared_cipher, no_application_protocol, "
                         "no_certificate, bad_certificate, name_mismatch, peer_alert, other).",
                         MetricType::Counter);
    for (const auto& [side, t] :
         {std::pair<const char*, const tls_handshake_counts&>{"listener", s.tls_listener},
          {"upstream", s.tls_upstream}}) {
      add_counter(done, d(t.completed), {{"side", side}});
      for (std::size_t i = 0; i < t.failed.size(); ++i) {
        add_counter(failed, d(t.failed[i]),
                    {{"side", side}, {"reason", http::label(static_cast<http::tls_failure>(i))}});
      }
    }
    out.push_back(std::move(done));
    out.push_back(std::move(failed));
  }

  // Client connections (slow and greedy clients).
  const auto& c = s.clients;
  out.push_back(gauge("sluice_client_connections_open", "Client connections open now.",
                      static_cast<double>(c.open)));
  out.push_back(gauge("sluice_client_connections_max",
                      "Client connections the workers accept at most (client.max_connections "
                      "per worker, summed).",
                      d(c.max_connections)));
  out.push_back(counter("sluice_client_connections_rejected_total",
                        "Client connections accepted over client.max_connections and reset at "
                        "once.",
                        d(c.rejected)));
  {
    auto f = family("sluice_client_timeouts_total",
                    "Client connections that ran out of time, by phase (header: a partial head "
                    "answered 408; idle: a keep-alive or silent connection closed; body: a "
                    "stalled request body).",
                    MetricType::Counter);
    add_counter(f, d(c.header_timeouts), {{"phase", "header"}});
    add_counter(f, d(c.idle_closed), {{"phase", "idle"}});
    add_counter(f, d(c.body_timeouts), {{"phase", "body"}});
    out.push_back(std::move(f));
  }
  {
    auto f = family("sluice_client_heads_refused_total",
                    "Request heads refused over the caps: 414 (max_uri_length), 431 "
                    "(max_header_size, max_headers).",
                    MetricType::Counter);
    add_counter(f, d(c.too_long_uris), {{"status", "414"}});
    add_counter(f, d(c.too_large_heads), {{"status", "431"}});
    out.push_back(std::move(f));
  }

  // The counter store: the families of its counter list (store/store_counters.hpp), in the
  // order /metrics has always had, the request path's own store families among them.
  add_store_families(out, s.store, store_row_id::checks, store_row_id::clock_resends);
  out.push_back(counter("sluice_concurrency_slots_lost_total",
                        "Held concurrency slots a renewal found expired (counted at each "
                        "renewal): the store was out of reach for longer than slot_ttl.",
                        d(s.slots_lost)));
  out.push_back(counter("sluice_concurrency_release_failures_total",
                        "Concurrency slot releases the store did not answer; their slots "
                        "expire slot_ttl after their last renewal.",
                        d(s.slot_release_failures)));
  out.push_back(counter("sluice_store_cached_refusals_total",
                        "Refusals answered from the over-limit cache while the store's refusal "
                        "of that key still stood (no store round trip).",
                        d(s.cached_refusals)));
  out.push_back(counter("sluice_lease_decisions_total",
                        "Requests decided from token leases alone (lease: N), without a store "
                        "round trip.",
                        d(s.leased_decisions)));
  out.push_back(counter("sluice_lease_grants_total",
                        "Token leases taken from the store (lease: N).", d(s.lease_grants)));
  {
    MetricFamily f = family("sluice_lease_tokens_total",
                            "Tokens of token leases (lease: N) by kind: leased, taken ahead "
                            "beyond the requests' costs; returned, given back to their buckets "
                            "when a lease ended unused.",
                            MetricType::Counter);
    add_counter(f, d(s.tokens_leased), {{"kind", "leased"}});
    add_counter(f, d(s.tokens_returned), {{"kind", "returned"}});
    out.push_back(std::move(f));
  }
  add_store_families(out, s.store, store_row_id::clock_resends, store_row_id::batch_sizes);
  out.push_back(gauge("sluice_store_connected",
                      "Store connections (one per worker; the memory store counts as one) "
                      "connected now.",
                      d(s.store_connected)));
  {
    auto f = family("sluice_store_breaker_state",
                    "Store connections whose circuit breaker is in this state.", MetricType::Gauge);
    add_gauge(f, d(s.breaker[static_cast<std::size_t>(store::breaker_state::closed)]),
              {{"state", "closed"}});
    add_gauge(f, d(s.breaker[static_cast<std::size_t>(store::breaker_state::open)]),
              {{"state", "open"}});
    add_gauge(f, d(s.breaker[static_cast<std::size_t>(store::breaker_state::half_open)]),
              {{"state", "half_open"}});
    out.push_back(std::move(f));
  }
  add_store_families(out, s.store, store_row_id::batch_sizes, store_row_id::end);
  {
    auto f = family("sluice_store_check_duration_seconds",
                    "Time from sending a check to the store to its outcome (decided, failed or "
                    "timed out), seconds.",
                    MetricType::Histogram);
    add_histogram(f, s.store_check);
    out.push_back(std::move(f));
  }

  // The rules in force.
  {
    auto f = family("sluice_config_reloads_total",
                    "Rules file reloads, by result (failed: the file was refused and the "
                    "running rules stayed).",
                    MetricType::Counter);
    add_counter(f, d(s.reloads), {{"result", "ok"}});
    add_counter(f, d(s.reload_failures), {{"result", "failed"}});
    out.push_back(std::move(f));
  }
  out.push_back(counter("sluice_admin_auth_failures_total",
                        "Admin requests refused 401 for a missing or wrong bearer token "
                        "(admin.token_env / admin.token_file).",
                        d(s.admin_auth_failures)));
  out.push_back(counter("sluice_access_log_dropped_total",
                        "Access log lines dropped because its queue was full (the disk or stdout "
                        "was slower than the requests).",
                        d(s.access_log_dropped)));
  out.push_back(gauge("sluice_config_generation",
                      "Generation of the rules in force (1 at start, +1 per reload).",
                      d(s.generation)));
  out.push_back(gauge("sluice_config_last_reload_success_timestamp_seconds",
                      "Unix time at which the rules in force were loaded or swapped in.",
                      static_cast<double>(s.config_loaded_unix_ms) / 1000.0));

  // The plan directory's per-worker caches.
  {
    auto f = family("sluice_plan_cache_lookups_total",
                    "API key lookups in the plan directory cache, by result (miss: a store "
                    "round trip follows).",
                    MetricType::Counter);
    add_counter(f, d(s.plan_cache_hits), {{"result", "hit"}});
    add_counter(f, d(s.plan_cache_negative_hits), {{"result", "negative_hit"}});
    add_counter(f, d(s.plan_cache_misses), {{"result", "miss"}});
    out.push_back(std::move(f));
  }
  out.push_back(counter("sluice_plan_cache_evictions_total",
                        "Plan directory cache entries evicted to stay within cache_size.",
                        d(s.plan_cache_evictions)));

  // The Envoy rate limit service (`rate_limit_service:`).
  {
    auto f = family("sluice_rls_calls_total",
                    "ShouldRateLimit calls of the rate limit service, by answer (unavailable: "
                    "the store failed and on_store_failure is fail_closed).",
                    MetricType::Counter);
    add_counter(f, d(s.rls.ok), {{"result", "ok"}});
    add_counter(f, d(s.rls.over_limit), {{"result", "over_limit"}});
    add_counter(f, d(s.rls.invalid_argument), {{"result", "invalid_argument"}});
    add_counter(f, d(s.rls.unavailable), {{"result", "unavailable"}});
    out.push_back(std::move(f));
  }
  {
    auto f = family("sluice_rls_descriptors_total",
                    "Descriptors of valid ShouldRateLimit calls: decided by the store, or "
                    "unknown (matched no limit, allowed).",
                    MetricType::Counter);
    add_counter(f, d(s.rls.descriptors_decided), {{"kind", "decided"}});
    add_counter(f, d(s.rls.unknown_descriptors), {{"kind", "unknown"}});
    out.push_back(std::move(f));
  }
  {
    auto f = family("sluice_rls_failure_policy_applied_total",
                    "ShouldRateLimit calls the store did not decide, by the "
                    "rate_limit_service.on_store_failure policy that answered them.",
                    MetricType::Counter);
    add_counter(f, d(s.rls.fail_open), {{"policy", "fail_open"}});
    add_counter(f, d(s.rls.fail_closed), {{"policy", "fail_closed"}});
    out.push_back(std::move(f));
  }
  out.push_back(counter("sluice_rls_shadow_limited_total",
                        "Decided ShouldRateLimit calls a shadow limit would have refused (the "
                        "answer is unchanged).",
                        d(s.rls.shadow_limited)));
  {
    auto f = family("sluice_rls_request_duration_seconds",
                    "ShouldRateLimit calls from the request read to the answer ready (the "
                    "store check included), seconds.",
                    MetricType::Histogram);
    add_histogram(f, s.rls.duration);
    out.push_back(std::move(f));
  }

  {
    auto f = family("sluice_build_info", "The running sluice build (value always 1).",
                    MetricType::Gauge);
    add_gauge(
        f, 1,
        {{"version", std::string(sluice::version)}, {"revision", std::string(sluice::revision)}});
    out.push_back(std::move(f));
  }
  return out;
}

}  // namespace

process_stats read_process_stats() noexcept {
  process_stats p;
  try {
    const double ticks = static_cast<double>(::sysconf(_SC_CLK_TCK));
    const double page = static_cast<double>(::sysconf(_SC_PAGESIZE));
    std::ifstream stat("/proc/self/stat");
    std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
    // Field 2 (comm) is in parentheses and may hold spaces: count fields after the last ')'.
    const auto close = text.rfind(')');
    double btime = 0;
    {
      std::ifstream sys("/proc/stat");
      std::string key;
      while (sys >> key) {
        if (key == "btime") {
          sys >> btime;
          break;
        }
        sys.ignore(std::numeric_limits<std::streamsize>::max(), '\n');
      }
    }
    if (close != std::string::npos && ticks > 0) {
      std::istringstream rest(text.substr(close + 1));
      std::string f;
      // Fields 3.. (state is field 3): utime 14, stime 15, starttime 22, vsize 23, rss 24.
      for (int field = 3; field <= 24 && rest >> f; ++field) {
        if (field == 14 || field == 15) p.cpu_seconds += std::stod(f) / ticks;
        if (field == 22 && btime > 0) p.start_time_seconds = btime + std::stod(f) / ticks;
        if (field == 23) p.virtual_bytes = std::stod(f);
        if (field == 24) p.resident_bytes = std::stod(f) * page;
      }
    }
    std::error_code ec;
    std::size_t fds = 0;
    for (std::filesystem::directory_iterator it("/proc/self/fd", ec), end; !ec && it != end;
         it.increment(ec))
      ++fds;
    // (The iterator's own descriptor is one of them, as every client library counts it.)
    if (!ec) p.open_fds = static_cast<double>(fds);
    rlimit lim{};
    if (::getrlimit(RLIMIT_NOFILE, &lim) == 0)
      p.max_fds = lim.rlim_cur == RLIM_INFINITY ? 0 : static_cast<double>(lim.rlim_cur);
  } catch (...) {  // std::bad_alloc, std::invalid_argument: what was read stays
  }
  return p;
}

std::string exposition(const metrics_sample& sample) {
  return prometheus::TextSerializer{}.Serialize(families(sample));
}

}  // namespace sluice::observability
