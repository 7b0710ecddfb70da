// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file
/// The version and revision of this build, derived from the source tree when it was
/// configured (cmake/SluiceVersion.cmake): `git describe` style.

#include <string_view>

namespace sluice {

/// `sluice --version` prints this: "0.1.0" for a commit tagged v0.1.0, else
/// "<tag>+<commits since it>.g<12 hex digits of the commit>", or before the first tag
/// "<VERSION file>~<commits>.g<...>" (dpkg sorts it below the release), for example
/// "0.1.0~412.g78bc591a0c1d".
/// A later commit always gives a higher Debian version.
extern const std::string_view version;

/// The full commit id (40 hex digits) the build was made from; "unknown" outside a git tree
/// without a .tarball-version file.
extern const std::string_view revision;

}  // namespace sluice
