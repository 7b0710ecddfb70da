// SPDX-License-Identifier: Apache-2.0
// The access log (include/sluice/observability/access_log.hpp): lines formatted on the caller's
// thread, written by spdlog's async logger (overrun_oldest: a full queue drops the oldest line,
// never blocks a worker) through a file sink that reopens its file when asked.
#include "sluice/observability/access_log.hpp"

#include "sluice/utf8.hpp"

#include <fcntl.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <unistd.h>

#include <spdlog/async.h>
#include <spdlog/async_logger.h>
#include <spdlog/details/thread_pool.h>
#include <spdlog/sinks/base_sink.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <boost/json/serialize.hpp>
#include <boost/json/string.hpp>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <mutex>
#include <stdexcept>

namespace sluice::observability {
namespace {

/// A file sink that appends to `path` and reopens it (same path) before the next line once
/// `reopen` is set — the file logrotate moved away keeps its lines, the new one gets the next.
class reopening_file_sink final : public spdlog::sinks::base_sink<std::mutex> {
 public:
  reopening_file_sink(std::string path, std::shared_ptr<std::atomic<bool>> reopen)
      : path_(std::move(path)), reopen_(std::move(reopen)) {
    open();
  }
  ~reopening_file_sink() override {
    if (fd_ >= 0) ::close(fd_);
  }

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    if (reopen_->exchange(false)) {
      if (fd_ >= 0) ::close(fd_);
      fd_ = -1;
      try {
        open();
      } catch (const std::exception&) {
        // The old descriptor is gone; lines are lost until the next reopen succeeds.
      }
    }
    if (fd_ < 0) return;
    line_.assign(msg.payload.data(), msg.payload.size());
    line_ += '\n';
    const char* p = line_.data();
    std::size_t left = line_.size();
    while (left > 0) {
      const ssize_t n = ::write(fd_, p, left);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return;
      p += n;
      left -= static_cast<std::size_t>(n);
    }
  }
  void flush_() override {}  // every line is written at once (O_APPEND, no user buffer)

 private:
  void open() {
    fd_ = ::open(path_.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0640);
    if (fd_ < 0) {
      throw std::runtime_error("access log " + path_ +
                               ": cannot be opened: " + std::strerror(errno));
    }
  }

  std::string path_;
  std::shared_ptr<std::atomic<bool>> reopen_;
  int fd_ = -1;
  std::string line_;
};

void append_time(std::string& out, std::int64_t unix_ms) {
  const std::time_t secs = static_cast<std::time_t>(unix_ms / 1000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[96];  // room for any int the fields could hold (-Wformat-truncation)
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                static_cast<int>(unix_ms % 1000));
  out += buf;
}

void append_ms(std::string& out, double ms) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f", ms);
  out += buf;
}

// A value of the plain format: `-` when empty; never a space, quote or control byte (those
// become '_': a line is split on spaces).
void append_token(std::string& out, std::string_view v) {
  if (v.empty()) {
    out += '-';
    return;
  }
  for (char c : v) {
    const auto u = static_cast<unsigned char>(c);
    out += (u <= 0x20 || u == 0x7f || c == '"') ? '_' : c;
  }
}

// A JSON string (RFC 8259 §8.1: UTF-8). Boost.JSON escapes quotes and controls but copies
// bytes above 0x7F as they are, so an ill-formed sequence (a client's target, header-made
// identity) is repaired first: U+FFFD, or `%XX` for the target (the byte as a URI writes it).
void append_json_string(std::string& out, std::string_view v,
                        utf8::repair how = utf8::repair::replacement_character) {
  if (utf8::first_invalid(v) == std::string_view::npos) {
    out += boost::json::serialize(boost::json::string(v));
  } else {
    out += boost::json::serialize(boost::json::string(utf8::make_valid(v, how)));
  }
}

}  // namespace

std::string key_hash(std::string_view key, std::string_view secret) {
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), secret.data(), static_cast<int>(secret.size()),
       reinterpret_cast<const unsigned char*>(key.data()), key.size(), mac, &len);
  static constexpr char hex[] = "0123456789abcdef";
  std::string out;
  for (unsigned i = 0; i < 6 && i < len; ++i) {
    out += hex[mac[i] >> 4];
    out += hex[mac[i] & 15];
  }
  return out;
}

std::string format_access_line(const access_record& r, access_format f) {
  std::string out;
  out.reserve(256);
  if (f == access_format::plain) {
    append_time(out, r.unix_ms);
    out += ' ';
    append_token(out, r.client);
    out += " \"";
    append_token(out, r.method);
    out += ' ';
    append_token(out, r.target);
    if (!r.protocol.empty()) {
      out += ' ';
      append_token(out, r.protocol);
    }
    out += "\" ";
    out += r.status ? std::to_string(r.status) : "-";
    out += " route=";
    append_token(out, r.route);
    out += " decision=";
    append_token(out, r.decision);
    out += " limit=";
    append_token(out, r.limit);
    out += " remaining=";
    out += r.remaining >= 0 ? std::to_string(r.remaining) : "-";
    out += " upstream=";
    append_token(out, r.upstream);
    out += " upstream_status=";
    out += r.upstream_status ? std::to_string(r.upstream_status) : "-";
    out += " upstream_ms=";
    if (r.upstream_ms >= 0) {
      append_ms(out, r.upstream_ms);
    } else {
      out += '-';
    }
    out += " total_ms=";
    append_ms(out, r.total_ms);
    out += " in=" + std::to_string(r.bytes_in) + " out=" + std::to_string(r.bytes_out);
    out += " key=";
    append_token(out, r.key_hash);
    return out;
  }
  out += "{\"time\":\"";
  append_time(out, r.unix_ms);
  out += "\",\"client\":";
  append_json_string(out, r.client);
  out += ",\"method\":";
  append_json_string(out, r.method);
  out += ",\"target\":";
  append_json_string(out, r.target, utf8::repair::percent_encode);
  if (!r.protocol.empty()) {
    out += ",\"protocol\":";
    append_json_string(out, r.protocol);
  }
  out += ",\"status\":";
  out += r.status ? std::to_string(r.status) : "null";
  auto opt = [&out](const char* name, std::string_view v) {
    out += ",\"";
    out += name;
    out += "\":";
    if (v.empty()) {
      out += "null";
    } else {
      append_json_string(out, v);
    }
  };
  opt("route", r.route);
  opt("decision", r.decision);
  opt("limit", r.limit);
  out += ",\"remaining\":";
  out += r.remaining >= 0 ? std::to_string(r.remaining) : "null";
  opt("upstream", r.upstream);
  out += ",\"upstream_status\":";
  out += r.upstream_status ? std::to_string(r.upstream_status) : "null";
  out += ",\"upstream_ms\":";
  if (r.upstream_ms >= 0) {
    append_ms(out, r.upstream_ms);
  } else {
    out += "null";
  }
  out += ",\"total_ms\":";
  append_ms(out, r.total_ms);
  out += ",\"bytes_in\":" + std::to_string(r.bytes_in);
  out += ",\"bytes_out\":" + std::to_string(r.bytes_out);
  opt("key", r.key_hash);
  out += '}';
  return out;
}

access_log::access_log(const std::string& path, access_format format, std::size_t queue)
    : format_(format), reopen_(std::make_shared<std::atomic<bool>>(false)) {
  spdlog::sink_ptr sink;
  if (path == "-") {
    sink = std::make_shared<spdlog::sinks::stdout_sink_mt>();
  } else {
    sink = std::make_shared<reopening_file_sink>(path, reopen_);
  }
  sink->set_pattern("%v");
  pool_ = std::make_shared<spdlog::details::thread_pool>(queue, 1);
  logger_ = std::make_shared<spdlog::async_logger>("access", std::move(sink), pool_,
                                                   spdlog::async_overflow_policy::overrun_oldest);
  logger_->set_level(spdlog::level::info);
  logger_->flush_on(spdlog::level::off);
}

access_log::~access_log() {
  try {
    flush();
  } catch (...) {
  }
}

void access_log::write(const access_record& r) noexcept {
  try {
    logger_->info(format_access_line(r, format_));
  } catch (...) {
    // A line that cannot be formatted or queued is lost, never an exception on a worker.
  }
}

void access_log::reopen() noexcept {
  reopen_->store(true);
}

std::uint64_t access_log::dropped() const {
  return pool_->overrun_counter();
}

void access_log::flush() {
  logger_->flush();
  // The flush is queued behind the lines; wait until the queue is empty.
  for (int i = 0; i < 2000 && pool_->queue_size() > 0; ++i) ::usleep(1000);
}

}  // namespace sluice::observability
