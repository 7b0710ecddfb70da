// The embedded counter store: the same decisions as the check script of lua/, computed with the
// reference arithmetic of src/limiter/token_bucket.cpp and src/limiter/window.cpp under
// per-shard mutexes. Every algorithm keeps the state the script keeps, in the same units, and
// expires it after the same time (its Reset), so both stores answer one table identically.
//
// Atomicity: a check locks every shard its keys fall in, in ascending shard index (deduplicated),
// so a multi-limit check is one critical section and two checks can never deadlock. The lock is
// held only for hash lookups and integer arithmetic: O(limits) per check.
//
// Expiry mirrors Redis PEXPIRE: a bucket carries `expires_at` = stamp + time to full; an expired
// entry reads as missing (= full, which is exactly its refilled level then). Entries are
// dropped lazily when touched, and every `sweep_interval` checks one shard, in rotation, is
// swept whole (outside the check's own locks): every idle bucket is gone within
// shard_count * sweep_interval checks of its expiry, at an amortised cost of
// size / (shard_count * sweep_interval) entry visits per check.
#include "sluice/store/memory_store.hpp"

#include <boost/container/small_vector.hpp>

#include "sluice/limiter/token_bucket.hpp"
#include "sluice/limiter/window.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace sluice::store {
namespace {

constexpr std::size_t shard_count = 64;
constexpr std::uint64_t sweep_interval = 1024;

// One key's state. `kind` says which member is meaningful; a key read by another algorithm
// (its limit's algorithm changed on reload) reads as missing, as in the script.
struct entry {
  config::algorithm kind = config::algorithm::token_bucket;
  limiter::bucket_state state;                // token bucket
  limiter::window_counts counts;              // fixed window, sliding window
  std::unique_ptr<limiter::log_entries> log;  // sliding log (allocated only for it)
  std::int64_t expires_at_ms = 0;
};

bool is_window(config::algorithm a) {
  return a == config::algorithm::fixed_window || a == config::algorithm::sliding_window;
}

struct shard {
  mutable std::mutex mutex;
  std::unordered_map<std::string, entry> buckets;

  void sweep(std::int64_t now_ms) {
    std::lock_guard lock(mutex);
    std::erase_if(buckets, [now_ms](const auto& kv) { return kv.second.expires_at_ms <= now_ms; });
  }
};

std::int64_t system_now_ms() {
  using namespace std::chrono;
  return duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count();
}

/// A vector that keeps up to 4 elements inline (a request's few limits).
template <class T>
using small = boost::container::small_vector<T, 4>;

}  // namespace

struct memory_store::impl {
  clock_fn clock;
  std::array<shard, shard_count> shards;
  std::atomic<std::uint64_t> checks{0};

  std::size_t shard_of(const std::string& key) const {
    return std::hash<std::string>{}(key) % shard_count;
  }
};

memory_store::memory_store(clock_fn clock) : impl_(std::make_unique<impl>()) {
  impl_->clock = clock ? std::move(clock) : clock_fn(&system_now_ms);
}

memory_store::~memory_store() = default;

limiter::check_outcome memory_store::decide(const limiter::check_request& req) {
  const std::size_t n = req.limits.size();

  // Lock the shards of every key, in index order, each once. (Small vectors: a request has a
  // few limits, and the decision should not allocate for its bookkeeping.)
  small<std::size_t> idx(n);
  for (std::size_t i = 0; i < n; ++i) idx[i] = impl_->shard_of(req.limits[i].key);
  small<std::size_t> order = idx;
  std::sort(order.begin(), order.end());
  order.erase(std::unique(order.begin(), order.end()), order.end());
  small<std::unique_lock<std::mutex>> locks;
  for (std::size_t s : order) locks.emplace_back(impl_->shards[s].mutex);

  // The clock is read under the locks, so checks on one bucket see non-decreasing time.
  const std::int64_t now = req.now_ms_override >= 0 ? req.now_ms_override : impl_->clock();

  // Phase 1: read and decide (reads only, like the script, so duplicate keys behave alike).
  struct read_state {
    std::int64_t level = 0;                   // token bucket
    limiter::window_counts counts;            // windows
    std::optional<limiter::log_entries> log;  // sliding log, expired entries dropped
    std::int64_t now_eff = 0;                 // windows, log: max(now, the stored state's time)
  };
  small<read_state> rs(n);
  small<bool> admits(n);
  limiter::check_outcome out;
  out.allowed = true;
  out.now_ms = now;
  for (std::size_t i = 0; i < n; ++i) {
    const auto& l = req.limits[i];
    auto& sh = impl_->shards[idx[i]];
    const entry* found = nullptr;
    if (auto it = sh.buckets.find(l.key); it != sh.buckets.end()) {
      if (it->second.expires_at_ms > now) {
        if (it->second.kind == l.algorithm) found = &it->second;
      } else {
        sh.buckets.erase(it);  // lazy expiry
      }
    }
    auto& r = rs[i];
    if (is_window(l.algorithm)) {
      r.counts = limiter::current_counts(found ? &found->counts : nullptr, l.bucket, l.algorithm,
                                         now, r.now_eff);
      admits[i] = limiter::window_admits(r.counts, l.bucket, l.algorithm, r.now_eff, l.cost);
    } else if (l.algorithm == config::algorithm::sliding_log) {
      r.log.emplace();
      if (found && found->log) *r.log = *found->log;
      r.now_eff = limiter::log_now(*r.log, now);
      limiter::expire_log(*r.log, l.bucket, r.now_eff);
      admits[i] = limiter::log_wait(*r.log, l.bucket, r.now_eff, l.cost) == 0;
    } else {
      r.level = limiter::refilled_level(found ? &found->state : nullptr, l.bucket, now);
      admits[i] = r.level >= l.cost * l.bucket.units_per_token;
    }
    if (!l.shadow && !admits[i]) out.allowed = false;
  }

  // Phase 2: debit (enforced iff allowed; shadow iff it admits alone), write, describe.
  // Every state is kept exactly until its Reset (the script's PX), or dropped when Reset is 0.
  out.limits.reserve(n);
  for (std::size_t i = 0; i < n; ++i) {
    const auto& l = req.limits[i];
    auto& sh = impl_->shards[idx[i]];
    auto& r = rs[i];
    const bool debit = l.shadow ? admits[i] : out.allowed;
    if (is_window(l.algorithm)) {
      limiter::window_counts after = r.counts;
      if (debit) after.current += l.cost;
      auto o = limiter::describe_window(r.counts, after, l.bucket, l.algorithm, r.now_eff, l.cost,
                                        admits[i]);
      if (o.reset_ms <= 0) {
        sh.buckets.erase(l.key);
      } else {
        auto& e = sh.buckets[l.key];
        e.kind = l.algorithm;
        e.counts = after;
        e.log.reset();
        e.expires_at_ms = now + o.reset_ms;
      }
      out.limits.push_back(o);
    } else if (l.algorithm == config::algorithm::sliding_log) {
      limiter::log_entries after = *r.log;
      if (debit) after.insert(after.end(), static_cast<std::size_t>(l.cost), r.now_eff);
      auto o = limiter::describe_log(*r.log, after, l.bucket, r.now_eff, l.cost, admits[i]);
      if (after.empty()) {
        sh.buckets.erase(l.key);
      } else {
        auto& e = sh.buckets[l.key];
        e.kind = l.algorithm;
        e.log = std::make_unique<limiter::log_entries>(std::move(after));
        e.expires_at_ms = now + o.reset_ms;
      }
      out.limits.push_back(o);
    } else {
      const std::int64_t after = r.level - (debit ? l.cost * l.bucket.units_per_token : 0);
      if (after >= l.bucket.capacity()) {
        sh.buckets.erase(l.key);  // full == missing (the script DELetes it)
      } else {
        auto& e = sh.buckets[l.key];
        e.kind = l.algorithm;
        e.state = {after, now, l.bucket.units_per_token};
        e.log.reset();
        e.expires_at_ms = now + limiter::ttl_ms(after, l.bucket);
      }
      out.limits.push_back(limiter::describe(after, l.bucket, l.cost, admits[i]));
    }
  }
  locks.clear();
  const std::uint64_t count = impl_->checks.fetch_add(1, std::memory_order_relaxed) + 1;
  if (count % sweep_interval == 0) impl_->shards[(count / sweep_interval) % shard_count].sweep(now);
  return out;
}

boost::asio::awaitable<boost::system::result<limiter::check_outcome>> memory_store::check(
    limiter::check_request req) {
  co_return decide(req);
}

store_stats memory_store::stats() const {
  store_stats s;
  s.checks = impl_->checks.load(std::memory_order_relaxed);
  s.connected = true;
  return s;
}

std::size_t memory_store::size() const {
  const std::int64_t now = impl_->clock();
  std::size_t total = 0;
  for (const auto& sh : impl_->shards) {
    std::lock_guard lock(sh.mutex);
    for (const auto& [key, e] : sh.buckets) total += e.expires_at_ms > now ? 1 : 0;
  }
  return total;
}

std::size_t memory_store::stored_entries() const {
  std::size_t total = 0;
  for (const auto& sh : impl_->shards) {
    std::lock_guard lock(sh.mutex);
    total += sh.buckets.size();
  }
  return total;
}

std::optional<std::pair<std::int64_t, std::int64_t>> memory_store::peek(
    const std::string& key) const {
  const std::int64_t now = impl_->clock();
  const auto& sh = impl_->shards[impl_->shard_of(key)];
  std::lock_guard lock(sh.mutex);
  auto it = sh.buckets.find(key);
  if (it == sh.buckets.end() || it->second.expires_at_ms <= now ||
      it->second.kind != config::algorithm::token_bucket)
    return std::nullopt;
  return std::make_pair(it->second.state.level, it->second.state.stamp_ms);
}

std::optional<std::string> memory_store::peek_state(const std::string& key) const {
  const std::int64_t now = impl_->clock();
  const auto& sh = impl_->shards[impl_->shard_of(key)];
  std::lock_guard lock(sh.mutex);
  auto it = sh.buckets.find(key);
  if (it == sh.buckets.end() || it->second.expires_at_ms <= now) return std::nullopt;
  const entry& e = it->second;
  switch (e.kind) {
    case config::algorithm::fixed_window:
      return std::to_string(e.counts.index) + ":" + std::to_string(e.counts.current);
    case config::algorithm::sliding_window:
      return std::to_string(e.counts.index) + ":" + std::to_string(e.counts.current) + ":" +
             std::to_string(e.counts.previous);
    case config::algorithm::sliding_log: {
      std::string out;
      if (e.log) {
        for (auto t : *e.log) out += (out.empty() ? "" : ",") + std::to_string(t);
      }
      return out;
    }
    default:
      return std::to_string(e.state.level) + " " + std::to_string(e.state.stamp_ms) + " " +
             std::to_string(e.state.units_per_token);
  }
}

}  // namespace sluice::store
