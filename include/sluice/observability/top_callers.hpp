// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// The most limited callers (issue 29): a bounded top-N of refusals (429) by caller, route
/// and limit over the last minutes, for the status page and `GET /admin/top`. Memory is fixed
/// when it is built, whatever the number of distinct callers refused.

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include <boost/unordered/unordered_flat_map.hpp>

namespace sluice::observability {

/// The Space-Saving sketch of Metwally, Agrawal and El Abbadi, "Efficient Computation of
/// Frequent and Top-k Elements in Data Streams" (ICDT 2005): `capacity` counters; a key seen
/// again adds to its counter; a new key, when every counter is taken, replaces the key of the
/// smallest counter m and counts from m + n with error m. So a counter overestimates its key's
/// true count by at most its error (which is at most total / capacity), and every key whose
/// true count exceeds total / capacity holds a counter (the paper's Lemma 3.4 and Theorem 3.5).
///
/// Fixed memory: the counters, their keys (at most max_key_bytes each, longer keys are cut),
/// a min-heap over them and an index sized for `capacity` are all allocated by the
/// constructor and never grow (bytes() counts them). add() is O(log capacity). Not
/// thread-safe.
class space_saving {
 public:
  /// The longest key kept, in bytes; a longer key is cut to this length.
  static constexpr std::size_t max_key_bytes = 160;

  /// One counter: its key, its count and the most it may overstate the key's true count.
  struct entry {
    std::string key;
    std::uint64_t count = 0;
    std::uint64_t error = 0;
  };

  /// `capacity` counters, at least 1.
  explicit space_saving(std::size_t capacity);
  space_saving(const space_saving&) = delete;
  space_saving& operator=(const space_saving&) = delete;

  /// Counts `n` occurrences of `key` (cut to max_key_bytes).
  void add(std::string_view key, std::uint64_t n = 1);
  /// Forgets every key (the memory stays allocated).
  void clear() noexcept;
  /// The counters in use, largest count first (ties: smaller error, then key).
  std::vector<entry> entries() const;
  /// Counters in use (at most capacity()).
  std::size_t size() const noexcept { return used_; }
  std::size_t capacity() const noexcept { return slots_.size(); }
  /// Occurrences counted since the last clear().
  std::uint64_t total() const noexcept { return total_; }
  /// Bytes this sketch holds: its counters with their key buffers, the heap and the index's
  /// table (the index is reserved for capacity() keys at construction and never rehashes).
  std::size_t bytes() const noexcept;

 private:
  struct slot {
    std::array<char, max_key_bytes> key;
    std::uint32_t length = 0;
    std::uint32_t heap_at = 0;  // position in heap_
    std::uint64_t count = 0;
    std::uint64_t error = 0;
    std::string_view view() const noexcept { return {key.data(), length}; }
  };
  void sift_down(std::size_t at) noexcept;
  void sift_up(std::size_t at) noexcept;
  void swap_heap(std::size_t a, std::size_t b) noexcept;

  std::vector<slot> slots_;
  std::vector<std::uint32_t> heap_;  // slot indices, smallest count on top
  // key (a view into its slot) -> slot index
  boost::unordered_flat_map<std::string_view, std::uint32_t> index_;
  std::size_t used_ = 0;
  std::uint64_t total_ = 0;
};

/// Sizes of the top-N (`status:` in the rules file; docs/operating.md "The status page").
struct top_settings {
  std::size_t top = 10;                   ///< rows shown by default (`status.top`), 1..100
  std::size_t window_minutes = 10;        ///< the window (`status.window`), 1..60 minutes
  std::size_t counters_per_minute = 256;  ///< Space-Saving counters of each minute's sketch
  static constexpr std::size_t max_top = 100;
  static constexpr std::size_t max_window_minutes = 60;
};

/// Refusals by caller, route and limit over a sliding window of the last `window_minutes`
/// whole minutes: a ring of one space_saving sketch per minute (a minute's sketch is cleared
/// when its slot comes round again), merged on read. Memory: window_minutes sketches of
/// counters_per_minute counters, all allocated by the constructor (bytes() <= bound_bytes()).
/// Thread-safe: record() takes a mutex held for one sketch update (O(log counters)); only
/// refused requests record.
class top_callers {
 public:
  explicit top_callers(top_settings s);

  /// Counts one refusal of `caller` (the hashed API key as the access log writes it, or the
  /// client address for a caller without a key) on `route` by `limit`, at `now_ms`
  /// (milliseconds of any monotonic clock, the same for every call).
  void record(std::string_view caller, std::string_view route, std::string_view limit,
              std::int64_t now_ms);

  /// One row of the answer: counts summed over the window's minutes (an upper bound of the
  /// true count; `error` is the most it may overstate).
  struct row {
    std::string caller, route, limit;
    std::uint64_t refusals = 0;
    std::uint64_t error = 0;
  };
  struct answer {
    std::vector<row> rows;    ///< largest first, at most the n asked (capped at max_top)
    std::size_t asked = 0;    ///< the n asked for
    std::size_t shown = 0;    ///< the n answered: min(asked, max_top)
    bool capped = false;      ///< asked > max_top
    std::uint64_t total = 0;  ///< refusals counted in the window
    std::size_t window_minutes = 0;
  };
  /// The `n` callers refused most in the window ending at `now_ms`; n = 0 means settings().top.
  answer top(std::size_t n, std::int64_t now_ms) const;

  const top_settings& settings() const noexcept { return settings_; }
  /// Bytes the sketches hold now (space_saving::bytes() summed).
  std::size_t bytes() const;
  /// The most bytes() can be for these settings: every sketch full.
  std::size_t bound_bytes() const noexcept { return bound_; }
  /// Counters in use now, summed over the minutes (at most window_minutes ×
  /// counters_per_minute).
  std::size_t counters_used() const;

 private:
  struct minute {
    std::int64_t number = -1;
    space_saving sketch;
    explicit minute(std::size_t c) : sketch(c) {}
  };
  top_settings settings_;
  std::size_t bound_ = 0;
  mutable std::mutex mutex_;
  std::vector<std::unique_ptr<minute>> ring_;
};

/// The `GET /admin/top` body for `a`: `{"window_minutes":W,"asked":K,"n":N,"capped":B,
/// "total":T,"top":[{"caller":..,"route":..,"limit":..,"refusals":..,"error":..}, ...]}`,
/// with `"note"` saying so when capped.
std::string top_json(const top_callers::answer& a);

}  // namespace sluice::observability
