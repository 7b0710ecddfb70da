// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// The response-end hook: how the application learns what became of a request it forwarded —
/// the upstream's final response head, the response body bytes as they are relayed, and how
/// the exchange ended. A forward verdict carries it (forward_plan::watch); the relay feeds it.
/// Costs settled after the response, response-status charges and concurrency slots are
/// built on it: whatever happens to the exchange, the hook's on_end() is called exactly once.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>
#include <utility>

namespace sluice::http {

class response_head;  // sluice/http/response_head.hpp

/// How a forwarded exchange ended (exchange_hook::on_end). The upstream's status, when a
/// final response head was read, is passed beside it.
enum class exchange_end : std::uint8_t {
  /// The upstream's whole response was relayed to the client.
  complete,
  /// The client went away, or was too slow for the write timeout, before the response was
  /// whole: mid-response, waiting for `100 Continue`, or during an interim response.
  client_gone,
  /// The upstream gave no usable response (the client got 502 or 504: unreachable, timeout,
  /// closed, malformed, a TLS failure), or its body broke off or grew past the route's
  /// max_response_body after the head was relayed.
  upstream_failed,
  /// A `101 Switching Protocols` was relayed and the tunnel after it has closed (either side
  /// closed, an idle timeout, or the client never received the 101).
  tunnel_closed,
  /// The upstream never got the whole request: the relay never started, or the request body
  /// broke off or was refused on the way (400, 408, 413).
  not_forwarded,
  /// The gateway cut the exchange off while it was relayed: a stop, or a drain's deadline,
  /// destroyed the session.
  aborted,
};
/// How many exchange_end values there are (an array index bound).
inline constexpr std::size_t exchange_end_count = 6;

/// The metrics label of an end: complete, client_gone, upstream_failed, tunnel_closed,
/// not_forwarded, aborted (the enumerators' names).
constexpr const char* exchange_end_name(exchange_end e) {
  constexpr const char* names[exchange_end_count] = {
      "complete", "client_gone", "upstream_failed", "tunnel_closed", "not_forwarded", "aborted"};
  return names[static_cast<std::size_t>(e)];
}

/// What the application implements to follow one forwarded exchange. Every call is made on
/// the thread of the worker that serves the request, in this order: on_response_head() at
/// most once (the final head: never a 1xx other than 101), on_body() zero or more times,
/// on_end() exactly once (also when no head came). None may throw or block: a store call
/// they need is started, not awaited (e.g. co_spawn on the worker's executor).
class exchange_hook {
 public:
  virtual ~exchange_hook() = default;

  /// The upstream's final response head (status and fields), before any of it is relayed
  /// (the relay has not yet rewritten it: hop-by-hop and rate-limit fields are as received).
  /// `head` is valid for the call only.
  virtual void on_response_head(const response_head& head) noexcept { (void)head; }

  /// A piece of the response body, as received from the upstream (de-chunked), just before it
  /// is written to the client. Bytes are valid for the call only; the relay does not wait for
  /// anything but the call's return, so a hook observes without holding or delaying.
  virtual void on_body(std::string_view bytes) noexcept { (void)bytes; }

  /// The exchange has ended; `upstream_status` is the final response head's status (0: none
  /// was read). Called exactly once, last.
  virtual void on_end(exchange_end end, unsigned upstream_status) noexcept = 0;
};

/// Two hooks followed as one: each call goes to `first`, then to `second` (both non-null).
/// What exchange_watch::add() makes when a request carries two hooks (a settlement and a
/// concurrency slot, say).
class hook_pair final : public exchange_hook {
 public:
  hook_pair(std::unique_ptr<exchange_hook> first, std::unique_ptr<exchange_hook> second)
      : first_(std::move(first)), second_(std::move(second)) {}
  void on_response_head(const response_head& head) noexcept override {
    first_->on_response_head(head);
    second_->on_response_head(head);
  }
  void on_body(std::string_view bytes) noexcept override {
    first_->on_body(bytes);
    second_->on_body(bytes);
  }
  void on_end(exchange_end end, unsigned upstream_status) noexcept override {
    first_->on_end(end, upstream_status);
    second_->on_end(end, upstream_status);
  }

 private:
  std::unique_ptr<exchange_hook> first_, second_;
};

/// Owns one exchange_hook for one forwarded request and guarantees its on_end() exactly once:
/// by end(), or — when the exchange is destroyed first (a request that never reached the
/// relay, a session a stop destroyed) — by the destructor, with `not_forwarded` before the
/// relay began and `aborted` after. Empty (no hook) by default: every call is then one test
/// of a null pointer, and nothing is allocated. Move-only; single thread (the worker's).
class exchange_watch {
 public:
  exchange_watch() = default;
  explicit exchange_watch(std::unique_ptr<exchange_hook> hook) : hook_(std::move(hook)) {}
  exchange_watch(exchange_watch&& o) noexcept
      : hook_(std::move(o.hook_)), status_(o.status_), relaying_(o.relaying_) {}
  /// Ends the hook held (as the destructor would), then takes `o`'s.
  exchange_watch& operator=(exchange_watch&& o) noexcept {
    if (this != &o) {
      abandon();
      hook_ = std::move(o.hook_);
      status_ = o.status_;
      relaying_ = o.relaying_;
    }
    return *this;
  }
  exchange_watch(const exchange_watch&) = delete;
  exchange_watch& operator=(const exchange_watch&) = delete;
  ~exchange_watch() { abandon(); }

  /// Adds the hook of `other` (a watch not yet ended or relayed) to this one's: both are then
  /// called, this watch's first (hook_pair). Nothing changes when `other` holds none.
  void add(exchange_watch other) {
    if (!other.hook_) return;
    if (!hook_) {
      hook_ = std::move(other.hook_);
      return;
    }
    hook_ = std::make_unique<hook_pair>(std::move(hook_), std::move(other.hook_));
  }

  /// Whether a hook is held (and has not ended).
  explicit operator bool() const { return hook_ != nullptr; }

  /// The relay has begun sending the request: a later destruction is `aborted`.
  void relaying() noexcept { relaying_ = true; }
  /// Passes the final response head on (and keeps its status for on_end()).
  void head(const http::response_head& head, unsigned status) noexcept {
    if (!hook_) return;
    status_ = status;
    hook_->on_response_head(head);
  }
  /// Passes a piece of the response body on.
  void body(std::string_view bytes) noexcept {
    if (hook_) hook_->on_body(bytes);
  }
  /// Ends the exchange: on_end(`e`, the head's status) once; later calls do nothing.
  void end(exchange_end e) noexcept {
    if (!hook_) return;
    const std::unique_ptr<exchange_hook> h = std::move(hook_);
    h->on_end(e, status_);
  }

 private:
  void abandon() noexcept { end(relaying_ ? exchange_end::aborted : exchange_end::not_forwarded); }

  std::unique_ptr<exchange_hook> hook_;
  unsigned status_ = 0;
  bool relaying_ = false;
};

}  // namespace sluice::http
