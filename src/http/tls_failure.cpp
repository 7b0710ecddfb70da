// SPDX-License-Identifier: Apache-2.0
// Reasons for failed TLS handshakes, from Asio's SSL error codes.
//
// Asio reports an OpenSSL failure (SSL_ERROR_SSL) as an error code of its ssl category whose
// value is the packed ERR_get_error() code: ERR_GET_REASON() gives the SSL_R_* reason. A
// reason at or above SSL_AD_REASON_OFFSET is an alert the peer sent (1000 + the alert code,
// RFC 8446 §6).

#include "sluice/http/tls_failure.hpp"

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509_vfy.h>
#include <boost/asio/error.hpp>
#include <boost/asio/ssl/error.hpp>
#include <boost/beast/core/error.hpp>

namespace sluice::http {

const char* label(tls_failure f) noexcept {
  switch (f) {
    case tls_failure::timeout:
      return "timeout";
    case tls_failure::closed:
      return "closed";
    case tls_failure::not_tls:
      return "not_tls";
    case tls_failure::protocol_version:
      return "protocol_version";
    case tls_failure::no_shared_cipher:
      return "no_shared_cipher";
    case tls_failure::no_application_protocol:
      return "no_application_protocol";
    case tls_failure::no_certificate:
      return "no_certificate";
    case tls_failure::bad_certificate:
      return "bad_certificate";
    case tls_failure::name_mismatch:
      return "name_mismatch";
    case tls_failure::peer_alert:
      return "peer_alert";
    case tls_failure::other:
      return "other";
  }
  return "other";
}

tls_failure classify_tls_failure(const boost::system::error_code& ec, long verify_result) noexcept {
  namespace asio = boost::asio;
  if (ec == boost::beast::error::timeout) return tls_failure::timeout;
  if (ec == asio::ssl::error::stream_truncated || ec == asio::error::eof ||
      ec == asio::error::connection_reset || ec == asio::error::broken_pipe ||
      ec == asio::error::connection_aborted || ec == asio::error::operation_aborted) {
    return tls_failure::closed;
  }
  if (ec.category() != asio::error::get_ssl_category()) return tls_failure::other;
  const auto code = static_cast<unsigned long>(ec.value());
  const int reason = ERR_GET_REASON(code);
  switch (reason) {
    case SSL_R_UNSUPPORTED_PROTOCOL:
    case SSL_R_VERSION_TOO_LOW:
    case SSL_R_NO_PROTOCOLS_AVAILABLE:
    case SSL_R_UNSUPPORTED_SSL_VERSION:
    case SSL_R_TLSV1_ALERT_PROTOCOL_VERSION:
      return tls_failure::protocol_version;
    case SSL_R_HTTP_REQUEST:
    case SSL_R_HTTPS_PROXY_REQUEST:
    case SSL_R_WRONG_VERSION_NUMBER:
      return tls_failure::not_tls;
    case SSL_R_NO_SHARED_CIPHER:
    case SSL_R_NO_SUITABLE_SIGNATURE_ALGORITHM:
      return tls_failure::no_shared_cipher;
    case SSL_R_NO_APPLICATION_PROTOCOL:
      return tls_failure::no_application_protocol;
    case SSL_R_PEER_DID_NOT_RETURN_A_CERTIFICATE:
      return tls_failure::no_certificate;
    case SSL_R_CERTIFICATE_VERIFY_FAILED:
      if (verify_result == X509_V_ERR_HOSTNAME_MISMATCH ||
          verify_result == X509_V_ERR_IP_ADDRESS_MISMATCH)
        return tls_failure::name_mismatch;
      return tls_failure::bad_certificate;
    case SSL_R_UNEXPECTED_EOF_WHILE_READING:
      return tls_failure::closed;
    default:
      break;
  }
  if (reason >= SSL_AD_REASON_OFFSET) return tls_failure::peer_alert;
  return tls_failure::other;
}

}  // namespace sluice::http
