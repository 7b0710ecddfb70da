// SPDX-License-Identifier: Apache-2.0
#pragma once
// Private to the store room: the completion handler the Redis clients keep per command.

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/append.hpp>
#include <boost/asio/associated_executor.hpp>
#include <boost/asio/post.hpp>
#include <boost/system/error_code.hpp>

#include <memory>
#include <utility>

namespace sluice::store::detail {

/// A type-erased, move-only completion handler for `void(error_code, T)`. (Boost 1.81's
/// any_completion_handler recurses when wrapped by append/post, so this small one is used.)
template <class T>
class posted_handler {
 public:
  posted_handler() = default;
  template <class Handler>
  explicit posted_handler(Handler h) : impl_(std::make_unique<model<Handler>>(std::move(h))) {}

  /// Posts the completion to the handler's associated executor (`fallback` if none); never
  /// runs it inline. Consumes the handler; a second call does nothing.
  void post(const boost::asio::any_io_executor& fallback, boost::system::error_code ec, T value) {
    if (auto i = std::move(impl_)) i->post(fallback, ec, std::move(value));
  }

 private:
  struct concept_t {
    virtual ~concept_t() = default;
    virtual void post(const boost::asio::any_io_executor& fallback, boost::system::error_code ec,
                      T value) = 0;
  };
  template <class Handler>
  struct model final : concept_t {
    explicit model(Handler h) : handler(std::move(h)) {}
    void post(const boost::asio::any_io_executor& fallback, boost::system::error_code ec,
              T value) override {
      auto ex = boost::asio::get_associated_executor(handler, fallback);
      boost::asio::post(ex, boost::asio::append(std::move(handler), ec, std::move(value)));
    }
    Handler handler;
  };
  std::unique_ptr<concept_t> impl_;
};

}  // namespace sluice::store::detail
