// The embedded counter store: the same decisions as lua/token_bucket.lua, computed with the
// reference arithmetic of src/limiter/token_bucket.cpp under per-shard mutexes.
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

#include "sluice/limiter/token_bucket.hpp"

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

struct entry {
  limiter::bucket_state state;
  std::int64_t expires_at_ms = 0;
};

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

  // Lock the shards of every key, in index order, each once.
  std::vector<std::size_t> idx(n);
  for (std::size_t i = 0; i < n; ++i) idx[i] = impl_->shard_of(req.limits[i].key);
  std::vector<std::size_t> order = idx;
  std::sort(order.begin(), order.end());
  order.erase(std::unique(order.begin(), order.end()), order.end());
  std::vector<std::unique_lock<std::mutex>> locks;
  locks.reserve(order.size());
  for (std::size_t s : order) locks.emplace_back(impl_->shards[s].mutex);

  // The clock is read under the locks, so checks on one bucket see non-decreasing time.
  const std::int64_t now =
      req.now_ms_override >= 0 ? req.now_ms_override : impl_->clock();

  // Phase 1: refill and decide (reads only, like the script, so duplicate keys behave alike).
  std::vector<std::int64_t> level(n);
  std::vector<bool> admits(n);
  limiter::check_outcome out;
  out.allowed = true;
  for (std::size_t i = 0; i < n; ++i) {
    const auto& l = req.limits[i];
    auto& sh = impl_->shards[idx[i]];
    const limiter::bucket_state* state = nullptr;
    if (auto it = sh.buckets.find(l.key); it != sh.buckets.end()) {
      if (it->second.expires_at_ms > now) {
        state = &it->second.state;
      } else {
        sh.buckets.erase(it);  // lazy expiry
      }
    }
    level[i] = limiter::refilled_level(state, l.bucket, now);
    admits[i] = level[i] >= l.cost * l.bucket.units_per_token;
    if (!l.shadow && !admits[i]) out.allowed = false;
  }

  // Phase 2: debit (enforced iff allowed; shadow iff it admits alone), write, describe.
  out.limits.reserve(n);
  for (std::size_t i = 0; i < n; ++i) {
    const auto& l = req.limits[i];
    auto& sh = impl_->shards[idx[i]];
    const bool debit = l.shadow ? admits[i] : out.allowed;
    const std::int64_t after = level[i] - (debit ? l.cost * l.bucket.units_per_token : 0);
    if (after >= l.bucket.capacity()) {
      sh.buckets.erase(l.key);  // full == missing (the script DELetes it)
    } else {
      auto& e = sh.buckets[l.key];
      e.state = {after, now};
      e.expires_at_ms = now + limiter::ttl_ms(after, l.bucket);
    }
    out.limits.push_back(limiter::describe(after, l.bucket, l.cost, admits[i]));
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
  if (it == sh.buckets.end() || it->second.expires_at_ms <= now) return std::nullopt;
  return std::make_pair(it->second.state.level, it->second.state.stamp_ms);
}

}  // namespace sluice::store
