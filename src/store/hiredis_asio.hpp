// SPDX-License-Identifier: Apache-2.0
#pragma once
// Private to the store room: drives one hiredis 0.14 async context from an Asio executor.
//
// hiredis asks its event loop, through the `ac->ev` hooks, to start or stop telling it when the
// socket is readable or writable (addRead/delRead/addWrite/delWrite, level-triggered and
// idempotent), and calls `cleanup` exactly once when the context is freed — after which it
// closes the fd itself. The hooks here map that onto `posix::stream_descriptor::async_wait`:
// each direction keeps at most one wait in flight; a wait that completes while its direction is
// no longer wanted is simply not re-armed. `cleanup` releases (does not close) the descriptor,
// which cancels the waits; their handlers hold a shared_ptr to this adapter and see `alive_`
// false. Everything runs on the one executor the adapter was attached with.

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>

#include <memory>

struct redisAsyncContext;

namespace sluice::store::detail {

class hiredis_asio : public std::enable_shared_from_this<hiredis_asio> {
 public:
  /// Installs the hooks on `ac` (whose fd must be valid) and arms write (a non-blocking connect
  /// completes on writability) and read. Returns nullptr if `ac` already has an adapter or the
  /// descriptor cannot be registered. The adapter lives until hiredis calls `cleanup`.
  static std::shared_ptr<hiredis_asio> attach(redisAsyncContext* ac,
                                              boost::asio::any_io_executor ex);

  hiredis_asio(redisAsyncContext* ac, boost::asio::any_io_executor ex);

  /// False once hiredis has cleaned the context up (the context may be freed).
  bool alive() const { return alive_; }

 private:
  static void add_read(void* p);
  static void del_read(void* p);
  static void add_write(void* p);
  static void del_write(void* p);
  static void cleanup(void* p);

  void arm_read();
  void arm_write();

  redisAsyncContext* ac_;
  boost::asio::posix::stream_descriptor sd_;
  std::shared_ptr<hiredis_asio> self_;  // keeps the adapter alive until cleanup
  bool alive_ = true;
  bool want_read_ = false;
  bool want_write_ = false;
  bool read_pending_ = false;
  bool write_pending_ = false;
};

}  // namespace sluice::store::detail
