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
//
// Or with SLUICE_CLOCK_NOW_FILE=PATH: a stopped clock set by hand. PATH holds a time in
// milliseconds since the epoch ("1700000000000"), read again on every clock read, and the
// real-time clocks return exactly that time: it moves only when the test writes another. A
// redis-server under it decides (TIME) and expires keys on the test's clock alone, so a test
// can assert the exact Retry-After of a scenario however slowly the machine runs it. (An
// unreadable or empty file reads as the kernel's time.)
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

// The stopped clock's time in ms since the epoch (SLUICE_CLOCK_NOW_FILE), or -1 when there is
// none (no such variable, or a file without a number).
long long stopped_ms() {
  static const char* path = std::getenv("SLUICE_CLOCK_NOW_FILE");
  if (path == nullptr) return -1;
  const int fd = static_cast<int>(::syscall(SYS_open, path, O_RDONLY | O_CLOEXEC));
  if (fd < 0) return -1;
  char buf[32];
  const long n = ::syscall(SYS_read, fd, buf, sizeof buf - 1);
  ::syscall(SYS_close, fd);
  long long v = 0;
  long i = 0;
  for (; i < n && buf[i] >= '0' && buf[i] <= '9'; ++i) v = v * 10 + (buf[i] - '0');
  return i > 0 ? v : -1;
}

// The real-time clock as this preload makes it: the stopped clock when there is one, else the
// kernel's time plus the offset; `ts` holds the kernel's time (read by the caller).
void adjust(struct timespec* ts) {
  const long long ms = stopped_ms();
  if (ms >= 0) {
    ts->tv_sec = static_cast<time_t>(ms / 1000);
    ts->tv_nsec = static_cast<long>(ms % 1000) * 1'000'000;
    return;
  }
  ts->tv_sec += offset_seconds();
}

bool is_realtime(clockid_t id) {
  return id == CLOCK_REALTIME || id == CLOCK_REALTIME_COARSE || id == CLOCK_TAI;
}

}  // namespace

extern "C" {

int clock_gettime(clockid_t id, struct timespec* ts) {
  const long r = ::syscall(SYS_clock_gettime, id, ts);
  if (r == 0 && is_realtime(id)) adjust(ts);
  return static_cast<int>(r);
}

int gettimeofday(struct timeval* tv, void* /*tz*/) {
  struct timespec ts;
  const long r = ::syscall(SYS_clock_gettime, CLOCK_REALTIME, &ts);
  if (r != 0) return -1;
  adjust(&ts);
  tv->tv_sec = ts.tv_sec;
  tv->tv_usec = ts.tv_nsec / 1000;
  return 0;
}

time_t time(time_t* out) {
  struct timespec ts;
  if (::syscall(SYS_clock_gettime, CLOCK_REALTIME, &ts) != 0) return -1;
  adjust(&ts);
  const time_t t = ts.tv_sec;
  if (out != nullptr) *out = t;
  return t;
}

}  // extern "C"
