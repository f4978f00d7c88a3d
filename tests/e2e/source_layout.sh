#!/usr/bin/env bash
# source_layout.sh — the layout rules of comm/ hold: <mpi.h> only behind the communicator and
# the MPI helpers, the fusion engine's and timeline's headers free of MPI, no private header of
# another module, no include cycle, namespaces that match folders; and docs/ARCHITECTURE.md
# stays true: every folder and file it names exists, and every source folder is named in it.
source "$(dirname "$0")/lib/e2e.sh"
cd "$(dirname "$0")/../.."
"$PYTHON" - <<'PY'
import os, re, sys

INCLUDE = "include/ringtrain/comm"
SRC = "src/comm"
MPI_HEADERS = {"include/ringtrain/comm/communicator.hpp", "include/ringtrain/comm/mpi_check.hpp"}
MPI_FREE = ["include/ringtrain/comm/fusion/fusion_engine.hpp",
            "include/ringtrain/comm/fusion/timeline.hpp",
            "include/ringtrain/comm/fusion/plan.hpp"]
problems = []

def files_under(top, exts):
    for root, _, names in os.walk(top):
        for name in sorted(names):
            if name.endswith(exts):
                yield os.path.join(root, name)

def quoted_includes(path):
    with open(path) as f:
        return re.findall(r'^#include "([^"]+)"', f.read(), re.M)

def resolve(path, include):
    """The repository file an #include "..." names, or None for a generated or outside one."""
    for candidate in (os.path.join(os.path.dirname(path), include), os.path.join("include", include)):
        if os.path.isfile(candidate):
            return os.path.normpath(candidate)
    return None

every_header = list(files_under("include/ringtrain", (".hpp",)))
comm_files = list(files_under(INCLUDE, (".hpp",))) + list(files_under(SRC, (".hpp", ".cpp")))

# 1. <mpi.h> appears in public headers only behind the communicator and the MPI helpers.
for header in every_header:
    with open(header) as f:
        if re.search(r'^#include <mpi\.h>', f.read(), re.M) and header not in MPI_HEADERS:
            problems.append(f"{header} includes <mpi.h>; only {sorted(MPI_HEADERS)} may")

# 2. The fusion engine's and the timeline's public headers reach no MPI header, even indirectly.
def reaches_mpi(path, seen):
    if path in MPI_HEADERS:
        return [path]
    for include in quoted_includes(path):
        target = resolve(path, include)
        if target and target not in seen:
            seen.add(target)
            chain = reaches_mpi(target, seen)
            if chain:
                return [path] + chain
    return None
for header in MPI_FREE:
    chain = reaches_mpi(header, {header})
    if chain:
        problems.append("MPI reaches " + header + ": " + " -> ".join(chain))

# 3. comm/ includes no private header of another module ("../" or backend/cuda/).
for path in comm_files:
    for include in quoted_includes(path):
        if include.startswith("../") or "backend/cuda/" in include:
            problems.append(f'{path} includes "{include}", a private header of another module')

# 4. No include cycle inside comm/: a header and the .cpp of the same name are one node.
def node(path):
    for top in (INCLUDE, SRC):
        if path.startswith(top + "/"):
            return os.path.splitext(path[len(top) + 1:])[0]
    return None
edges = {}
for path in comm_files:
    me = node(path)
    for include in quoted_includes(path):
        target = resolve(path, include)
        other = node(target) if target else None
        if other and other != me:
            edges.setdefault(me, set()).add(other)
state = {}
def visit(n, stack):
    state[n] = "open"
    for m in sorted(edges.get(n, ())):
        if state.get(m) == "open":
            problems.append("include cycle in comm/: " + " -> ".join(stack[stack.index(m):] + [m]))
        elif m not in state:
            visit(m, stack + [m])
    state[n] = "done"
for n in sorted(edges):
    if n not in state:
        visit(n, [n])

# 5. Namespaces match folders: what a file defines closes as ringtrain::comm[::<folder>].
for path in comm_files:
    folder = os.path.dirname(node(path))
    want = "ringtrain::comm" + ("::" + folder.replace("/", "::") if folder else "")
    with open(path) as f:
        closes = re.findall(r'^}  // namespace (ringtrain[\w:]*)$', f.read(), re.M)
    if closes and closes[-1] != want:
        problems.append(f"{path} defines namespace {closes[-1]}, but its folder says {want}")

# 6. docs/ARCHITECTURE.md names what exists, and every source folder. A backticked path is
# looked up as written and under src/ and include/ringtrain/ (the table names modules as
# `comm/shm/`); a folder counts as named when its path, or its path under src/ or
# include/ringtrain/, appears backticked with its trailing '/'.
import glob
ARCH = "docs/ARCHITECTURE.md"
with open(ARCH) as f:
    arch = f.read()
named = set()
for token in re.findall(r"`([^`\s]+)`", arch):
    if "/" not in token or token.startswith(("-", "http")) or any(c in token for c in "<{:"):
        continue  # a flag, a URL, a pattern such as src/<module>/, a namespace
    path = token.split("#")[0]
    bases = ("", "src/", "include/ringtrain/")
    if not any(glob.glob(base + path) for base in bases):
        problems.append(f"{ARCH} names `{token}`, which does not exist (as written, under src/ "
                        "or include/ringtrain/)")
    if path.endswith("/"):
        named.add(path.rstrip("/"))
def dirs(pattern):
    return sorted(d for d in glob.glob(pattern) if os.path.isdir(d) and "__pycache__" not in d)
source_folders = (dirs("src/*") + dirs("src/*/*") + dirs("include/ringtrain/*") +
                  dirs("include/ringtrain/*/*") + ["tools"] + dirs("tools/*") + ["jobs"] +
                  dirs("jobs/*") + ["inputs", "tests"] + dirs("tests/*"))
for folder in source_folders:
    short = folder
    for base in ("src/", "include/ringtrain/"):
        if folder.startswith(base):
            short = folder[len(base):]
    if folder not in named and short not in named:
        ways = f"`{short}/`" + (f" or `{folder}/`" if short != folder else "")
        problems.append(f"{folder}/ is not named in {ARCH} (as {ways}): say there what it owns")

for p in problems:
    print("source layout: " + p)
print(f"source layout: {len(comm_files)} comm/ files, {sum(map(len, edges.values()))} include "
      f"edges between them, {len(source_folders)} source folders against {ARCH}, "
      f"{len(problems)} problem(s)")
sys.exit(1 if problems else 0)
PY
