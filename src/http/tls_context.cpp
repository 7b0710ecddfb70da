// SPDX-License-Identifier: Apache-2.0
// OpenSSL contexts built from the rules: the listener's (SNI among its certificates) and the
// https upstreams'.
//
// Every file is read whole into memory and parsed from there, then the SSL_CTXs are built
// from the parsed objects: the checks (a certificate, within its validity, a key that
// matches) and the contexts see the same bytes, even if the file changes meanwhile.
//
// Protocol settings, the same on every context: TLS 1.2 and 1.3 only (RFC 8996 deprecates
// 1.0 and 1.1); for TLS 1.2 only ECDHE key exchange with AEAD ciphers (forward secrecy; the
// TLS 1.3 suites are OpenSSL's defaults, all AEAD); no renegotiation (a client-initiated one
// costs the server a handshake for nothing); no compression (CRIME). ALPN is `http/1.1`
// only: a client offering ALPN without it gets the `no_application_protocol` alert that
// RFC 7301 §3.2 asks for, a client offering none is served HTTP/1.1 all the same.

#include "sluice/http/tls_context.hpp"

#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <spdlog/spdlog.h>
#include <boost/asio/ip/address.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <optional>

namespace sluice::http {
namespace {

namespace ssl = boost::asio::ssl;

/// Largest certificate, key, CA or passphrase file read (a chain is a few KiB).
constexpr std::size_t max_file_bytes = 1024 * 1024;

/// TLS 1.2 suites: ECDHE with AEAD ciphers only (Mozilla's "intermediate" list less DHE).
constexpr const char* tls12_ciphers =
    "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:"
    "ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-RSA-AES256-GCM-SHA384:"
    "ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-CHACHA20-POLY1305";

/// ALPN protocol list in wire format (RFC 7301 §3.1): one length-prefixed name.
constexpr unsigned char alpn_http11[] = {8, 'h', 't', 't', 'p', '/', '1', '.', '1'};
/// With `http2:` on: h2 first (the server's preference), then http/1.1.
constexpr unsigned char alpn_h2_http11[] = {2, 'h', '2', 8, 'h', 't', 't', 'p', '/', '1', '.', '1'};

struct x509_free {
  void operator()(X509* x) const { X509_free(x); }
};
struct pkey_free {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
struct bio_free {
  void operator()(BIO* b) const { BIO_free(b); }
};
struct store_free {
  void operator()(X509_STORE* s) const { X509_STORE_free(s); }
};
struct names_free {
  void operator()(STACK_OF(X509_NAME) * s) const { sk_X509_NAME_pop_free(s, X509_NAME_free); }
};
using x509_ptr = std::unique_ptr<X509, x509_free>;
using pkey_ptr = std::unique_ptr<EVP_PKEY, pkey_free>;
using bio_ptr = std::unique_ptr<BIO, bio_free>;
using store_ptr = std::unique_ptr<X509_STORE, store_free>;
using names_ptr = std::unique_ptr<STACK_OF(X509_NAME), names_free>;

/// The reason of OpenSSL's most recent error on this thread ("" when none); clears them.
std::string openssl_reason() {
  unsigned long last = 0;
  while (const unsigned long e = ERR_get_error()) last = e;
  if (last == 0) return {};
  const char* r = ERR_reason_error_string(last);
  return r ? r : "error " + std::to_string(ERR_GET_REASON(last));
}

/// Collects problems in the diagnostic form of the rules loader.
struct problem_sink {
  const std::string& source;
  std::vector<config::diagnostic>& out;
  bool any = false;

  void add(const config::file_ref& f, const std::string& message) {
    out.push_back({source, f.line, f.field, f.path + ": " + message});
    any = true;
  }
};

/// The whole of a (regular) file, at most max_file_bytes; nullopt with `why` otherwise.
std::optional<std::string> read_file(const std::string& path, std::string& why) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    why = std::string("cannot read file: ") + std::strerror(errno);
    return std::nullopt;
  }
  struct closer {
    int fd;
    ~closer() { ::close(fd); }
  } guard{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    why = "cannot read file: not a regular file";
    return std::nullopt;
  }
  if (static_cast<std::uint64_t>(st.st_size) > max_file_bytes) {
    why = "cannot read file: larger than 1 MiB";
    return std::nullopt;
  }
  std::string text;
  char buf[8192];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      why = std::string("cannot read file: ") + std::strerror(errno);
      return std::nullopt;
    }
    if (n == 0) break;
    text.append(buf, static_cast<std::size_t>(n));
    if (text.size() > max_file_bytes) {
      why = "cannot read file: larger than 1 MiB";
      return std::nullopt;
    }
  }
  return text;
}

bio_ptr memory_bio(const std::string& text) {
  return bio_ptr(BIO_new_mem_buf(text.data(), static_cast<int>(text.size())));
}

/// Every PEM certificate in `text`, in order (none when it holds none).
std::vector<x509_ptr> read_certificates(const std::string& text) {
  std::vector<x509_ptr> certs;
  auto bio = memory_bio(text);
  while (bio) {
    X509* x = PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr);
    if (!x) break;
    certs.emplace_back(x);
  }
  ERR_clear_error();  // the read that ended the loop failed with "no start line"
  return certs;
}

std::string subject_of(X509* x) {
  bio_ptr bio(BIO_new(BIO_s_mem()));
  X509_NAME_print_ex(bio.get(), X509_get_subject_name(x), 0, XN_FLAG_RFC2253);
  char* data = nullptr;
  const long n = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<std::size_t>(n));
}

/// An ASN.1 time as `2026-01-31T12:00:00Z`.
std::string time_text(const ASN1_TIME* t) {
  std::tm tm{};
  if (ASN1_TIME_to_tm(t, &tm) != 1) return "?";
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

/// Why certificate `x` (position `i` of its chain) is not valid now, or "".
std::string validity_problem(X509* x, std::size_t i) {
  const std::string which =
      i == 0 ? "the certificate"
             : "chain certificate " + std::to_string(i) + " (" + subject_of(x) + ")";
  if (X509_cmp_current_time(X509_get0_notAfter(x)) < 0)
    return which + " expired on " + time_text(X509_get0_notAfter(x));
  if (X509_cmp_current_time(X509_get0_notBefore(x)) > 0)
    return which + " is not valid before " + time_text(X509_get0_notBefore(x));
  return {};
}

/// The passphrase callback's state: what to give, and whether OpenSSL asked for one.
struct passphrase_state {
  const std::string* passphrase = nullptr;
  bool asked = false;
};

int passphrase_cb(char* buf, int size, int /*rwflag*/, void* u) {
  auto* st = static_cast<passphrase_state*>(u);
  st->asked = true;
  if (!st->passphrase || st->passphrase->size() > static_cast<std::size_t>(size)) return -1;
  std::memcpy(buf, st->passphrase->data(), st->passphrase->size());
  return static_cast<int>(st->passphrase->size());
}

/// RFC 7301 §3.2: h2 when HTTP/2 is on (`arg` not null) and the client offers it, else
/// http/1.1 when the client offers it, else the no_application_protocol alert.
int select_alpn(SSL*, const unsigned char** out, unsigned char* outlen, const unsigned char* in,
                unsigned int inlen, void* arg) {
  unsigned char* chosen = nullptr;
  const bool h2 = arg != nullptr;
  if (SSL_select_next_proto(&chosen, outlen, h2 ? alpn_h2_http11 : alpn_http11,
                            h2 ? sizeof alpn_h2_http11 : sizeof alpn_http11, in,
                            inlen) != OPENSSL_NPN_NEGOTIATED) {
    return SSL_TLSEXT_ERR_ALERT_FATAL;
  }
  *out = chosen;
  return SSL_TLSEXT_ERR_OK;
}

/// Settings every context shares (see the top of this file). Throws on OpenSSL failure.
void common_settings(SSL_CTX* ctx) {
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  SSL_CTX_set_max_proto_version(ctx, TLS1_3_VERSION);
  SSL_CTX_set_options(ctx, SSL_OP_NO_COMPRESSION | SSL_OP_NO_RENEGOTIATION);
  if (SSL_CTX_set_cipher_list(ctx, tls12_ciphers) != 1) {
    throw std::runtime_error("SSL_CTX_set_cipher_list: " + openssl_reason());
  }
}

}  // namespace

// --- the listener ------------------------------------------------------------------------

struct server_tls::impl {
  struct entry {
    std::unique_ptr<ssl::context> ctx;
    x509_ptr leaf;
  };
  std::vector<entry> entries;  // tls.certificates order; the first is the default
  std::vector<std::string> subjects;

  /// SNI (RFC 6066 §3): the first certificate naming the requested host.
  static int on_servername(SSL* ssl, int* /*alert*/, void* arg) {
    const auto* self = static_cast<const impl*>(arg);
    const char* name = SSL_get_servername(ssl, TLSEXT_NAMETYPE_host_name);
    if (!name || !*name) return SSL_TLSEXT_ERR_OK;
    for (std::size_t i = 0; i < self->entries.size(); ++i) {
      if (X509_check_host(self->entries[i].leaf.get(), name, 0, 0, nullptr) == 1) {
        if (i > 0) SSL_set_SSL_CTX(ssl, self->entries[i].ctx->native_handle());
        return SSL_TLSEXT_ERR_OK;
      }
    }
    return SSL_TLSEXT_ERR_NOACK;  // the default certificate, which does not name it
  }
};

server_tls::server_tls() : impl_(std::make_unique<impl>()) {}
server_tls::~server_tls() = default;

ssl::context& server_tls::context() const {
  return *impl_->entries.front().ctx;
}

const std::vector<std::string>& server_tls::subjects() const {
  return impl_->subjects;
}

std::shared_ptr<const server_tls> server_tls::build(const config::listener_tls& settings,
                                                    bool http2, const std::string& source,
                                                    std::vector<config::diagnostic>& problems) {
  problem_sink sink{source, problems};
  ERR_clear_error();

  // The passphrase of encrypted keys (a problem with its source is reported once, not again
  // for each key it would have decrypted).
  std::optional<std::string> passphrase;
  const std::size_t before_passphrase = problems.size();
  if (!settings.key_passphrase_env.empty()) {
    if (const char* v = std::getenv(settings.key_passphrase_env.c_str())) {
      passphrase = v;
    } else {
      problems.push_back(
          {source, settings.key_passphrase_env_line, "tls.key_passphrase_env",
           "the environment variable " + settings.key_passphrase_env + " is not set"});
      sink.any = true;
    }
  }
  if (!settings.key_passphrase_file.path.empty()) {
    const auto& f = settings.key_passphrase_file;
    struct stat st {};
    std::string why;
    if (::stat(f.path.c_str(), &st) == 0 && (st.st_mode & (S_IRWXG | S_IRWXO)) != 0) {
      char mode[8];
      std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
      sink.add(f, std::string("group or others may access it (mode ") + mode +
                      "): it must be readable by its owner only (chmod 600)");
    } else if (auto text = read_file(f.path, why)) {
      while (!text->empty() && (text->back() == '\n' || text->back() == '\r')) text->pop_back();
      passphrase = std::move(*text);
    } else {
      sink.add(f, why);
    }
  }

  const bool passphrase_failed = problems.size() != before_passphrase;

  // The client CAs: one store and one name list, given to every context.
  store_ptr ca_store;
  names_ptr ca_names;
  if (!settings.client_ca.path.empty()) {
    std::string why;
    if (auto text = read_file(settings.client_ca.path, why)) {
      auto cas = read_certificates(*text);
      if (cas.empty()) {
        sink.add(settings.client_ca, "holds no PEM certificate");
      } else {
        ca_store.reset(X509_STORE_new());
        ca_names.reset(sk_X509_NAME_new_null());
        for (const auto& c : cas) {
          X509_STORE_add_cert(ca_store.get(), c.get());
          sk_X509_NAME_push(ca_names.get(), X509_NAME_dup(X509_get_subject_name(c.get())));
        }
      }
    } else {
      sink.add(settings.client_ca, why);
    }
  }

  std::shared_ptr<server_tls> out(new server_tls());
  for (const auto& cert : settings.certificates) {
    std::string why;
    auto cert_text = read_file(cert.cert.path, why);
    if (!cert_text) {
      sink.add(cert.cert, why);
      continue;
    }
    auto chain = read_certificates(*cert_text);
    if (chain.empty()) {
      sink.add(cert.cert, "holds no PEM certificate");
      continue;
    }
    bool valid = true;
    for (std::size_t i = 0; i < chain.size(); ++i) {
      if (auto p = validity_problem(chain[i].get(), i); !p.empty()) {
        sink.add(cert.cert, p);
        valid = false;
      }
    }
    auto key_text = read_file(cert.key.path, why);
    if (!key_text) {
      sink.add(cert.key, why);
      continue;
    }
    passphrase_state ps{passphrase ? &*passphrase : nullptr};
    auto bio = memory_bio(*key_text);
    pkey_ptr key(PEM_read_bio_PrivateKey(bio.get(), nullptr, passphrase_cb, &ps));
    if (!key) {
      const auto reason = openssl_reason();
      if (ps.asked && !passphrase && passphrase_failed) {
        // The passphrase's source failed, and is reported already.
      } else if (ps.asked && !passphrase) {
        sink.add(cert.key,
                 "the key is encrypted: give its passphrase with tls.key_passphrase_env or "
                 "tls.key_passphrase_file");
      } else if (ps.asked) {
        sink.add(cert.key,
                 "the key cannot be decrypted with the passphrase given (" + reason + ")");
      } else {
        sink.add(cert.key, "holds no PEM private key (" + reason + ")");
      }
      continue;
    }
    if (X509_check_private_key(chain.front().get(), key.get()) != 1) {
      ERR_clear_error();
      sink.add(cert.key, "the key does not match the certificate in " + cert.cert.path);
      continue;
    }
    if (!valid || sink.any) continue;

    auto ctx = std::make_unique<ssl::context>(ssl::context::tls_server);
    SSL_CTX* h = ctx->native_handle();
    common_settings(h);
    bool ok = SSL_CTX_use_certificate(h, chain.front().get()) == 1;
    for (std::size_t i = 1; ok && i < chain.size(); ++i)
      ok = SSL_CTX_add1_chain_cert(h, chain[i].get()) == 1;
    ok = ok && SSL_CTX_use_PrivateKey(h, key.get()) == 1 && SSL_CTX_check_private_key(h) == 1;
    if (!ok) {
      sink.add(cert.cert, "OpenSSL refused the certificate or its key (" + openssl_reason() + ")");
      continue;
    }
    // Session resumption with client certificates needs a session id context (else OpenSSL
    // refuses to resume: "session id context uninitialized").
    static constexpr unsigned char sid[] = {'s', 'l', 'u', 'i', 'c', 'e'};
    SSL_CTX_set_session_id_context(h, sid, sizeof sid);
    static int h2_on = 1;
    SSL_CTX_set_alpn_select_cb(h, select_alpn, http2 ? &h2_on : nullptr);
    SSL_CTX_set_tlsext_servername_callback(h, &impl::on_servername);
    SSL_CTX_set_tlsext_servername_arg(h, out->impl_.get());
    if (ca_store) {
      SSL_CTX_set1_cert_store(h, ca_store.get());
      SSL_CTX_set_client_CA_list(h, SSL_dup_CA_list(ca_names.get()));
    }
    int mode = SSL_VERIFY_NONE;
    if (settings.verify_client == config::client_verify::optional) mode = SSL_VERIFY_PEER;
    if (settings.verify_client == config::client_verify::require)
      mode = SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT;
    SSL_CTX_set_verify(h, mode, nullptr);
    out->impl_->subjects.push_back(subject_of(chain.front().get()));
    out->impl_->entries.push_back({std::move(ctx), std::move(chain.front())});
  }
  if (sink.any) return nullptr;
  if (out->impl_->entries.empty()) {
    problems.push_back({source, settings.line, "tls.certificates", "no certificate is given"});
    return nullptr;
  }
  return out;
}

// --- upstreams ---------------------------------------------------------------------------

struct client_tls::impl {
  std::unique_ptr<ssl::context> ctx;
  std::string host;
  bool host_is_address = false;
  bool verify = true;
  std::uint64_t id = 0;
};

client_tls::client_tls() : impl_(std::make_unique<impl>()) {}
client_tls::~client_tls() = default;

ssl::context& client_tls::context() const {
  return *impl_->ctx;
}

bool client_tls::verifies() const {
  return impl_->verify;
}

std::uint64_t client_tls::id() const {
  return impl_->id;
}

bool client_tls::prepare(SSL* ssl) const {
  const std::string& host = impl_->host;
  if (impl_->host_is_address) {
    if (!impl_->verify) return true;
    return X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), host.c_str()) == 1;
  }
  if (SSL_set_tlsext_host_name(ssl, host.c_str()) != 1) return false;
  if (!impl_->verify) return true;
  SSL_set_hostflags(ssl, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
  return SSL_set1_host(ssl, host.c_str()) == 1;
}

std::shared_ptr<const client_tls> client_tls::build(const config::upstream& up,
                                                    const std::string& source,
                                                    std::vector<config::diagnostic>& problems) {
  static std::atomic<std::uint64_t> next_id{0};
  problem_sink sink{source, problems};
  ERR_clear_error();
  std::shared_ptr<client_tls> out(new client_tls());
  auto& im = *out->impl_;
  im.ctx = std::make_unique<ssl::context>(ssl::context::tls_client);
  SSL_CTX* h = im.ctx->native_handle();
  common_settings(h);
  // An HTTP/2 upstream is offered `h2` alone: HTTP/1.1 cannot carry its exchange (trailers).
  static constexpr unsigned char alpn_h2[] = {2, 'h', '2'};
  if (up.http2) {
    SSL_CTX_set_alpn_protos(h, alpn_h2, sizeof alpn_h2);  // (0 is success here)
  } else {
    SSL_CTX_set_alpn_protos(h, alpn_http11, sizeof alpn_http11);
  }
  im.host = up.host;
  boost::system::error_code ec;
  (void)boost::asio::ip::make_address(up.host, ec);
  im.host_is_address = !ec;
  im.verify = up.verify;
  im.id = ++next_id;
  if (!up.verify) {
    SSL_CTX_set_verify(h, SSL_VERIFY_NONE, nullptr);
    spdlog::warn(
        "upstream {} ({}): verify: false — its TLS certificate and host name are not checked, "
        "so anyone on the path to it can read and change its traffic",
        up.name, up.url);
    return out;
  }
  SSL_CTX_set_verify(h, SSL_VERIFY_PEER, nullptr);
  if (up.ca_file.path.empty()) {
    if (SSL_CTX_set_default_verify_paths(h) != 1) {
      problems.push_back({source, 0, "upstreams." + up.name,
                          "the system's CA store cannot be loaded (" + openssl_reason() + ")"});
      return nullptr;
    }
    return out;
  }
  std::string why;
  auto text = read_file(up.ca_file.path, why);
  if (!text) {
    sink.add(up.ca_file, why);
    return nullptr;
  }
  auto cas = read_certificates(*text);
  if (cas.empty()) {
    sink.add(up.ca_file, "holds no PEM certificate");
    return nullptr;
  }
  X509_STORE* store = SSL_CTX_get_cert_store(h);
  for (const auto& c : cas) X509_STORE_add_cert(store, c.get());
  ERR_clear_error();  // a duplicate certificate in the file is not an error
  return out;
}

// --- the bundle ----------------------------------------------------------------------------

std::shared_ptr<const client_tls> tls_bundle::upstream(const std::string& name) const {
  auto it = upstreams.find(name);
  return it == upstreams.end() ? nullptr : it->second;
}

std::shared_ptr<const tls_bundle> build_tls(const config::rules& r,
                                            std::vector<config::diagnostic>& problems) {
  const auto before = problems.size();
  auto out = std::make_shared<tls_bundle>();
  if (r.tls.enabled) out->listener = server_tls::build(r.tls, r.http2, r.source, problems);
  for (const auto& [name, up] : r.upstreams) {
    if (!up.tls) continue;
    if (auto c = client_tls::build(up, r.source, problems)) out->upstreams.emplace(name, c);
  }
  if (problems.size() != before) return nullptr;
  return out;
}

}  // namespace sluice::http
