// SPDX-License-Identifier: Apache-2.0
// The metrics room's primitives and text exposition: single-writer counters, the duration
// histogram's bucket edges, and the exact text of a sample (Prometheus text format 0.0.4).
#include "sluice/observability/metrics.hpp"

#include "sluice/version.hpp"

#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

namespace sluice::observability {
namespace {

using namespace std::chrono_literals;

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(owned_counter, adds_on_its_thread_and_reads_anywhere) {
  owned_counter c;
  std::thread writer([&] {
    for (int i = 0; i < 100000; ++i) c.add();
    c.add(5);
  });
  writer.join();
  EXPECT_EQ(c.value(), 100005u);
}

TEST(shared_duration_histogram, counts_every_observation_of_several_threads) {
  shared_duration_histogram h;
  std::vector<std::thread> writers;
  for (int t = 0; t < 4; ++t)
    writers.emplace_back([&] {
      for (int i = 0; i < 10000; ++i) h.observe(100us);  // on the first bound
      h.observe(11s);                                    // above every bound
    });
  for (auto& w : writers) w.join();
  const auto c = h.read();
  EXPECT_EQ(c.buckets.front(), 40000u);
  EXPECT_EQ(c.buckets.back(), 4u);
  EXPECT_EQ(c.count(), 40004u);
  EXPECT_DOUBLE_EQ(c.sum_seconds, 40000 * 0.0001 + 44);
}

TEST(duration_histogram, a_value_on_a_bound_is_in_that_bucket) {
  duration_histogram h;
  h.observe(-5ns);    // counts as 0: first bucket
  h.observe(100us);   // exactly 0.0001 s: first bucket (le)
  h.observe(101us);   // second bucket (0.00025)
  h.observe(5ms);     // exactly 0.005: its own bucket
  h.observe(1s);      // exactly the last bound
  h.observe(1001ms);  // above every bound: +Inf
  const auto c = h.read();
  EXPECT_EQ(c.count(), 6u);
  EXPECT_EQ(c.buckets[0], 2u);
  EXPECT_EQ(c.buckets[1], 1u);
  EXPECT_EQ(c.buckets[5], 1u);   // 0.005
  EXPECT_EQ(c.buckets[11], 1u);  // 1
  EXPECT_EQ(c.buckets[12], 1u);  // +Inf
  EXPECT_DOUBLE_EQ(c.sum_seconds, 0.0001 + 0.000101 + 0.005 + 1 + 1.001);

  histogram_counts total;
  total.add(c);
  total.add(c);
  EXPECT_EQ(total.count(), 12u);
  EXPECT_EQ(total.buckets[0], 4u);
}

metrics_sample example() {
  metrics_sample s;
  route_counts search;
  search.route = "search";
  search.allowed = 3;  // the totals; sluice_requests_total is written from by_protocol
  search.limited = 2;
  search.fail_open = 4;
  search.by_protocol[0] = {.allowed = 1, .limited = 2, .fail_open = 4};  // http/1.1
  search.by_protocol[1] = {.allowed = 2};                                // h2
  search.local = 1;
  search.shadow_limited = 6;
  search.bad_gateway = 7;
  search.gateway_timeout = 8;
  s.routes.push_back(search);
  s.bad_requests = 9;
  s.store.checks = 10;
  s.store.batch_sizes = {50, 51, 52, 53, 54, 55, 56, 57};
  s.store.timeouts = 11;
  s.store.errors = 12;
  s.store.unavailable = 13;
  s.store.late_replies = 14;
  s.store.reconnects = 15;
  s.store.idle_stalls = 2;
  s.store.connect_failures = 16;
  s.store.script_loads = 17;
  s.store.breaker_opens = 18;
  s.store.breaker_reopens = 2;
  s.store.breaker_half_opens = 5;
  s.store.breaker_closes = 3;
  s.store.buckets = 640;
  s.store.evictions = 29;
  s.store.sentinel_unreachable = 30;
  s.store.sentinel_unknown_master = 31;
  s.store.master_switches = 32;
  s.store.sentinels_learned = 4;
  s.store.topology_refreshes = 33;
  s.store.topology_failures = 34;
  s.store.split_checks = 35;
  s.store.split_commit_refusals = 36;
  s.store.split_partial_commits = 37;
  s.store_connections = 4;
  s.store_connected = 3;
  s.breaker = {2, 1, 1};
  s.store_check.buckets[0] = 1;
  s.store_check.buckets[3] = 2;
  s.store_check.buckets.back() = 1;  // above every bound
  s.store_check.sum_seconds = 2.5;
  s.upstream.connects = 19;
  s.upstream.reuses = 20;
  s.upstream.retries_idempotent = 21;
  s.upstream.idle = 6;
  observability::upstream_counts api;
  api.upstream = "api";
  api.response.buckets[2] = 4;   // (0.00025, 0.0005]
  api.response.buckets[13] = 1;  // (2.5, 5]
  api.response.sum_seconds = 3.25;
  api.failures[static_cast<std::size_t>(http::upstream_failure::timeout)] = 7;
  api.failures[static_cast<std::size_t>(http::upstream_failure::body_failed)] = 2;
  s.upstreams.push_back(api);
  s.tunnels_open = 3;
  s.tunnels_total = 9;
  s.tls_listener.completed = 40;
  s.tls_listener.failed[static_cast<std::size_t>(http::tls_failure::protocol_version)] = 41;
  s.tls_upstream.completed = 42;
  s.tls_upstream.failed[static_cast<std::size_t>(http::tls_failure::name_mismatch)] = 43;
  s.clients.open = 31;
  s.clients.max_connections = 2000;
  s.clients.rejected = 32;
  s.clients.header_timeouts = 33;
  s.clients.idle_closed = 34;
  s.clients.body_timeouts = 35;
  s.clients.too_long_uris = 36;
  s.clients.too_large_heads = 37;
  s.reloads = 22;
  s.reload_failures = 23;
  s.access_log_dropped = 41;
  s.generation = 24;
  s.config_loaded_unix_ms = 1700000000250;
  s.plan_cache_hits = 25;
  s.plan_cache_negative_hits = 26;
  s.plan_cache_misses = 27;
  s.plan_cache_evictions = 28;
  s.quota_warnings = {{"monthly", 29}, {"tokens", 0}};
  s.client_address_fallbacks = {{"no_header", 29}, {"syntax_error", 30}};
  s.slots_held = {{"inflight", 3}};
  s.slot_releases = {{"complete", 42}, {"client_gone", 43}};
  s.slots_lost = 44;
  s.slot_release_failures = 45;
  s.rls.ok = 46;
  s.rls.over_limit = 47;
  s.rls.invalid_argument = 48;
  s.rls.unavailable = 49;
  s.rls.descriptors_decided = 50;
  s.rls.unknown_descriptors = 51;
  s.rls.fail_open = 52;
  s.rls.fail_closed = 53;
  s.rls.shadow_limited = 54;
  s.rls.duration.buckets[3] = 2;  // (500 µs, 1 ms]
  s.rls.duration.sum_seconds = 0.0015;
  return s;
}

TEST(exposition, every_family_with_help_type_and_exact_values) {
  const std::string text = exposition(example());
  for (const char* line : {
           "# TYPE sluice_requests_total counter\n",
           "sluice_requests_total{route=\"search\",decision=\"allowed\",protocol=\"http/1.1\"} 1\n",
           "sluice_requests_total{route=\"search\",decision=\"limited\",protocol=\"http/1.1\"} 2\n",
           "sluice_requests_total{route=\"search\",decision=\"unlimited\",protocol=\"http/1.1\"} "
           "0\n",
           "sluice_requests_total{route=\"search\",decision=\"fail_open\",protocol=\"http/1.1\"} "
           "4\n",
           "sluice_requests_total{route=\"search\",decision=\"fail_closed\",protocol=\"http/1.1\"} "
           "0\n",
           "sluice_requests_total{route=\"search\",decision=\"allowed\",protocol=\"h2\"} 2\n",
           "sluice_requests_total{route=\"search\",decision=\"limited\",protocol=\"h2\"} 0\n",
           "sluice_failure_policy_applied_total{route=\"search\",policy=\"fail_open\"} 4\n",
           "sluice_failure_policy_applied_total{route=\"search\",policy=\"fail_closed\"} 0\n",
           "sluice_failure_policy_applied_total{route=\"search\",policy=\"local\"} 1\n",
           "sluice_shadow_limited_total{route=\"search\"} 6\n",
           "sluice_upstream_errors_total{route=\"search\",status=\"502\"} 7\n",
           "sluice_upstream_errors_total{route=\"search\",status=\"504\"} 8\n",
           "sluice_bad_requests_total 9\n",
           "# TYPE sluice_client_address_fallbacks_total counter\n",
           "sluice_client_address_fallbacks_total{reason=\"no_header\"} 29\n",
           "sluice_client_address_fallbacks_total{reason=\"syntax_error\"} 30\n",
           "# TYPE sluice_upstream_response_duration_seconds histogram\n",
           "sluice_upstream_response_duration_seconds_count{upstream=\"api\"} 5\n",
           "sluice_upstream_response_duration_seconds_sum{upstream=\"api\"} 3.25\n",
           "sluice_upstream_response_duration_seconds_bucket{upstream=\"api\",le=\"0.00025\"} 0\n",
           "sluice_upstream_response_duration_seconds_bucket{upstream=\"api\",le=\"0.0005\"} 4\n",
           "sluice_upstream_response_duration_seconds_bucket{upstream=\"api\",le=\"2.5\"} 4\n",
           "sluice_upstream_response_duration_seconds_bucket{upstream=\"api\",le=\"5\"} 5\n",
           "sluice_upstream_response_duration_seconds_bucket{upstream=\"api\",le=\"+Inf\"} 5\n",
           "# TYPE sluice_upstream_failures_total counter\n",
           "sluice_upstream_failures_total{upstream=\"api\",cause=\"unreachable\"} 0\n",
           "sluice_upstream_failures_total{upstream=\"api\",cause=\"timeout\"} 7\n",
           "sluice_upstream_failures_total{upstream=\"api\",cause=\"body_failed\"} 2\n",
           "# TYPE sluice_upstream_idle_connections gauge\n",
           "sluice_upstream_idle_connections 6\n",
           "sluice_upstream_connections_opened_total 19\n",
           "sluice_upstream_connection_reuses_total 20\n",
           "sluice_upstream_retries_total{reason=\"not_sent\"} 0\n",
           "sluice_upstream_retries_total{reason=\"idempotent\"} 21\n",
           "sluice_upstream_stale_failures_total 0\n",
           "sluice_upstream_idle_dropped_total{reason=\"closed\"} 0\n",
           "sluice_upstream_idle_dropped_total{reason=\"stray_bytes\"} 0\n",
           "sluice_tunnels_open 3\n",
           "sluice_tunnels_total 9\n",
           "sluice_tls_handshakes_total{side=\"listener\"} 40\n",
           "sluice_tls_handshakes_total{side=\"upstream\"} 42\n",
           "sluice_tls_handshake_failures_total{side=\"listener\",reason=\"protocol_version\"} "
           "41\n",
           "sluice_tls_handshake_failures_total{side=\"listener\",reason=\"timeout\"} 0\n",
           "sluice_tls_handshake_failures_total{side=\"upstream\",reason=\"name_mismatch\"} 43\n",
           "sluice_tls_handshake_failures_total{side=\"upstream\",reason=\"other\"} 0\n",
           "# TYPE sluice_client_connections_open gauge\n",
           "sluice_client_connections_open 31\n",
           "# TYPE sluice_client_connections_max gauge\n",
           "sluice_client_connections_max 2000\n",
           "# TYPE sluice_client_connections_rejected_total counter\n",
           "sluice_client_connections_rejected_total 32\n",
           "# TYPE sluice_client_timeouts_total counter\n",
           "sluice_client_timeouts_total{phase=\"header\"} 33\n",
           "sluice_client_timeouts_total{phase=\"idle\"} 34\n",
           "sluice_client_timeouts_total{phase=\"body\"} 35\n",
           "# TYPE sluice_client_heads_refused_total counter\n",
           "sluice_client_heads_refused_total{status=\"414\"} 36\n",
           "sluice_client_heads_refused_total{status=\"431\"} 37\n",
           "sluice_store_checks_total 10\n",
           "sluice_store_timeouts_total 11\n",
           "sluice_store_errors_total 12\n",
           "sluice_store_unavailable_total 13\n",
           "sluice_store_late_replies_total 14\n",
           "sluice_store_reconnects_total 15\n",
           "# TYPE sluice_store_idle_stalls_total counter\n",
           "sluice_store_idle_stalls_total 2\n",
           "sluice_store_connect_failures_total 16\n",
           "sluice_store_script_loads_total 17\n",
           "sluice_store_breaker_opens_total 18\n",
           "# TYPE sluice_store_breaker_transitions_total counter\n",
           "sluice_store_breaker_transitions_total{to=\"open\"} 20\n",
           "sluice_store_breaker_transitions_total{to=\"half_open\"} 5\n",
           "sluice_store_breaker_transitions_total{to=\"closed\"} 3\n",
           "# TYPE sluice_store_buckets gauge\n",
           "sluice_store_buckets 640\n",
           "# TYPE sluice_store_evictions_total counter\n",
           "sluice_store_evictions_total 29\n",
           "sluice_store_sentinel_lookup_failures_total{reason=\"unreachable\"} 30\n",
           "sluice_store_sentinel_lookup_failures_total{reason=\"unknown_master\"} 31\n",
           "# TYPE sluice_store_master_switches_total counter\n",
           "sluice_store_master_switches_total 32\n",
           "# TYPE sluice_store_sentinels_learned_total counter\n",
           "sluice_store_sentinels_learned_total 4\n",
           "sluice_store_cluster_topology_refreshes_total{result=\"ok\"} 33\n",
           "sluice_store_cluster_topology_refreshes_total{result=\"failed\"} 34\n",
           "# TYPE sluice_store_split_checks_total counter\n",
           "sluice_store_split_checks_total 35\n",
           "sluice_store_split_charged_unadmitted_total{reason=\"commit_refused\"} 36\n",
           "sluice_store_split_charged_unadmitted_total{reason=\"commit_failed\"} 37\n",
           "# TYPE sluice_store_connected gauge\n",
           "sluice_store_connected 3\n",
           "sluice_store_breaker_state{state=\"closed\"} 2\n",
           "sluice_store_breaker_state{state=\"open\"} 1\n",
           "sluice_store_breaker_state{state=\"half_open\"} 1\n",
           "# TYPE sluice_store_script_calls_total counter\n",
           "sluice_store_script_calls_total{checks=\"1\"} 50\n",
           "sluice_store_script_calls_total{checks=\"3-4\"} 52\n",
           "sluice_store_script_calls_total{checks=\"65+\"} 57\n",
           "# TYPE sluice_store_check_duration_seconds histogram\n",
           "sluice_store_check_duration_seconds_count 4\n",
           "sluice_store_check_duration_seconds_sum 2.5\n",
           "sluice_store_check_duration_seconds_bucket{le=\"0.0001\"} 1\n",
           "sluice_store_check_duration_seconds_bucket{le=\"0.0005\"} 1\n",
           "sluice_store_check_duration_seconds_bucket{le=\"0.001\"} 3\n",
           "sluice_store_check_duration_seconds_bucket{le=\"1\"} 3\n",
           "sluice_store_check_duration_seconds_bucket{le=\"10\"} 3\n",
           "sluice_store_check_duration_seconds_bucket{le=\"+Inf\"} 4\n",
           "sluice_config_reloads_total{result=\"ok\"} 22\n",
           "sluice_config_reloads_total{result=\"failed\"} 23\n",
           "sluice_config_generation 24\n",
           "sluice_access_log_dropped_total 41\n",
           "sluice_config_last_reload_success_timestamp_seconds 1700000000.25\n",
           "sluice_plan_cache_lookups_total{result=\"hit\"} 25\n",
           "sluice_plan_cache_lookups_total{result=\"negative_hit\"} 26\n",
           "sluice_plan_cache_lookups_total{result=\"miss\"} 27\n",
           "sluice_plan_cache_evictions_total 28\n",
           "sluice_quota_warnings_total{limit=\"monthly\"} 29\n",
           "sluice_quota_warnings_total{limit=\"tokens\"} 0\n",
           "# TYPE sluice_concurrency_slots_held gauge\n",
           "sluice_concurrency_slots_held{limit=\"inflight\"} 3\n",
           "sluice_concurrency_releases_total{reason=\"complete\"} 42\n",
           "sluice_concurrency_releases_total{reason=\"client_gone\"} 43\n",
           "sluice_concurrency_slots_lost_total 44\n",
           "sluice_concurrency_release_failures_total 45\n",
           "sluice_rls_calls_total{result=\"ok\"} 46\n",
           "sluice_rls_calls_total{result=\"over_limit\"} 47\n",
           "sluice_rls_calls_total{result=\"invalid_argument\"} 48\n",
           "sluice_rls_calls_total{result=\"unavailable\"} 49\n",
           "sluice_rls_descriptors_total{kind=\"decided\"} 50\n",
           "sluice_rls_descriptors_total{kind=\"unknown\"} 51\n",
           "sluice_rls_failure_policy_applied_total{policy=\"fail_open\"} 52\n",
           "sluice_rls_failure_policy_applied_total{policy=\"fail_closed\"} 53\n",
           "sluice_rls_shadow_limited_total 54\n",
           "# TYPE sluice_rls_request_duration_seconds histogram\n",
           "sluice_rls_request_duration_seconds_count 2\n",
           "sluice_rls_request_duration_seconds_sum 0.0015\n",
           "sluice_rls_request_duration_seconds_bucket{le=\"0.0005\"} 0\n",
           "sluice_rls_request_duration_seconds_bucket{le=\"0.001\"} 2\n",
       }) {
    EXPECT_TRUE(contains(text, line)) << "missing: " << line << "in:\n" << text;
  }
  const std::string build_info = "sluice_build_info{version=\"" + std::string(sluice::version) +
                                 "\",revision=\"" + std::string(sluice::revision) + "\"} 1\n";
  EXPECT_TRUE(contains(text, build_info)) << "missing: " << build_info << "in:\n" << text;
  // Every family has one HELP and one TYPE line, and the text ends with a line feed.
  std::size_t help = 0, type = 0;
  for (std::size_t at = 0; (at = text.find("# HELP ", at)) != std::string::npos; ++at) ++help;
  for (std::size_t at = 0; (at = text.find("# TYPE ", at)) != std::string::npos; ++at) ++type;
  EXPECT_EQ(help, type);
  EXPECT_EQ(help, 83u);
  EXPECT_EQ(text.back(), '\n');
}

TEST(exposition, no_routes_still_lists_every_family) {
  const std::string text = exposition(metrics_sample{});
  EXPECT_TRUE(contains(text, "# TYPE sluice_requests_total counter\n"));
  EXPECT_FALSE(contains(text, "sluice_requests_total{"));
  EXPECT_TRUE(contains(text, "sluice_store_checks_total 0\n"));
  EXPECT_TRUE(contains(text, "sluice_store_check_duration_seconds_bucket{le=\"+Inf\"} 0\n"));
}

TEST(exposition, client_exchanges_by_route_and_status_class_and_the_process) {
  metrics_sample s;
  exchange_counts e;
  e.route = "api";
  auto& h1 = e.duration[static_cast<std::size_t>(http::protocol::http1)];
  h1[code_class_of(200)].buckets[3] = 2;  // two of (0.5 ms, 1 ms]
  h1[code_class_of(200)].sum_seconds = 0.5;
  h1[code_class_of(503)].buckets.back() = 1;  // above 10 s
  h1[code_class_of(503)].sum_seconds = 12;
  auto& h2 = e.duration[static_cast<std::size_t>(http::protocol::h2)];
  h2[code_class_of(429)].buckets[0] = 1;
  h2[code_class_of(429)].sum_seconds = 0.0001;
  e.bytes_in = 12;
  e.bytes_out = 3456;
  s.exchanges.push_back(exchange_counts{});  // "": the unrouted
  s.exchanges.push_back(e);
  s.process = {1.5, 4096, 8192, 7, 1024, 1700000000};
  const std::string text = exposition(s);
  for (const char* line : {
           "# TYPE sluice_http_request_duration_seconds histogram\n",
           "sluice_http_request_duration_seconds_bucket{route=\"api\",code_class=\"2xx\",protocol="
           "\"http/1.1\",le="
           "\"0.0005\"} 0\n",
           "sluice_http_request_duration_seconds_bucket{route=\"api\",code_class=\"2xx\",protocol="
           "\"http/1.1\",le="
           "\"0.001\"} 2\n",
           "sluice_http_request_duration_seconds_count{route=\"api\",code_class=\"2xx\",protocol="
           "\"http/1.1\"} 2\n",
           "sluice_http_request_duration_seconds_sum{route=\"api\",code_class=\"2xx\",protocol="
           "\"http/1.1\"} 0.5\n",
           "sluice_http_request_duration_seconds_bucket{route=\"api\",code_class=\"5xx\",protocol="
           "\"http/1.1\",le="
           "\"10\"} 0\n",
           "sluice_http_request_duration_seconds_count{route=\"api\",code_class=\"5xx\",protocol="
           "\"http/1.1\"} 1\n",
           "sluice_http_request_duration_seconds_count{route=\"api\",code_class=\"none\",protocol="
           "\"http/1.1\"} 0\n",
           "sluice_http_request_duration_seconds_count{route=\"\",code_class=\"4xx\",protocol="
           "\"http/1.1\"} 0\n",
           "sluice_http_request_duration_seconds_count{route=\"api\",code_class=\"4xx\",protocol="
           "\"h2\"} 1\n",
           "sluice_http_request_duration_seconds_count{route=\"api\",code_class=\"2xx\",protocol="
           "\"h2\"} 0\n",
           "sluice_http_received_bytes_total{route=\"api\"} 12\n",
           "sluice_http_sent_bytes_total{route=\"api\"} 3456\n",
           "sluice_http_sent_bytes_total{route=\"\"} 0\n",
           "# TYPE process_cpu_seconds_total counter\n",
           "process_cpu_seconds_total 1.5\n",
           "process_resident_memory_bytes 4096\n",
           "process_virtual_memory_bytes 8192\n",
           "process_open_fds 7\n",
           "process_max_fds 1024\n",
           "process_start_time_seconds 1700000000\n",
       })
    EXPECT_TRUE(contains(text, line)) << line << text;
  EXPECT_EQ(code_class_of(0), 0u);
  EXPECT_EQ(code_class_of(99), 0u);
  EXPECT_EQ(code_class_of(101), 1u);
  EXPECT_EQ(code_class_of(599), 5u);
  EXPECT_EQ(code_class_of(600), 0u);
}

TEST(exposition, the_process_is_read_from_proc) {
  const auto p = read_process_stats();
  EXPECT_GT(p.resident_bytes, 0);
  EXPECT_GE(p.virtual_bytes, p.resident_bytes);
  EXPECT_GE(p.open_fds, 3);  // stdin, stdout, stderr at least
  EXPECT_GE(p.max_fds, p.open_fds);
  EXPECT_GT(p.start_time_seconds, 1.6e9);
  EXPECT_GE(p.cpu_seconds, 0);
}

TEST(exposition, label_values_are_escaped) {
  metrics_sample s;
  route_counts r;
  r.route = "a\"b\\c";
  s.routes.push_back(r);
  const std::string text = exposition(s);
  EXPECT_TRUE(contains(text, "sluice_shadow_limited_total{route=\"a\\\"b\\\\c\"} 0\n")) << text;
}

}  // namespace
}  // namespace sluice::observability
