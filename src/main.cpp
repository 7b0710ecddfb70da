// SPDX-License-Identifier: Apache-2.0
// sluice command line: `sluice --config FILE`, `sluice --check-config FILE`, `sluice --version`.
// Thin by design: everything it runs lives in sluice_core.

#include "sluice/app/runtime.hpp"
#include "sluice/config/loader.hpp"
#include "sluice/http/tls_context.hpp"
#include "sluice/limiter/guarantee.hpp"
#include "sluice/observability/log.hpp"
#include "sluice/version.hpp"

#include <spdlog/spdlog.h>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/program_options.hpp>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <functional>
#include <iostream>
#include <set>
#include <string_view>
#include <thread>

namespace po = boost::program_options;

namespace {

void print_diagnostics(const sluice::config::load_result& r) {
  for (const auto& d : r.diagnostics) std::cerr << d.to_string() << '\n';
}

/// Loads the rules file and builds its TLS contexts: a certificate, key or CA file that is
/// missing, unreadable, expired or mismatched is one more diagnostic (and no value).
sluice::config::load_result load_with_tls(const std::string& file,
                                          std::shared_ptr<const sluice::http::tls_bundle>& tls) {
  auto r = sluice::config::load_file(file);
  if (r.ok()) {
    tls = sluice::http::build_tls(*r.value, r.diagnostics);
    if (!tls) r.value = nullptr;
  }
  return r;
}

std::string summary(const sluice::config::rules& r) {
  std::set<std::string> names;
  for (const auto& [_, p] : r.plans)
    for (const auto& l : p.limits) names.insert(l.name);
  for (const auto& route : r.routes)
    for (const auto& l : route.limits) names.insert(l.name);
  std::string store = "memory";
  if (r.store.redis()) {
    store = "redis " + r.store.host + ":" + std::to_string(r.store.port);
    if (r.store.type == sluice::config::store_settings::kind::redis_sentinel) {
      store = "redis-sentinel, master '" + r.store.master_name + "' from " +
              std::to_string(r.store.sentinels.size()) + " Sentinels";
    }
    if (r.store.type == sluice::config::store_settings::kind::redis_cluster)
      store = "redis-cluster from " + std::to_string(r.store.nodes.size()) + " seed nodes";
    store += r.store.layout == sluice::config::store_settings::layout_kind::hash
                 ? ", buckets in " + std::to_string(r.store.hash_groups) + " hashes per limit"
                 : ", one key per bucket";
  }
  std::string text = std::to_string(r.routes.size()) + " routes, " + std::to_string(names.size()) +
                     " limits, " + std::to_string(r.plans.size()) + " plans, " +
                     std::to_string(r.api_keys.size()) + " API keys, " +
                     std::to_string(r.upstreams.size()) + " upstreams; store: " + store;
  if (r.tls.enabled) {
    text += "; TLS with " + std::to_string(r.tls.certificates.size()) + " certificate" +
            (r.tls.certificates.size() == 1 ? "" : "s");
  }
  return text;
}

/// Checks `--listen`, `--admin` and `--workers` with the rules file's own parsers (the same
/// rules and messages as `listen:`, `admin:` and `workers:`) and fills `out`. Prints
/// `sluice: --OPTION: message` for each refused value; returns false when there was one.
/// Runs before anything is loaded or bound, so a bad override starts nothing.
bool read_overrides(const po::variables_map& vm, sluice::app::gateway_options& out) {
  bool ok = true;
  auto refuse = [&](const char* option, const std::string& message) {
    std::cerr << "sluice: --" << option << ": " << message << '\n';
    ok = false;
  };
  for (const char* option : {"listen", "admin"}) {
    if (!vm.count(option)) continue;
    std::string error;
    auto a = sluice::config::parse_listen_address(vm[option].as<std::string>(), error);
    if (!a)
      refuse(option, error);
    else
      (std::string_view(option) == "listen" ? out.listen : out.admin) = a->to_string();
  }
  if (vm.count("workers")) {
    std::string error;
    if (auto n = sluice::config::parse_workers(vm["workers"].as<std::string>(), error)) {
      // gateway_options::workers 0 means "as the file says"; `--workers 0` means what
      // `workers: 0` means, one per core.
      out.workers = *n != 0 ? *n : std::max(1u, std::thread::hardware_concurrency());
    } else {
      refuse("workers", error);
    }
  }
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  po::options_description desc("sluice: a rate-limiting HTTP reverse proxy\n\nOptions");
  desc.add_options()("help,h", "show this help")("version", "print the version and exit")(
      "config,c", po::value<std::string>(), "run the gateway on this rules file")(
      "check-config", po::value<std::string>(), "validate a rules file and exit (0 = valid)")(
      "listen", po::value<std::string>(), "override `listen:` (host:port)")(
      "admin", po::value<std::string>(), "override `admin:` (host:port of the admin listener)")(
      "no-watch", "do not watch the rules file (reload on SIGHUP or POST /admin/reload only)")(
      "workers", po::value<std::string>(), "override `workers:` (0..1024, 0 = one per core)")(
      "log-level", po::value<std::string>()->default_value("info"),
      "trace, debug, info, warn, error, critical, off");
  po::variables_map vm;
  try {
    po::store(po::parse_command_line(argc, argv, desc), vm);
    po::notify(vm);
  } catch (const std::exception& e) {
    std::cerr << "sluice: " << e.what() << "\n" << desc << '\n';
    return 2;
  }
  if (vm.count("help")) {
    std::cout << desc << '\n';
    return 0;
  }
  if (vm.count("version")) {
    std::cout << "sluice " << sluice::version << "\nrevision " << sluice::revision << '\n';
    return 0;
  }
  sluice::app::runtime_options options;
  if (!read_overrides(vm, options.gateway)) return 2;
  if (vm.count("check-config")) {
    // Warnings of the check (an upstream with `verify: false`) go to stderr, as at start.
    sluice::observability::setup_logging(vm["log-level"].as<std::string>());
    const auto file = vm["check-config"].as<std::string>();
    std::shared_ptr<const sluice::http::tls_bundle> tls;
    auto r = load_with_tls(file, tls);
    if (!r.ok()) {
      print_diagnostics(r);
      std::cerr << file << ": " << r.diagnostics.size() << " error(s)\n";
      return 1;
    }
    std::cout << file << ": OK: " << summary(*r.value) << '\n';
    // Each limit's stated guarantee, once per limit name (DESIGN.md: no limit promises more
    // than it keeps).
    std::set<std::string> shown;
    auto show = [&](const sluice::config::limit& l) {
      if (shown.insert(l.name).second)
        std::cout << "  limit " << l.name << ": " << sluice::limiter::guarantee(l) << '\n';
    };
    for (const auto& [_, p] : r.value->plans)
      for (const auto& l : p.limits) show(l);
    for (const auto& route : r.value->routes)
      for (const auto& l : route.limits) show(l);
    return 0;
  }
  if (!vm.count("config")) {
    std::cerr << "sluice: --config FILE is required\n" << desc << '\n';
    return 2;
  }

  sluice::observability::setup_logging(vm["log-level"].as<std::string>());
  const auto file = vm["config"].as<std::string>();
  std::shared_ptr<const sluice::http::tls_bundle> tls;
  auto loaded = load_with_tls(file, tls);
  if (!loaded.ok()) {
    print_diagnostics(loaded);
    std::cerr << file << ": not started: " << loaded.diagnostics.size() << " error(s)\n";
    return 1;
  }

  options.watch = vm.count("no-watch") == 0;

  try {
    // Signals are caught from here on (a signal arriving before its wait is kept for it).
    boost::asio::io_context main_ioc;
    boost::asio::signal_set stop_signals(main_ioc, SIGINT, SIGTERM);
    boost::asio::signal_set hup(main_ioc, SIGHUP);
    boost::asio::signal_set usr1(main_ioc, SIGUSR1);
    sluice::app::runtime rt(file, loaded.value, options, std::move(tls));
    rt.start();
    auto& gw = rt.gateway();
    spdlog::info("sluice {} listening on {} ({})", sluice::version,
                 gw.endpoint().address().to_string() + ":" + std::to_string(gw.endpoint().port()),
                 summary(*loaded.value));
    if (auto admin = rt.admin_endpoint()) {
      spdlog::info("admin listening on {}:{}", admin->address().to_string(), admin->port());
    }

    // The first SIGTERM/SIGINT drains (readiness 503, no new connections, requests in flight
    // finish, up to drain_timeout); a second one stops at once, cutting what is left.
    std::atomic<bool> abort_drain{false};
    std::size_t cut = 0;
    std::thread drainer;
    std::function<void(const boost::system::error_code&, int)> on_second =
        [&](const boost::system::error_code& ec, int sig) {
          if (ec) return;
          spdlog::warn("signal {} during the drain: stopping now", sig);
          abort_drain = true;
        };
    stop_signals.async_wait([&](const boost::system::error_code& ec, int sig) {
      if (ec) return;
      spdlog::info("signal {}: draining (up to {} ms; a second signal stops at once)", sig,
                   gw.current().rules->drain_timeout.count());
      hup.cancel();
      usr1.cancel();
      stop_signals.async_wait(on_second);
      drainer = std::thread([&] {
        cut = rt.drain_and_stop(&abort_drain);
        boost::asio::post(main_ioc, [&] {
          stop_signals.cancel();
          main_ioc.stop();
        });
      });
    });
    // SIGHUP re-reads the rules file (as a file event or POST /admin/reload would); an
    // invalid file keeps the running config.
    std::function<void(const boost::system::error_code&, int)> on_hup =
        [&](const boost::system::error_code& ec, int) {
          if (ec) return;
          rt.reload("SIGHUP");
          hup.async_wait(on_hup);
        };
    hup.async_wait(on_hup);
    // SIGUSR1 reopens the access log's file (logrotate's postrotate).
    std::function<void(const boost::system::error_code&, int)> on_usr1 =
        [&](const boost::system::error_code& ec, int) {
          if (ec) return;
          gw.reopen_logs();
          usr1.async_wait(on_usr1);
        };
    usr1.async_wait(on_usr1);
    main_ioc.run();
    if (drainer.joinable()) drainer.join();
    if (cut > 0) {
      spdlog::warn("stopped with {} requests cut (still in flight at the end of the drain)", cut);
    } else {
      spdlog::info("stopped: every request in flight finished");
    }
    rt.stop();
  } catch (const std::exception& e) {
    spdlog::critical("sluice: {}", e.what());
    return 1;
  }
  return 0;
}
