// SPDX-License-Identifier: Apache-2.0
// The Redis Cluster counter store (redis_cluster_store.hpp; the Redis Cluster specification,
// "Redirection and resharding", and the command docs of CLUSTER SHARDS, CLUSTER SLOTS, ASKING).
//
// Everything runs on the worker's executor. The slot map and the master connections (one
// redis_store each) belong to that thread; stats() reads the connections from other threads
// under `nodes_mutex`, which the worker takes only when it adds or closes one.
//
// A topology query is a short exchange on its own connection (redis_connection: resolve,
// connect, TLS, AUTH), CLUSTER SHARDS (CLUSTER SLOTS where SHARDS is refused), under one timer;
// whichever of the reply, the timer or the connection's end comes first finishes it.
#include "sluice/store/redis_cluster_store.hpp"

#include "sluice/errc.hpp"
#include "sluice/store/lua_scripts.hpp"
#include "store/redis_connection.hpp"
#include "store/store_stats_mirror.hpp"

#include <hiredis/hiredis.h>

#include <spdlog/spdlog.h>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/ip/address.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <algorithm>
#include <atomic>
#include <functional>
#include <mutex>
#include <optional>
#include <string_view>
#include <unordered_map>

namespace sluice::store {

namespace asio = boost::asio;
using boost::system::error_code;
using limiter::check_outcome;
using limiter::check_request;
using check_result = boost::system::result<check_outcome>;

namespace {

constexpr std::uintptr_t tag_shards = 2;
constexpr std::uintptr_t tag_slots = 3;

std::string_view text_of(const redisReply* r) {
  return r && r->str ? std::string_view(r->str, r->len) : std::string_view();
}

// One topology query (see the top of this file). `done` is called once, posted.
class topology_query : public std::enable_shared_from_this<topology_query> {
 public:
  using result = boost::system::result<slot_map, topology_error>;
  using handler = std::function<void(result)>;

  /// `node`: the nodes' connection settings (username, password, TLS); `to` the node asked.
  topology_query(asio::any_io_executor ex, node_address to, const redis_settings& node,
                 std::chrono::milliseconds timeout, handler done)
      : ex_(std::move(ex)),
        to_(std::move(to)),
        options_{to_.host, to_.port, {}, node.username, node.password, node.tls},
        tls_(node.tls.context != nullptr),
        timeout_(timeout),
        done_(std::move(done)),
        timer_(ex_) {}

  /// Ends the query now (the store stops): the handler is called with an error.
  void cancel() { finish(fail("stopped")); }

  void start() {
    keep_ = shared_from_this();
    timer_.expires_after(timeout_);
    timer_.async_wait([w = weak_from_this()](error_code ec) {
      if (auto self = w.lock(); self && !ec) {
        self->finish(fail("no answer within " + std::to_string(self->timeout_.count()) + " ms"));
      }
    });
    io_ = detail::redis_connection::open(ex_, options_, this, &topology_query::on_connect,
                                         &topology_query::on_disconnect);
    io_->command(&topology_query::on_reply, reinterpret_cast<void*>(tag_shards),
                 {"CLUSTER", "SHARDS"});
  }

 private:
  static result fail(std::string why) { return topology_error{std::move(why)}; }

  static topology_query* owner(const detail::redis_connection* c) {
    return static_cast<topology_query*>(c->data());
  }

  static void on_connect(detail::redis_connection* c, bool ok, const std::string& why) noexcept {
    try {
      auto* self = owner(c);
      if (self == nullptr || ok) return;
      self->finish(fail("cannot connect: " + why));
    } catch (...) {
      // No exception crosses a connection callback.
    }
  }

  static void on_disconnect(detail::redis_connection* c, const std::string& why) noexcept {
    try {
      auto* self = owner(c);
      if (self == nullptr) return;
      self->finish(fail("connection closed: " + why));
    } catch (...) {
      // No exception crosses a connection callback.
    }
  }

  static void on_reply(detail::redis_connection* c, const redisReply* r, void* privdata) noexcept {
    try {
      auto* self = owner(c);
      if (self == nullptr || r == nullptr) return;
      self->reply(reinterpret_cast<std::uintptr_t>(privdata), *r);
    } catch (...) {
      // No exception crosses a connection callback.
    }
  }

  void reply(std::uintptr_t tag, const redisReply& r) {
    if (finished_) return;
    if (r.type == REDIS_REPLY_ERROR) {
      const auto text = text_of(&r);
      if (text.find("cluster support disabled") != std::string_view::npos) {
        finish(fail("not in cluster mode (" + std::string(text.substr(0, 120)) + ")"));
      } else if (tag == tag_shards) {
        // Redis before 7.0 has no CLUSTER SHARDS: the same map from CLUSTER SLOTS.
        io_->command(&topology_query::on_reply, reinterpret_cast<void*>(tag_slots),
                     {"CLUSTER", "SLOTS"});
      } else {
        finish(fail("CLUSTER SLOTS failed: " + std::string(text.substr(0, 120))));
      }
      return;
    }
    finish(tag == tag_shards ? slot_map::from_cluster_shards(r, to_.host, tls_)
                             : slot_map::from_cluster_slots(r, to_.host));
  }

  void finish(result r) {
    if (finished_) return;
    finished_ = true;
    timer_.cancel();
    if (auto c = std::move(io_)) c->close();  // its NULL replies are ignored (finished_)
    // Posted: we may be inside a connection callback; `keep_` holds us until then.
    if (!keep_) return;  // (never started)
    asio::post(ex_, [self = std::move(keep_), r = std::move(r)]() mutable {
      auto h = std::move(self->done_);
      h(std::move(r));
    });
  }

  asio::any_io_executor ex_;
  node_address to_;
  detail::redis_connection::options options_;
  bool tls_ = false;  // the nodes are reached over TLS: their tls-port is the one to use
  std::chrono::milliseconds timeout_;
  handler done_;
  asio::steady_timer timer_;
  std::shared_ptr<detail::redis_connection> io_;
  std::shared_ptr<topology_query> keep_;
  bool finished_ = false;
};

// One slot's share of a request: the indices of its limits in the request.
struct slot_group {
  std::uint16_t slot = 0;
  std::vector<std::size_t> limits;
  bool enforced = false;  // holds an enforced limit that can refuse (can_refuse())
  bool shadow = false;    // holds a shadow limit
};

}  // namespace

struct redis_cluster_store::impl : std::enable_shared_from_this<impl> {
  impl(asio::any_io_executor e, redis_cluster_settings s)
      : ex(std::move(e)), settings(std::move(s)), refresh_timer(ex) {}

  asio::any_io_executor ex;
  redis_cluster_settings settings;
  slot_map map;
  bool have_map = false;
  bool stopped = false;
  // The master connections, by endpoint; `by_master[i]` is the connection of map.masters()[i]
  // (null until made).
  std::unordered_map<std::string, std::shared_ptr<redis_store>> nodes;
  std::vector<std::shared_ptr<redis_store>> by_master;
  mutable std::mutex nodes_mutex;  // guards `nodes` and `retired` against stats()
  store_stats retired;             // the counters of connections closed so far
  std::uint64_t epoch_base = 0;    // bumped when a connection is added or closed

  // Topology refresh.
  asio::steady_timer refresh_timer;
  bool refreshing = false;
  bool refresh_again = false;      // asked for while one was running
  bool refresh_scheduled = false;  // want_refresh() armed the timer for the earliest moment
  std::chrono::steady_clock::time_point last_refresh{};
  std::optional<std::string> logged_topology_failure;  // the failure last logged
  std::string topology_failure;  // failure()'s: the last refresh with no map (nodes_mutex)
  std::weak_ptr<topology_query> current_query;  // cancelled by stop()

  // The cluster's own store counters (checks refused before a node, topology, split checks):
  // stats() adds them to its nodes'.
  store_stats_mirror own;
  // The cluster's own counters beyond store_stats (cluster()).
  struct atomic_counters {
    std::atomic<std::uint64_t> moved{0}, asks{0}, masters{0}, covered{0};
  } counters;

  // ---- connections ---------------------------------------------------------------------------

  std::shared_ptr<redis_store> node(const node_address& a) {
    const std::string key = a.to_string();
    if (auto it = nodes.find(key); it != nodes.end()) return it->second;
    redis_settings s = settings.node;
    s.cluster_node = true;
    s.host = a.host;
    s.port = a.port;
    auto store = std::make_shared<redis_store>(ex, std::move(s));
    {
      std::lock_guard lock(nodes_mutex);
      nodes.emplace(key, store);
      ++epoch_base;
    }
    if (!stopped) store->start();
    return store;
  }

  void rebuild_by_master() {
    by_master.assign(map.masters().size(), nullptr);
    for (std::size_t i = 0; i < map.masters().size(); ++i) {
      const auto key = map.masters()[i].address.to_string();
      if (auto it = nodes.find(key); it != nodes.end()) by_master[i] = it->second;
    }
  }

  std::shared_ptr<redis_store> node_of_slot(std::uint16_t slot) {
    const auto i = map.master_index(slot);
    if (i == slot_map::no_master) return nullptr;
    if (i >= by_master.size()) rebuild_by_master();
    if (!by_master[i]) by_master[i] = node(map.masters()[i].address);
    return by_master[i];
  }

  // A new slot map: connections for its masters, the others closed.
  void apply(slot_map m) {
    std::vector<std::size_t> served(m.masters().size(), 0);
    for (std::uint16_t s = 0; s < cluster_slot_count; ++s) {
      if (const auto i = m.master_index(s); i != slot_map::no_master) ++served[i];
    }
    map = std::move(m);
    have_map = true;
    std::vector<std::string> keep;
    std::uint64_t masters = 0;
    for (std::size_t i = 0; i < served.size(); ++i) {
      if (served[i] == 0) continue;
      ++masters;
      keep.push_back(map.masters()[i].address.to_string());
      node(map.masters()[i].address);
    }
    {
      std::lock_guard lock(nodes_mutex);
      for (auto it = nodes.begin(); it != nodes.end();) {
        if (std::find(keep.begin(), keep.end(), it->first) != keep.end()) {
          ++it;
          continue;
        }
        // A demoted or removed master: its checks in flight finish (they hold the store);
        // then it is closed.
        spdlog::info("redis cluster: {} serves no slot any more; its connection is closed",
                     it->first);
        const auto gone = it->second->stats();
        retired.add_counts(gone);
        epoch_base += gone.reconnects + 1;  // the epoch only moves forward
        it = nodes.erase(it);
      }
    }
    rebuild_by_master();
    counters.masters = masters;
    counters.covered = map.covered_slots();
  }

  // ---- topology ------------------------------------------------------------------------------

  void start() {
    if (stopped) return;
    refresh();
  }

  // Asks for a refresh soon (after a MOVED or a failure): at most one per refresh_min_gap.
  void want_refresh() {
    if (stopped || refresh_scheduled) return;
    if (refreshing) {
      refresh_again = true;
      return;
    }
    const auto due = last_refresh + settings.refresh_min_gap;
    if (std::chrono::steady_clock::now() >= due) {
      refresh();
      return;
    }
    refresh_scheduled = true;
    refresh_timer.expires_at(due);  // (cancels the periodic wait; refresh() arms it again)
    refresh_timer.async_wait([w = weak_from_this()](error_code ec) {
      if (auto self = w.lock(); self && !ec) {
        self->refresh_scheduled = false;
        self->refresh();
      }
    });
  }

  void arm_periodic() {
    refresh_timer.expires_after(settings.refresh_every);
    refresh_timer.async_wait([w = weak_from_this()](error_code ec) {
      if (auto self = w.lock(); self && !ec && !self->refreshing) self->refresh();
    });
  }

  // Known masters first (in map order), then the seeds, each once.
  std::vector<node_address> candidates() const {
    std::vector<node_address> out;
    auto push = [&](const node_address& a) {
      if (std::find(out.begin(), out.end(), a) == out.end()) out.push_back(a);
    };
    for (const auto& [key, store] : nodes) {
      (void)store;
      if (auto a = parse_node_address(key)) push(*a);
    }
    for (const auto& m : map.masters()) push(m.address);
    for (const auto& s : settings.seeds) push(s);
    return out;
  }

  void refresh() {
    if (stopped || refreshing) return;
    refreshing = true;
    refresh_again = false;
    refresh_scheduled = false;
    last_refresh = std::chrono::steady_clock::now();
    refresh_timer.cancel();
    auto list = std::make_shared<std::vector<node_address>>(candidates());
    auto why = std::make_shared<std::string>();
    ask(list, 0, why);
  }

  void ask(std::shared_ptr<std::vector<node_address>> list, std::size_t i,
           std::shared_ptr<std::string> why) {
    if (stopped) return;
    if (i >= list->size()) {
      ++own.topology_failures;
      if (logged_topology_failure != *why) {
        spdlog::warn("redis cluster: no node gave a slot map ({}); retrying", *why);
        logged_topology_failure = *why;
      }
      {
        std::lock_guard lock(nodes_mutex);
        topology_failure = "redis cluster: no node gave a slot map (" + *why + ")";
      }
      refresh_done(true);
      return;
    }
    const node_address to = (*list)[i];
    auto q = std::make_shared<topology_query>(
        ex, to, settings.node, settings.topology_timeout,
        [w = weak_from_this(), list, i, why, to](topology_query::result r) {
          auto self = w.lock();
          if (!self || self->stopped) return;
          if (r && r->covered_slots() > 0) {
            {
              std::lock_guard lock(self->nodes_mutex);
              self->topology_failure.clear();
            }
            if (self->logged_topology_failure) {
              spdlog::info("redis cluster: slot map read again from {}", to.to_string());
              self->logged_topology_failure.reset();
            } else if (!self->have_map) {
              spdlog::info("redis cluster: slot map from {}: {} masters, {} slots covered",
                           to.to_string(), r->masters().size(), r->covered_slots());
            }
            ++self->own.topology_refreshes;
            self->apply(std::move(*r));
            self->refresh_done(false);
            return;
          }
          if (!why->empty()) *why += "; ";
          *why += to.to_string() + ": " + (r ? std::string("no slot covered") : r.error().message);
          self->ask(list, i + 1, why);
        });
    current_query = q;
    q->start();
  }

  void refresh_done(bool failed) {
    refreshing = false;
    if (refresh_again || (failed && !have_map)) {
      // Soon again (at most once per refresh_min_gap): something asked for it meanwhile, or
      // there is no map at all yet.
      refresh_again = false;
      want_refresh();
      return;
    }
    arm_periodic();
  }

  // ---- checks --------------------------------------------------------------------------------

  // One slot's call on its master, following MOVED and ASK (at most max_redirects) before
  // `deadline`. Any other failure is an error: the route's failure policy answers.
  asio::awaitable<check_result> call(std::uint16_t slot, check_request req,
                                     std::chrono::steady_clock::time_point deadline) {
    auto self = shared_from_this();  // kept while suspended
    std::shared_ptr<redis_store> target = node_of_slot(slot);
    std::string target_host;
    if (const auto* m = map.master_of(slot)) target_host = m->address.host;
    bool asking = false;
    for (unsigned attempt = 0;; ++attempt) {
      if (!target) {
        ++own.unavailable;
        want_refresh();
        co_return errc::store_unavailable;
      }
      if (std::chrono::steady_clock::now() >= deadline) co_return errc::store_timeout;
      auto r = co_await target->check_routed(req, {asking, deadline});
      if (stopped) co_return errc::store_unavailable;
      if (!r.ec) co_return std::move(r.outcome);
      const auto redirect =
          r.error_reply.empty() ? std::nullopt : parse_redirect(r.error_reply, target_host);
      if (!redirect) {
        const auto kind =
            r.error_reply.empty() ? error_kind::other : classify_error_reply(r.error_reply);
        // A lost or refused connection, a timeout, CLUSTERDOWN: the map may be out of date.
        if (r.error_reply.empty() || kind == error_kind::clusterdown ||
            kind == error_kind::tryagain || is_wrong_node(kind)) {
          want_refresh();
        }
        co_return r.ec;
      }
      if (attempt >= settings.max_redirects) co_return errc::store_error;
      target_host = redirect->to.host;
      if (redirect->type == redirect::kind::moved) {
        ++counters.moved;
        map.assign(redirect->slot, redirect->to);
        rebuild_by_master();
        target = node_of_slot(redirect->slot);
        asking = false;
        want_refresh();
      } else {
        ++counters.asks;
        target = node(redirect->to);
        asking = true;
      }
    }
  }

  struct fan_out {
    explicit fan_out(const asio::any_io_executor& e, std::size_t n)
        : results(n, check_result(errc::store_unavailable)), remaining(n), wake(e) {
      wake.expires_at(std::chrono::steady_clock::time_point::max());
    }
    std::vector<check_result> results;
    std::size_t remaining;
    asio::steady_timer wake;
  };

  // Sends every (slot, request) at once and waits for all of them: never one after another.
  asio::awaitable<std::vector<check_result>> parallel(
      std::vector<std::pair<std::uint16_t, check_request>> calls,
      std::chrono::steady_clock::time_point deadline) {
    auto self = shared_from_this();
    auto fan = std::make_shared<fan_out>(ex, calls.size());
    for (std::size_t i = 0; i < calls.size(); ++i) {
      asio::co_spawn(ex, call(calls[i].first, std::move(calls[i].second), deadline),
                     [fan, i](std::exception_ptr e, check_result r) {
                       fan->results[i] = e ? check_result(errc::store_error) : std::move(r);
                       if (--fan->remaining == 0) fan->wake.cancel();
                     });
    }
    if (fan->remaining > 0)
      (void)co_await fan->wake.async_wait(asio::as_tuple(asio::use_awaitable));
    co_return std::move(fan->results);
  }

  static check_request subset(const check_request& req, const std::vector<std::size_t>& idx,
                              bool peek, bool shadow_only = false) {
    check_request sub;
    sub.now_ms_override = req.now_ms_override;
    sub.peek = peek;
    sub.settle = req.settle;
    // A refusal found by the first step's peek is final (the request is refused), so that
    // peek starts the blocks of the limits that refuse, as a one-slot check would.
    sub.peek_starts_blocks = peek && !req.peek;
    sub.lift_blocks = req.lift_blocks;
    for (const auto i : idx) {
      if (shadow_only && !req.limits[i].shadow) continue;
      sub.limits.push_back(req.limits[i]);
    }
    return sub;
  }

  static void merge(check_outcome& out, const slot_group& g, const check_outcome& part) {
    std::size_t j = 0;
    for (const auto i : g.limits) out.limits[i] = part.limits.at(j++);
    out.now_ms = std::max(out.now_ms, part.now_ms);
  }

  static error_code first_error(const std::vector<check_result>& rs) {
    for (const auto& r : rs)
      if (!r) return r.error();
    return {};
  }

  asio::awaitable<check_result> check(check_request req) {
    auto self = shared_from_this();
    const auto deadline = std::chrono::steady_clock::now() + settings.node.command_timeout;
    if (stopped || !have_map) {
      ++own.unavailable;
      want_refresh();
      co_return errc::store_unavailable;
    }
    std::vector<std::string> keys;
    keys.reserve(req.limits.size());
    for (const auto& l : req.limits) keys.push_back(lua::redis_key(l, settings.node.layout));
    const auto routing = route_keys(map, keys);
    if (!routing.uncovered.empty()) {
      ++own.unavailable;
      want_refresh();
      co_return errc::store_unavailable;
    }
    std::vector<slot_group> groups;
    for (const auto& mb : routing.masters) {
      for (const auto& sb : mb.slots) {
        slot_group g;
        g.slot = sb.slot;
        g.limits = sb.keys;
        for (const auto i : g.limits) {
          if (req.limits[i].shadow) {
            g.shadow = true;
          } else if (can_refuse(req, req.limits[i])) {
            g.enforced = true;
          }
        }
        groups.push_back(std::move(g));
      }
    }
    if (groups.size() == 1) co_return co_await call(groups[0].slot, std::move(req), deadline);
    ++own.split_checks;

    check_outcome out;
    out.limits.resize(req.limits.size());
    const auto enforced_groups = static_cast<std::size_t>(
        std::count_if(groups.begin(), groups.end(), [](const auto& g) { return g.enforced; }));

    // One step: at most one group can refuse the request (the others hold shadow limits,
    // decided alone anyway, or limits that never refuse: a settle's, settled atomically per
    // slot — a failure of one slot leaves the others settled —, a slot's release or renewal),
    // or nothing is written at all (peek).
    if (req.peek || enforced_groups <= 1) {
      std::vector<std::pair<std::uint16_t, check_request>> calls;
      for (const auto& g : groups) calls.emplace_back(g.slot, subset(req, g.limits, req.peek));
      auto rs = co_await parallel(std::move(calls), deadline);
      if (auto ec = first_error(rs)) co_return ec;
      out.allowed = true;
      for (std::size_t k = 0; k < groups.size(); ++k) {
        merge(out, groups[k], *rs[k]);
        if (groups[k].enforced && !rs[k]->allowed) out.allowed = false;
      }
      co_return out;
    }

    // Step 1: the groups with enforced limits peek; those with shadow limits only are real.
    std::vector<std::pair<std::uint16_t, check_request>> calls;
    for (const auto& g : groups) calls.emplace_back(g.slot, subset(req, g.limits, g.enforced));
    auto first = co_await parallel(std::move(calls), deadline);
    if (auto ec = first_error(first)) co_return ec;
    bool admit = true;
    for (std::size_t k = 0; k < groups.size(); ++k) {
      merge(out, groups[k], *first[k]);
      if (groups[k].enforced && !first[k]->allowed) admit = false;
    }

    // Step 2: commit the enforced groups (all admitted), or only their shadow limits (the
    // request is refused: no enforced limit is charged).
    std::vector<std::size_t> sent;
    calls.clear();
    for (std::size_t k = 0; k < groups.size(); ++k) {
      if (!groups[k].enforced || (!admit && !groups[k].shadow)) continue;
      sent.push_back(k);
      calls.emplace_back(groups[k].slot, subset(req, groups[k].limits, false, !admit));
    }
    auto second = co_await parallel(std::move(calls), deadline);
    if (!admit) {
      // A peek that admits describes the state after its debit; a refused request debits
      // nothing, so its enforced limits read as one refused call reports them: `cost` more
      // remaining (exact for every algorithm; Reset stays the peek's, a little later than
      // the true one).
      for (std::size_t i = 0; i < req.limits.size(); ++i) {
        auto& lo = out.limits[i];
        if (req.limits[i].shadow) continue;
        // (with a lease, the peek took `granted`; a peek writes nothing, so no lease was
        // taken and no refund kept)
        const std::int64_t taken = lo.granted > 0 ? lo.granted : req.limits[i].cost;
        lo.granted = 0;
        if (!lo.admits) continue;
        lo.remaining = std::min(lo.remaining + taken, lo.limit);
      }
      // Refused as step 1 decided. A shadow limit's own outcome is taken from its commit
      // when it arrived (a failed one changes nothing: the request is refused either way).
      for (std::size_t s = 0; s < sent.size(); ++s) {
        if (!second[s]) continue;
        std::size_t j = 0;
        for (const auto i : groups[sent[s]].limits) {
          if (req.limits[i].shadow) out.limits[i] = second[s]->limits.at(j++);
        }
      }
      out.allowed = false;
      co_return out;
    }
    if (auto ec = first_error(second)) {
      if (std::any_of(second.begin(), second.end(), [](const auto& r) { return r && r->allowed; }))
        ++own.split_partial_commits;
      co_await give_back_slots(req, groups, sent, second, deadline);
      co_return ec;
    }
    out.allowed = true;
    for (std::size_t s = 0; s < sent.size(); ++s) {
      merge(out, groups[sent[s]], *second[s]);
      if (!second[s]->allowed) out.allowed = false;
    }
    if (!out.allowed) {
      ++own.split_commit_refusals;
      co_await give_back_slots(req, groups, sent, second, deadline);
    }
    co_return out;
  }

  // Whether limit `l` of `req` can refuse it: not in a settle (it only charges or refunds),
  // and not a concurrency slot's release or renewal (they only act on a slot held).
  static bool can_refuse(const check_request& req, const limiter::limit_check& l) {
    return !req.settle &&
           !(l.algorithm == config::algorithm::concurrency && l.op != limiter::slot_op::acquire);
  }

  // A split check that was not admitted after all (a commit refused, or failed on a node)
  // may have taken concurrency slots in the groups whose commit went through: those are
  // released at once, best effort (one call per slot group, errors ignored: an unreleased
  // slot expires after its slot_ttl), so a request that is not forwarded holds no slot.
  asio::awaitable<void> give_back_slots(const check_request& req,
                                        const std::vector<slot_group>& groups,
                                        const std::vector<std::size_t>& sent,
                                        const std::vector<check_result>& second,
                                        std::chrono::steady_clock::time_point deadline) {
    std::vector<std::pair<std::uint16_t, check_request>> calls;
    for (std::size_t s = 0; s < sent.size(); ++s) {
      if (!second[s] || !second[s]->allowed) continue;
      check_request rel;
      rel.now_ms_override = req.now_ms_override;
      for (const auto i : groups[sent[s]].limits) {
        const auto& l = req.limits[i];
        if (l.algorithm != config::algorithm::concurrency || l.op != limiter::slot_op::acquire)
          continue;
        rel.limits.push_back(l);
        rel.limits.back().op = limiter::slot_op::release;
      }
      if (!rel.limits.empty()) calls.emplace_back(groups[sent[s]].slot, std::move(rel));
    }
    if (calls.empty()) co_return;
    (void)co_await parallel(std::move(calls), deadline);
  }

  void stop() {
    stopped = true;
    refresh_timer.cancel();
    if (auto q = current_query.lock()) q->cancel();
    std::lock_guard lock(nodes_mutex);
    for (auto& [key, store] : nodes) {
      (void)key;
      store->stop();
    }
  }
};

redis_cluster_store::redis_cluster_store(asio::any_io_executor ex, redis_cluster_settings settings)
    : impl_(std::make_shared<impl>(std::move(ex), std::move(settings))) {}

redis_cluster_store::~redis_cluster_store() {
  impl_->stop();
}

asio::awaitable<check_result> redis_cluster_store::check(limiter::check_request req) {
  auto self = impl_;
  co_return co_await self->check(std::move(req));
}

void redis_cluster_store::start() {
  impl_->start();
}

void redis_cluster_store::stop() {
  impl_->stop();
}

// The counters of the connections closed so far, of the nodes' connections and the cluster's
// own, each summed by store_stats::add_counts (every counter of the list, store_counters.hpp).
store_stats redis_cluster_store::stats() const {
  std::lock_guard lock(impl_->nodes_mutex);
  store_stats s = impl_->retired;
  bool connected = !impl_->nodes.empty() &&
                   impl_->counters.covered.load(std::memory_order_relaxed) == cluster_slot_count;
  auto worst = breaker_state::closed;
  for (const auto& [key, store] : impl_->nodes) {
    (void)key;
    const auto n = store->stats();
    s.add_counts(n);
    connected = connected && n.connected;
    if (n.breaker == breaker_state::open ||
        (n.breaker == breaker_state::half_open && worst == breaker_state::closed)) {
      worst = n.breaker;
    }
  }
  s.add_counts(impl_->own.snapshot());
  s.connected = connected;
  s.breaker = worst;
  return s;
}

std::string redis_cluster_store::failure() const {
  std::lock_guard lock(impl_->nodes_mutex);
  if (!impl_->topology_failure.empty()) return impl_->topology_failure;
  for (const auto& [key, store] : impl_->nodes) {
    (void)key;
    if (auto why = store->failure(); !why.empty()) return why;
  }
  return {};
}

std::uint64_t redis_cluster_store::connection_epoch() const {
  std::uint64_t e = impl_->epoch_base;
  for (const auto& [key, store] : impl_->nodes) {
    (void)key;
    e += store->connection_epoch();
  }
  return e;
}

cluster_stats redis_cluster_store::cluster() const {
  const auto& c = impl_->counters;
  const auto& own = impl_->own;
  cluster_stats s;
  s.topology_refreshes = own.topology_refreshes.load(std::memory_order_relaxed);
  s.topology_failures = own.topology_failures.load(std::memory_order_relaxed);
  s.moved = c.moved.load(std::memory_order_relaxed);
  s.asks = c.asks.load(std::memory_order_relaxed);
  s.split_checks = own.split_checks.load(std::memory_order_relaxed);
  s.commit_refusals = own.split_commit_refusals.load(std::memory_order_relaxed);
  s.partial_commits = own.split_partial_commits.load(std::memory_order_relaxed);
  s.masters = c.masters.load(std::memory_order_relaxed);
  s.covered_slots = c.covered.load(std::memory_order_relaxed);
  return s;
}

}  // namespace sluice::store
