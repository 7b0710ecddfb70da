#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Checks that every source file of the project names its licence (ctest `docs_spdx`, label `docs`).

    spdx_test.py SOURCE_DIR

Every C++, Lua, Python, shell and CMake file tracked by git (and the scripts in scripts/ and
.ci/) must carry `SPDX-License-Identifier: Apache-2.0` in its first three lines, as a comment
of its language (SPDX specification, annex "Using SPDX short identifiers in source files").
LICENSE must be the Apache License 2.0. Prints each file that lacks it; exits 1 if one does.
Outside a git tree (a source tarball) the files are found by walking the tree.
"""
import os
import subprocess
import sys

TAG = "SPDX-License-Identifier: Apache-2.0"
EXTENSIONS = (".cpp", ".hpp", ".lua", ".py", ".sh", ".cmake", ".cpp.in")
SCRIPT_DIRS = ("scripts/", ".ci/")
SKIP_DIRS = ("build", ".git", "fuzz/corpus", "fuzz/regressions", "docker/.cache", "bench/out")


def tracked(root):
    try:
        out = subprocess.run(["git", "-C", root, "ls-files"], capture_output=True, text=True,
                             check=True).stdout
        return out.split("\n")
    except (OSError, subprocess.CalledProcessError):
        found = []
        for d, dirs, files in os.walk(root):
            rel = os.path.relpath(d, root)
            dirs[:] = [x for x in dirs if os.path.normpath(os.path.join(rel, x)) not in SKIP_DIRS]
            found += [os.path.normpath(os.path.join(rel, f)) for f in files]
        return found


def wants_tag(path):
    if any(path.startswith(d + "/") for d in SKIP_DIRS):
        return False
    base = os.path.basename(path)
    return (path.endswith(EXTENSIONS) or base == "CMakeLists.txt" or
            any(path.startswith(d) for d in SCRIPT_DIRS))


def main():
    root = sys.argv[1]
    missing = []
    checked = 0
    for path in tracked(root):
        if not path or not wants_tag(path):
            continue
        full = os.path.join(root, path)
        if not os.path.isfile(full):
            continue
        checked += 1
        with open(full, encoding="utf-8", errors="replace") as f:
            head = [f.readline() for _ in range(3)]
        if not any(TAG in line for line in head):
            missing.append(path)
    with open(os.path.join(root, "LICENSE"), encoding="utf-8") as f:
        licence = f.read()
    ok = "Apache License" in licence and "Version 2.0, January 2004" in licence
    if not ok:
        print("LICENSE: not the Apache License 2.0")
    for path in missing:
        print(f"{path}: no '{TAG}' in its first three lines")
    print(f"spdx: {checked} files checked, {len(missing)} without the identifier")
    return 1 if missing or not ok else 0


if __name__ == "__main__":
    sys.exit(main())
