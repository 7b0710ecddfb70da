// SPDX-License-Identifier: Apache-2.0
// The rate limit service's gRPC server (rls/server.hpp): grpc++'s synchronous API, whose
// thread pool runs the handlers; a handler waits for its check, which runs on a gateway
// worker's event loop (the store connections belong to the workers), so no store connection
// is shared with a gRPC thread.

#include "sluice/rls/server.hpp"

#include "sluice/rls/plan.hpp"

#include "envoy/service/ratelimit/v3/rls.grpc.pb.h"

#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <future>
#include <optional>
#include <stdexcept>
#include <variant>

namespace sluice::rls {

namespace {

class service final : public pb::RateLimitService::Service {
 public:
  service(rules_fn rules, decide_fn decide, counters& count)
      : rules_(std::move(rules)), decide_(std::move(decide)), count_(count) {}

  grpc::Status ShouldRateLimit(grpc::ServerContext*, const pb::RateLimitRequest* req,
                               pb::RateLimitResponse* resp) override {
    const auto began = std::chrono::steady_clock::now();
    auto status = answer(*req, *resp);
    count_.duration.observe(std::chrono::steady_clock::now() - began);
    return status;
  }

 private:
  static void bump(std::atomic<std::uint64_t>& c, std::uint64_t n = 1) {
    c.fetch_add(n, std::memory_order_relaxed);
  }

  grpc::Status answer(const pb::RateLimitRequest& req, pb::RateLimitResponse& resp) {
    const auto rules = rules_();
    const auto& rls = rules->rate_limit_service;
    auto mapped = map_request(rls, req);
    if (auto* bad = std::get_if<invalid>(&mapped)) {
      bump(count_.invalid);
      return {grpc::StatusCode::INVALID_ARGUMENT, bad->message};
    }
    auto& p = std::get<plan>(mapped);
    bump(count_.unknown, p.unknown);
    if (p.check.limits.empty()) {
      resp = allow_all(p.per_descriptor.size());
      bump(count_.ok);
      return grpc::Status::OK;
    }
    auto done = std::make_shared<std::promise<boost::system::result<limiter::check_outcome>>>();
    auto answer = done->get_future();
    decide_(p.check, [done](boost::system::result<limiter::check_outcome> r) {
      done->set_value(std::move(r));
    });
    // The store's own deadline bounds the check; this bound only guards against a worker
    // that never runs it (stopping).
    std::optional<boost::system::result<limiter::check_outcome>> r;
    if (answer.wait_for(std::chrono::seconds(5)) == std::future_status::ready) r = answer.get();
    if (!r || !*r) {
      if (rls.on_store_failure == config::failure_policy::fail_closed) {
        bump(count_.fail_closed);
        bump(count_.unavailable);
        return {grpc::StatusCode::UNAVAILABLE,
                "the counter store did not answer and rate_limit_service.on_store_failure is "
                "fail_closed"};
      }
      bump(count_.fail_open);
      bump(count_.ok);
      resp = allow_all(p.per_descriptor.size());
      return grpc::Status::OK;
    }
    const auto& outcome = **r;
    resp = render(p, outcome, rules->headers);
    bump(count_.descriptors_decided, p.per_descriptor.size() - p.unknown);
    bool shadow_refused = false;
    for (std::size_t i = 0; i < p.applied.size() && i < outcome.limits.size(); ++i)
      shadow_refused = shadow_refused || (p.applied[i].shadow && !outcome.limits[i].admits);
    if (shadow_refused) bump(count_.shadow_limited);
    bump(outcome.allowed ? count_.ok : count_.over_limit);
    return grpc::Status::OK;
  }

  rules_fn rules_;
  decide_fn decide_;
  counters& count_;
};

}  // namespace

struct server::impl {
  std::string host;
  std::uint16_t port = 0;
  counters count;
  service svc;
  std::unique_ptr<grpc::Server> grpc;
  bool stopped = false;

  impl(std::string h, std::uint16_t p, rules_fn rules, decide_fn decide)
      : host(std::move(h)), port(p), svc(std::move(rules), std::move(decide), count) {}
};

server::server(std::string host, std::uint16_t port, rules_fn rules, decide_fn decide)
    : impl_(std::make_unique<impl>(std::move(host), port, std::move(rules), std::move(decide))) {}

server::~server() {
  stop();
}

void server::start() {
  if (impl_->grpc) return;
  // grpc.health.v1: the default service answers SERVING for "" and, once set below, for
  // the rate limit service's full name while the server runs (NOT_SERVING from Shutdown on).
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  const std::string addr = impl_->host.find(':') != std::string::npos
                               ? "[" + impl_->host + "]:" + std::to_string(impl_->port)
                               : impl_->host + ":" + std::to_string(impl_->port);
  int bound = 0;
  builder.AddListeningPort(addr, grpc::InsecureServerCredentials(), &bound);
  // SO_REUSEPORT off: a second process must not silently share the port.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.RegisterService(&impl_->svc);
  impl_->grpc = builder.BuildAndStart();
  if (!impl_->grpc || bound == 0) {
    impl_->grpc.reset();
    throw std::runtime_error("rate_limit_service.listen: cannot listen on " + addr);
  }
  impl_->port = static_cast<std::uint16_t>(bound);
  if (auto* health = impl_->grpc->GetHealthCheckService())
    health->SetServingStatus(pb::RateLimitService::service_full_name(), true);
  spdlog::info("rate limit service (envoy.service.ratelimit.v3) listening on {}:{}", impl_->host,
               impl_->port);
}

void server::stop() {
  if (!impl_->grpc || impl_->stopped) return;
  impl_->stopped = true;
  impl_->grpc->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
  impl_->grpc->Wait();
}

std::uint16_t server::port() const {
  return impl_->port;
}

observability::rls_counts counters::read() const noexcept {
  observability::rls_counts c;
  c.ok = ok.load(std::memory_order_relaxed);
  c.over_limit = over_limit.load(std::memory_order_relaxed);
  c.invalid_argument = invalid.load(std::memory_order_relaxed);
  c.unavailable = unavailable.load(std::memory_order_relaxed);
  c.descriptors_decided = descriptors_decided.load(std::memory_order_relaxed);
  c.unknown_descriptors = unknown.load(std::memory_order_relaxed);
  c.fail_open = fail_open.load(std::memory_order_relaxed);
  c.fail_closed = fail_closed.load(std::memory_order_relaxed);
  c.shadow_limited = shadow_limited.load(std::memory_order_relaxed);
  c.duration = duration.read();
  return c;
}

const counters& server::stats() const {
  return impl_->count;
}

}  // namespace sluice::rls
