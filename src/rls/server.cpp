// SPDX-License-Identifier: Apache-2.0
// The rate limit service's gRPC server (rls/server.hpp): grpc++'s callback API. A call's
// handler maps the request and hands its check to a gateway worker's event loop (the store
// connections belong to the workers, so none is shared with a gRPC thread) and returns at
// once; the worker's answer finishes the call. No gRPC thread waits for a store, so the calls
// in flight are as many as the clients send, and their checks reach a worker together (one
// pipelined batch on its store connection) instead of one per waiting thread.

#include "sluice/rls/server.hpp"

#include "sluice/rls/plan.hpp"

#include "sluice/config/loader.hpp"
#include "sluice/errc.hpp"

#include "envoy/service/ratelimit/v3/rls.grpc.pb.h"

#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <optional>
#include <stdexcept>
#include <variant>

namespace sluice::rls {

namespace {

/// One call in flight: what its answer needs once the check is decided. Finishes its reactor
/// exactly once: with the decision, or — should the check's callback be dropped without a
/// call (a worker's loop torn down at exit) — as a store failure under the service's policy.
class pending_call {
 public:
  pending_call(grpc::ServerUnaryReactor* reactor, pb::RateLimitResponse* resp, counters& count,
               std::shared_ptr<const config::rules> rules, plan p,
               std::chrono::steady_clock::time_point began)
      : reactor_(reactor),
        resp_(resp),
        count_(count),
        rules_(std::move(rules)),
        plan_(std::move(p)),
        began_(began) {}
  pending_call(const pending_call&) = delete;
  pending_call& operator=(const pending_call&) = delete;
  ~pending_call() {
    if (!finished_) decided(boost::system::error_code(errc::store_unavailable));
  }

  const limiter::check_request& check() const { return plan_.check; }

  /// Answers the call from the check's result (any thread).
  void decided(const boost::system::result<limiter::check_outcome>& r) {
    if (!r) {
      if (rules_->rate_limit_service.on_store_failure == config::failure_policy::fail_closed) {
        bump(count_.fail_closed);
        bump(count_.unavailable);
        finish({grpc::StatusCode::UNAVAILABLE,
                "the counter store did not answer and rate_limit_service.on_store_failure is "
                "fail_closed"});
        return;
      }
      bump(count_.fail_open);
      bump(count_.ok);
      *resp_ = allow_all(plan_.per_descriptor.size());
      finish(grpc::Status::OK);
      return;
    }
    const auto& outcome = *r;
    *resp_ = render(plan_, outcome, rules_->headers);
    bump(count_.descriptors_decided, plan_.per_descriptor.size() - plan_.unknown);
    bool shadow_refused = false;
    for (std::size_t i = 0; i < plan_.applied.size() && i < outcome.limits.size(); ++i)
      shadow_refused = shadow_refused || (plan_.applied[i].shadow && !outcome.limits[i].admits);
    if (shadow_refused) bump(count_.shadow_limited);
    bump(outcome.allowed ? count_.ok : count_.over_limit);
    finish(grpc::Status::OK);
  }

  static void bump(std::atomic<std::uint64_t>& c, std::uint64_t n = 1) {
    c.fetch_add(n, std::memory_order_relaxed);
  }

 private:
  void finish(const grpc::Status& status) {
    finished_ = true;
    count_.duration.observe(std::chrono::steady_clock::now() - began_);
    reactor_->Finish(status);
  }

  grpc::ServerUnaryReactor* reactor_;
  pb::RateLimitResponse* resp_;
  counters& count_;
  std::shared_ptr<const config::rules> rules_;
  plan plan_;
  std::chrono::steady_clock::time_point began_;
  bool finished_ = false;
};

class service final : public pb::RateLimitService::CallbackService {
 public:
  service(rules_fn rules, decide_fn decide, counters& count)
      : rules_(std::move(rules)), decide_(std::move(decide)), count_(count) {}

  grpc::ServerUnaryReactor* ShouldRateLimit(grpc::CallbackServerContext* ctx,
                                            const pb::RateLimitRequest* req,
                                            pb::RateLimitResponse* resp) override {
    const auto began = std::chrono::steady_clock::now();
    auto* reactor = ctx->DefaultReactor();
    auto finish_now = [&](const grpc::Status& status) {
      count_.duration.observe(std::chrono::steady_clock::now() - began);
      reactor->Finish(status);
      return reactor;
    };
    auto rules = rules_();
    auto mapped = map_request(rules->rate_limit_service, *req);
    if (auto* bad = std::get_if<invalid>(&mapped)) {
      pending_call::bump(count_.invalid);
      return finish_now({grpc::StatusCode::INVALID_ARGUMENT, bad->message});
    }
    auto& p = std::get<plan>(mapped);
    pending_call::bump(count_.unknown, p.unknown);
    if (p.check.limits.empty()) {
      *resp = allow_all(p.per_descriptor.size());
      pending_call::bump(count_.ok);
      return finish_now(grpc::Status::OK);
    }
    // The store's own deadline bounds the check: the call ends when it does.
    auto call = std::make_shared<pending_call>(reactor, resp, count_, std::move(rules),
                                               std::move(p), began);
    auto check = call->check();
    decide_(std::move(check),
            [call = std::move(call)](boost::system::result<limiter::check_outcome> r) {
              call->decided(r);
            });
    return reactor;
  }

 private:
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
  const std::string addr = config::listen_address{impl_->host, impl_->port}.to_string();
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
