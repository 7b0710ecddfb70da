// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// Reading what a response cost from the response itself: a number in a response header
/// (`X-Usage-Tokens: 1234`), at a JSON path in an `application/json` body
/// (`usage.total_tokens`), or at that path in the last event of a `text/event-stream` (SSE)
/// answer that carries it. The scanner observes the body as it streams: it never holds or
/// copies it, and its state is bounded (the path, a JSON parser's stack of at most
/// `max_json_depth` levels, a few counters) whatever the body's size.

#include "sluice/config/usage_path.hpp"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::limiter {

/// Why a response's cost could not be read (or, for `cut`, that the body ended early). One
/// label each, for a metric: a bounded set.
enum class usage_failure : std::uint8_t {
  no_header,        ///< a header source, and the response has no such field
  not_json,         ///< a JSON source, and the body is neither JSON nor an event stream
  path_absent,      ///< the document (or no event) has a value at the path
  not_a_number,     ///< the value at the path is a string, bool, null, object, array or a fraction
  negative,         ///< the value is below zero
  too_large,        ///< the value is above the source's `max_cost`
  over_scan_limit,  ///< a JSON body longer than the source's `scan_limit`
  cut,              ///< the body ended before its document or its last event was whole
  malformed,        ///< the JSON body is not well-formed (or nests deeper than max_json_depth)
};
/// Number of usage_failure values (for per-reason counters).
inline constexpr std::size_t usage_failure_count = 9;

/// The metric label of `f`: "no_header", "not_json", ... (the enumerator's name).
std::string_view label(usage_failure f) noexcept;

// A JSON path's steps and their parser live in the config room (a rules file names the path).
using config::parse_usage_path;
using config::usage_path_step;

/// The largest cost read by default: 2^53, the largest integer every JSON reader (and a Lua
/// double) holds exactly; ×1000 it still fits a signed 64-bit integer of milli-units.
inline constexpr std::uint64_t default_max_usage = std::uint64_t{1} << 53;
/// The default scan limit of a JSON body: 1 MiB.
inline constexpr std::size_t default_usage_scan_limit = std::size_t{1} << 20;
/// Deepest JSON nesting scanned; deeper documents are `malformed` (Boost.JSON's depth limit).
inline constexpr std::size_t max_json_depth = 64;

/// Where a response's cost is read from (a plain settings struct, converted once per rules
/// generation; the scanner refers to it, so it must outlive every scanner made from it).
struct usage_source {
  /// A response header's name (case-insensitive, matched by the caller): read the cost from
  /// its value. Empty: read it from the body at `path`.
  std::string header;
  /// The JSON path of the cost in the body (see parse_usage_path); unused for a header.
  std::vector<usage_path_step> path;
  /// Values above this are `too_large`.
  std::uint64_t max_cost = default_max_usage;
  /// A JSON body longer than this (bytes) is not scanned: `over_scan_limit`. An event stream is
  /// scanned whole (its state stays bounded; the cost per byte is in bench/RESULTS.md).
  std::size_t scan_limit = default_usage_scan_limit;
};

/// What a scan found. Exactly one of: a cost and no failure (read cleanly); no cost and a
/// failure (why none was read); a cost and `usage_failure::cut` (the body was cut, and this is
/// what a complete part of it said: for an event stream, the last whole event carrying the
/// path).
struct usage_reading {
  std::optional<std::uint64_t> cost;     ///< units read from the response
  std::optional<usage_failure> failure;  ///< why not (or `cut` beside a cost)
  bool operator==(const usage_reading&) const = default;
};

/// Reads a header field's value as a cost: ASCII digits only (leading zeros allowed, no sign,
/// no spaces inside, no list — the caller passes repeated field lines joined by ", ", which is
/// then `not_a_number`); `value` nullopt: `no_header`. `-N` (digits after one minus) is
/// `negative`; more than `max_cost` (or than 2^64 − 1) is `too_large`.
usage_reading read_usage_header(std::optional<std::string_view> value, std::uint64_t max_cost);

/// Reads one response's cost as its body streams by. Made from a source, for one response or
/// reused for many: start() begins each response (the gateway's charge hook makes one per
/// settled limit of a charged request). Not thread-safe; no member throws after construction
/// (the constructor allocates the JSON parser's state once).
///
/// Body rules:
/// - `application/json` or any `type/subtype+json` (RFC 6839), parameters ignored: the body is
///   one JSON document (RFC 8259; invalid UTF-8 inside strings is tolerated: only numbers are
///   read). A member that repeats counts as its last occurrence, as a DOM parse keeps it
///   (`{"usage":{"total_tokens":5},"usage":3}` has no value at `usage.total_tokens`).
/// - `text/event-stream`: events per the WHATWG HTML "event stream interpretation" (lines end
///   in LF, CRLF or CR; one leading BOM is dropped; `data` fields of an event are joined by LF;
///   an event is dispatched at a blank line; comments and other fields — `event`, `id`,
///   `retry` — are skipped). Each event's data is parsed as one JSON document; data that is not
///   JSON (OpenAI's `[DONE]`) is skipped. The result is the value at the path in the last
///   event that has one (a bad value there — negative, a string — is that event's failure). An
///   event not yet dispatched when the stream ends is not counted (the spec discards it) and
///   makes the reading `cut`.
/// - Numbers: a non-negative integer, up to `max_cost`. A number written with a fraction or an
///   exponent counts when its value is whole (`12.0`, `1e3`); `12.5` is `not_a_number` — never
///   floored: a fractional token count means the path names the wrong field. `"123"` (a
///   string) is `not_a_number`.
class usage_scanner {
 public:
  explicit usage_scanner(const usage_source& source);
  ~usage_scanner();
  usage_scanner(const usage_scanner&) = delete;
  usage_scanner& operator=(const usage_scanner&) = delete;

  /// Begins a response. `content_type`: its Content-Type field value (empty when absent);
  /// `header_value`: the source header's value, for a header source (nullopt when absent);
  /// `content_length`: the body's length when the head states it (a JSON body longer than the
  /// scan limit is then `over_scan_limit` at once, and wants_body() is false).
  void start(std::string_view content_type,
             std::optional<std::string_view> header_value = std::nullopt,
             std::optional<std::uint64_t> content_length = std::nullopt) noexcept;

  /// Whether feeding the body can still change the reading (false for a header source, a body
  /// that is not scanned, a JSON body past its scan limit or found malformed). Feeding when
  /// false is allowed and cheap.
  bool wants_body() const noexcept;

  /// Observes the next bytes of the body, exactly as they stream (any split point).
  void feed(std::string_view bytes) noexcept;

  /// Ends the response and returns the reading. `complete`: the body ended as its framing
  /// said; false when it was cut (the client went away, the upstream failed): the reading is
  /// then `cut`, with the cost a complete part said, if any.
  usage_reading finish(bool complete) noexcept;

  /// Body bytes observed since start().
  std::uint64_t bytes_seen() const noexcept;

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

}  // namespace sluice::limiter
