// SPDX-License-Identifier: Apache-2.0
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
// dropped lazily when touched, and an incremental sweep runs beside the checks: every
// `sweep_interval` checks, the next `sweep_slots` slots of the shards' hash tables, one shard
// after the other (outside the check's own locks), drop what has expired in them. A check so pays
// about one entry visit whatever the store's size, and no sweep holds a shard longer than
// `sweep_slots` visits (a whole-shard sweep every 1,024 checks cost 68 visits per check and a
// 20 ms stall at 4.5 million buckets: bench/RESULTS.md, the key sweep); an idle bucket is gone
// within about size × sweep_interval ÷ sweep_slots checks of its expiry (one pass over every
// shard's table), 10,000 checks for 10,000 buckets.
//
// Bound (store.max_buckets): each shard holds at most max_buckets / shards entries (a bound
// under 1,024 uses fewer shards, at least 16 entries each, so the total is within
// shards - 1 of max_buckets and never above it). A check
// that must create an entry in a full shard makes room first, in the shard it already holds
// locked (no other lock is taken, so the lock order stands):
//   1. expired entries: when the shard may hold one (a lower bound of its entries' expiry has
//      passed) and at least cap/8 entries were created since its last sweep, the shard is
//      swept whole: at most 8 entry visits per created entry, amortised;
//   2. otherwise (or if the sweep freed nothing) the entry with the earliest expiry among
//      `eviction_samples` sampled ones is evicted, as Redis approximates LRU by sampling
//      (https://redis.io/docs/latest/develop/reference/eviction/). The earliest expiry is an
//      expired entry if one was sampled, else the token bucket nearest to full (its expiry is
//      the time it is full again), the window nearest to its end, the log nearest to empty:
//      the state whose loss changes the least. A key of the check itself is never evicted.
// So a created entry costs O(eviction_samples) at the bound, never a scan of the whole store.
#include "sluice/store/memory_store.hpp"

#include "sluice/config/algorithm_kind.hpp"
#include "sluice/errc.hpp"

#include <boost/container/small_vector.hpp>

#include "sluice/limiter/block.hpp"
#include "sluice/limiter/calendar.hpp"
#include "sluice/limiter/concurrency.hpp"
#include "sluice/limiter/token_bucket.hpp"
#include "sluice/limiter/window.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <limits>
#include <mutex>
#include <stdexcept>
#include <unordered_map>
#include <vector>

namespace sluice::store {
namespace {

constexpr std::size_t shard_count = 64;
constexpr std::uint64_t sweep_interval = 256;
// Hash-table slots one step of the incremental sweep visits (a slot holds about one entry: the
// table's load factor is at most 1).
constexpr std::size_t sweep_slots = 256;
// Entries sampled per eviction (Redis's maxmemory-samples default is 5): the evicted entry is
// the earliest-expiring of 8, i.e. from the earliest ninth of its shard on average. A fresh
// key at a 100,000-bucket bound costs 1.42 µs against 1.40 µs with no bound
// (bench/RESULTS.md, "Bounded memory store").
constexpr int eviction_samples = 8;

// One key's state. `kind` says which member is meaningful; a key read by another algorithm
// (its limit's algorithm changed on reload) reads as missing, as in the script.
struct entry {
  config::algorithm kind = config::algorithm::token_bucket;
  limiter::bucket_state state;                // token bucket
  limiter::window_counts counts;              // fixed window, sliding window, calendar
  std::unique_ptr<limiter::log_entries> log;  // sliding log (allocated only for it)
  std::unique_ptr<limiter::slot_set> slots;   // concurrency (allocated only for it)
  std::int64_t expires_at_ms = 0;             // (a block: its end)
  bool block = false;  // a penalty box's block (limiter::block_key() of its bucket's key)
};

// The algorithms whose state is window_counts: the window algorithms but the sliding log,
// which keeps its stamps (a calendar's `previous` is its zone tag).
bool keeps_window_counts(config::algorithm a) {
  return config::is_window_algorithm(a) && a != config::algorithm::sliding_log;
}

struct shard {
  mutable std::mutex mutex;
  std::unordered_map<std::string, entry> buckets;
  // Guarded by `mutex`:
  std::int64_t min_expires_ms = std::numeric_limits<std::int64_t>::max();  // ≤ every entry's
  std::uint64_t created_since_sweep = 0;
  std::uint64_t evictions = 0;  // live entries evicted at the bound
  std::uint64_t rng = 0;        // xorshift64 state of the eviction sampling (never 0)
  std::size_t cursor = 0;       // the next hash-table slot the incremental sweep visits

  // Part of a step of the incremental sweep: drops the expired entries of up to `slots` slots
  // of the hash table from the cursor on; returns the slots visited, and sets `finished` when
  // the cursor passed the last slot (it starts from the first again: a pass is done).
  // min_expires_ms stays a lower bound (erasing never lowers what it bounds).
  std::size_t sweep_some(std::int64_t now_ms, std::size_t slots, bool& finished) {
    std::lock_guard lock(mutex);
    const std::size_t n = buckets.bucket_count();
    if (cursor >= n) cursor = 0;
    const std::size_t end = std::min(n, cursor + slots);
    const std::size_t visited = end - cursor;
    for (; cursor < end; ++cursor) {
      // Erasing one entry leaves the other entries of the slot valid; the slot is read again
      // from its start after each erase (its list changed), so expired ones are found in turn.
      for (auto it = buckets.cbegin(cursor); it != buckets.cend(cursor);) {
        if (it->second.expires_at_ms > now_ms) {
          ++it;
          continue;
        }
        buckets.erase(buckets.find(it->first));
        it = buckets.cbegin(cursor);
      }
    }
    finished = cursor >= n;
    if (finished) cursor = 0;
    return visited;
  }

  // Drops every expired entry; min_expires_ms becomes exact.
  void sweep_locked(std::int64_t now_ms) {
    std::int64_t least = std::numeric_limits<std::int64_t>::max();
    std::erase_if(buckets, [now_ms, &least](const auto& kv) {
      if (kv.second.expires_at_ms <= now_ms) return true;
      least = std::min(least, kv.second.expires_at_ms);
      return false;
    });
    min_expires_ms = least;
    created_since_sweep = 0;
  }

  std::uint64_t next_random() {  // xorshift64 (Marsaglia 2003)
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
  }

  // The entry for `key`, created if missing; at the bound `cap`, room is made first (see the
  // file comment). `req`'s keys are never evicted.
  entry& slot(const std::string& key, std::int64_t now_ms, std::size_t cap,
              const limiter::check_request& req) {
    if (auto it = buckets.find(key); it != buckets.end()) return it->second;
    if (buckets.size() >= cap) make_room(now_ms, cap, req);
    ++created_since_sweep;
    return buckets.try_emplace(key).first->second;
  }

  void make_room(std::int64_t now_ms, std::size_t cap, const limiter::check_request& req) {
    if (min_expires_ms <= now_ms && created_since_sweep >= cap / 8) {
      sweep_locked(now_ms);
      if (buckets.size() < cap) return;
    }
    // The request's own entries are never evicted to make room for it: its buckets, and the
    // blocks of its limits with a penalty box (a block in force must hold, docs: "The penalty
    // box").
    const auto of_request = [&req](const std::string& k) {
      return std::any_of(req.limits.begin(), req.limits.end(), [&k](const limiter::limit_check& l) {
        return l.key == k || (l.block_ms > 0 && limiter::block_key(l.key) == k);
      });
    };
    // Sample `eviction_samples` consecutive entries of the map's node list from a random
    // hash bucket on: the order is the hash's, unrelated to expiry, and each further entry
    // is one pointer away (one cache miss, no bucket-array lookup per sample). Probes of
    // empty buckets are bounded.
    const std::size_t n = buckets.bucket_count();
    auto it = buckets.end();
    for (int probe = 0; probe < 8 * eviction_samples && it == buckets.end(); ++probe) {
      const std::size_t b = next_random() % n;
      if (buckets.begin(b) != buckets.end(b)) it = buckets.find(buckets.begin(b)->first);
    }
    if (it == buckets.end()) it = buckets.begin();
    auto victim = buckets.end();
    std::int64_t victim_expires = std::numeric_limits<std::int64_t>::max();
    for (int seen = 0; seen < eviction_samples && seen < static_cast<int>(buckets.size()); ++seen) {
      if (it->second.expires_at_ms < victim_expires && !of_request(it->first)) {
        victim = it;
        victim_expires = it->second.expires_at_ms;
      }
      if (++it == buckets.end()) it = buckets.begin();
    }
    if (victim == buckets.end()) return;  // only this check's keys: over by at most its limits
    if (victim_expires > now_ms) ++evictions;
    buckets.erase(victim);
  }
};

// The default clock: steady_clock, offset to the Unix epoch by system_clock once. The offset
// is kept in nanoseconds and the sum floored to ms once, as Redis floors TIME: flooring the
// anchor and the elapsed time apart would run the clock up to 2 ms behind the wall clock, and
// a window would then close up to 2 ms late.
memory_store::clock_fn anchored_clock() {
  using namespace std::chrono;
  const auto steady0 = steady_clock::now();
  const std::int64_t epoch0_ns =
      duration_cast<nanoseconds>(system_clock::now().time_since_epoch()).count();
  return [steady0, epoch0_ns] {
    const std::int64_t now_ns =
        epoch0_ns + duration_cast<nanoseconds>(steady_clock::now() - steady0).count();
    return now_ns / 1'000'000;
  };
}

/// A vector that keeps up to 4 elements inline (a request's few limits).
template <class T>
using small = boost::container::small_vector<T, 4>;

using block_event = limiter::limit_outcome::block_event;

// A limit's block as a check found it: its end (0: none in force) and what the check did.
struct limiter_block {
  std::int64_t end = 0;
  block_event event = block_event::none;
};

// lua/block.lua's block_open: the block of bucket `bucket_key` at `now` (an ended one is
// dropped, as Redis expires it); with `lift` it is deleted, and reported lifted if in force.
limiter_block open_block(shard& sh, const std::string& bucket_key, std::int64_t now, bool lift) {
  limiter_block b;
  const auto it = sh.buckets.find(limiter::block_key(bucket_key));
  if (it == sh.buckets.end()) return b;
  const bool live = it->second.block && it->second.expires_at_ms > now;
  if (live) b.end = it->second.expires_at_ms;
  if (lift || !live) sh.buckets.erase(it);
  if (lift && live) b.event = block_event::lifted;
  return b;
}

// lua/block.lua's block_close: a refusal by limit `l` with no block in force starts one
// (stored when `write`); the block in force is applied to the limit's outcome `o`.
void close_block(shard& sh, const limiter::limit_check& l, std::int64_t now, bool refused,
                 bool write, limiter_block& b, limiter::limit_outcome& o, std::size_t cap,
                 const limiter::check_request& req) {
  std::int64_t left = b.event == block_event::none && b.end > 0 ? b.end - now : 0;
  if (left == 0 && refused) {
    b.end = now + l.block_ms;
    b.event = block_event::started;
    left = l.block_ms;
    if (write) {
      auto& e = sh.slot(limiter::block_key(l.key), now, cap, req);
      e.kind = config::algorithm::token_bucket;
      e.block = true;
      e.log.reset();
      e.expires_at_ms = b.end;
      sh.min_expires_ms = std::min(sh.min_expires_ms, e.expires_at_ms);
    }
  }
  if (left > 0) limiter::apply_block(o, left);
  o.block_end_ms = b.end;
  o.block = b.event;
}

}  // namespace

struct memory_store::impl {
  clock_fn clock;
  std::array<shard, shard_count> shards;
  std::size_t shards_used = shard_count;  // max_buckets / 16, in 1 .. shard_count
  std::size_t cap = 0;                    // entries per shard
  std::atomic<std::uint64_t> checks{0};
  std::mutex sweep_mutex;       // one sweep step at a time (a step that finds it held is skipped)
  std::size_t sweep_shard = 0;  // guarded by sweep_mutex: the shard the sweep is passing over

  // One step of the incremental sweep (file comment): `sweep_slots` slots, over the shard the
  // sweep is on and, when its pass ends within the step, the next ones, so a pass over the
  // whole store takes its total slots ÷ sweep_slots steps however the keys fall in shards.
  void sweep_step(std::int64_t now_ms) {
    std::unique_lock lock(sweep_mutex, std::try_to_lock);
    if (!lock) return;
    std::size_t budget = sweep_slots;
    for (std::size_t k = 0; k < shards_used && budget > 0; ++k) {
      bool finished = false;
      budget -= shards[sweep_shard].sweep_some(now_ms, budget, finished);
      if (!finished) break;
      sweep_shard = (sweep_shard + 1) % shards_used;
    }
  }

  // By the key up to its last '}' (the whole of a bucket key), so that a bucket's block
  // (limiter::block_key()) lives in its bucket's shard, as both share a hash slot in Redis:
  // a check locks only its buckets' shards.
  std::size_t shard_of(std::string_view key) const {
    const auto tag_end = key.rfind('}');
    if (tag_end != std::string_view::npos) key = key.substr(0, tag_end + 1);
    return std::hash<std::string_view>{}(key) % shards_used;
  }

  // A settle (lua/check.lua's settle, tb_settle, window_settle): each limit in order, read,
  // charged or refunded, written — under the locks decide() holds on the shards of `idx`.
  limiter::check_outcome settle_locked(const limiter::check_request& req,
                                       const small<std::size_t>& idx, std::int64_t now) {
    limiter::check_outcome out;
    out.allowed = true;
    out.now_ms = now;
    out.limits.reserve(req.limits.size());
    for (std::size_t i = 0; i < req.limits.size(); ++i) {
      const auto& l = req.limits[i];
      auto& sh = shards[idx[i]];
      const entry* found = nullptr;
      if (auto it = sh.buckets.find(l.key); it != sh.buckets.end()) {
        if (it->second.expires_at_ms > now) {
          if (it->second.kind == l.algorithm) found = &it->second;
        } else {
          sh.buckets.erase(it);  // lazy expiry
        }
      }
      if (keeps_window_counts(l.algorithm)) {
        std::int64_t now_eff = now;
        const auto counts = limiter::current_counts(found ? &found->counts : nullptr, l.bucket,
                                                    l.algorithm, now, now_eff);
        const auto after =
            limiter::settled_counts(counts, l.bucket, l.algorithm, l.settle, l.taken_at_ms);
        const bool admits = limiter::window_admits(after, l.bucket, l.algorithm, now_eff, l.cost);
        auto o =
            limiter::describe_window(after, after, l.bucket, l.algorithm, now_eff, l.cost, admits);
        if (o.reset_ms <= 0) {
          sh.buckets.erase(l.key);
        } else {
          auto& e = sh.slot(l.key, now, cap, req);
          e.kind = l.algorithm;
          e.counts = after;
          e.log.reset();
          e.expires_at_ms = now + o.reset_ms;
          sh.min_expires_ms = std::min(sh.min_expires_ms, e.expires_at_ms);
        }
        out.limits.push_back(o);
        continue;
      }
      const std::int64_t level =
          limiter::refilled_level(found ? &found->state : nullptr, l.bucket, now);
      const std::int64_t after = limiter::settled_level(level, l.bucket, l.settle);
      if (after >= l.bucket.capacity()) {
        sh.buckets.erase(l.key);  // full == missing (the script DELetes it)
      } else {
        auto& e = sh.slot(l.key, now, cap, req);
        e.kind = l.algorithm;
        e.state = {after, now, l.bucket.units_per_token};
        e.log.reset();
        e.expires_at_ms = now + limiter::ttl_ms(after, l.bucket);
        sh.min_expires_ms = std::min(sh.min_expires_ms, e.expires_at_ms);
      }
      out.limits.push_back(
          limiter::describe(after, l.bucket, l.cost, after >= l.cost * l.bucket.units_per_token));
    }
    return out;
  }
};

memory_store::memory_store(clock_fn clock, std::uint64_t max_buckets)
    : impl_(std::make_unique<impl>()) {
  if (max_buckets == 0) throw std::invalid_argument("memory_store: max_buckets must be at least 1");
  impl_->clock = clock ? std::move(clock) : anchored_clock();
  // At least 16 entries a shard when the bound allows (an eviction samples within one shard).
  impl_->shards_used =
      static_cast<std::size_t>(std::clamp<std::uint64_t>(max_buckets / 16, 1, shard_count));
  impl_->cap = static_cast<std::size_t>(max_buckets / impl_->shards_used);
  for (std::size_t i = 0; i < shard_count; ++i)
    impl_->shards[i].rng = 0x9e3779b97f4a7c15ULL * (i + 1);
}

memory_store::~memory_store() = default;

limiter::check_outcome memory_store::decide(const limiter::check_request& req) {
  const std::size_t n = req.limits.size();

  // Lock the shards of every key, in index order, each once. (Small vectors: a request has a
  // few limits, and the decision should not allocate for its bookkeeping.)
  small<std::size_t> idx(n);
  for (std::size_t i = 0; i < n; ++i) idx[i] = impl_->shard_of(req.limits[i].key);
  small<std::size_t> order = idx;
  if (n > 1) {
    std::sort(order.begin(), order.end());
    order.erase(std::unique(order.begin(), order.end()), order.end());
  }
  small<std::unique_lock<std::mutex>> locks;
  for (std::size_t s : order) locks.emplace_back(impl_->shards[s].mutex);

  // The clock is read under the locks, so checks on one bucket see non-decreasing time.
  const std::int64_t now = req.now_ms_override >= 0 ? req.now_ms_override : impl_->clock();
  if (req.settle) return impl_->settle_locked(req, idx, now);

  // Phase 1: read and decide (reads only, like the script, so duplicate keys behave alike).
  struct read_state {
    std::int64_t level = 0;                   // token bucket
    limiter::window_counts counts;            // windows
    std::optional<limiter::log_entries> log;  // sliding log, expired entries dropped
    std::optional<limiter::slot_set> slots;   // concurrency, expired slots dropped
    std::int64_t now_eff = 0;                 // windows, log: max(now, the stored state's time)
    limiter::calendar_period period;          // calendar: the period decided in
  };
  small<read_state> rs(n);
  small<bool> admits(n);
  // Penalty boxes (lua/block.lua): per limit with a block, its end and event.
  small<limiter_block> blocks(n);
  // A lone limit's entry as phase 1 found it (live, of any kind), so phase 2 does not look
  // its key up again: nothing in between inserts, and what may be erased (an ended block,
  // another key) leaves this iterator valid (an unordered_map erase invalidates only the
  // erased element's). (With several limits, one may erase a key another shares.)
  using entry_at = std::unordered_map<std::string, entry>::iterator;
  std::optional<entry_at> lone;
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
        if (n == 1) lone = it;
      } else {
        sh.buckets.erase(it);  // lazy expiry
      }
    }
    auto& r = rs[i];
    if (l.algorithm == config::algorithm::calendar) {
      r.counts = limiter::calendar_counts(found ? &found->counts : nullptr, l.bucket, now, r.period,
                                          r.now_eff);
      admits[i] = r.counts.current + l.cost <= l.bucket.window_limit;
    } else if (keeps_window_counts(l.algorithm)) {
      r.counts = limiter::current_counts(found ? &found->counts : nullptr, l.bucket, l.algorithm,
                                         now, r.now_eff);
      admits[i] = limiter::window_admits(r.counts, l.bucket, l.algorithm, r.now_eff, l.cost);
    } else if (l.algorithm == config::algorithm::sliding_log) {
      r.log.emplace();
      if (found && found->log) *r.log = *found->log;
      r.now_eff = limiter::log_now(*r.log, now);
      limiter::expire_log(*r.log, l.bucket, r.now_eff);
      admits[i] = limiter::log_wait(*r.log, l.bucket, r.now_eff, l.cost) == 0;
    } else if (l.algorithm == config::algorithm::concurrency) {
      r.slots.emplace();
      if (found && found->slots) *r.slots = *found->slots;
      limiter::expire_slots(*r.slots, now);
      admits[i] = limiter::slots_admit(*r.slots, l);
    } else {
      r.level = limiter::refilled_level(found ? &found->state : nullptr, l.bucket, now);
      r.level = limiter::refunded_level(r.level, l.bucket, l.refund);
      admits[i] = r.level >= l.cost * l.bucket.units_per_token;
    }
    if (l.block_ms > 0 && !l.shadow) {
      blocks[i] = open_block(sh, l.key, now, req.lift_blocks);
      if (blocks[i].end > 0 && blocks[i].event == limiter::limit_outcome::block_event::none)
        admits[i] = false;
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
    if (keeps_window_counts(l.algorithm)) {
      limiter::window_counts after = r.counts;
      if (debit) after.current += l.cost;
      auto o = l.algorithm == config::algorithm::calendar
                   ? limiter::describe_calendar(r.counts, after, l.bucket, r.period, r.now_eff,
                                                l.cost, admits[i])
                   : limiter::describe_window(r.counts, after, l.bucket, l.algorithm, r.now_eff,
                                              l.cost, admits[i]);
      if (req.peek) {
        // (decided as if: nothing written)
      } else if (o.reset_ms <= 0) {
        sh.buckets.erase(l.key);
      } else {
        auto& e = sh.slot(l.key, now, impl_->cap, req);
        e.kind = l.algorithm;
        e.counts = after;
        e.log.reset();
        e.slots.reset();
        e.expires_at_ms = now + o.reset_ms;
        sh.min_expires_ms = std::min(sh.min_expires_ms, e.expires_at_ms);
      }
      out.limits.push_back(o);
    } else if (l.algorithm == config::algorithm::sliding_log) {
      limiter::log_entries after = *r.log;
      if (debit) after.insert(after.end(), static_cast<std::size_t>(l.cost), r.now_eff);
      auto o = limiter::describe_log(*r.log, after, l.bucket, r.now_eff, l.cost, admits[i]);
      if (req.peek) {
        // (decided as if: nothing written)
      } else if (after.empty()) {
        sh.buckets.erase(l.key);
      } else {
        auto& e = sh.slot(l.key, now, impl_->cap, req);
        e.kind = l.algorithm;
        e.log = std::make_unique<limiter::log_entries>(std::move(after));
        e.slots.reset();
        e.expires_at_ms = now + o.reset_ms;
        sh.min_expires_ms = std::min(sh.min_expires_ms, e.expires_at_ms);
      }
      out.limits.push_back(o);
    } else if (l.algorithm == config::algorithm::concurrency) {
      // A release or renew acts whatever the decision; an acquire takes a slot iff debited.
      // The set is read again as this check's earlier limits left it: a batch of releases or
      // renewals names one key once per slot, and each must see the others' writes (the
      // script's ZADD and ZREM compose the same way).
      if (auto it = sh.buckets.find(l.key);
          it != sh.buckets.end() && it->second.kind == l.algorithm && it->second.slots) {
        *r.slots = *it->second.slots;
        limiter::expire_slots(*r.slots, now);
      } else {
        r.slots->clear();
      }
      limiter::slot_set after = *r.slots;
      const bool held = limiter::apply_slot_op(after, l, debit, now);
      // (A release or renew never refuses: no Retry-After; its admits says whether the slot
      // was held.)
      const bool acquire = l.op == limiter::slot_op::acquire;
      auto o = limiter::describe_slots(*r.slots, after, l.bucket, now, !acquire || admits[i]);
      if (!acquire) o.admits = held;
      if (req.peek) {
        // (decided as if: nothing written)
      } else if (after.empty()) {
        sh.buckets.erase(l.key);
      } else {
        auto& e = sh.slot(l.key, now, impl_->cap, req);
        e.kind = l.algorithm;
        e.expires_at_ms = now + limiter::slots_ttl_ms(after, now);
        e.slots = std::make_unique<limiter::slot_set>(std::move(after));
        e.log.reset();
        sh.min_expires_ms = std::min(sh.min_expires_ms, e.expires_at_ms);
      }
      out.limits.push_back(o);
    } else {
      const std::int64_t taken =
          debit ? limiter::leased_units(r.level, l.bucket, l.cost, l.lease) : 0;
      const std::int64_t after = r.level - taken;
      if (req.peek) {
        // (decided as if: nothing written)
      } else if (after >= l.bucket.capacity()) {
        // full == missing (the script DELetes it)
        if (lone) {
          sh.buckets.erase(*lone);
        } else {
          sh.buckets.erase(l.key);
        }
      } else {
        auto& e = lone ? (*lone)->second : sh.slot(l.key, now, impl_->cap, req);
        e.kind = l.algorithm;
        e.state = {after, now, l.bucket.units_per_token};
        e.log.reset();
        e.slots.reset();
        e.expires_at_ms = now + limiter::ttl_ms(after, l.bucket);
        sh.min_expires_ms = std::min(sh.min_expires_ms, e.expires_at_ms);
      }
      out.limits.push_back(limiter::describe(after, l.bucket, l.cost, admits[i]));
      if (l.lease > 0 || l.refund > 0) out.limits.back().granted = taken / l.bucket.units_per_token;
    }
    if (l.block_ms > 0 && !l.shadow) {
      const bool refused = !admits[i] && !req.lift_blocks;  // (an unblock starts none)
      close_block(sh, l, now, refused, !req.peek || req.peek_starts_blocks, blocks[i],
                  out.limits.back(), impl_->cap, req);
    }
  }
  locks.clear();
  if (req.peek) return out;  // not a check: neither counted nor a sweep's turn
  const std::uint64_t count = impl_->checks.fetch_add(1, std::memory_order_relaxed) + 1;
  if (count % sweep_interval == 0) impl_->sweep_step(now);
  return out;
}

boost::asio::awaitable<boost::system::result<limiter::check_outcome>> memory_store::check(
    limiter::check_request req) {
  if (req.settle && !limiter::can_settle(req)) co_return make_error_code(errc::store_error);
  co_return decide(req);
}

store_stats memory_store::stats() const {
  store_stats s;
  s.checks = impl_->checks.load(std::memory_order_relaxed);
  for (const auto& sh : impl_->shards) {
    std::lock_guard lock(sh.mutex);
    s.buckets += sh.buckets.size();
    s.evictions += sh.evictions;
  }
  s.connected = true;
  return s;
}

std::uint64_t memory_store::capacity() const {
  return static_cast<std::uint64_t>(impl_->cap) * impl_->shards_used;
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
    case config::algorithm::calendar:  // index:count:zone
      return std::to_string(e.counts.index) + ":" + std::to_string(e.counts.current) + ":" +
             std::to_string(e.counts.previous);
    case config::algorithm::sliding_log: {
      std::string out;
      if (e.log) {
        for (auto t : *e.log) out += (out.empty() ? "" : ",") + std::to_string(t);
      }
      return out;
    }
    case config::algorithm::concurrency: {
      // "<id>@<expiry>" per live slot, in the order taken.
      std::string out;
      if (e.slots) {
        for (const auto& s : *e.slots) {
          if (s.expires_ms <= now) continue;
          out += (out.empty() ? "" : ",") + s.id + "@" + std::to_string(s.expires_ms);
        }
      }
      return out;
    }
    default:
      return std::to_string(e.state.level) + " " + std::to_string(e.state.stamp_ms) + " " +
             std::to_string(e.state.units_per_token);
  }
}

}  // namespace sluice::store
