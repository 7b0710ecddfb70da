// SPDX-License-Identifier: Apache-2.0
// Bounded reads of configuration files. Why the bound and the type check: the files are read
// whole into memory and then parsed, so `--check-config /dev/zero`, a FIFO or a runaway file
// would otherwise read forever (or block in open()) with memory growing without limit. A file
// holding a secret must also be its owner's alone: the mode is checked on the descriptor that
// is read, so no rename between a stat() and the open() can slip another file in.

#include "config/file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
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

std::string read_bounded(const std::string& path, std::size_t max_bytes, bool owner_only,
                         std::string& out) {
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
  } else if (owner_only && (st.st_mode & 077) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
    why = std::string((st.st_mode & 044) != 0 ? "readable" : "writable") +
          " by group or others (mode " + mode + "); it holds a secret: make it its owner's " +
          "alone (chmod 600)";
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

}  // namespace

std::string read_regular(const std::string& path, std::size_t max_bytes, std::string& out) {
  return read_bounded(path, max_bytes, false, out);
}

std::string read_private(const std::string& path, std::size_t max_bytes, std::string& out) {
  return read_bounded(path, max_bytes, true, out);
}

}  // namespace sluice::config::file
