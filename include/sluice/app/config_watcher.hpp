// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// Watches a rules file for changes however it is delivered: written in place, written to a
/// temporary file and renamed over it, or swapped in through a symlink (Kubernetes ConfigMap
/// volumes: `rules.yaml` -> `..data/rules.yaml`, `..data` -> `..<stamp>/`, where an update
/// renames a fresh `..data` symlink over the old one).

#include <chrono>
#include <functional>
#include <memory>
#include <string>

namespace sluice::app {

/// Settings of a config_watcher.
struct watch_settings {
  /// Quiet time after the last event of a burst before the file is looked at: one editor
  /// save or one platform swap is several events, and should be one reload.
  std::chrono::milliseconds debounce{150};
  /// Period of the stat(2) fallback check (catches what inotify cannot see, such as a
  /// directory replaced above the watched one). 0 disables it.
  std::chrono::milliseconds poll{1000};
};

/// Calls `on_change` on its own thread whenever the file at `path` may have new content.
///
/// inotify watches the directory holding `path` (never the file's inode, which a rename or a
/// symlink swap replaces) and the directory the path currently resolves to; both are
/// re-resolved after every burst of events. A burst ends after `debounce` without events;
/// then the file's identity (resolved path, device, inode, size, mtime, ctime) is compared
/// with the one last reported, and `on_change` runs when it differs. So a byte-identical
/// redelivery (a new file or a new directory) is reported, while editor swap files and other
/// neighbours in the directory are not. A file that disappears is reported once (the loader
/// then says it cannot be read).
///
/// Threading: on_change runs on the watcher's thread, one call at a time; it may block (it
/// parses and validates off the request path). Construct and destroy from any one thread;
/// the destructor stops and joins the thread.
class config_watcher {
 public:
  /// Starts watching at once. The file's identity at construction is the baseline (the
  /// config already loaded from it). Throws std::system_error when inotify cannot be set up.
  config_watcher(std::string path, std::function<void()> on_change, watch_settings settings = {});
  ~config_watcher();
  config_watcher(const config_watcher&) = delete;
  config_watcher& operator=(const config_watcher&) = delete;

  /// Stops the thread (idempotent).
  void stop();

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

}  // namespace sluice::app
