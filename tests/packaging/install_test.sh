#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Checks what an operator installs (cmake/SluicePackaging.cmake): the install tree and the
# Debian package built from this build tree. Registered in tests/CMakeLists.txt (label
# `packaging`), which passes the install paths the build was configured with:
#
#   install_test.sh BUILD_DIR CMAKE CPACK VERSION PREFIX BINARY CONFIG UNIT DOCDIR
#
# BINARY, CONFIG, UNIT and DOCDIR are absolute installed paths (under PREFIX, except CONFIG for
# the /usr prefix: /etc/sluice/sluice.yaml). Nothing is written outside a temporary directory:
# the tree is staged with DESTDIR, which also covers the absolute /etc destination.
set -euo pipefail

if (($# != 9)); then
  echo "usage: $0 BUILD_DIR CMAKE CPACK VERSION PREFIX BINARY CONFIG UNIT DOCDIR" >&2
  exit 2
fi
build=$1 cmake=$2 cpack=$3 version=$4 prefix=$5 binary=$6 config=$7 unit=$8 docdir=$9
# The manual page lives beside the doc directory: PREFIX/share/man (GNUInstallDirs' mandir).
mandir=${docdir%/doc/*}/man

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }
pass() { echo "ok: $*"; }

# The files a full install must hold, and nothing else (no test or benchmark executable).
expected_files() {
  printf '%s\n' "$binary" "$config" "$unit" "$docdir/README.md" "$docdir/docs/operating.md" \
    "$docdir/docs/clients.md" "$docdir/examples/sluice.yaml" "$docdir/copyright" \
    "$docdir/changelog.gz" "$mandir/man1/sluice.1.gz" | sort
}

# check_tree ROOT WHAT: the file set under ROOT, the binary, the rules file and the unit.
check_tree() {
  local root=$1 what=$2
  local actual
  actual=$(cd "$root" && find . -type f -o -type l | sed 's|^\.||' | sort)
  if [[ $actual == "$(expected_files)" ]]; then
    pass "$what: exactly the expected files"
  else
    fail "$what: file set differs (< expected, > installed):"
    diff <(expected_files) <(echo "$actual") >&2 || true
  fi

  [[ -x $root$binary ]] || { fail "$what: $binary is not executable"; return; }
  local out
  if out=$("$root$binary" --version) && [[ $(head -n1 <<<"$out") == "sluice $version" ]]; then
    pass "$what: --version: $(head -n1 <<<"$out")"
  else
    fail "$what: --version printed '$out', wanted 'sluice $version' first"
  fi
  # The licence and the changelog: machine-readable Apache-2.0, an entry for this version.
  grep -Fxq "License: Apache-2.0" "$root$docdir/copyright" ||
    fail "$what: $docdir/copyright does not state License: Apache-2.0"
  [[ $(zcat "$root$docdir/changelog.gz" | head -n1) == "sluice ($version) unstable; urgency=medium" ]] ||
    fail "$what: changelog.gz's first entry is not for $version: $(zcat "$root$docdir/changelog.gz" | head -n1)"
  if out=$("$root$binary" --check-config "$root$config" 2>&1) && [[ $out == *": OK: "* ]]; then
    pass "$what: --check-config accepts the installed rules file"
  else
    fail "$what: --check-config on the installed rules file: $out"
  fi
  # The packaged default listens on loopback only.
  grep -Eq '^listen: 127\.0\.0\.1:[0-9]+' "$root$config" ||
    fail "$what: the installed rules file does not listen on 127.0.0.1"

  local u=$root$unit
  [[ -f $u ]] || { fail "$what: no unit $unit"; return; }
  grep -Fxq "ExecStart=$binary --config $config" "$u" ||
    fail "$what: ExecStart is not '$binary --config $config': $(grep '^ExecStart=' "$u")"
  grep -Eq '^ExecReload=.*kill -HUP \$MAINPID' "$u" || fail "$what: ExecReload does not send SIGHUP"
  local line
  for line in Restart=on-failure DynamicUser=yes NoNewPrivileges=yes ProtectSystem=strict \
              ProtectHome=yes PrivateTmp=yes CapabilityBoundingSet= WantedBy=multi-user.target; do
    grep -Fxq "$line" "$u" || fail "$what: the unit lacks '$line'"
  done
  grep -Eq '^LimitNOFILE=[0-9]{5,}$' "$u" || fail "$what: the unit has no high LimitNOFILE"
  pass "$what: unit $unit"
}

# systemd-analyze verify checks the unit against this host's systemd (directives, values, that
# ExecStart is executable). It prints warnings but exits 0 for most of them: any output fails.
verify_unit() {
  local root=$1
  if ! command -v systemd-analyze >/dev/null; then
    echo "SKIP: systemd-analyze is not installed: the unit's directives are not verified"
    return
  fi
  mkdir -p "$tmp/verify"
  # The same unit, with ExecStart naming the staged binary (the installed path does not exist).
  sed "s|^ExecStart=$binary |ExecStart=$root$binary |" "$root$unit" >"$tmp/verify/sluice.service"
  local out
  if out=$(cd "$tmp/verify" && systemd-analyze verify "$tmp/verify/sluice.service" 2>&1) &&
     [[ -z $out ]]; then
    pass "systemd-analyze verify: clean"
  else
    fail "systemd-analyze verify: ${out:-exit status $?}"
  fi
}

# --- the install tree -------------------------------------------------------------------------
DESTDIR=$tmp/root "$cmake" --install "$build" >"$tmp/install.log" 2>&1 ||
  { cat "$tmp/install.log" >&2; fail "cmake --install failed"; exit 1; }
check_tree "$tmp/root" "install (DESTDIR)"
verify_unit "$tmp/root"

# Under a prefix that keeps the rules file inside it (not /usr), --prefix relocates everything.
if [[ $config == "$prefix"/* ]]; then
  "$cmake" --install "$build" --prefix "$tmp/relocated" >"$tmp/relocated.log" 2>&1 ||
    { cat "$tmp/relocated.log" >&2; fail "cmake --install --prefix failed"; }
  for f in "${binary#"$prefix"}" "${config#"$prefix"}" "${unit#"$prefix"}"; do
    [[ -f $tmp/relocated$f ]] || fail "--prefix: no $f under the new prefix"
  done
  pass "install --prefix: relocated"
else
  echo "note: $config is outside the prefix $prefix; --prefix relocation not checked"
fi

# --- the Debian package -----------------------------------------------------------------------
if [[ ! -x $cpack ]] || ! command -v dpkg-deb >/dev/null; then
  echo "SKIP: cpack or dpkg-deb is missing: the .deb is not built"
else
  (cd "$tmp" && "$cpack" -G DEB -B "$tmp/deb" --config "$build/CPackConfig.cmake") \
    >"$tmp/cpack.log" 2>&1 || { cat "$tmp/cpack.log" >&2; fail "cpack failed"; exit 1; }
  debs=("$tmp"/deb/*.deb)
  ((${#debs[@]} == 1)) && [[ -f ${debs[0]} ]] || { fail "cpack made ${#debs[@]} .deb files"; exit 1; }
  deb=${debs[0]}
  pass "cpack: $(basename "$deb"), $(stat -c %s "$deb") bytes"

  field() { dpkg-deb -f "$deb" "$1"; }
  [[ $(field Package) == sluice ]] || fail "Package is '$(field Package)'"
  [[ $(field Version) == "$version" ]] || fail "Version is '$(field Version)', wanted $version"
  [[ -n $(field Maintainer) ]] || fail "no Maintainer"
  [[ $(field Recommends) == *redis-server* ]] || fail "Recommends lacks redis-server"
  depends=$(field Depends)
  echo "Depends: $depends"
  # Every shared library the binary needs comes from a package the .deb depends on (by name, or
  # by a name that package provides, as libspdlog1.10 provides libspdlog1.10-fmt9).
  dep_names=" $(echo "$depends" | sed -E 's/[,|]/\n/g' | sed -E 's/\(.*\)//; s/^ +//; s/ +$//' | tr '\n' ' ') "
  # One dpkg -S for every library, as ldd found it and as its real path (usrmerge: dpkg knows
  # /lib/... for some packages and /usr/lib/... for others).
  libs=$(readelf -d "$build/sluice" | sed -nE 's/.*\(NEEDED\).*\[(.*)\]/\1/p')
  declare -A lib_path
  while read -r lib _ path _; do lib_path[$lib]=$path; done < <(ldd "$build/sluice")
  owners=$(for lib in $libs; do
             [[ -n ${lib_path[$lib]:-} ]] && echo "${lib_path[$lib]}" && readlink -f "${lib_path[$lib]}"
           done | sort -u | xargs dpkg -S 2>/dev/null || true)
  failures_before=$failures
  for lib in $libs; do
    path=${lib_path[$lib]:-}
    # dpkg -S prints `package:arch: path`.
    pkg=$(awk -F': ' -v a="$path" -v b="$(readlink -f "$path")" \
            '$NF == a || $NF == b { split($1, p, ":"); print p[1]; exit }' <<<"$owners")
    [[ -n $pkg ]] || { fail "$lib (${path:-not found}) belongs to no Debian package"; continue; }
    provides=$(dpkg-query -W -f='${Provides}' "$pkg" 2>/dev/null | tr ',' '\n' | sed -E 's/\(.*\)//; s/ //g')
    found=""
    for name in "$pkg" $provides; do [[ $dep_names == *" $name "* ]] && found=$name; done
    [[ -n $found ]] || fail "Depends does not name $pkg (which ships $lib)"
  done
  ((failures > failures_before)) ||
    pass "Depends names the package of each of the binary's $(wc -w <<<"$libs") shared libraries"

  contents=$(dpkg-deb -c "$deb")
  for f in "$binary" "$config" "$unit"; do
    grep -Eq " \.${f//./\\.}\$" <<<"$contents" || fail "the .deb lacks $f"
  done
  dpkg-deb -e "$deb" "$tmp/control"
  [[ $(cat "$tmp/control/conffiles") == "$config" ]] ||
    fail "conffiles is '$(cat "$tmp/control/conffiles")', wanted $config"
  for s in postinst prerm postrm; do
    [[ -x $tmp/control/$s ]] && sh -n "$tmp/control/$s" || fail "maintainer script $s"
  done
  # Unpacked, the package is the same tree as the install (the binary stripped).
  dpkg-deb -x "$deb" "$tmp/unpacked"
  check_tree "$tmp/unpacked" "the .deb"
fi

if ((failures)); then
  echo "packaging: $failures check(s) failed" >&2
  exit 1
fi
echo "packaging: all checks passed"
