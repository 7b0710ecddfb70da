// SPDX-License-Identifier: Apache-2.0
// A test preload that steps a process's wall clock while it runs (an equivalent of
// libfaketime's FAKETIME_TIMESTAMP_FILE, which cannot run redis-server on Debian bookworm:
// jemalloc reads the clock while libfaketime initialises and the process exits).
//
// LD_PRELOAD it with SLUICE_CLOCK_OFFSET_FILE=PATH: PATH holds a signed offset in seconds
// ("3600", "-3600", "0"), read again on every clock read. gettimeofday(), time() and
// clock_gettime() of the real-time clocks return the kernel's time plus that offset; the
// monotonic clocks are left alone, as a step of NTP (or a suspend) leaves them. The kernel is
// asked directly (syscall), so nothing here allocates or needs the dynamic loader, and it
// works from the first clock read of the process on.
#include <fcntl.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include <cstdlib>

namespace {

long long offset_seconds() {
  static const char* path = std::getenv("SLUICE_CLOCK_OFFSET_FILE");
  if (path == nullptr) return 0;
  const int fd = static_cast<int>(::syscall(SYS_open, path, O_RDONLY | O_CLOEXEC));
  if (fd < 0) return 0;
  char buf[32];
  const long n = ::syscall(SYS_read, fd, buf, sizeof buf - 1);
  ::syscall(SYS_close, fd);
  if (n <= 0) return 0;
  long long v = 0;
  bool neg = false;
  long i = 0;
  if (buf[0] == '-' || buf[0] == '+') {
    neg = buf[0] == '-';
    i = 1;
  }
  for (; i < n && buf[i] >= '0' && buf[i] <= '9'; ++i) v = v * 10 + (buf[i] - '0');
  return neg ? -v : v;
}

bool is_realtime(clockid_t id) {
  return id == CLOCK_REALTIME || id == CLOCK_REALTIME_COARSE || id == CLOCK_TAI;
}

}  // namespace

extern "C" {

int clock_gettime(clockid_t id, struct timespec* ts) {
  const long r = ::syscall(SYS_clock_gettime, id, ts);
  if (r == 0 && is_realtime(id)) ts->tv_sec += offset_seconds();
  return static_cast<int>(r);
}

int gettimeofday(struct timeval* tv, void* /*tz*/) {
  struct timespec ts;
  const long r = ::syscall(SYS_clock_gettime, CLOCK_REALTIME, &ts);
  if (r != 0) return -1;
  tv->tv_sec = ts.tv_sec + offset_seconds();
  tv->tv_usec = ts.tv_nsec / 1000;
  return 0;
}

time_t time(time_t* out) {
  struct timespec ts;
  if (::syscall(SYS_clock_gettime, CLOCK_REALTIME, &ts) != 0) return -1;
  const time_t t = ts.tv_sec + offset_seconds();
  if (out != nullptr) *out = t;
  return t;
}

}  // extern "C"
