#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The package upgrade, end to end, as an operator does it: a fresh clone of SOURCE_DIR (default:
# this tree) is built and packaged (scripts/package, its own build tree), the .deb installed with
# dpkg -i, one more commit made in the clone, the package built again (the same build tree: the
# new commit reconfigures and recompiles only the version) and installed over the first; after
# each install `sluice --version` and dpkg's record must name that build's version, and the
# second install must be an upgrade ("Unpacking sluice (NEW) over (OLD)"). The package is
# purged at the end. Not in the suite (it builds the whole gateway once: minutes); run as root
# on a machine where the sluice package is not installed:
#
#   tests/packaging/upgrade_test.sh [SOURCE_DIR]
set -euo pipefail
src=$(cd "${1:-$(dirname "$0")/../..}" && pwd)
[[ $(id -u) -eq 0 ]] || { echo "upgrade_test: run as root (dpkg -i)" >&2; exit 2; }
if dpkg-query -W -f='${Status}' sluice 2>/dev/null | grep -q "install ok installed"; then
  echo "upgrade_test: the sluice package is installed here already; not touching it" >&2
  exit 2
fi
tmp=$(mktemp -d)
cleanup() {
  dpkg --purge sluice >/dev/null 2>&1 || true
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "upgrade_test: FAIL: $*" >&2; exit 1; }
say() { echo "upgrade_test: $*"; }

git clone -q "$src" "$tmp/clone"
git -C "$tmp/clone" tag -l 'v[0-9]*' | xargs -r git -C "$tmp/clone" tag -d >/dev/null

# build_and_install: packages the clone's HEAD, installs it, checks the versions; prints dpkg's log.
build_and_install() {
  local want rev deb out
  read -r want rev <<<"$(cmake -DSOURCE_DIR="$tmp/clone" -P "$tmp/clone/cmake/SluiceVersion.cmake" 2>&1)"
  SLUICE_BUILD_DIR="$tmp/build" "$tmp/clone/scripts/package" >"$tmp/package.log" 2>&1 ||
    { tail -n 30 "$tmp/package.log" >&2; fail "scripts/package failed"; }
  deb=$(ls "$tmp"/build/packages/*.deb)
  [[ $(basename "$deb") == "sluice_${want}_$(dpkg --print-architecture).deb" ]] ||
    fail "the package is $(basename "$deb"), wanted sluice_${want}_*.deb"
  out=$(dpkg -i "$deb" 2>&1) || { echo "$out" >&2; fail "dpkg -i $deb"; }
  echo "$out" >"$tmp/dpkg.log"
  [[ $(dpkg-query -W -f='${Version}' sluice) == "$want" ]] ||
    fail "dpkg records $(dpkg-query -W -f='${Version}' sluice), wanted $want"
  [[ $(/usr/bin/sluice --version) == "sluice $want"$'\n'"revision $rev" ]] ||
    fail "/usr/bin/sluice --version: $(/usr/bin/sluice --version), wanted $want ($rev)"
  say "installed $want: $(/usr/bin/sluice --version | tr '\n' ' ')"
  version=$want
}

build_and_install
first=$version
git -C "$tmp/clone" -c user.name=test -c user.email=test@invalid commit -q --allow-empty \
  -m "one more commit"
build_and_install
second=$version
dpkg --compare-versions "$second" gt "$first" || fail "$second is not newer than $first"
grep -Fq "Unpacking sluice ($second) over ($first)" "$tmp/dpkg.log" ||
  { cat "$tmp/dpkg.log" >&2; fail "the second install was not an upgrade of the first"; }
say "upgraded $first -> $second"
say "passed"
