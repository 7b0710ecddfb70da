#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Checks that docs/operating.md lists every metric family the gateway exposes, and no other
(ctest `docs_metrics_listed`, label `docs`).

    metrics_listed_test.py SOURCE_DIR

The families are the "sluice_..." and "process_..." string literals of src/observability/metrics.cpp
and of the store's counter list, include/sluice/store/store_counters.hpp (which metrics.cpp
exposes); the guide's are the metric names in the first column of the
tables of its "## Metrics" section. Prints the difference and exits 1 if there is one.
"""
import os
import re
import sys


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    root = sys.argv[1]
    exposed = set()
    for source in ("src/observability/metrics.cpp", "include/sluice/store/store_counters.hpp"):
        with open(os.path.join(root, source), encoding="utf-8") as f:
            exposed.update(re.findall(r'"((?:sluice|process)_[a-z0-9_]+)"', f.read()))
    with open(os.path.join(root, "docs/operating.md"), encoding="utf-8") as f:
        guide = f.read()
    start = guide.find("\n## Metrics\n")
    if start < 0:
        print("docs/operating.md has no '## Metrics' section")
        return 1
    end = guide.find("\n## ", start + 1)
    section = guide[start:end if end >= 0 else len(guide)]
    listed = set()
    for line in section.split("\n"):
        if line.startswith(("| `sluice_", "| `process_")):
            first = line.split("|")[1]
            listed.update(re.findall(r"`((?:sluice|process)_[a-z0-9_]+)`", first))
    missing = sorted(exposed - listed)
    extra = sorted(listed - exposed)
    for name in missing:
        print(f"exposed but not listed in docs/operating.md: {name}")
    for name in extra:
        print(f"listed in docs/operating.md but not exposed: {name}")
    print(f"{len(exposed)} families exposed, {len(listed)} listed")
    return 1 if missing or extra or not exposed else 0


if __name__ == "__main__":
    sys.exit(main())
