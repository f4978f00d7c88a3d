#!/usr/bin/env bash
# bundle.sh — the bundle runs where none of its Debian packages are. tools/bundle.sh packs this
# build (or BUNDLE_TARBALL, e.g. make bundle's dist/ringtrain.tar.xz, is taken as it is); the
# tarball is unpacked at a new path inside a root that holds glibc, bash and a few coreutils
# only (a mount namespace and chroot: no OpenMPI, HDF5, Boost, oneDNN, libpng, no CUDA but a
# copy bound at another path). There: env.sh --check fails and names the CUDA libraries while
# none is reachable, passes with CUDA_HOME, ringtrain --help answers, 2 ranks train through the
# bundle's own mpirun, and the bundle's h5dump reads the results. Outside, env.sh finds CUDA's
# libraries in a pip-wheel layout, and tools/gpu-check.sh --bundle runs from the tarball without
# building (its no-GPU path here). A bundle of a build without the CUDA backend (make CUDA=0, or no
# nvcc) needs no CUDA library: its env.sh --check passes with none reachable, and the CUDA
# checks are left out. Skipped with one line where namespaces or chroot are refused.
source "$(dirname "$0")/lib/e2e.sh"
e2e_workdir bundle

if [ "$(id -u)" != 0 ] || ! unshare -m true 2>/dev/null; then
  echo "SKIP: needs root and mount namespaces (unshare -m) for the bundle's chroot"
  exit 0
fi
cuda=0
if built_with_cuda; then
  cuda=1
  [ -d /usr/local/cuda/lib64 ] || { echo "SKIP: no CUDA libraries under /usr/local/cuda to bind"; exit 0; }
fi

# ---- the bundle ---------------------------------------------------------------------------------
tarball=${BUNDLE_TARBALL:-}
if [ -z "$tarball" ]; then
  XZ_OPT="-0 -T0" tools/bundle.sh "$BIN" "$work/pack/ringtrain" | tee "$work/pack.log"
  tarball=$work/pack/ringtrain.tar.xz
fi
[ -f "$tarball" ] || fail "no bundle tarball $tarball"
echo "tarball: $tarball, $(du -h "$tarball" | cut -f1)"
[ "$(stat -c %s "$tarball")" -lt $((64 * 1024 * 1024)) ] || fail "the tarball is over 64 MiB"

# ---- a root with glibc, bash and coreutils only ---------------------------------------------------
root=$work/root
mkdir -p "$root"/{etc,tmp,proc,dev,sys,opt/vendor-cuda,data,out,usr/bin} "$root/somewhere/else"
ln -s usr/bin "$root/bin"
copy_file() { mkdir -p "$root$(dirname "$1")" && cp -L "$1" "$root$1"; }
# glibc as Debian installs it (the bundle may use any of its libraries), then each tool and what
# it loads beyond glibc (libtinfo for bash, libpcre2 for grep, ...).
dpkg -L libc6 | grep -E '/lib[^/]*\.so|/ld-linux' | while read -r f; do
  [ -f "$f" ] && copy_file "$f"
done
mkdir -p "$root/lib64" && cp -L /lib64/ld-linux-x86-64.so.2 "$root/lib64/"
for tool in bash cat ls mkdir rm dirname basename sed grep tr sort head tail wc cut env uname \
  readlink id ldd stat du; do
  path=$(command -v "$tool")
  cp -L "$path" "$root/usr/bin/$tool"
  { ldd "$path" 2>/dev/null || true; } | sed -n 's/.* => \(\/[^ ]*\) .*/\1/p' | while read -r lib; do
    [ -e "$root$lib" ] || copy_file "$lib"
  done
done
ln -s bash "$root/usr/bin/sh"
echo 'root:x:0:0:root:/tmp:/bin/bash' >"$root/etc/passwd"
echo 'root:x:0:' >"$root/etc/group"
printf '127.0.0.1 localhost\n' >"$root/etc/hosts"
for absent in /usr/lib/x86_64-linux-gnu/libmpi.so.40 /usr/lib/x86_64-linux-gnu/libhdf5_serial.so.103 \
  /usr/lib/x86_64-linux-gnu/libdnnl.so.2 /usr/lib/x86_64-linux-gnu/libstdc++.so.6 /usr/bin/mpirun \
  /usr/local/cuda; do
  [ ! -e "$root$absent" ] || fail "the test root holds $absent"
done
tar -C "$root/somewhere/else" -xJf "$tarball"
bundle=/somewhere/else/ringtrain
# VERSION names the Makefile's version (a bundle packed from bin/ once said "ringtrain " alone).
want="ringtrain $(sed -n 's/.*RINGTRAIN_VERSION "\([^"]*\)".*/\1/p' Makefile | head -1)"
[ "$(head -1 "$root$bundle/VERSION")" = "$want" ] ||
  fail "VERSION begins '$(head -1 "$root$bundle/VERSION")', expected '$want'"
tiny_fiber_data "$root/data"

# ---- inside: what a user on a bare machine would type --------------------------------------------
cat >"$root/inside.sh" <<EOF
set -u
export HOME=/tmp PATH=/usr/bin OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
unset CUDA_HOME CUDNN_ROOT NCCL_ROOT RINGTRAIN_CUDA_LIBS LD_LIBRARY_PATH
echo "== no CUDA reachable"
$bundle/env.sh --check; echo "check exit \$?"
echo "== CUDA_HOME=/opt/vendor-cuda"
export CUDA_HOME=/opt/vendor-cuda
$bundle/env.sh --check || exit 11
source $bundle/env.sh || exit 12
ringtrain --help >/tmp/help.txt || exit 13
grep -c 'train.backend' /tmp/help.txt
mpirun -np 2 --oversubscribe ringtrain --deck $bundle/share/ringtrain/inputs/quickstart.deck \
  --data.dir=/data --train.epochs=1 --train.max_steps=6 --data.eval_split= --data.test_split= \
  --output.dir=/out --output.name=bundle --output.timeline=false || exit 14
h5dump -a /world_size /out/bundle.h5 || exit 15
h5dump -a /libraries /out/bundle.h5 || exit 16
EOF
cuda_mount=true
[ "$cuda" = 0 ] || cuda_mount="mount --bind -o ro /usr/local/cuda '$root/opt/vendor-cuda'"
set +e
unshare -m -p -f bash -c "
  set -e
  mount --rbind /dev '$root/dev'
  mount -t proc proc '$root/proc'
  mount --rbind /sys '$root/sys'
  mount -t tmpfs tmpfs '$root/tmp'
  $cuda_mount
  exec chroot '$root' /usr/bin/bash /inside.sh" >"$work/inside.log" 2>&1
status=$?
set -e
cat "$work/inside.log"
[ "$status" = 0 ] || fail "inside the root: exit $status"
log=$(cat "$work/inside.log")
if [ "$cuda" = 1 ]; then
  grep -q '✗ libcudnn.so.9 *not found' <<<"$log" || fail "env.sh --check did not name the missing cuDNN"
  grep -q '^check exit 1$' <<<"$log" || fail "env.sh --check did not fail without CUDA"
  grep -q '✓ libcudnn.so.9 *\/opt\/vendor-cuda\/lib64 (CUDA_HOME)' <<<"$log" ||
    fail "env.sh --check did not find cuDNN under CUDA_HOME"
else
  grep -q '^check exit 0$' <<<"$log" || fail "env.sh --check of a bundle without CUDA failed"
  ! grep -q 'libcud\|libnccl' <<<"$log" || fail "env.sh --check of a bundle without CUDA named a CUDA library"
fi
grep -q "every binary's libraries resolve" <<<"$log" || fail "a bundle binary does not resolve"
grep -q '(0): 2$' <<<"$(sed -n '/ATTRIBUTE "world_size"/,/^}/p' <<<"$log")" ||
  fail "the results file does not say world_size 2"
grep -q '"oneDNN [0-9]' <<<"$log" || fail "the results file does not name oneDNN's version"
# PMIx finds its plugins and help files in the bundle: no "unable to find a usable compression
# library" (its zlib plugin not found), no "Sorry! ... couldn't open the help file".
! grep -q -E "Sorry!|couldn't open the help file|usable compression library" <<<"$log" ||
  fail "PMIx looked for its plugins or help files outside the bundle"

# ---- outside: CUDA's libraries from a pip-wheel layout (nvidia/<name>/lib, versioned names only)
if [ "$cuda" = 1 ]; then
  site=$work/site
  for pair in cudnn:libcudnn.so.9 nccl:libnccl.so.2 cublas:libcublas.so.13 cublas:libcublasLt.so.13 \
    cuda_runtime:libcudart.so.13; do
    mkdir -p "$site/nvidia/${pair%%:*}/lib"
    ln -s "/usr/local/cuda/lib64/${pair#*:}" "$site/nvidia/${pair%%:*}/lib/"
  done
  wheels=$(env -u CUDA_HOME -u CUDNN_ROOT -u NCCL_ROOT -u RINGTRAIN_CUDA_LIBS PYTHONPATH="$site" \
    RINGTRAIN_PYTHON="$PYTHON" "$root$bundle/env.sh" --check) || { echo "$wheels"; fail "wheels"; }
  echo "$wheels"
  grep -q "✓ libcudnn.so.9 *$site/nvidia/cudnn/lib (wheels of $PYTHON)" <<<"$wheels" ||
    fail "env.sh did not take cuDNN from the wheels"
  grep -q "✓ libnccl.so.2 *$site/nvidia/nccl/lib (wheels of $PYTHON)" <<<"$wheels" ||
    fail "env.sh did not take NCCL from the wheels"
fi
# ---- gpu-check from the tarball, building nothing (what a lent GPU machine runs) ----------------
if "$BIN/tests/unit" --run_test=device_selection/device_probe_line | grep -q '^cuda devices: 0 '; then
  status=0
  OUT=$work/gpu-check tools/gpu-check.sh --bundle "$tarball" >"$work/gpu-check.out" 2>&1 || status=$?
  cat "$work/gpu-check.out" "$work/gpu-check/report.txt"
  [ "$status" = 0 ] || fail "gpu-check --bundle: exit $status"
  [ "$(grep -v '^#' "$work/gpu-check/report.txt" | awk '{print $1, $2}' | tr '\n' ';')" = \
    "PASS unpack;PASS libraries;PASS probe;PASS cpu-side-unit;SKIP gpu-checks;" ] ||
    fail "gpu-check --bundle's report"
  grep -q '^gpu-check: no GPU ' "$work/gpu-check.out" || fail "gpu-check --bundle's line"
fi
echo "PASS: the bundle ran from a new path in a root without its packages"
