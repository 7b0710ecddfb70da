// SPDX-License-Identifier: Apache-2.0
// Finding the master through Redis Sentinel (sentinel_locator.hpp; the Sentinel client
// guidelines, https://redis.io/docs/reference/sentinel-clients/, steps 1 and 2 and "Subscribe to
// Sentinel events"; step 3, ROLE, is the store's, on its own connection).
//
// A lookup is a chain of short exchanges, one Sentinel at a time: resolve (a name, off the
// worker's thread), connect, AUTH (with a Sentinel password), SENTINEL GET-MASTER-ADDR-BY-NAME,
// all under one timer per Sentinel. Each exchange has a generation number; whichever of the
// reply, the timer or the connection's end comes first closes it and bumps the generation, so
// the others find a stale number and do nothing. The next Sentinel is asked from a posted
// step, never inside a connection callback of the previous one.
//
// The watch is one long-lived subscription to `+switch-master` on every Sentinel, each made
// again (with a growing, jittered delay) whenever it is lost: the Sentinel that ran the
// failover announces the switch first, the others only once they hear of it (their hello
// messages come every 2 s), so listening to all of them follows the fastest. The same switch
// announced again by another Sentinel is not reported twice. Sentinels publish
// `+switch-master` once the new master is promoted; the old master (if alive) is reconfigured
// as a replica right after, and until then still takes writes: the sooner connections leave
// it, the fewer counts a failover forgets.
//
// The list of Sentinels grows past the configured ones (the seeds): every lookup sends
// `SENTINEL SENTINELS <master>` pipelined before `GET-MASTER-ADDR-BY-NAME` on the same
// connection, so the answering Sentinel names the other Sentinels it knows (it learns them from
// their hello messages) at no extra round trip, and the reply comes before the address. A
// Sentinel named for the first time joins the lookup order (after the ones known) and gets its
// own `+switch-master` subscription; one a later answer no longer names is set aside (not asked,
// its subscription closed) until it is named again. The seeds are never set aside, so a gateway
// whose learned Sentinels all went away still starts from its configuration. The list is
// bounded (max_sentinels): a Sentinel naming hundreds of peers cannot grow it without limit.
#include "store/sentinel_locator.hpp"

#include "store/redis_connection.hpp"

#include <hiredis/hiredis.h>

#include <spdlog/spdlog.h>
#include <boost/asio/ip/address.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>

#include <algorithm>
#include <charconv>
#include <optional>
#include <random>
#include <string_view>
#include <utility>
#include <vector>

namespace sluice::store::detail {

namespace asio = boost::asio;
using boost::system::error_code;

namespace {

constexpr std::uintptr_t tag_query = 2;
constexpr std::uintptr_t tag_peers = 3;

// Configured plus learned Sentinels one locator keeps (a Sentinel group has a handful).
constexpr std::size_t max_sentinels = 16;

constexpr std::chrono::milliseconds watch_backoff_first{100};
constexpr std::chrono::milliseconds watch_backoff_max{2000};

std::string_view text_of(const redisReply* r) {
  return r && r->str ? std::string_view(r->str, r->len) : std::string_view();
}

std::optional<std::uint16_t> parse_port(std::string_view s) {
  unsigned v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc{} || end != s.data() + s.size() || v == 0 || v > 65535) return std::nullopt;
  return static_cast<std::uint16_t>(v);
}

}  // namespace

struct sentinel_locator::impl : std::enable_shared_from_this<impl> {
  using kind = located::kind;

  impl(asio::any_io_executor e, sentinel_settings s, switch_handler sw, learned_handler lh)
      : ex(std::move(e)),
        settings(std::move(s)),
        on_switch(std::move(sw)),
        on_learned(std::move(lh)),
        q_timer(ex),
        rng(std::random_device{}()) {
    seeds = settings.sentinels.size();
    for (std::size_t i = 0; i < settings.sentinels.size(); ++i) {
      order.push_back(i);
      active.push_back(true);
      subs.push_back(std::make_unique<subscription>(ex, i));
    }
  }

  asio::any_io_executor ex;
  // settings.sentinels: the seeds (the configured ones, [0, seeds)), then the learned ones.
  sentinel_settings settings;
  switch_handler on_switch;
  learned_handler on_learned;
  std::size_t seeds = 0;
  std::vector<bool> active;        // per Sentinel: asked and watched (seeds: always)
  std::vector<std::size_t> order;  // indices of settings.sentinels; the last to answer first
  bool stopped = false;
  // The address of the last `+switch-master` of our master, returned by the next lookup if it
  // comes within hint_valid (a connection already there leaves it unused).
  std::optional<std::pair<std::string, std::uint16_t>> hint;
  std::chrono::steady_clock::time_point hint_at{};
  static constexpr std::chrono::seconds hint_valid{5};
  std::string last_switch;     // "host:port" of the last switch reported
  std::optional<kind> logged;  // the outcome last logged
  std::string logged_address;  // the address last logged as found

  // The lookup in progress.
  locate_handler handler;
  bool locating = false;
  std::size_t tried = 0;      // Sentinels asked so far in this lookup
  unsigned answered_nil = 0;  // of those, the ones that do not know the name
  std::string detail;
  redis_connection* q_ac = nullptr;  // the exchange's connection (q_io), or null
  std::shared_ptr<redis_connection> q_io;
  asio::steady_timer q_timer;
  std::uint64_t q_gen = 0;

  // The `+switch-master` subscriptions, one per Sentinel (index = its place in the settings).
  struct subscription {
    subscription(const asio::any_io_executor& e, std::size_t i) : index(i), timer(e) {}
    std::size_t index;
    redis_connection* ac = nullptr;  // io, or null
    std::shared_ptr<redis_connection> io;
    asio::steady_timer timer;  // subscription deadline, then the delay before the next try
    std::uint64_t gen = 0;
    bool subscribed = false;
    std::chrono::milliseconds backoff = watch_backoff_first;
    std::string last_failure;
  };
  bool watch_on = false;
  std::vector<std::unique_ptr<subscription>> subs;
  std::mt19937_64 rng;

  subscription* sub_of(const redis_connection* c) {
    for (auto& sub : subs)
      if (sub->ac == c) return sub.get();
    return nullptr;
  }

  std::string name_of(std::size_t index) const {
    const auto& a = settings.sentinels[index];
    return a.host + ":" + std::to_string(a.port);
  }

  static impl* owner(const redis_connection* c) { return static_cast<impl*>(c->data()); }

  // Opens a connection to a Sentinel on this executor (redis_connection: resolution, connect,
  // TLS, AUTH); the caller's timer bounds it.
  std::shared_ptr<redis_connection> open(const sentinel_settings::address& to) {
    // (No deadline of its own: the caller's timer bounds the exchange.)
    return redis_connection::open(
        ex, {to.host, to.port, {}, settings.username, settings.password, settings.tls}, this,
        &impl::on_connect, &impl::on_disconnect);
  }

  // ---- lookup ---------------------------------------------------------------------------------

  void locate(locate_handler h) {
    if (stopped || locating) {
      asio::post(ex, [h = std::move(h)] { h(located{kind::stopped, {}, 0, {}, {}}); });
      return;
    }
    if (hint && std::chrono::steady_clock::now() - hint_at > hint_valid) hint.reset();
    if (hint) {
      // A Sentinel has just announced the new master: use it (the store checks its ROLE).
      located l{kind::found, hint->first, hint->second, "+switch-master", {}};
      hint.reset();
      log_outcome(l);
      asio::post(ex, [h = std::move(h), l = std::move(l)]() mutable { h(std::move(l)); });
      return;
    }
    handler = std::move(h);
    locating = true;
    tried = 0;
    answered_nil = 0;
    detail.clear();
    ask_next();
  }

  void ask_next() {
    if (stopped || !locating) return;
    while (tried < order.size() && !active[order[tried]]) ++tried;  // set aside
    if (tried >= order.size()) {
      located l;
      l.what = answered_nil > 0 ? kind::unknown_master : kind::unreachable;
      l.detail = std::move(detail);
      finish(std::move(l));
      return;
    }
    const auto& s = settings.sentinels[order[tried]];
    const std::uint64_t gen = ++q_gen;
    q_timer.expires_after(settings.timeout);
    q_timer.async_wait([w = weak_from_this(), gen](error_code ec) {
      if (ec) return;
      if (auto self = w.lock(); self && self->q_gen == gen) {
        self->attempt_failed("no answer within " + std::to_string(self->settings.timeout.count()) +
                             " ms");
      }
    });
    q_io = open(s);
    q_ac = q_io.get();
    // The other Sentinels first: their reply comes before the address, which ends the
    // exchange.
    const auto& name = settings.master_name;
    q_ac->command(&impl::on_peers_reply, nullptr, {"SENTINEL", "SENTINELS", name});
    q_ac->command(&impl::on_query_reply, nullptr, {"SENTINEL", "GET-MASTER-ADDR-BY-NAME", name});
  }

  // Closes the exchange with the Sentinel being asked (whatever state it is in).
  void end_query() {
    ++q_gen;
    q_timer.cancel();
    auto c = std::move(q_io);
    q_ac = nullptr;
    if (c) c->close();  // its NULL replies find q_ac changed and do nothing
  }

  // The Sentinel being asked did not name the master: note why, ask the next (posted).
  void attempt_failed(std::string why) {
    if (!locating) return;
    detail += (detail.empty() ? "" : "; ") + name_of(order[tried]) + ": " + why;
    end_query();
    ++tried;
    asio::post(ex, [w = weak_from_this(), gen = q_gen] {
      if (auto self = w.lock(); self && self->q_gen == gen) self->ask_next();
    });
  }

  void found(std::string host, std::uint16_t port) {
    const std::size_t who = order[tried];
    // The Sentinel that answered goes first next time (client guidelines, step 1).
    std::rotate(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(tried),
                order.begin() + static_cast<std::ptrdiff_t>(tried) + 1);
    end_query();
    finish(located{kind::found, std::move(host), port, name_of(who), {}});
  }

  void finish(located l) {
    locating = false;
    log_outcome(l);
    auto h = std::move(handler);
    handler = nullptr;
    if (h) asio::post(ex, [h = std::move(h), l = std::move(l)]() mutable { h(std::move(l)); });
  }

  // One line per change: failures as warnings (the routes' failure policy answers meanwhile),
  // the master found again, or at a new address, as info.
  void log_outcome(const located& l) {
    const auto& name = settings.master_name;
    if (l.what == kind::found) {
      const std::string at = l.host + ":" + std::to_string(l.port);
      if (logged == kind::found && at == logged_address) return;
      spdlog::info("redis sentinel: master '{}' is at {} (from {})", name, at, l.sentinel);
      logged = kind::found;
      logged_address = at;
      return;
    }
    if (l.what == kind::stopped || logged == l.what) return;
    logged = l.what;
    if (l.what == kind::unknown_master) {
      spdlog::warn(
          "redis sentinel: no Sentinel knows master '{}' ({}); the store is not connected, "
          "the routes' on_store_failure applies (repeats not logged)",
          name, l.detail);
    } else {
      spdlog::warn(
          "redis sentinel: no Sentinel answered for master '{}' ({}); the store is not "
          "connected, the routes' on_store_failure applies (repeats not logged)",
          name, l.detail);
    }
  }

  static void on_query_reply(redis_connection* c, const redisReply* r,
                             void* /*privdata*/) noexcept {
    try {
      impl* self = owner(c);
      if (self == nullptr || self->q_ac != c || r == nullptr) return;  // NULL: disconnect path
      const auto* reply = r;
      if (reply->type == REDIS_REPLY_NIL) {
        // This Sentinel does not monitor a master of that name: ask the next one.
        ++self->answered_nil;
        self->attempt_failed("does not know master '" + self->settings.master_name + "'");
        return;
      }
      if (reply->type == REDIS_REPLY_ERROR) {
        self->attempt_failed(std::string(text_of(reply).substr(0, 200)));
        return;
      }
      if (reply->type == REDIS_REPLY_ARRAY && reply->elements == 2 &&
          reply->element[0]->type == REDIS_REPLY_STRING &&
          reply->element[1]->type == REDIS_REPLY_STRING) {
        const auto port = parse_port(text_of(reply->element[1]));
        const auto host = text_of(reply->element[0]);
        if (port && !host.empty()) {
          self->found(std::string(host), *port);
          return;
        }
      }
      self->attempt_failed("unexpected reply to SENTINEL GET-MASTER-ADDR-BY-NAME");
    } catch (...) {
      // No exception crosses a connection callback.
    }
  }

  // `SENTINEL SENTINELS <master>`: an array with one entry per other Sentinel, each a flat
  // list of field names and values (`name`, `ip`, `port`, `runid`, `flags`, ...; Sentinel
  // documentation, "Sentinel API"). An error (the name is unknown) teaches nothing; the address
  // query after it says what the Sentinel knows.
  static void on_peers_reply(redis_connection* c, const redisReply* r,
                             void* /*privdata*/) noexcept {
    try {
      impl* self = owner(c);
      if (self == nullptr || self->q_ac != c || r == nullptr || !self->locating) return;
      const auto* reply = r;
      if (reply->type != REDIS_REPLY_ARRAY) return;
      std::vector<sentinel_settings::address> named;
      for (std::size_t i = 0; i < reply->elements && named.size() < max_sentinels; ++i) {
        const redisReply* e = reply->element[i];
        if (e == nullptr || e->type != REDIS_REPLY_ARRAY) continue;
        std::string_view ip;
        std::optional<std::uint16_t> port;
        for (std::size_t k = 0; k + 1 < e->elements; k += 2) {
          const auto field = text_of(e->element[k]);
          if (field == "ip") ip = text_of(e->element[k + 1]);
          if (field == "port") port = parse_port(text_of(e->element[k + 1]));
        }
        if (!ip.empty() && port) named.push_back({std::string(ip), *port});
      }
      // Subscriptions are made and closed from a posted step, never inside a connection callback.
      asio::post(self->ex, [w = self->weak_from_this(), named = std::move(named),
                            from = self->order[self->tried]] {
        if (auto me = w.lock(); me && !me->stopped) me->learn(named, from);
      });
    } catch (...) {
      // No exception crosses a connection callback.
    }
  }

  std::optional<std::size_t> index_of(const sentinel_settings::address& a) const {
    for (std::size_t i = 0; i < settings.sentinels.size(); ++i)
      if (settings.sentinels[i].host == a.host && settings.sentinels[i].port == a.port) return i;
    return std::nullopt;
  }

  // The Sentinels `from` names besides itself: learned ones it names are asked and watched,
  // learned ones it no longer names are set aside, new ones are added (up to max_sentinels).
  void learn(const std::vector<sentinel_settings::address>& named, std::size_t from) {
    std::vector<bool> named_now(settings.sentinels.size(), false);
    std::size_t added = 0;
    std::string added_text;
    for (const auto& a : named) {
      auto i = index_of(a);
      if (!i) {
        if (settings.sentinels.size() >= max_sentinels) continue;
        i = settings.sentinels.size();
        settings.sentinels.push_back(a);
        active.push_back(false);
        named_now.push_back(false);
        order.push_back(*i);
        subs.push_back(std::make_unique<subscription>(ex, *i));
        ++added;
        added_text += (added_text.empty() ? "" : ", ") + name_of(*i);
      }
      named_now[*i] = true;
    }
    for (std::size_t i = seeds; i < settings.sentinels.size(); ++i) {
      const bool keep = named_now[i] || i == from;
      if (keep == active[i]) continue;
      active[i] = keep;
      if (keep) {
        if (watch_on) subscribe(*subs[i]);
      } else {
        spdlog::info(
            "redis sentinel: {} no longer names Sentinel {} for master '{}': set aside (not "
            "asked, not watched) until a Sentinel names it again",
            name_of(from), name_of(i), settings.master_name);
        close_subscription(*subs[i]);
      }
    }
    if (added > 0) {
      spdlog::info("redis sentinel: learned {} Sentinel(s) of master '{}' from {}: {}", added,
                   settings.master_name, name_of(from), added_text);
      if (on_learned) on_learned(added);
    }
  }

  // The connection failed (resolution, connect, TLS, AUTH) or was lost: forget it first.
  static void on_connect(redis_connection* c, bool ok, const std::string& why) noexcept {
    try {
      impl* self = owner(c);
      if (self == nullptr || ok) return;
      self->gone(c, why);
    } catch (...) {
      // No exception crosses a connection callback.
    }
  }

  static void on_disconnect(redis_connection* c, const std::string& why) noexcept {
    try {
      impl* self = owner(c);
      if (self == nullptr) return;
      self->gone(c, "connection lost: " + why);
    } catch (...) {
      // No exception crosses a connection callback.
    }
  }

  void gone(const redis_connection* c, const std::string& why) {
    if (c == q_ac) {
      q_ac = nullptr;
      q_io.reset();
      attempt_failed(why);
    } else if (auto* sub = c != nullptr ? sub_of(c) : nullptr) {
      sub->ac = nullptr;
      sub->io.reset();
      watch_lost(*sub, why);
    }
  }

  // ---- watch ----------------------------------------------------------------------------------

  void watch() {
    if (watch_on || stopped) return;
    watch_on = true;
    for (auto& sub : subs)
      if (active[sub->index]) subscribe(*sub);
  }

  void subscribe(subscription& sub) {
    if (stopped || !active[sub.index]) return;
    const auto& s = settings.sentinels[sub.index];
    const std::uint64_t gen = ++sub.gen;
    sub.timer.expires_after(settings.timeout);
    sub.timer.async_wait([w = weak_from_this(), &sub, gen](error_code ec) {
      if (ec) return;
      if (auto self = w.lock(); self && sub.gen == gen && !sub.subscribed) {
        self->watch_lost(
            sub, "no answer within " + std::to_string(self->settings.timeout.count()) + " ms");
      }
    });
    sub.io = open(s);
    sub.ac = sub.io.get();
    sub.ac->subscribe(&impl::on_watch_message, nullptr, "+switch-master");
  }

  // Every reply on a subscription: the SUBSCRIBE confirmation, then one per message.
  static void on_watch_message(redis_connection* c, const redisReply* r,
                               void* /*privdata*/) noexcept {
    try {
      impl* self = owner(c);
      subscription* sub = self != nullptr ? self->sub_of(c) : nullptr;
      if (sub == nullptr || r == nullptr) return;
      const auto* reply = r;
      if (reply->type == REDIS_REPLY_ERROR) {
        self->watch_lost(*sub, "SUBSCRIBE failed: " + std::string(text_of(reply).substr(0, 200)));
        return;
      }
      if (reply->type != REDIS_REPLY_ARRAY || reply->elements < 3) return;
      const auto what = text_of(reply->element[0]);
      if (what == "subscribe") {
        self->subscribed_on(*sub);
      } else if (what == "message") {
        self->message(text_of(reply->element[2]));
      }
    } catch (...) {
      // No exception crosses a connection callback.
    }
  }

  void subscribed_on(subscription& sub) {
    sub.subscribed = true;
    sub.timer.cancel();
    sub.backoff = watch_backoff_first;
    if (!sub.last_failure.empty()) {
      spdlog::info("redis sentinel: watching +switch-master on {} (after: {})", name_of(sub.index),
                   sub.last_failure);
      sub.last_failure.clear();
    } else {
      spdlog::debug("redis sentinel: watching +switch-master on {}", name_of(sub.index));
    }
  }

  // `<master-name> <old-ip> <old-port> <new-ip> <new-port>` (Sentinel documentation,
  // "Pub/Sub messages").
  void message(std::string_view payload) {
    std::vector<std::string_view> words;
    while (!payload.empty() && words.size() < 6) {
      const auto sp = payload.find(' ');
      words.push_back(payload.substr(0, sp));
      payload = sp == std::string_view::npos ? std::string_view() : payload.substr(sp + 1);
    }
    if (words.size() != 5 || words[0] != settings.master_name) return;
    const auto port = parse_port(words[4]);
    if (!port || words[3].empty()) return;
    std::string host(words[3]);
    const std::string to = host + ":" + std::to_string(*port);
    if (to == last_switch) return;  // the same switch, from another Sentinel
    last_switch = to;
    spdlog::info("redis sentinel: +switch-master '{}': {}:{} -> {}", settings.master_name, words[1],
                 words[2], to);
    hint.emplace(host, *port);
    hint_at = std::chrono::steady_clock::now();
    if (on_switch) {
      asio::post(ex, [w = weak_from_this(), host = std::move(host), p = *port] {
        if (auto self = w.lock(); self && !self->stopped && self->on_switch)
          self->on_switch(host, p);
      });
    }
  }

  // A subscription is gone (or never came up): make it again after a jittered delay.
  void watch_lost(subscription& sub, std::string why) {
    if (stopped || !active[sub.index]) return;
    const bool was_subscribed = sub.subscribed;
    sub.subscribed = false;
    ++sub.gen;
    sub.ac = nullptr;
    if (auto c = std::move(sub.io)) c->close();
    if (why != sub.last_failure || was_subscribed) {
      spdlog::warn(
          "redis sentinel: +switch-master subscription on {} {}: {} (made again with backoff; "
          "repeats not logged)",
          name_of(sub.index), was_subscribed ? "lost" : "failed", why);
      sub.last_failure = std::move(why);
    }
    std::uniform_int_distribution<std::int64_t> d(sub.backoff.count() / 2, sub.backoff.count());
    sub.timer.expires_after(std::chrono::milliseconds(d(rng)));
    sub.backoff = std::min(sub.backoff * 2, watch_backoff_max);
    sub.timer.async_wait([w = weak_from_this(), &sub, gen = sub.gen](error_code ec) {
      if (ec) return;
      if (auto self = w.lock(); self && sub.gen == gen) self->subscribe(sub);
    });
  }

  // Closes a subscription and whatever attempt or delay of it is pending.
  void close_subscription(subscription& sub) {
    ++sub.gen;
    sub.timer.cancel();
    sub.subscribed = false;
    sub.backoff = watch_backoff_first;
    sub.last_failure.clear();
    sub.ac = nullptr;
    if (auto c = std::move(sub.io)) c->close();
  }

  void stop() {
    if (stopped) return;
    if (locating) finish(located{kind::stopped, {}, 0, {}, {}});
    stopped = true;
    end_query();
    for (auto& sub : subs) close_subscription(*sub);
  }
};

sentinel_locator::sentinel_locator(asio::any_io_executor ex, sentinel_settings settings,
                                   switch_handler on_switch, learned_handler on_learned)
    : impl_(std::make_shared<impl>(std::move(ex), std::move(settings), std::move(on_switch),
                                   std::move(on_learned))) {}

sentinel_locator::~sentinel_locator() {
  impl_->stop();
}

void sentinel_locator::locate(locate_handler h) {
  impl_->locate(std::move(h));
}

void sentinel_locator::watch() {
  impl_->watch();
}

void sentinel_locator::stop() {
  impl_->stop();
}

std::size_t sentinel_locator::known() const {
  std::size_t n = 0;
  for (const bool a : impl_->active) n += a ? 1 : 0;
  return n;
}

std::size_t sentinel_locator::watching() const {
  std::size_t n = 0;
  for (const auto& sub : impl_->subs) n += sub->subscribed ? 1 : 0;
  return n;
}

}  // namespace sluice::store::detail
