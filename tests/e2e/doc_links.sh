#!/usr/bin/env bash
# doc_links.sh — no document of the project points outside the repository: every relative
# Markdown link and every backticked ../ path in a tracked .md or .txt file stays inside it (the
# README once sent readers to ../shared/DESIGN.md, a file no clone has).
source tests/e2e/lib/e2e.sh
"$PYTHON" - <<'PY'
import os, re, subprocess, sys
files = subprocess.check_output(["git", "ls-files", "*.md", "*.txt"], text=True).split()
problems = []
for path in files:
    text = open(path, encoding="utf-8").read()
    targets = re.findall(r"\]\(([^)\s]+)\)", text) + re.findall(r"`(\.\./[^`\s]*)`", text)
    for target in targets:
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue  # a URL, or a heading of the same page
        where = os.path.normpath(os.path.join(os.path.dirname(path), target.split("#")[0]))
        if os.path.isabs(target) or where == ".." or where.startswith("../"):
            problems.append(f"{path}: '{target}' is outside the repository")
for p in problems:
    print("doc links: " + p)
print(f"doc links: {len(files)} documents, {len(problems)} link(s) outside the repository")
sys.exit(1 if problems else 0)
PY
