// SPDX-License-Identifier: Apache-2.0
#include "store/hiredis_asio.hpp"

#include <hiredis/async.h>

#include <boost/system/error_code.hpp>

namespace sluice::store::detail {

namespace asio = boost::asio;

hiredis_asio::hiredis_asio(redisAsyncContext* ac, asio::any_io_executor ex)
    : ac_(ac), sd_(std::move(ex)) {}

std::shared_ptr<hiredis_asio> hiredis_asio::attach(redisAsyncContext* ac,
                                                   asio::any_io_executor ex) {
  if (ac == nullptr || ac->ev.data != nullptr || ac->c.fd < 0) return nullptr;
  auto a = std::make_shared<hiredis_asio>(ac, std::move(ex));
  boost::system::error_code ec;
  a->sd_.assign(ac->c.fd, ec);  // registers with the reactor; hiredis still owns the fd
  if (ec) return nullptr;
  a->self_ = a;
  ac->ev.data = a.get();
  ac->ev.addRead = &hiredis_asio::add_read;
  ac->ev.delRead = &hiredis_asio::del_read;
  ac->ev.addWrite = &hiredis_asio::add_write;
  ac->ev.delWrite = &hiredis_asio::del_write;
  ac->ev.cleanup = &hiredis_asio::cleanup;
  add_write(a.get());
  add_read(a.get());
  return a;
}

void hiredis_asio::add_read(void* p) {
  auto* a = static_cast<hiredis_asio*>(p);
  a->want_read_ = true;
  a->arm_read();
}

void hiredis_asio::del_read(void* p) {
  static_cast<hiredis_asio*>(p)->want_read_ = false;
}

void hiredis_asio::add_write(void* p) {
  auto* a = static_cast<hiredis_asio*>(p);
  a->want_write_ = true;
  a->arm_write();
}

void hiredis_asio::del_write(void* p) {
  static_cast<hiredis_asio*>(p)->want_write_ = false;
}

void hiredis_asio::cleanup(void* p) {
  auto* a = static_cast<hiredis_asio*>(p);
  auto keep = std::move(a->self_);  // `a` stays valid until the end of this function
  a->alive_ = false;
  a->want_read_ = a->want_write_ = false;
  boost::system::error_code ec;
  a->sd_.cancel(ec);
  (void)a->sd_.release();  // hiredis closes the fd right after this hook
  a->ac_->ev.data = nullptr;
}

void hiredis_asio::arm_read() {
  if (read_pending_ || !alive_) return;
  read_pending_ = true;
  sd_.async_wait(asio::posix::descriptor_base::wait_read,
                 [self = shared_from_this()](boost::system::error_code ec) {
                   self->read_pending_ = false;
                   if (ec || !self->alive_ || !self->want_read_) return;
                   // May run reply callbacks and may free the context (then alive_ is false).
                   redisAsyncHandleRead(self->ac_);
                   if (self->alive_ && self->want_read_) self->arm_read();
                 });
}

void hiredis_asio::arm_write() {
  if (write_pending_ || !alive_) return;
  write_pending_ = true;
  sd_.async_wait(asio::posix::descriptor_base::wait_write,
                 [self = shared_from_this()](boost::system::error_code ec) {
                   self->write_pending_ = false;
                   if (ec || !self->alive_ || !self->want_write_) return;
                   redisAsyncHandleWrite(self->ac_);
                   if (self->alive_ && self->want_write_) self->arm_write();
                 });
}

}  // namespace sluice::store::detail
