// SPDX-License-Identifier: Apache-2.0
// Byte-level test peers on plain POSIX sockets: poll(2) bounds every blocking call, so a
// script or a test can block on "the next bytes" without an event loop and still never hang.

#include "support/scripted_upstream.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <random>
#include <stdexcept>
#include <thread>

namespace sluice::test {
namespace {

using steady = std::chrono::steady_clock;

int ms_left(steady::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - steady::now());
  return left.count() < 0 ? 0 : static_cast<int>(left.count());
}

/// Waits for `events` on `fd` until `deadline`; false when the time ran out.
bool wait_for(int fd, short events, steady::time_point deadline) {
  for (;;) {
    pollfd p{fd, events, 0};
    const int r = ::poll(&p, 1, ms_left(deadline));
    if (r > 0) return true;
    if (r == 0) return false;
    if (errno != EINTR) return true;  // let the following call report the error
  }
}

bool iequal(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const auto x = static_cast<unsigned char>(a[i]);
    const auto y = static_cast<unsigned char>(b[i]);
    if (std::tolower(x) != std::tolower(y)) return false;
  }
  return true;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

sockaddr_in loopback(std::uint16_t port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return a;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// raw_socket

raw_socket::raw_socket(int fd) : fd_(fd) {
  const int one = 1;
  ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

raw_socket raw_socket::connect(std::uint16_t port, std::chrono::milliseconds timeout) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) throw std::runtime_error(std::string("raw_socket: socket: ") + std::strerror(errno));
  const auto addr = loopback(port);
  const auto deadline = steady::now() + timeout;
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0) {
    if (errno != EINPROGRESS) {
      const int e = errno;
      ::close(fd);
      throw std::runtime_error(std::string("raw_socket: connect: ") + std::strerror(e));
    }
    if (!wait_for(fd, POLLOUT, deadline)) {
      ::close(fd);
      throw std::runtime_error("raw_socket: connect: timeout");
    }
    int err = 0;
    socklen_t len = sizeof err;
    ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) {
      ::close(fd);
      throw std::runtime_error(std::string("raw_socket: connect: ") + std::strerror(err));
    }
  }
  return raw_socket(fd);
}

raw_socket::~raw_socket() {
  close();
}

raw_socket::raw_socket(raw_socket&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)),
      buf_(std::move(other.buf_)),
      pos_(std::exchange(other.pos_, 0)),
      last_(other.last_) {}

raw_socket& raw_socket::operator=(raw_socket&& other) noexcept {
  if (this != &other) {
    close();
    fd_ = std::exchange(other.fd_, -1);
    buf_ = std::move(other.buf_);
    pos_ = std::exchange(other.pos_, 0);
    last_ = other.last_;
  }
  return *this;
}

bool raw_socket::write(std::string_view bytes, std::chrono::milliseconds timeout) {
  if (fd_ < 0) return false;
  const auto deadline = steady::now() + timeout;
  while (!bytes.empty()) {
    const auto n = ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      bytes.remove_prefix(static_cast<std::size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (!wait_for(fd_, POLLOUT, deadline)) return false;
      continue;
    }
    return false;  // EPIPE, ECONNRESET...
  }
  return true;
}

bool raw_socket::fill(steady::time_point deadline) {
  if (fd_ < 0) {
    last_ = status::eof;
    return false;
  }
  if (pos_ > 0 && pos_ == buf_.size()) {
    buf_.clear();
    pos_ = 0;
  } else if (pos_ > (1u << 20) && pos_ * 2 > buf_.size()) {
    buf_.erase(0, pos_);
    pos_ = 0;
  }
  char chunk[64 * 1024];
  for (;;) {
    const auto n = ::recv(fd_, chunk, sizeof chunk, MSG_DONTWAIT);
    if (n > 0) {
      buf_.append(chunk, static_cast<std::size_t>(n));
      last_ = status::ok;
      return true;
    }
    if (n == 0) {
      last_ = status::eof;
      return false;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      if (!wait_for(fd_, POLLIN, deadline)) {
        last_ = status::timeout;
        return false;
      }
      continue;
    }
    last_ = status::reset;
    return false;
  }
}

void raw_socket::consume(std::size_t n) {
  pos_ += n;
}

std::string_view raw_socket::buffered() const {
  return std::string_view(buf_).substr(pos_);
}

raw_socket::status raw_socket::read_some(std::string& out, std::chrono::milliseconds timeout) {
  if (pos_ < buf_.size()) {
    out.append(buf_, pos_, std::string::npos);
    pos_ = buf_.size();
    last_ = status::ok;
    return last_;
  }
  if (fill(steady::now() + timeout)) {
    out.append(buf_, pos_, std::string::npos);
    pos_ = buf_.size();
  }
  return last_;
}

std::optional<std::string> raw_socket::read_until(std::string_view delim,
                                                  std::chrono::milliseconds timeout) {
  const auto deadline = steady::now() + timeout;
  std::size_t searched = pos_;
  for (;;) {
    const auto at = buf_.find(delim, searched);
    if (at != std::string::npos) {
      std::string out = buf_.substr(pos_, at + delim.size() - pos_);
      consume(out.size());
      last_ = status::ok;
      return out;
    }
    searched = buf_.size() >= delim.size() ? std::max(pos_, buf_.size() - delim.size() + 1) : pos_;
    const std::size_t offset = searched - pos_;
    if (!fill(deadline)) return std::nullopt;
    searched = pos_ + offset;  // fill() may have moved the unconsumed bytes to the front
  }
}

std::optional<std::string> raw_socket::read_exact(std::size_t n,
                                                  std::chrono::milliseconds timeout) {
  const auto deadline = steady::now() + timeout;
  while (buf_.size() - pos_ < n) {
    if (!fill(deadline)) return std::nullopt;
  }
  std::string out = buf_.substr(pos_, n);
  consume(n);
  last_ = status::ok;
  return out;
}

std::string raw_socket::read_to_end(std::chrono::milliseconds timeout) {
  const auto deadline = steady::now() + timeout;
  while (fill(deadline)) {
  }
  std::string out = buf_.substr(pos_);
  consume(out.size());
  return out;
}

bool raw_socket::closed_by_peer(std::chrono::milliseconds wait) {
  const auto deadline = steady::now() + wait;
  while (fill(deadline)) {
  }
  return last_ == status::eof || last_ == status::reset;
}

bool raw_socket::readable(std::chrono::milliseconds wait) {
  if (pos_ < buf_.size()) return true;
  if (fill(steady::now() + wait)) return true;
  return last_ != status::timeout;
}

void raw_socket::shutdown_write() {
  if (fd_ >= 0) ::shutdown(fd_, SHUT_WR);
}

void raw_socket::reset() {
  if (fd_ < 0) return;
  linger l{1, 0};
  ::setsockopt(fd_, SOL_SOCKET, SO_LINGER, &l, sizeof l);
  ::close(fd_);
  fd_ = -1;
}

void raw_socket::close() {
  if (fd_ < 0) return;
  ::close(fd_);
  fd_ = -1;
}

// ---------------------------------------------------------------------------------------------
// HTTP framing helpers

std::string http_head::header(std::string_view name) const {
  for (const auto& [n, v] : headers) {
    if (iequal(n, name)) return v;
  }
  return {};
}

bool http_head::has(std::string_view name) const {
  for (const auto& h : headers) {
    if (iequal(h.first, name)) return true;
  }
  return false;
}

unsigned http_head::status() const {
  if (start_line.rfind("HTTP/", 0) != 0) return 0;
  const auto sp = start_line.find(' ');
  if (sp == std::string::npos || start_line.size() < sp + 4) return 0;
  unsigned code = 0;
  for (std::size_t i = sp + 1; i < sp + 4; ++i) {
    const char c = start_line[i];
    if (c < '0' || c > '9') return 0;
    code = code * 10 + static_cast<unsigned>(c - '0');
  }
  return code;
}

std::string http_head::method() const {
  return start_line.substr(0, start_line.find(' '));
}

std::string http_head::target() const {
  const auto a = start_line.find(' ');
  if (a == std::string::npos) return {};
  const auto b = start_line.find(' ', a + 1);
  return start_line.substr(a + 1, b == std::string::npos ? std::string::npos : b - a - 1);
}

bool http_head::chunked() const {
  for (const auto& [n, v] : headers) {
    if (!iequal(n, "transfer-encoding")) continue;
    std::string lower = v;
    for (auto& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (lower.find("chunked") != std::string::npos) return true;
  }
  return false;
}

std::optional<http_head> read_head(raw_socket& s, std::chrono::milliseconds timeout) {
  auto text = s.read_until("\r\n\r\n", timeout);
  if (!text) return std::nullopt;
  http_head h;
  std::string_view rest(*text);
  const auto eol = rest.find("\r\n");
  h.start_line = std::string(rest.substr(0, eol));
  rest.remove_prefix(eol + 2);
  while (rest.size() > 2) {
    const auto end = rest.find("\r\n");
    const std::string_view line = rest.substr(0, end);
    rest.remove_prefix(end + 2);
    const auto colon = line.find(':');
    if (colon == std::string_view::npos) return std::nullopt;
    h.headers.emplace_back(std::string(line.substr(0, colon)),
                           std::string(trim(line.substr(colon + 1))));
  }
  return h;
}

std::optional<std::string> read_chunked_body(raw_socket& s, std::chrono::milliseconds timeout,
                                             std::vector<std::size_t>* sizes) {
  const auto deadline = steady::now() + timeout;
  auto left = [&] {
    return std::chrono::duration_cast<std::chrono::milliseconds>(deadline - steady::now());
  };
  std::string body;
  for (;;) {
    auto line = s.read_until("\r\n", left());
    if (!line) return std::nullopt;
    std::size_t size = 0;
    std::size_t digits = 0;
    for (const char c : *line) {
      int v = -1;
      if (c >= '0' && c <= '9') v = c - '0';
      if (c >= 'a' && c <= 'f') v = c - 'a' + 10;
      if (c >= 'A' && c <= 'F') v = c - 'A' + 10;
      if (v < 0) break;
      size = size * 16 + static_cast<std::size_t>(v);
      if (++digits > 15) return std::nullopt;
    }
    if (digits == 0) return std::nullopt;
    if (size == 0) break;
    if (sizes) sizes->push_back(size);
    auto data = s.read_exact(size + 2, left());
    if (!data || data->compare(size, 2, "\r\n") != 0) return std::nullopt;
    body.append(*data, 0, size);
  }
  for (;;) {  // trailer section, up to the empty line
    auto line = s.read_until("\r\n", left());
    if (!line) return std::nullopt;
    if (*line == "\r\n") break;
  }
  return body;
}

std::optional<std::string> read_request_body(raw_socket& s, const http_head& head,
                                             std::chrono::milliseconds timeout) {
  if (head.chunked()) return read_chunked_body(s, timeout);
  const auto length = head.header("Content-Length");
  if (length.empty()) return std::string();
  return s.read_exact(std::stoull(length), timeout);
}

std::string chunked(std::string_view data, const std::vector<std::size_t>& sizes) {
  std::string out;
  out.reserve(data.size() + data.size() / 8 + 64);
  std::size_t i = 0;
  char line[32];
  while (!data.empty()) {
    const std::size_t n =
        std::min(std::max<std::size_t>(sizes[i++ % sizes.size()], 1), data.size());
    std::snprintf(line, sizeof line, "%zx\r\n", n);
    out += line;
    out.append(data.substr(0, n));
    out += "\r\n";
    data.remove_prefix(n);
  }
  out += "0\r\n\r\n";
  return out;
}

std::string random_bytes(std::size_t n, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::string out(n, '\0');
  std::size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    const std::uint32_t v = rng();
    std::memcpy(out.data() + i, &v, 4);
  }
  for (; i < n; ++i) out[i] = static_cast<char>(rng() & 0xff);
  return out;
}

// ---------------------------------------------------------------------------------------------
// scripted_upstream

struct scripted_upstream::impl {
  int listener = -1;
  std::uint16_t port = 0;
  std::atomic<bool> stopping{false};
  std::atomic<std::size_t> accepted{0};
  std::thread acceptor;

  std::mutex mutex;  // guards what follows
  script current;
  std::map<std::size_t, int> open;  // index -> fd of connections whose script still runs
  std::vector<std::thread> threads;

  void accept_loop() {
    while (!stopping.load()) {
      pollfd p{listener, POLLIN, 0};
      if (::poll(&p, 1, 50) <= 0) continue;
      const int fd = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) continue;
      const std::size_t index = ++accepted;
      std::lock_guard lock(mutex);
      if (stopping.load()) {
        ::close(fd);
        return;
      }
      open.emplace(index, fd);
      threads.emplace_back([this, fd, index, s = current] {
        raw_socket socket(fd);
        try {
          if (s) s(socket, index);
        } catch (...) {
          // A script that throws (a test assertion helper) just ends its connection.
        }
        std::lock_guard guard(mutex);
        open.erase(index);
        // The socket closes after the fd leaves `open`, so the destructor never shuts down
        // a descriptor number that was reused meanwhile.
        socket.close();
      });
    }
  }
};

scripted_upstream::scripted_upstream(script s) : impl_(std::make_shared<impl>()) {
  impl_->current = std::move(s);
  impl_->listener = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (impl_->listener < 0) throw std::runtime_error("scripted_upstream: socket failed");
  const int one = 1;
  ::setsockopt(impl_->listener, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  auto addr = loopback(0);
  if (::bind(impl_->listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::listen(impl_->listener, 128) != 0) {
    ::close(impl_->listener);
    throw std::runtime_error(std::string("scripted_upstream: bind: ") + std::strerror(errno));
  }
  socklen_t len = sizeof addr;
  ::getsockname(impl_->listener, reinterpret_cast<sockaddr*>(&addr), &len);
  impl_->port = ntohs(addr.sin_port);
  impl_->acceptor = std::thread([self = impl_.get()] { self->accept_loop(); });
}

scripted_upstream::~scripted_upstream() {
  impl_->stopping.store(true);
  impl_->acceptor.join();
  ::close(impl_->listener);
  std::vector<std::thread> threads;
  {
    std::lock_guard lock(impl_->mutex);
    for (const auto& [index, fd] : impl_->open) ::shutdown(fd, SHUT_RDWR);
    threads.swap(impl_->threads);
  }
  for (auto& t : threads) t.join();
}

std::uint16_t scripted_upstream::port() const {
  return impl_->port;
}

std::string scripted_upstream::url() const {
  return "http://127.0.0.1:" + std::to_string(impl_->port);
}

std::size_t scripted_upstream::accepts() const {
  return impl_->accepted.load();
}

void scripted_upstream::set_script(script s) {
  std::lock_guard lock(impl_->mutex);
  impl_->current = std::move(s);
}

std::uint16_t closed_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  auto addr = loopback(0);
  ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  socklen_t len = sizeof addr;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

}  // namespace sluice::test
