#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Checks the links between the project's Markdown documents (ctest `docs_links`, label `docs`).

    links_test.py SOURCE_DIR

Every relative link `[text](path)` or `[text](path#anchor)` in README.md, docs/*.md,
docker/README.md and bench/RESULTS.md must name a file of the source tree, and an anchor must
name a heading of the Markdown file it points into (GitHub's heading ids: lower case, spaces
as '-', other punctuation dropped, a repeated heading numbered -1, -2...). Links in code blocks
and inline code are not links; http(s) and mailto links are not checked (no network).
Prints each broken link as FILE:LINE: [text](target): why, and exits 1 if there is one.
"""
import os
import re
import sys

LINK = re.compile(r"!?\[([^\]]*)\]\(([^)\s]+)\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def prose_lines(text):
    """(line number, line) of the lines outside fenced code blocks, inline code removed."""
    fence = None
    for number, line in enumerate(text.split("\n"), 1):
        stripped = line.lstrip()
        if fence is None and (stripped.startswith("```") or stripped.startswith("~~~")):
            fence = stripped[:3]
            continue
        if fence is not None:
            if stripped.startswith(fence):
                fence = None
            continue
        yield number, re.sub(r"`[^`]*`", lambda m: "`" + "x" * (len(m.group(0)) - 2) + "`", line)


def slug(heading):
    """GitHub's id of a heading's text."""
    text = heading.replace("`", "").lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path, cache={}):
    if path not in cache:
        with open(path, encoding="utf-8") as f:
            text = f.read()
        seen = {}
        ids = set()
        fence = None
        for line in text.split("\n"):
            stripped = line.lstrip()
            if stripped.startswith("```") or stripped.startswith("~~~"):
                fence = None if fence else stripped[:3]
                continue
            if fence:
                continue
            m = HEADING.match(line)
            if not m:
                continue
            base = slug(m.group(2))
            n = seen.get(base, 0)
            seen[base] = n + 1
            ids.add(base if n == 0 else f"{base}-{n}")
        cache[path] = ids
    return cache[path]


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    root = sys.argv[1]
    documents = ["README.md", "docker/README.md", "bench/RESULTS.md"]
    documents += sorted("docs/" + n for n in os.listdir(os.path.join(root, "docs")) if n.endswith(".md"))
    broken = 0
    checked = 0
    for doc in documents:
        path = os.path.join(root, doc)
        if not os.path.exists(path):
            continue
        with open(path, encoding="utf-8") as f:
            text = f.read()
        for number, line in prose_lines(text):
            for m in LINK.finditer(line):
                target = m.group(2)
                if re.match(r"^[a-z][a-z0-9+.-]*:", target):
                    continue  # http:, https:, mailto:
                checked += 1
                file_part, _, anchor = target.partition("#")
                into = os.path.normpath(os.path.join(os.path.dirname(path), file_part)) if file_part else path
                why = None
                if not os.path.exists(into):
                    why = "no such file"
                elif anchor and into.endswith(".md") and anchor not in anchors(into):
                    why = f"no heading '#{anchor}' in {os.path.relpath(into, root)}"
                if why:
                    broken += 1
                    print(f"{doc}:{number}: [{m.group(1)}]({target}): {why}")
    print(f"{checked} relative links checked in {len(documents)} documents, {broken} broken")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
