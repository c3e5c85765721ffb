#!/usr/bin/env bash
# The repository stands alone: a clone has its licence, its own documents and a tidy module.
#   - LICENSE names a licence;
#   - no file points at a path outside the repository (the contract once lived one level up),
#     and every relative link of the Markdown files reaches a file, and heading, that exists;
#   - `go mod tidy` would change neither go.mod nor go.sum.
# Run by scripts/test.sh; every check runs, and the script fails if one did.
set -uo pipefail
cd "$(dirname "$0")/.."
status=0
fail() { echo "repo-check: $*" >&2; status=1; }

if [ ! -f LICENSE ]; then
  fail "no LICENSE file"
elif ! head -n 3 LICENSE | grep -Eq 'MIT License|Apache License'; then
  fail "LICENSE names neither the MIT nor the Apache licence"
fi

# Files as a clone has them (tracked, plus new ones not ignored), text only.
mapfile -t files < <(git ls-files -co --exclude-standard | while read -r f; do
  [ -f "$f" ] && grep -Iq . "$f" && echo "$f"; done)
if [ ${#files[@]} -eq 0 ]; then
  fail "found no files to check (not a git work tree?)"
fi
# The patterns are spelt so that this script does not match itself.
if hits=$(grep -nE '\.\.[/]shared|shared[/]spec' "${files[@]}"); then
  fail "paths outside the repository:"; echo "$hits" >&2
fi

if ! python3 - "${files[@]}" <<'EOF'; then
import os, re, sys

def slug(title):
    """GitHub's anchor of a heading."""
    title = re.sub(r"[`*_]|\[([^\]]*)\]\([^)]*\)", lambda m: m.group(1) or "", title)
    return re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-")

def anchors(path, cache={}):
    if path not in cache:
        seen, out = {}, set()
        for title in headings(path):
            s = slug(title)
            n = seen.get(s, 0)
            seen[s] = n + 1
            out.add(s if n == 0 else f"{s}-{n}")
        cache[path] = out
    return cache[path]

def headings(path):
    fenced = False
    for line in open(path, encoding="utf-8"):
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and (m := re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)):
            yield m.group(1)

def links(path):
    fenced = False
    for n, line in enumerate(open(path, encoding="utf-8"), 1):
        if line.startswith("```"):
            fenced = not fenced
            continue
        if fenced:
            continue
        line = re.sub(r"`[^`]*`", "", line)  # code spans hold examples, not links
        for m in re.finditer(r"\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)", line):
            yield n, m.group(1)

root = os.path.realpath(".")
bad = 0
for md in (f for f in sys.argv[1:] if f.endswith(".md") and "node_modules/" not in f):
    for n, target in links(md):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):
            continue  # a URL
        path, _, frag = target.partition("#")
        dest = os.path.realpath(os.path.join(os.path.dirname(md), path)) if path else os.path.realpath(md)
        where = f"{md}:{n}: {target}"
        if dest != root and not dest.startswith(root + os.sep):
            print(f"repo-check: {where}: points outside the repository", file=sys.stderr); bad += 1
        elif not os.path.exists(dest):
            print(f"repo-check: {where}: no such file", file=sys.stderr); bad += 1
        elif frag and dest.endswith(".md") and frag not in anchors(dest):
            print(f"repo-check: {where}: no such heading", file=sys.stderr); bad += 1
sys.exit(1 if bad else 0)
EOF
  fail "broken Markdown links (above)"
fi

if ! diff=$(go mod tidy -diff 2>&1); then
  fail "go mod tidy would change go.mod/go.sum; run it and commit the result:"; echo "$diff" >&2
fi

[ $status -eq 0 ] && echo "repo-check: LICENSE, self-contained paths and links, go mod tidy: ok"
exit $status
