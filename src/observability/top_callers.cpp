// SPDX-License-Identifier: Apache-2.0
// The most limited callers: Space-Saving sketches (Metwally, Agrawal, El Abbadi 2005), one
// per minute of the window, merged on read.

#include "sluice/observability/top_callers.hpp"

#include "sluice/utf8.hpp"

#include <boost/json.hpp>

#include <algorithm>
#include <cstring>
#include <unordered_map>

namespace sluice::observability {

space_saving::space_saving(std::size_t capacity) : slots_(std::max<std::size_t>(capacity, 1)) {
  heap_.reserve(slots_.size());
  index_.reserve(slots_.size());
}

void space_saving::clear() noexcept {
  index_.clear();
  heap_.clear();
  used_ = 0;
  total_ = 0;
}

void space_saving::swap_heap(std::size_t a, std::size_t b) noexcept {
  std::swap(heap_[a], heap_[b]);
  slots_[heap_[a]].heap_at = static_cast<std::uint32_t>(a);
  slots_[heap_[b]].heap_at = static_cast<std::uint32_t>(b);
}

void space_saving::sift_up(std::size_t at) noexcept {
  while (at > 0) {
    const std::size_t parent = (at - 1) / 2;
    if (slots_[heap_[parent]].count <= slots_[heap_[at]].count) return;
    swap_heap(at, parent);
    at = parent;
  }
}

void space_saving::sift_down(std::size_t at) noexcept {
  for (;;) {
    std::size_t least = at;
    for (std::size_t c : {2 * at + 1, 2 * at + 2})
      if (c < heap_.size() && slots_[heap_[c]].count < slots_[heap_[least]].count) least = c;
    if (least == at) return;
    swap_heap(at, least);
    at = least;
  }
}

void space_saving::add(std::string_view key, std::uint64_t n) {
  if (key.size() > max_key_bytes) key = key.substr(0, max_key_bytes);
  total_ += n;
  if (auto it = index_.find(key); it != index_.end()) {
    slot& s = slots_[it->second];
    s.count += n;
    sift_down(s.heap_at);  // it grew: it may sink below larger children
    return;
  }
  std::uint32_t i;
  std::uint64_t floor = 0;
  if (used_ < slots_.size()) {
    i = static_cast<std::uint32_t>(used_++);
    heap_.push_back(i);
    slots_[i].heap_at = static_cast<std::uint32_t>(heap_.size() - 1);
    slots_[i].count = 0;
  } else {
    // Every counter is taken: the smallest one's key gives way (the paper's replacement).
    i = heap_.front();
    floor = slots_[i].count;
    index_.erase(slots_[i].view());
  }
  slot& s = slots_[i];
  std::memcpy(s.key.data(), key.data(), key.size());
  s.length = static_cast<std::uint32_t>(key.size());
  s.count = floor + n;
  s.error = floor;
  index_.emplace(s.view(), i);
  sift_up(s.heap_at);
  sift_down(s.heap_at);
}

std::vector<space_saving::entry> space_saving::entries() const {
  std::vector<entry> out;
  out.reserve(used_);
  for (std::size_t i = 0; i < used_; ++i)
    out.push_back({std::string(slots_[i].view()), slots_[i].count, slots_[i].error});
  std::sort(out.begin(), out.end(), [](const entry& a, const entry& b) {
    if (a.count != b.count) return a.count > b.count;
    if (a.error != b.error) return a.error < b.error;
    return a.key < b.key;
  });
  return out;
}

std::size_t space_saving::bytes() const noexcept {
  using value = decltype(index_)::value_type;
  // The flat map's table: one element and one byte of metadata per bucket.
  return sizeof(*this) + slots_.capacity() * sizeof(slot) +
         heap_.capacity() * sizeof(std::uint32_t) + index_.bucket_count() * (sizeof(value) + 1);
}

namespace {

constexpr char separator = '\x1f';  // between caller, route and limit in a sketch key

std::int64_t minute_of(std::int64_t ms) {
  return ms < 0 ? 0 : ms / 60'000;
}

}  // namespace

top_callers::top_callers(top_settings s) : settings_(s) {
  settings_.window_minutes =
      std::clamp<std::size_t>(settings_.window_minutes, 1, top_settings::max_window_minutes);
  settings_.top = std::clamp<std::size_t>(settings_.top, 1, top_settings::max_top);
  settings_.counters_per_minute = std::max(settings_.counters_per_minute, settings_.top);
  for (std::size_t i = 0; i < settings_.window_minutes; ++i) {
    ring_.push_back(std::make_unique<minute>(settings_.counters_per_minute));
    // Full, every sketch holds what it holds empty: its storage is allocated up front.
    bound_ += ring_.back()->sketch.bytes() + sizeof(minute);
  }
}

void top_callers::record(std::string_view caller, std::string_view route, std::string_view limit,
                         std::int64_t now_ms) {
  std::array<char, space_saving::max_key_bytes> buf;
  std::size_t n = 0;
  for (std::string_view part :
       {caller, std::string_view(&separator, 1), route, std::string_view(&separator, 1), limit}) {
    const std::size_t take = std::min(part.size(), buf.size() - n);
    std::memcpy(buf.data() + n, part.data(), take);
    n += take;
  }
  const std::int64_t m = minute_of(now_ms);
  std::lock_guard lock(mutex_);
  minute& slot = *ring_[static_cast<std::size_t>(m) % ring_.size()];
  if (slot.number != m) {
    slot.sketch.clear();
    slot.number = m;
  }
  slot.sketch.add({buf.data(), n});
}

top_callers::answer top_callers::top(std::size_t n, std::int64_t now_ms) const {
  answer a;
  a.asked = n == 0 ? settings_.top : n;
  a.shown = std::min(a.asked, top_settings::max_top);
  a.capped = a.asked > top_settings::max_top;
  a.window_minutes = settings_.window_minutes;
  const std::int64_t m = minute_of(now_ms);
  const auto oldest = m - static_cast<std::int64_t>(settings_.window_minutes) + 1;
  // Merge: a key's counts and errors add up over the minutes (each minute's counter is an
  // upper bound of that minute's true count, so the sum bounds the window's).
  std::unordered_map<std::string, std::pair<std::uint64_t, std::uint64_t>> merged;
  {
    std::lock_guard lock(mutex_);
    for (const auto& slot : ring_) {
      if (slot->number < oldest || slot->number > m) continue;
      a.total += slot->sketch.total();
      for (auto& e : slot->sketch.entries()) {
        auto& [count, error] = merged[std::move(e.key)];
        count += e.count;
        error += e.error;
      }
    }
  }
  std::vector<row> rows;
  rows.reserve(merged.size());
  for (auto& [key, ce] : merged) {
    row r;
    const auto first = key.find(separator);
    const auto second = first == std::string::npos ? first : key.find(separator, first + 1);
    r.caller = key.substr(0, first);
    if (first != std::string::npos)
      r.route = key.substr(first + 1, second == std::string::npos ? second : second - first - 1);
    if (second != std::string::npos) r.limit = key.substr(second + 1);
    r.refusals = ce.first;
    r.error = ce.second;
    rows.push_back(std::move(r));
  }
  std::sort(rows.begin(), rows.end(), [](const row& x, const row& y) {
    if (x.refusals != y.refusals) return x.refusals > y.refusals;
    if (x.error != y.error) return x.error < y.error;
    return std::tie(x.caller, x.route, x.limit) < std::tie(y.caller, y.route, y.limit);
  });
  if (rows.size() > a.shown) rows.resize(a.shown);
  a.rows = std::move(rows);
  return a;
}

std::size_t top_callers::bytes() const {
  std::lock_guard lock(mutex_);
  std::size_t b = 0;
  for (const auto& slot : ring_) b += slot->sketch.bytes() + sizeof(minute);
  return b;
}

std::size_t top_callers::counters_used() const {
  std::lock_guard lock(mutex_);
  std::size_t c = 0;
  for (const auto& slot : ring_) c += slot->sketch.size();
  return c;
}

std::string top_json(const top_callers::answer& a) {
  namespace json = boost::json;
  json::object o;
  o["window_minutes"] = a.window_minutes;
  o["asked"] = a.asked;
  o["n"] = a.shown;
  o["capped"] = a.capped;
  if (a.capped)
    o["note"] = "n=" + std::to_string(a.asked) + " is over the bound; capped at " +
                std::to_string(top_settings::max_top);
  o["total"] = a.total;
  json::array rows;
  for (const auto& r : a.rows)
    rows.emplace_back(json::object{{"caller", r.caller},
                                   {"route", r.route},
                                   {"limit", r.limit},
                                   {"refusals", r.refusals},
                                   {"error", r.error}});
  o["top"] = std::move(rows);
  return utf8::make_valid(json::serialize(o));
}

}  // namespace sluice::observability
