// SPDX-License-Identifier: Apache-2.0
#include "sluice/limiter/usage_scanner.hpp"

#include <boost/json/basic_parser_impl.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

namespace sluice::limiter {

std::string_view label(usage_failure f) noexcept {
  switch (f) {
    case usage_failure::no_header:
      return "no_header";
    case usage_failure::not_json:
      return "not_json";
    case usage_failure::path_absent:
      return "path_absent";
    case usage_failure::not_a_number:
      return "not_a_number";
    case usage_failure::negative:
      return "negative";
    case usage_failure::too_large:
      return "too_large";
    case usage_failure::over_scan_limit:
      return "over_scan_limit";
    case usage_failure::cut:
      return "cut";
    case usage_failure::malformed:
      return "malformed";
  }
  return "unknown";
}

usage_reading read_usage_header(std::optional<std::string_view> value, std::uint64_t max_cost) {
  if (!value) return {std::nullopt, usage_failure::no_header};
  std::string_view v = *value;
  bool negative = false;
  if (!v.empty() && v.front() == '-') {
    negative = true;
    v.remove_prefix(1);
  }
  if (v.empty()) return {std::nullopt, usage_failure::not_a_number};
  std::uint64_t n = 0;
  bool overflow = false;
  for (const char c : v) {
    if (c < '0' || c > '9') return {std::nullopt, usage_failure::not_a_number};
    const auto d = static_cast<std::uint64_t>(c - '0');
    if (n > (std::numeric_limits<std::uint64_t>::max() - d) / 10) overflow = true;
    if (!overflow) n = n * 10 + d;
  }
  if (negative) {
    if (n == 0 && !overflow) return {0, std::nullopt};  // "-0" is zero
    return {std::nullopt, usage_failure::negative};
  }
  if (overflow || n > max_cost) return {std::nullopt, usage_failure::too_large};
  return {n, std::nullopt};
}

namespace {

namespace json = boost::json;

/// What one JSON document said at the path: nothing yet, a cost, or why the value is not one.
struct value_outcome {
  bool found = false;
  std::uint64_t cost = 0;
  std::optional<usage_failure> failure;
};

/// A Boost.JSON basic_parser handler that follows the path through the document's events and
/// keeps no text: a key is compared with the expected member as its parts arrive.
///
/// Containers are counted by `depth_`; the ones on the path form a prefix of the open ones,
/// `on_` of them (the k-th open container on the path holds the value step k−1 selects). A
/// value starting while depth_ == on_ is "selected" when it is the root, or when the deepest
/// path container's step names it (the key just read matched, or the element count equals
/// the index). A selected value after all steps is the target; a selected container of the
/// kind the next step needs becomes the next path container; anything else is skipped. A
/// member repeated along the path replaces what its earlier occurrence held, so the reading
/// is the one a DOM parse (last duplicate wins) gives.
/// O(1) per event; memory: one counter per path step.
class path_handler {
 public:
  static constexpr std::size_t max_array_size = static_cast<std::size_t>(-1);
  static constexpr std::size_t max_object_size = static_cast<std::size_t>(-1);
  static constexpr std::size_t max_string_size = static_cast<std::size_t>(-1);
  static constexpr std::size_t max_key_size = static_cast<std::size_t>(-1);

  explicit path_handler(const usage_source& source)
      : source_(&source), path_(&source.path), elements_(source.path.size(), 0) {}

  /// Forgets the document (for the next one).
  void reset() noexcept {
    depth_ = on_ = 0;
    key_pos_ = 0;
    key_ok_ = true;
    key_match_ = false;
    in_string_ = in_number_ = target_number_ = false;
    std::fill(elements_.begin(), elements_.end(), 0);
    outcome_ = {};
  }

  const value_outcome& outcome() const noexcept { return outcome_; }

  bool on_document_begin(json::error_code&) { return true; }
  bool on_document_end(json::error_code&) { return true; }

  bool on_object_begin(json::error_code&) {
    open(true);
    return true;
  }
  bool on_array_begin(json::error_code&) {
    open(false);
    return true;
  }
  bool on_object_end(std::size_t, json::error_code&) {
    close();
    return true;
  }
  bool on_array_end(std::size_t, json::error_code&) {
    close();
    return true;
  }

  bool on_string_part(json::string_view, std::size_t, json::error_code&) {
    if (!in_string_) {
      in_string_ = true;
      scalar();
    }
    return true;
  }
  bool on_string(json::string_view, std::size_t, json::error_code&) {
    if (!in_string_) scalar();
    in_string_ = false;
    return true;
  }

  bool on_key_part(json::string_view s, std::size_t, json::error_code&) {
    key_chars(s);
    return true;
  }
  bool on_key(json::string_view s, std::size_t, json::error_code&) {
    key_chars(s);
    if (key_relevant()) key_match_ = key_ok_ && key_pos_ == (*path_)[on_ - 1].member.size();
    key_pos_ = 0;
    key_ok_ = true;
    return true;
  }

  bool on_number_part(json::string_view, json::error_code&) {
    if (!in_number_) {
      in_number_ = true;
      target_number_ = select(kind_scalar) == role::target;
    }
    return true;
  }
  bool on_int64(std::int64_t i, json::string_view, json::error_code&) {
    if (number_is_target()) {
      if (i < 0) {
        fail(usage_failure::negative);
      } else {
        whole(static_cast<std::uint64_t>(i));
      }
    }
    return true;
  }
  bool on_uint64(std::uint64_t u, json::string_view, json::error_code&) {
    if (number_is_target()) whole(u);
    return true;
  }
  bool on_double(double d, json::string_view, json::error_code&) {
    if (!number_is_target()) return true;
    if (std::isnan(d)) {
      fail(usage_failure::not_a_number);
    } else if (d < 0) {
      fail(usage_failure::negative);
    } else if (std::isinf(d)) {
      fail(usage_failure::too_large);
    } else if (d != std::floor(d)) {
      fail(usage_failure::not_a_number);
    } else if (d > static_cast<double>(source_->max_cost)) {
      fail(usage_failure::too_large);
    } else {
      whole(static_cast<std::uint64_t>(d));
    }
    return true;
  }
  bool on_bool(bool, json::error_code&) {
    scalar();
    return true;
  }
  bool on_null(json::error_code&) {
    scalar();
    return true;
  }
  bool on_comment_part(json::string_view, json::error_code&) { return true; }
  bool on_comment(json::string_view, json::error_code&) { return true; }

 private:
  enum class role { skip, target, descend };
  static constexpr int kind_scalar = 0, kind_object = 1, kind_array = 2;

  /// The role of a value that starts now (and counts it as an element of its array).
  role select(int kind) noexcept {
    if (depth_ != on_) return role::skip;
    bool selected = true;
    if (on_ > 0) {
      const auto& step = (*path_)[on_ - 1];
      if (step.index) {
        selected = elements_[on_ - 1]++ == *step.index;
      } else {
        selected = key_match_;
        key_match_ = false;
      }
    }
    if (!selected) return role::skip;
    // The value now selected replaces whatever an earlier duplicate member along the path
    // held (the last duplicate wins, as in a DOM parse): what was found under it is void.
    outcome_ = {};
    if (on_ == path_->size()) return role::target;
    const bool wants_array = (*path_)[on_].index.has_value();
    if (kind == (wants_array ? kind_array : kind_object)) return role::descend;
    return role::skip;  // the path meets a value of the wrong kind: absent here
  }

  void open(bool object) noexcept {
    const role r = select(object ? kind_object : kind_array);
    if (r == role::target) fail(usage_failure::not_a_number);
    ++depth_;
    if (r == role::descend) {
      ++on_;
      elements_[on_ - 1] = 0;
      key_pos_ = 0;
      key_ok_ = true;
      key_match_ = false;
    }
  }

  void close() noexcept {
    if (depth_ == on_ && on_ > 0) --on_;
    --depth_;
    key_match_ = false;
  }

  void scalar() noexcept {
    if (select(kind_scalar) == role::target) fail(usage_failure::not_a_number);
  }

  bool number_is_target() noexcept {
    const bool target = in_number_ ? target_number_ : select(kind_scalar) == role::target;
    in_number_ = target_number_ = false;
    return target;
  }

  /// A key is compared only in the deepest path container, when its step names a member.
  bool key_relevant() const noexcept {
    return depth_ == on_ && on_ > 0 && !(*path_)[on_ - 1].index;
  }

  void key_chars(json::string_view s) noexcept {
    if (!key_relevant() || !key_ok_) return;
    const std::string& want = (*path_)[on_ - 1].member;
    if (key_pos_ + s.size() > want.size() ||
        std::memcmp(want.data() + key_pos_, s.data(), s.size()) != 0) {
      key_ok_ = false;
      return;
    }
    key_pos_ += s.size();
  }

  void whole(std::uint64_t n) noexcept {
    if (n > source_->max_cost) {
      fail(usage_failure::too_large);
      return;
    }
    outcome_ = {true, n, std::nullopt};
  }
  void fail(usage_failure f) noexcept { outcome_ = {true, 0, f}; }

  const usage_source* source_;
  const std::vector<usage_path_step>* path_;
  std::vector<std::size_t> elements_;  ///< per path container: elements begun (arrays)
  std::size_t depth_ = 0, on_ = 0;
  std::size_t key_pos_ = 0;  ///< bytes of the current key matched so far
  bool key_ok_ = true;       ///< the current key is still a prefix of the member wanted
  bool key_match_ = false;   ///< the last key read named the member wanted
  bool in_string_ = false, in_number_ = false, target_number_ = false;
  value_outcome outcome_;
};

json::parse_options parser_options() {
  json::parse_options o;
  o.max_depth = max_json_depth;
  o.allow_invalid_utf8 = true;  // strings are skipped; their bytes do not matter
  return o;
}

bool json_whitespace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

/// ASCII case-insensitive equality.
bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    auto lower = [](char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; };
    if (lower(a[i]) != lower(b[i])) return false;
  }
  return true;
}

enum class body_kind { none, json, event_stream };

/// The body's kind from its media type (RFC 9110 §8.3.1: type/subtype, case-insensitive,
/// then parameters).
body_kind kind_of(std::string_view content_type) {
  auto semi = content_type.find(';');
  std::string_view type = content_type.substr(0, semi);
  while (!type.empty() && (type.front() == ' ' || type.front() == '\t')) type.remove_prefix(1);
  while (!type.empty() && (type.back() == ' ' || type.back() == '\t')) type.remove_suffix(1);
  if (iequals(type, "application/json")) return body_kind::json;
  if (iequals(type, "text/event-stream")) return body_kind::event_stream;
  const auto slash = type.find('/');
  if (slash != std::string_view::npos && slash > 0 && type.size() > slash + 6 &&
      iequals(type.substr(type.size() - 5), "+json")) {
    return body_kind::json;
  }
  return body_kind::none;
}

}  // namespace

struct usage_scanner::impl {
  explicit impl(const usage_source& s) : source(s), parser(parser_options(), s) {}

  const usage_source& source;
  json::basic_parser<path_handler> parser;
  body_kind kind = body_kind::none;
  std::optional<usage_reading> settled;  ///< decided before the body (header, type, length)
  std::uint64_t seen = 0;
  // JSON body
  bool over = false;      ///< past the scan limit
  bool bad = false;       ///< the document failed to parse (or had extra data after it)
  bool doc_done = false;  ///< the document is whole (only whitespace may follow)
  // Event stream (WHATWG HTML "event stream interpretation")
  enum class line_part { name, space, data_value, skip };
  line_part part = line_part::name;
  std::size_t bom = 0;       ///< bytes of a leading BOM matched (3: done with it)
  std::size_t name_len = 0;  ///< bytes of the current field name
  bool name_is_data = true;  ///< the name so far is a prefix of "data"
  bool cr_pending = false;   ///< the last byte was CR (an LF next ends no new line)
  bool event_data = false;   ///< the current event has a data line
  bool event_bad = false;    ///< its data is not a JSON document (skipped)
  value_outcome last;        ///< the last dispatched event's value at the path

  void reset_parser() noexcept {
    parser.reset();
    parser.handler().reset();
  }

  // -- JSON body ------------------------------------------------------------------------------

  void feed_json(const char* p, std::size_t n) noexcept {
    if (bad) return;
    if (doc_done) {
      if (!std::all_of(p, p + n, json_whitespace)) bad = true;
      return;
    }
    json::error_code ec;
    const std::size_t used = parser.write_some(true, p, n, ec);
    if (ec) {
      bad = true;
      return;
    }
    if (parser.done()) {
      doc_done = true;
      if (!std::all_of(p + used, p + n, json_whitespace)) bad = true;
    }
  }

  usage_reading finish_json(bool complete) noexcept {
    if (over) return {std::nullopt, usage_failure::over_scan_limit};
    if (bad) return {std::nullopt, usage_failure::malformed};
    // A cut body is not ended with `more = false`: that would complete a number in flight
    // ("12" of "123"). What the complete part said is kept: a number counts once a byte after
    // it has arrived.
    if (!complete) return with_cut(parser.handler().outcome());
    if (!doc_done) {
      json::error_code ec;
      parser.write_some(false, nullptr, 0, ec);
      if (ec || !parser.done()) return {std::nullopt, usage_failure::malformed};
    }
    return reading(parser.handler().outcome());
  }

  // -- Event stream ---------------------------------------------------------------------------

  /// Feeds data-field bytes to the event's JSON document.
  void event_json(const char* p, std::size_t n) noexcept {
    if (event_bad || n == 0) return;
    json::error_code ec;
    if (parser.done()) {  // a whole document, then more than whitespace: not one document
      if (!std::all_of(p, p + n, json_whitespace)) event_bad = true;
      return;
    }
    const std::size_t used = parser.write_some(true, p, n, ec);
    if (ec) {
      event_bad = true;
    } else if (parser.done() && !std::all_of(p + used, p + n, json_whitespace)) {
      event_bad = true;
    }
  }

  /// A data line begins: the data buffer gets an LF between lines (whitespace to JSON).
  void begin_data_line() noexcept {
    if (event_data) {
      event_json("\n", 1);
    } else {
      event_data = true;
      event_bad = false;
      reset_parser();
    }
  }

  /// A blank line: dispatch the event (one with no data line is no event).
  void dispatch() noexcept {
    if (!event_data) return;
    event_data = false;
    if (event_bad) return;
    json::error_code ec;
    if (!parser.done()) parser.write_some(false, nullptr, 0, ec);
    if (ec || !parser.done()) return;
    if (parser.handler().outcome().found) last = parser.handler().outcome();
  }

  /// A line ended (at `CR` or `LF`): blank, a data field, or anything else.
  void end_line() noexcept {
    if (part == line_part::name) {
      if (name_len == 0) {
        dispatch();
      } else if (name_len == 4 && name_is_data) {
        begin_data_line();  // "data" with no colon: an empty value
      }
    }
    part = line_part::name;
    name_len = 0;
    name_is_data = true;
  }

  void feed_events(const char* p, const char* end) noexcept {
    static constexpr std::string_view data_name = "data";
    while (p < end) {
      if (cr_pending) {
        cr_pending = false;
        if (*p == '\n') {
          ++p;
          continue;
        }
      }
      switch (part) {
        case line_part::name: {
          const char c = *p++;
          if (c == '\r' || c == '\n') {
            cr_pending = c == '\r';
            end_line();
          } else if (c == ':') {
            if (name_len == 4 && name_is_data) {
              begin_data_line();
              part = line_part::space;
            } else {
              part = line_part::skip;  // a comment (empty name) or another field
            }
          } else {
            name_is_data = name_is_data && name_len < 4 && data_name[name_len] == c;
            ++name_len;
          }
          break;
        }
        case line_part::space:
          if (*p == ' ') ++p;  // one space after the colon is not part of the value
          part = line_part::data_value;
          break;
        case line_part::data_value:
        case line_part::skip: {
          const char* stop = p;
          while (stop < end && *stop != '\n' && *stop != '\r') ++stop;
          if (part == line_part::data_value) event_json(p, static_cast<std::size_t>(stop - p));
          p = stop;
          if (p < end) {
            cr_pending = *p == '\r';
            ++p;
            end_line();
          }
          break;
        }
      }
    }
  }

  void feed_event_bytes(const char* p, std::size_t n) noexcept {
    // A leading BOM (EF BB BF) is dropped; its bytes may come one at a time.
    static constexpr char bom_bytes[] = "\xEF\xBB\xBF";
    while (bom < 3 && n > 0) {
      if (*p == bom_bytes[bom]) {
        ++bom;
        ++p;
        --n;
        continue;
      }
      const std::size_t held = bom;
      bom = 3;
      feed_events(bom_bytes, bom_bytes + held);  // not a BOM after all: its bytes are text
    }
    feed_events(p, p + n);
  }

  usage_reading finish_events(bool complete) noexcept {
    // The spec discards an event not dispatched when the stream ends: a partial line, or data
    // lines without their blank line, mean the stream stopped mid-event.
    const bool mid_event =
        event_data || part != line_part::name || name_len > 0 || (bom > 0 && bom < 3);
    if (!complete || mid_event) return with_cut(last);
    return reading(last);
  }

  // -- Readings -------------------------------------------------------------------------------

  static usage_reading reading(const value_outcome& o) noexcept {
    if (!o.found) return {std::nullopt, usage_failure::path_absent};
    if (o.failure) return {std::nullopt, o.failure};
    return {o.cost, std::nullopt};
  }

  static usage_reading with_cut(const value_outcome& o) noexcept {
    if (o.found && !o.failure) return {o.cost, usage_failure::cut};
    return {std::nullopt, usage_failure::cut};
  }
};

usage_scanner::usage_scanner(const usage_source& source) : impl_(std::make_unique<impl>(source)) {}

usage_scanner::~usage_scanner() = default;

void usage_scanner::start(std::string_view content_type,
                          std::optional<std::string_view> header_value,
                          std::optional<std::uint64_t> content_length) noexcept {
  impl& s = *impl_;
  s.settled.reset();
  s.seen = 0;
  s.over = s.bad = s.doc_done = false;
  s.part = impl::line_part::name;
  s.bom = 0;
  s.name_len = 0;
  s.name_is_data = true;
  s.cr_pending = s.event_data = s.event_bad = false;
  s.last = {};
  s.reset_parser();
  s.kind = body_kind::none;
  if (!s.source.header.empty()) {
    s.settled = read_usage_header(header_value, s.source.max_cost);
    return;
  }
  s.kind = kind_of(content_type);
  if (s.kind == body_kind::none) {
    s.settled = usage_reading{std::nullopt, usage_failure::not_json};
  } else if (s.kind == body_kind::json && content_length && *content_length > s.source.scan_limit) {
    s.over = true;
  }
}

bool usage_scanner::wants_body() const noexcept {
  const impl& s = *impl_;
  if (s.settled) return false;
  if (s.kind == body_kind::json) return !s.over && !s.bad;
  return s.kind == body_kind::event_stream;
}

void usage_scanner::feed(std::string_view bytes) noexcept {
  impl& s = *impl_;
  s.seen += bytes.size();
  if (s.settled || bytes.empty()) return;
  if (s.kind == body_kind::json) {
    if (s.over) return;
    if (s.seen > s.source.scan_limit) {
      s.over = true;
      return;
    }
    s.feed_json(bytes.data(), bytes.size());
  } else if (s.kind == body_kind::event_stream) {
    s.feed_event_bytes(bytes.data(), bytes.size());
  }
}

usage_reading usage_scanner::finish(bool complete) noexcept {
  impl& s = *impl_;
  usage_reading r;
  if (s.settled) {
    r = *s.settled;
    if (!complete && r.cost) r.failure = usage_failure::cut;  // read, but the body was cut
  } else if (s.kind == body_kind::json) {
    r = s.finish_json(complete);
  } else {
    r = s.finish_events(complete);
  }
  s.settled = r;  // a second finish() says the same
  return r;
}

std::uint64_t usage_scanner::bytes_seen() const noexcept {
  return impl_->seen;
}

}  // namespace sluice::limiter
