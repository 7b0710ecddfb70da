// Bounded reads of configuration files. Why the bound and the type check: both files are read
// whole into memory and then parsed, so `--check-config /dev/zero`, a FIFO or a runaway file
// would otherwise read forever (or block in open()) with memory growing without limit.

#include "config/file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace sluice::config::file {
namespace {

std::string size_text(std::size_t bytes) {
  constexpr std::size_t mib = 1024 * 1024;
  if (bytes % mib == 0) return std::to_string(bytes / mib) + " MiB";
  return std::to_string(bytes) + " bytes";
}

const char* kind_of(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISFIFO(mode)) return "a pipe";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a file";
}

}  // namespace

std::string read_regular(const std::string& path, std::size_t max_bytes, std::string& out) {
  out.clear();
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer. It changes
  // nothing for a regular file (reads from disk never return EAGAIN).
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return "cannot read file: " + std::string(std::strerror(errno));
  std::string why;
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    why = "cannot read file: " + std::string(std::strerror(errno));
  } else if (!S_ISREG(st.st_mode)) {
    why = std::string("cannot read file: not a regular file (") + kind_of(st.st_mode) + ")";
  } else if (static_cast<std::size_t>(st.st_size) > max_bytes) {
    why = "cannot read file: larger than " + size_text(max_bytes) + " (" +
          std::to_string(st.st_size) + " bytes)";
  } else {
    out.reserve(static_cast<std::size_t>(st.st_size));
    char buf[65536];
    for (;;) {
      const ssize_t n = ::read(fd, buf, sizeof buf);
      if (n > 0) {
        if (out.size() + static_cast<std::size_t>(n) > max_bytes) {
          why = "cannot read file: larger than " + size_text(max_bytes) + " (it grew while read)";
          break;
        }
        out.append(buf, static_cast<std::size_t>(n));
      } else if (n == 0) {
        break;
      } else if (errno != EINTR) {
        why = "cannot read file: " + std::string(std::strerror(errno));
        break;
      }
    }
  }
  ::close(fd);
  if (!why.empty()) out.clear();
  return why;
}

}  // namespace sluice::config::file
