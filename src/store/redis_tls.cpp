// SPDX-License-Identifier: Apache-2.0
#include "sluice/store/redis_tls.hpp"

#include <boost/asio/ssl/context.hpp>
#include <boost/system/system_error.hpp>

#include <openssl/ssl.h>

#include <stdexcept>

namespace sluice::store {

namespace ssl = boost::asio::ssl;

std::shared_ptr<ssl::context> make_redis_tls_context(const redis_tls_options& o) {
  auto ctx = std::make_shared<ssl::context>(ssl::context::tls_client);
  ctx->set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 |
                   ssl::context::no_sslv3 | ssl::context::no_tlsv1 | ssl::context::no_tlsv1_1);
  const auto step = [](const std::string& what, auto&& f) {
    try {
      f();
    } catch (const boost::system::system_error& e) {
      throw std::runtime_error(what + ": " + e.code().message());
    }
  };
  if (o.ca_file.empty()) {
    step("the system's trust store", [&] { ctx->set_default_verify_paths(); });
  } else {
    step("store.tls.ca_file " + o.ca_file, [&] { ctx->load_verify_file(o.ca_file); });
  }
  if (!o.cert_file.empty()) {
    step("store.tls.cert_file " + o.cert_file,
         [&] { ctx->use_certificate_chain_file(o.cert_file); });
    step("store.tls.key_file " + o.key_file,
         [&] { ctx->use_private_key_file(o.key_file, ssl::context::pem); });
    if (SSL_CTX_check_private_key(ctx->native_handle()) != 1) {
      throw std::runtime_error("store.tls.key_file " + o.key_file +
                               ": does not match store.tls.cert_file " + o.cert_file);
    }
  }
  return ctx;
}

}  // namespace sluice::store
