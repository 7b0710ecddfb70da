// SPDX-License-Identifier: Apache-2.0
#include "sluice/http/response_head.hpp"

#include <boost/beast/http/error.hpp>
#include <boost/beast/http/status.hpp>

#include <cstring>
#include <limits>

namespace sluice::http {

namespace bhttp = boost::beast::http;

std::string_view response_head::reason() const {
  if (!reason_.empty()) return reason_;
  const auto registered = bhttp::obsolete_reason(static_cast<bhttp::status>(status_));
  return {registered.data(), registered.size()};
}

std::string_view response_head::operator[](bhttp::field f) const {
  for (const auto& line : lines_) {
    if (line.id == f) return line.value_text;
  }
  return {};
}

namespace {

/// Appends `a` then `b` to `bytes` (one growth, no zero fill); their offsets, or false when
/// the block would pass 4 GiB (never for a head under the parser's header_limit).
template <class Bytes>
bool append(Bytes& bytes, std::string_view a, std::string_view b, std::uint32_t& at_a,
            std::uint32_t& at_b) {
  const std::size_t at = bytes.size();
  if (at + a.size() + b.size() > std::numeric_limits<std::uint32_t>::max()) return false;
  bytes.resize(at + a.size() + b.size(), boost::container::default_init);
  char* p = bytes.data() + at;
  if (!a.empty()) std::memcpy(p, a.data(), a.size());
  if (!b.empty()) std::memcpy(p + a.size(), b.data(), b.size());
  at_a = static_cast<std::uint32_t>(at);
  at_b = static_cast<std::uint32_t>(at + a.size());
  return true;
}

}  // namespace

void response_head_parser::on_response_impl(int code, string_view reason, int version,
                                            error_code& ec) {
  head_.status_ = static_cast<unsigned>(code);
  head_.version_ = static_cast<unsigned>(version);
  std::uint32_t at = 0, unused = 0;
  if (!append(bytes_, {reason.data(), reason.size()}, {}, at, unused)) {
    ec = bhttp::error::header_limit;
    return;
  }
  reason_size_ = static_cast<std::uint32_t>(reason.size());
}

void response_head_parser::on_field_impl(bhttp::field name, string_view name_string,
                                         string_view value, error_code& ec) {
  // Copied: the views Beast passes point into the input, which the next read may move, or
  // (a folded value) into a buffer of its own that the next line reuses.
  line_at line{name, 0, static_cast<std::uint32_t>(name_string.size()), 0,
               static_cast<std::uint32_t>(value.size())};
  if (!append(bytes_, {name_string.data(), name_string.size()}, {value.data(), value.size()},
              line.name, line.value)) {
    ec = bhttp::error::header_limit;
    return;
  }
  at_.push_back(line);
}

void response_head_parser::on_header_impl(error_code&) {
  // bytes_ no longer grows: the views can be made.
  const char* base = bytes_.data();
  head_.reason_ = std::string_view(base, reason_size_);
  head_.lines_.clear();
  head_.lines_.reserve(at_.size());
  for (const auto& line : at_) {
    head_.lines_.push_back(head_line{line.id, std::string_view(base + line.name, line.name_size),
                                     std::string_view(base + line.value, line.value_size)});
  }
}

std::size_t response_head_parser::on_body_impl(string_view body, error_code& ec) {
  if (window_ == nullptr) {
    ec = bhttp::error::need_buffer;
    return 0;
  }
  const std::size_t n = std::min(body.size(), window_left_);
  if (n > 0) std::memcpy(window_, body.data(), n);
  window_ += n;
  window_left_ -= n;
  if (n < body.size()) ec = bhttp::error::need_buffer;
  return n;
}

}  // namespace sluice::http
