// SPDX-License-Identifier: Apache-2.0
// The process around the gateway: reload triggers and the admin listener.
//
// Reloads are serialised by one mutex: gateway::reload numbers a snapshot and then installs
// it, so two attempts racing could install generation N after N+1. Holding the mutex across
// parse + swap costs nothing on the request path (workers never take it).

#include "sluice/app/runtime.hpp"

#include "sluice/rls/server.hpp"

#include "app/listen_endpoint.hpp"

#include "sluice/config/loader.hpp"
#include "sluice/observability/admin.hpp"
#include "sluice/observability/metrics.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

namespace sluice::app {
namespace {

namespace asio = boost::asio;

/// The settings a running gateway reads only at start-up (listen, admin, workers, and the
/// store's connection and layout: everything but `store.local_share`) that differ between the
/// rules in force and `next`, by rules-file path; `next` gets the running values, so the
/// snapshot swapped in (and /admin/config) says what is actually in force.
std::vector<std::string> pin_startup_settings(const config::rules& running, config::rules& next) {
  std::vector<std::string> changed;
  auto pin = [&changed](const char* path, auto& field, const auto& value) {
    if (field != value) {
      changed.emplace_back(path);
      field = value;
    }
  };
  pin("listen", next.listen_host, running.listen_host);
  pin("listen", next.listen_port, running.listen_port);
  pin("admin", next.admin_host, running.admin_host);
  pin("admin", next.admin_port, running.admin_port);
  pin("workers", next.workers, running.workers);
  pin("rate_limit_service.listen", next.rate_limit_service.listen_host,
      running.rate_limit_service.listen_host);
  pin("rate_limit_service.listen", next.rate_limit_service.listen_port,
      running.rate_limit_service.listen_port);
  pin("client", next.client, running.client);
  pin("drain_timeout", next.drain_timeout, running.drain_timeout);
  pin("http2", next.http2, running.http2);
  pin("store.type", next.store.type, running.store.type);
  pin("store.address", next.store.host, running.store.host);
  pin("store.address", next.store.port, running.store.port);
  pin("store.timeout", next.store.timeout, running.store.timeout);
  pin("store.password_env", next.store.password_env, running.store.password_env);
  // The files are read again on every reload (a missing or exposed one refuses it); the
  // passwords they hold are used from start-up on, as password_env's. Never the values in
  // the warning: only the field names.
  pin("store.password_file", next.store.password_file, running.store.password_file);
  pin("store.password_file", next.store.password, running.store.password);
  pin("store.username", next.store.username, running.store.username);
  pin("store.sentinel_username", next.store.sentinel_username, running.store.sentinel_username);
  pin("store.tls", next.store.tls, running.store.tls);
  pin("store.sentinels", next.store.sentinels, running.store.sentinels);
  pin("store.nodes", next.store.nodes, running.store.nodes);
  pin("store.master", next.store.master_name, running.store.master_name);
  pin("store.sentinel_password_env", next.store.sentinel_password_env,
      running.store.sentinel_password_env);
  pin("store.sentinel_password_file", next.store.sentinel_password_file,
      running.store.sentinel_password_file);
  pin("store.sentinel_password_file", next.store.sentinel_password,
      running.store.sentinel_password);
  pin("store.sentinel_timeout", next.store.sentinel_timeout, running.store.sentinel_timeout);
  pin("store.layout", next.store.layout, running.store.layout);
  pin("store.hash_groups", next.store.hash_groups, running.store.hash_groups);
  pin("store.max_buckets", next.store.max_buckets, running.store.max_buckets);
  pin("store.max_batch", next.store.max_batch, running.store.max_batch);
  pin("access_log.path", next.access_log_path, running.access_log_path);
  pin("access_log.format", next.access_log_json, running.access_log_json);
  pin("status.top", next.status_top, running.status_top);
  pin("status.window", next.status_window_minutes, running.status_window_minutes);
  pin("status.graph", next.status_graph_minutes, running.status_graph_minutes);
  pin("status.graph_step", next.status_graph_step, running.status_graph_step);
  // TLS on the listener or not is read at start-up; its certificates are reloaded. A file
  // that drops `tls:` keeps the running block (its files are read again), one that adds it
  // to a plain listener is ignored.
  if (next.tls.enabled != running.tls.enabled) {
    changed.emplace_back("tls");
    next.tls = running.tls;
  }
  changed.erase(std::unique(changed.begin(), changed.end()), changed.end());
  return changed;
}

}  // namespace

struct runtime::impl : observability::admin_backend {
  std::string file;
  runtime_options options;
  std::unique_ptr<app::gateway> gw;
  std::optional<asio::ip::tcp::endpoint> admin_at;
  std::shared_ptr<observability::admin_server> admin;
  std::unique_ptr<config_watcher> watcher;
  std::unique_ptr<rls::server> rls;  // `rate_limit_service:` (null without one)
  std::mutex reload_mutex;
  std::string last_reload_error;  // guarded by reload_mutex
  bool started = false;
  bool stopped = false;

  reload_outcome reload(std::string_view trigger) {
    std::lock_guard lock(reload_mutex);
    const auto began = std::chrono::steady_clock::now();
    auto loaded = sluice::config::load_file(file);
    reload_outcome out;
    std::shared_ptr<config::rules> next;
    std::shared_ptr<const http::tls_bundle> tls;
    std::vector<std::string> pinned;
    if (loaded.ok()) {
      next = std::make_shared<config::rules>(*loaded.value);
      pinned = pin_startup_settings(*gw->current().rules, *next);
      // Certificates and CA files are read now: one that is missing, expired or does not
      // match its key refuses the whole reload, and the contexts in force stay.
      tls = http::build_tls(*next, loaded.diagnostics);
      if (!tls) loaded.value = nullptr;
    }
    if (loaded.ok()) {
      if (!pinned.empty()) {
        std::string names;
        for (const auto& n : pinned) names += (names.empty() ? "" : ", ") + n;
        spdlog::warn(
            "reload ({}): {} changes {}, read at start-up only: the running values stay "
            "in force until a restart",
            trigger, file, names);
      }
      gw->reload(std::move(next), std::move(tls));
      last_reload_error.clear();
      out.ok = true;
      out.generation = gw->current().generation;
      const auto us = std::chrono::duration_cast<std::chrono::microseconds>(
                          std::chrono::steady_clock::now() - began)
                          .count();
      spdlog::info("reload ({}): {} in force as generation {} (parsed and swapped in {} us)",
                   trigger, file, out.generation, us);
      return out;
    }
    gw->note_reload_failure();
    out.generation = gw->current().generation;
    for (const auto& d : loaded.diagnostics) out.diagnostics.push_back(d.to_string());
    last_reload_error = out.diagnostics.empty() ? std::string("refused") : out.diagnostics.front();
    std::string more;
    if (out.diagnostics.size() > 1)
      more = " (and " + std::to_string(out.diagnostics.size() - 1) + " more)";
    spdlog::error("reload ({}): {} refused, generation {} stays in force: {}{}", trigger, file,
                  out.generation, out.diagnostics.front(), more);
    return out;
  }

  // observability::admin_backend
  bool ready() override {
    return !gw->draining() && gw->wait_for_store(std::chrono::milliseconds(0));
  }
  std::string not_ready_reason() override {
    if (gw->draining()) return "draining";
    auto why = gw->store_failure();
    return why.empty() ? std::string() : "store: " + why;
  }
  config_view current_config() override {
    auto cur = gw->current();
    std::lock_guard lock(reload_mutex);
    return {cur.rules, cur.generation, file, last_reload_error};
  }
  observability::admin_reload_result reload() override {
    auto r = reload("admin");
    return {r.ok, r.generation, std::move(r.diagnostics)};
  }
  std::optional<std::string> metrics() override {
    auto s = gw->sample();
    if (admin) s.admin_auth_failures = admin->auth_failures();
    if (rls) s.rls = rls->stats().read();
    return observability::exposition(s);
  }
  explained explain(const observability::explain_query& q) override {
    auto json = gw->explain(q);
    if (!json) return {std::nullopt, "the gateway did not answer within 2 s"};
    return {std::move(*json), {}};
  }
  std::optional<observability::status_facts> status() override {
    observability::status_facts f;
    f.uptime_ms = gw->uptime_ms();
    f.workers = gw->workers();
    f.sample = gw->sample();
    if (rls) {
      f.sample.rls = rls->stats().read();
      f.rls_enabled = true;
    }
    return f;
  }
  std::optional<observability::top_callers::answer> top(std::size_t n) override {
    return gw->top(n);
  }
  observability::unblock_answer unblock(const observability::unblock_query& q) override {
    auto a = gw->unblock(q);
    if (!a) return {503, "{\"error\":\"the gateway did not answer within 2 s\"}"};
    return std::move(*a);
  }
};

runtime::runtime(std::string config_file, std::shared_ptr<const config::rules> rules,
                 runtime_options options, std::shared_ptr<const http::tls_bundle> tls)
    : impl_(std::make_unique<impl>()) {
  impl_->file = std::move(config_file);
  impl_->options = options;
  if (!options.gateway.admin.empty()) {
    impl_->admin_at = listen_endpoint(options.gateway.admin, "admin");
  } else if (!rules->admin_host.empty()) {
    impl_->admin_at =
        asio::ip::tcp::endpoint{asio::ip::make_address(rules->admin_host), rules->admin_port};
  }
  if (impl_->admin_at && !impl_->admin_at->address().is_loopback() && rules->admin.token.empty()) {
    // The admin listener reloads rules and explains any key's state: without a token
    // (admin.token_env / token_file) it belongs on loopback (or behind something that
    // authenticates).
    spdlog::warn(
        "admin listener on {} is not a loopback address and asks for no token: anyone who can "
        "reach it can reload the rules and read every route's limits and any caller's state "
        "(set admin.token_env or admin.token_file)",
        impl_->admin_at->address().to_string());
  }
  const auto rls_settings = rules->rate_limit_service;
  impl_->gw = std::make_unique<app::gateway>(std::move(rules), options.gateway, std::move(tls));
  if (rls_settings.enabled) {
    app::gateway* gw = impl_->gw.get();
    impl_->rls = std::make_unique<rls::server>(
        rls_settings.listen_host, rls_settings.listen_port, [gw] { return gw->current().rules; },
        [gw](limiter::check_request req,
             std::function<void(boost::system::result<limiter::check_outcome>)> done) {
          gw->decide(std::move(req), std::move(done));
        });
  }
  if (impl_->admin_at) {
    // The backend is the impl itself; the shared_ptr does not own it (the runtime does, and
    // stops the listener before the impl goes away).
    std::shared_ptr<observability::admin_backend> backend(std::shared_ptr<void>{}, impl_.get());
    impl_->admin =
        std::make_shared<observability::admin_server>(*impl_->admin_at, std::move(backend));
  }
}

runtime::~runtime() {
  stop();
}

void runtime::start() {
  if (impl_->started) return;
  impl_->started = true;
  impl_->gw->start();
  if (impl_->rls) impl_->rls->start();
  if (impl_->admin) impl_->admin->start();
  if (impl_->options.watch) {
    try {
      impl_->watcher = std::make_unique<config_watcher>(
          impl_->file, [p = impl_.get()] { p->reload("file change"); }, impl_->options.watching);
    } catch (const std::exception& e) {
      spdlog::error(
          "cannot watch {} ({}): file changes will not be seen; SIGHUP and "
          "POST /admin/reload still reload it",
          impl_->file, e.what());
    }
  }
}

std::size_t runtime::drain_and_stop(const std::atomic<bool>* abort) {
  if (impl_->stopped) return 0;
  if (impl_->watcher) impl_->watcher->stop();
  const auto deadline = impl_->gw->current().rules->drain_timeout;
  const auto cut = impl_->gw->drain(deadline, abort);
  stop();
  return cut;
}

void runtime::stop() {
  if (impl_->stopped) return;
  impl_->stopped = true;
  if (impl_->watcher) impl_->watcher->stop();
  if (impl_->admin) impl_->admin->stop();
  if (impl_->rls) impl_->rls->stop();
  impl_->gw->stop();
}

reload_outcome runtime::reload(std::string_view trigger) {
  return impl_->reload(trigger);
}

gateway& runtime::gateway() {
  return *impl_->gw;
}

std::optional<asio::ip::tcp::endpoint> runtime::admin_endpoint() const {
  if (!impl_->admin) return std::nullopt;
  return impl_->admin->local_endpoint();
}

std::optional<std::uint16_t> runtime::rate_limit_service_port() const {
  if (!impl_->rls) return std::nullopt;
  return impl_->rls->port();
}

const std::string& runtime::config_file() const {
  return impl_->file;
}

}  // namespace sluice::app
