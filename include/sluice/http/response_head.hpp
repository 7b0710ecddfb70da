// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// The relay's parser of upstream responses: Beast's HTTP/1 parser (its tokenizing, framing
/// rules and limits, RFC 9112) with a field store of its own. Beast's `basic_fields` gives
/// every field a heap node in an ordered set; a relayed response head is only walked once
/// (rendered for the client hop) and asked for a field or two, so here its lines are copied
/// into one byte block per head and kept in arrival order. The body goes into a caller's
/// window, as Beast's `buffer_body` does.

#include <boost/beast/http/basic_parser.hpp>
#include <boost/beast/http/field.hpp>
#include <boost/container/small_vector.hpp>

#include <cstdint>
#include <string_view>

namespace sluice::http {

/// One field line of a response_head, as received (name and value without the OWS around
/// the value; an obs-fold already replaced by a space, as Beast does).
struct head_line {
  boost::beast::http::field id = boost::beast::http::field::unknown;  ///< unknown if unnamed
  std::string_view name_text;
  std::string_view value_text;

  // The accessors basic_fields' lines have, so code walking either reads alike.
  boost::beast::http::field name() const { return id; }
  std::string_view name_string() const { return name_text; }
  std::string_view value() const { return value_text; }
};

/// A parsed response head: status line and field lines in arrival order. Its views point
/// into the response_head_parser that made it, which must outlive them.
class response_head {
 public:
  using const_iterator = const head_line*;

  /// The status code, e.g. 200.
  unsigned result_int() const { return status_; }
  /// The reason phrase as received, or the registered one when the upstream sent none (as
  /// Beast's `header::reason()`).
  std::string_view reason() const;
  /// The HTTP version: 10 or 11.
  unsigned version() const { return version_; }

  const_iterator begin() const { return lines_.data(); }
  const_iterator end() const { return lines_.data() + lines_.size(); }
  std::size_t size() const { return lines_.size(); }

  /// The value of the first line of field `f` ("" when there is none), as basic_fields'
  /// operator[] answers.
  std::string_view operator[](boost::beast::http::field f) const;

 private:
  friend class response_head_parser;
  unsigned status_ = 0;
  unsigned version_ = 11;
  std::string_view reason_;
  boost::container::small_vector<head_line, 12> lines_;
};

/// An HTTP/1 response parser (Beast's basic_parser) storing the head as a response_head
/// and the body into a window the caller sets before each put (Beast's buffer_body: a full
/// window ends the put with http::error::need_buffer). Errors are basic_parser's.
class response_head_parser final : public boost::beast::http::basic_parser<false> {
 public:
  response_head_parser() = default;
  // The head's views point into this object.
  response_head_parser(const response_head_parser&) = delete;
  response_head_parser& operator=(const response_head_parser&) = delete;

  /// The head; complete once is_header_done().
  const response_head& get() const { return head_; }

  /// Where the next body bytes go: `size` bytes at `data` (null: none, need_buffer).
  void window(char* data, std::size_t size) {
    window_ = data;
    window_left_ = size;
  }
  /// How much of the window the body has not filled yet.
  std::size_t window_left() const { return window_left_; }

 private:
  using error_code = boost::system::error_code;
  using string_view = boost::beast::string_view;

  void on_request_impl(boost::beast::http::verb, string_view, string_view, int,
                       error_code&) override {}
  void on_response_impl(int code, string_view reason, int version, error_code& ec) override;
  void on_field_impl(boost::beast::http::field name, string_view name_string, string_view value,
                     error_code& ec) override;
  void on_header_impl(error_code& ec) override;
  void on_body_init_impl(const boost::optional<std::uint64_t>&, error_code&) override {}
  std::size_t on_body_impl(string_view body, error_code& ec) override;
  void on_chunk_header_impl(std::uint64_t, string_view, error_code&) override {}
  std::size_t on_chunk_body_impl(std::uint64_t, string_view body, error_code& ec) override {
    return on_body_impl(body, ec);
  }
  void on_finish_impl(error_code&) override {}

  /// Offsets into bytes_ of a line, turned into views once the head is whole (bytes_ may
  /// grow until then; the input it was copied from may move between reads).
  struct line_at {
    boost::beast::http::field id;
    std::uint32_t name, name_size, value, value_size;
  };
  /// The reason phrase, then each line's name and value (a usual head fits inline).
  boost::container::small_vector<char, 512> bytes_;
  std::uint32_t reason_size_ = 0;
  boost::container::small_vector<line_at, 12> at_;
  response_head head_;
  char* window_ = nullptr;
  std::size_t window_left_ = 0;
};

}  // namespace sluice::http
