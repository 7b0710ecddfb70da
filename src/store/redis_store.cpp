// Placeholder while the hiredis wiring is written: every check is store_unavailable.
#include "sluice/store/redis_store.hpp"

#include "sluice/errc.hpp"

namespace sluice::store {

struct redis_store::impl {};

redis_store::redis_store(boost::asio::any_io_executor, redis_settings) {}
redis_store::~redis_store() = default;

boost::asio::awaitable<boost::system::result<limiter::check_outcome>> redis_store::check(
    limiter::check_request) {
  co_return boost::system::error_code(errc::store_unavailable);
}
void redis_store::start() {}
void redis_store::stop() {}
store_stats redis_store::stats() const { return {}; }

}  // namespace sluice::store
