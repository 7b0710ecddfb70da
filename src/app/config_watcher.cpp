// SPDX-License-Identifier: Apache-2.0
// Watching the rules file (hot reload: edits, renames, symlink swaps).
//
// Why the directory and not the file: an inotify watch belongs to an inode. Editors and
// deployment tools replace the file (write a temporary file, rename(2) it over the old name),
// and container platforms replace a symlink two levels up, so a watch on the file's inode
// keeps watching an inode nobody will write again. A watch on the directory that holds the
// *name* sees every way the name can get new content: IN_CLOSE_WRITE (in-place write),
// IN_MOVED_TO (rename-over, `..data` swap), IN_CREATE/IN_DELETE (`ln -sfn`, delete and
// recreate), IN_ATTRIB (touch, chmod). The directory the name currently resolves to is
// watched as well, so an in-place write behind a symlink is seen too; after each burst the
// path is resolved again and that second watch follows it.
//
// Events say that *something* in a directory changed. Whether the file did is decided by its
// identity (resolved path, device, inode, size, mtime, ctime): any delivery of the file,
// including the same bytes in a new file or directory, changes it, while a neighbour's swap
// file does not. A stat(2) poll (1 s by default) is the fallback for what inotify cannot
// report, such as the watched directory itself being replaced.
//
// Cost: one thread asleep in poll(2); each burst costs a few stat calls.

#include "sluice/app/config_watcher.hpp"

#include <spdlog/spdlog.h>

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <optional>
#include <system_error>
#include <thread>

namespace sluice::app {
namespace {

namespace fs = std::filesystem;
using clock = std::chrono::steady_clock;

/// What identifies one delivery of the file.
struct identity {
  bool exists = false;
  std::string real;
  dev_t dev = 0;
  ino_t ino = 0;
  off_t size = 0;
  long long mtime_ns = 0;
  long long ctime_ns = 0;

  bool operator==(const identity&) const = default;
};

identity identify(const std::string& path) {
  identity id;
  std::error_code ec;
  auto real = fs::canonical(path, ec);
  if (ec) return id;
  struct stat st {};
  if (::stat(real.c_str(), &st) != 0) return id;
  id.exists = true;
  id.real = real.string();
  id.dev = st.st_dev;
  id.ino = st.st_ino;
  id.size = st.st_size;
  id.mtime_ns = static_cast<long long>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec;
  id.ctime_ns = static_cast<long long>(st.st_ctim.tv_sec) * 1'000'000'000 + st.st_ctim.tv_nsec;
  return id;
}

constexpr std::uint32_t dir_mask = IN_CLOSE_WRITE | IN_MOVED_TO | IN_MOVED_FROM | IN_CREATE |
                                   IN_DELETE | IN_ATTRIB | IN_DELETE_SELF | IN_MOVE_SELF |
                                   IN_ONLYDIR;

}  // namespace

struct config_watcher::impl {
  std::string path;
  std::function<void()> on_change;
  watch_settings settings;
  int inotify_fd = -1;
  int stop_fd = -1;
  std::string dir;         // directory holding the name
  std::string target_dir;  // directory the name resolves into ("" when the same or unknown)
  int target_wd = -1;
  identity last;
  std::thread thread;

  ~impl() {
    if (inotify_fd >= 0) ::close(inotify_fd);
    if (stop_fd >= 0) ::close(stop_fd);
  }

  /// (Re-)adds the watches: the name's directory (idempotent for the same inode) and the
  /// directory the name resolves into now.
  void rewatch() {
    if (::inotify_add_watch(inotify_fd, dir.c_str(), dir_mask) < 0) {
      spdlog::debug("config watcher: cannot watch {}: {}", dir, std::strerror(errno));
    }
    std::error_code ec;
    auto real = fs::canonical(path, ec);
    std::string wanted = ec ? std::string() : real.parent_path().string();
    std::error_code ec2;
    if (!wanted.empty() && fs::equivalent(wanted, dir, ec2)) wanted.clear();
    if (wanted == target_dir) return;
    if (target_wd >= 0) ::inotify_rm_watch(inotify_fd, target_wd);  // may be gone already
    target_wd = -1;
    target_dir = wanted;
    if (!target_dir.empty())
      target_wd = ::inotify_add_watch(inotify_fd, target_dir.c_str(), dir_mask);
  }

  /// Drains the inotify queue; true when any event was read.
  bool drain() {
    alignas(inotify_event) std::array<char, 16 * 1024> buf{};
    bool any = false;
    while (true) {
      const ssize_t n = ::read(inotify_fd, buf.data(), buf.size());
      if (n <= 0) break;  // EAGAIN: drained
      any = true;
    }
    return any;
  }

  void check() {
    rewatch();
    identity now = identify(path);
    if (now == last) return;
    last = std::move(now);
    try {
      on_change();
    } catch (const std::exception& e) {
      spdlog::error("config watcher: reload failed: {}", e.what());
    }
  }

  void run() {
    // End of the current burst's quiet time, when `settling` (a plain time point and flag:
    // GCC 12 warns falsely of an uninitialised std::optional<time_point> here).
    clock::time_point due{};
    bool settling = false;
    auto next_poll = clock::now() + settings.poll;
    while (true) {
      const auto now = clock::now();
      int timeout = -1;
      auto until = [&](clock::time_point t) {
        const auto ms = std::chrono::ceil<std::chrono::milliseconds>(t - now).count();
        const int v = static_cast<int>(std::max<long long>(0, ms));
        timeout = timeout < 0 ? v : std::min(timeout, v);
      };
      if (settling) until(due);
      if (settings.poll.count() > 0) until(next_poll);
      std::array<pollfd, 2> fds{{{inotify_fd, POLLIN, 0}, {stop_fd, POLLIN, 0}}};
      const int r = ::poll(fds.data(), fds.size(), timeout);
      if (r < 0 && errno != EINTR) {
        spdlog::error("config watcher: poll: {}", std::strerror(errno));
        return;
      }
      if (fds[1].revents != 0) return;
      if (fds[0].revents != 0 && drain()) {
        due = clock::now() + settings.debounce;
        settling = true;
      }
      const auto t = clock::now();
      if (settings.poll.count() > 0 && t >= next_poll) {
        next_poll = t + settings.poll;
        // A change inotify did not report still gets the quiet time before it is read.
        if (!settling && !(identify(path) == last)) {
          due = t + settings.debounce;
          settling = true;
        }
      }
      if (settling && t >= due) {
        settling = false;
        check();
      }
    }
  }
};

config_watcher::config_watcher(std::string path, std::function<void()> on_change,
                               watch_settings settings)
    : impl_(std::make_unique<impl>()) {
  impl_->path = std::move(path);
  impl_->on_change = std::move(on_change);
  impl_->settings = settings;
  fs::path parent = fs::path(impl_->path).parent_path();
  impl_->dir = parent.empty() ? "." : parent.string();
  impl_->inotify_fd = ::inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  if (impl_->inotify_fd < 0)
    throw std::system_error(errno, std::generic_category(), "inotify_init1");
  impl_->stop_fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (impl_->stop_fd < 0) throw std::system_error(errno, std::generic_category(), "eventfd");
  if (::inotify_add_watch(impl_->inotify_fd, impl_->dir.c_str(), dir_mask) < 0) {
    throw std::system_error(errno, std::generic_category(), "inotify_add_watch " + impl_->dir);
  }
  impl_->rewatch();
  impl_->last = identify(impl_->path);
  impl_->thread = std::thread([p = impl_.get()] { p->run(); });
}

config_watcher::~config_watcher() {
  stop();
}

void config_watcher::stop() {
  if (!impl_->thread.joinable()) return;
  const std::uint64_t one = 1;
  [[maybe_unused]] auto n = ::write(impl_->stop_fd, &one, sizeof one);
  impl_->thread.join();
}

}  // namespace sluice::app
