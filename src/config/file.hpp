// SPDX-License-Identifier: Apache-2.0
#pragma once
// Reading a configuration file whole (the rules file, the API key file). Private to the config
// room.

#include <cstddef>
#include <string>

namespace sluice::config::file {

/// Reads the file at `path` into `out`. Refuses, without reading, anything but a regular file
/// (a directory, a device such as /dev/zero, a pipe, a socket; symbolic links are followed)
/// and a file above `max_bytes`; a file that grows past `max_bytes` while being read is
/// refused too. Returns an empty string on success, else the diagnostic's message:
/// `cannot read file: <strerror>`, `cannot read file: not a regular file (a character device)`
/// or `cannot read file: larger than 16 MiB (17825792 bytes)`. Never blocks on a FIFO (it is
/// opened non-blocking and refused). Never throws except std::bad_alloc.
std::string read_regular(const std::string& path, std::size_t max_bytes, std::string& out);

/// Reads a file holding a secret (a password) into `out`, as read_regular() does, and also
/// refuses it when its permission bits let anyone but its owner read or write it (any of
/// 0077: `readable by group or others (mode 0644); ...`), as ssh refuses a private key; the
/// mode is that of the file opened (a symbolic link is followed, as Kubernetes mounts
/// secrets). Returns "" on success, else the message. Never throws except std::bad_alloc.
std::string read_private(const std::string& path, std::size_t max_bytes, std::string& out);

}  // namespace sluice::config::file
