#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Checks the build's version derivation (cmake/SluiceVersion.cmake) on throwaway clones of the
# source tree: the version names the commit, one more commit gives a higher Debian version (so
# its package upgrades the one before), the first tag v<VERSION> ranks above every build before
# it and below the commit after it, a source tarball without .git reads .tarball-version; and
# the built binary reports the tree's version. Registered in
# tests/CMakeLists.txt (label `packaging`):
#
#   version_test.sh SOURCE_DIR CMAKE BINARY
#
# The whole upgrade (two builds of two commits, dpkg -i of each, --version) is
# tests/packaging/upgrade_test.sh, run by hand: it builds twice.
set -euo pipefail
if (($# != 3)); then
  echo "usage: $0 SOURCE_DIR CMAKE BINARY" >&2
  exit 2
fi
src=$1 cmake=$2 binary=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }
pass() { echo "ok: $*"; }
describe() { "$cmake" -DSOURCE_DIR="$1" -P "$src/cmake/SluiceVersion.cmake" 2>&1; }
newer() { dpkg --compare-versions "$1" gt "$2"; }
git_in() { git -C "$1" -c user.name=test -c user.email=test@invalid -c commit.gpgsign=false "${@:2}"; }

if ! command -v git >/dev/null || ! git -C "$src" rev-parse HEAD >/dev/null 2>&1; then
  echo "SKIP: $src is not a git tree"
  exit 0
fi
base=$(head -n1 "$src/VERSION")

# The tree itself, and the binary built from it.
read -r v0 r0 <<<"$(describe "$src")"
[[ $r0 == $(git -C "$src" rev-parse HEAD) ]] || fail "revision $r0 is not HEAD"
out=$("$binary" --version)
[[ $out == "sluice $v0"$'\n'"revision $r0" ]] || fail "--version printed '$out', wanted 'sluice $v0' and 'revision $r0'"
pass "the tree: $v0 ($r0); --version agrees"

git clone -q "$src" "$tmp/clone"
git -C "$tmp/clone" tag -l 'v[0-9]*' | xargs -r git -C "$tmp/clone" tag -d >/dev/null
read -r v1 r1 <<<"$(describe "$tmp/clone")"
count=$(git -C "$tmp/clone" rev-list --count HEAD)
[[ $v1 == "$base~$count.g${r1:0:12}" ]] || fail "untagged: $v1, wanted $base~$count.g${r1:0:12}"
pass "untagged: $v1"

git_in "$tmp/clone" commit -q --allow-empty -m "one more commit"
read -r v2 r2 <<<"$(describe "$tmp/clone")"
[[ $r2 != "$r1" && $v2 == *".g${r2:0:12}" ]] || fail "after a commit: $v2 does not name $r2"
newer "$v2" "$v1" || fail "after a commit: $v2 is not newer than $v1 for dpkg"
pass "one more commit: $v2 > $v1"

# The first release, v<VERSION>: it must upgrade every build before it (their `~` sorts
# below it), and the commit after it must upgrade the release.
git_in "$tmp/clone" tag -a "v$base" -m "release $base"
read -r v3 _ <<<"$(describe "$tmp/clone")"
[[ $v3 == "$base" ]] || fail "on the tag v$base: $v3"
git_in "$tmp/clone" commit -q --allow-empty -m "after the release"
read -r v4 r4 <<<"$(describe "$tmp/clone")"
[[ $v4 == "$base+1.g${r4:0:12}" ]] || fail "one commit after v$base: $v4"
newer "$v4" "$v3" && newer "$v3" "$v2" || fail "$v4 > $v3 > $v2 does not hold for dpkg"
pass "tagged: $v3, then $v4"

mkdir "$tmp/tarball"
cp "$src/VERSION" "$tmp/tarball/"
echo "$v4 $r4" >"$tmp/tarball/.tarball-version"
read -r v5 r5 <<<"$(describe "$tmp/tarball")"
[[ $v5 == "$v4" && $r5 == "$r4" ]] || fail "tarball: $v5 $r5, wanted $v4 $r4"
rm "$tmp/tarball/.tarball-version"
read -r v6 r6 <<<"$(describe "$tmp/tarball")"
[[ $v6 == "$base+unknown" && $r6 == unknown ]] || fail "no git, no .tarball-version: $v6 $r6"
pass "tarball: $v5; without either: $v6"

if ((failures)); then
  echo "version: $failures check(s) failed" >&2
  exit 1
fi
echo "version: all checks passed"
