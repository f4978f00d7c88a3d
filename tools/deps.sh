#!/usr/bin/env bash
# deps.sh — checks, reports and (with apt-get as root) installs every package ringtrain needs.
#   tools/deps.sh --report            print what was found (✓/✗), never fails
#   tools/deps.sh --install [--bench] install what is missing; fail with a list if we cannot
set -u
mode=${1:---report}
bench=0; [ "${2:-}" = "--bench" ] && bench=1

# Debian package : what it provides : the usual cluster module name
build_pkgs=(
  "g++:C++17 compiler:gcc"
  "make:GNU make:-"
  "pkg-config:pkg-config:-"
  "openmpi-bin:OpenMPI launcher:openmpi"
  "libopenmpi-dev:OpenMPI headers:openmpi"
  "libhdf5-dev:HDF5 (serial):hdf5"
  "hdf5-tools:h5dump:hdf5"
  "libboost-program-options-dev:Boost.Program_options:boost"
  "libboost-test-dev:Boost.Test:boost"
  "libdnnl-dev:oneDNN:onednn"
  "zlib1g-dev:zlib:-"
  "libpng-dev:libpng:libpng"
  "libjpeg62-turbo-dev:libjpeg-turbo:libjpeg-turbo"
  "libtiff-dev:libtiff:libtiff"
  "python3-h5py:h5py:python"
  "python3-matplotlib:matplotlib:python"
  "python3-numpy:numpy:python"
  "dataset-fashion-mnist:Fashion-MNIST data:-"
  "xz-utils:xz (the bundle's tarball):-"
  "libonnx-dev:ONNX (rt-export):onnx"
  "libprotobuf-dev:protobuf (ONNX's):protobuf"
  "libzip-dev:libzip (rt-export --torch):libzip"
  "python3-onnx:ONNX checker (export tests):python"
)
bench_pkgs=(
  "python3-torch:PyTorch (benchmark peer):pytorch"
  "libopenblas0:OpenBLAS for PyTorch:openblas"
)
pkgs=("${build_pkgs[@]}")
[ "$bench" = 1 ] && pkgs+=("${bench_pkgs[@]}")

installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep "install ok installed" >/dev/null; }
version()   { dpkg-query -W -f='${Version}' "$1" 2>/dev/null | sed 's/[-+~].*//'; }

missing=()
if command -v dpkg-query >/dev/null; then
  for entry in "${pkgs[@]}"; do
    name=${entry%%:*}
    installed "$name" || missing+=("$entry")
  done
fi

if [ "$mode" = "--install" ] && [ ${#missing[@]} -gt 0 ]; then
  names=(); for entry in "${missing[@]}"; do names+=("${entry%%:*}"); done
  if command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
    echo "deps: installing ${names[*]}"
    export DEBIAN_FRONTEND=noninteractive
    if ! apt-get install -y -q --no-install-recommends "${names[@]}" >/tmp/ringtrain-apt.log 2>&1; then
      apt-get update -qq >/dev/null 2>&1
      apt-get install -y -q --no-install-recommends "${names[@]}" >/tmp/ringtrain-apt.log 2>&1 || {
        echo "deps: apt-get install failed; see /tmp/ringtrain-apt.log" >&2; exit 1; }
    fi
    missing=()
  else
    echo "deps: missing, and no apt-get as root to install them:" >&2
    for entry in "${missing[@]}"; do
      IFS=: read -r name what module <<<"$entry"
      printf '  %-30s %-26s module: %s\n' "$name" "$what" "$module" >&2
    done
    echo "  hint: load the modules (e.g. 'module load openmpi hdf5 boost onednn') and run make" >&2
    exit 1
  fi
fi

# What only the emulated-node tests use (jobs/local/cluster.sh: ip, tc; nft for packet loss) and
# the real Slurm the Slurm tests start (jobs/local/slurm.sh: slurmctld, slurmd, the client
# commands, the pmix and task/affinity plugins, munge): installed where apt-get runs as root,
# never required (those tests skip without them).
test_pkgs=(iproute2 util-linux nftables slurm-wlm slurm-wlm-basic-plugins munge)
if [ "$mode" = "--install" ] && command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
  optional=(); for name in "${test_pkgs[@]}"; do installed "$name" || optional+=("$name"); done
  if [ ${#optional[@]} -gt 0 ]; then
    echo "deps: installing ${optional[*]} (emulated-node and Slurm tests)"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${optional[@]}" \
      >>/tmp/ringtrain-apt.log 2>&1 || echo "deps: could not install ${optional[*]}; those tests will skip" >&2
  fi
fi

[ "$mode" = "--install" ] && [ -z "${VERBOSE_DEPS:-}" ] && exit 0

say() { printf '  %s %-14s %s\n' "$1" "$2" "$3"; }
if command -v mpirun >/dev/null; then say ✓ MPI "$(mpirun --version 2>/dev/null | head -1)"; else say ✗ MPI "not found"; fi
for p in libhdf5-dev:HDF5 libdnnl-dev:oneDNN libboost-program-options-dev:Boost; do
  if installed "${p%%:*}"; then say ✓ "${p#*:}" "$(version "${p%%:*}")"; else say ✗ "${p#*:}" "not found"; fi
done
if [ "${HAVE_CUDA:-0}" = 1 ]; then
  nv=$("${CUDA_HOME:-/usr/local/cuda}/bin/nvcc" --version 2>/dev/null | sed -n 's/.*release \([0-9.]*\).*/\1/p')
  if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then
    say ✓ CUDA "$nv: backend builds; GPU present, GPU tests run"
  else
    say ✗ GPU "CUDA $nv builds the backend; no GPU here, GPU tests skip"
  fi
else
  say ✗ CUDA "not built (nvcc or cudnn.h not found under ${CUDA_HOME:-/usr/local/cuda})"
fi
if "${PYTHON:-python3}" -c 'import h5py, matplotlib' 2>/dev/null; then
  say ✓ Python "${PYTHON:-python3} with h5py, matplotlib"
else
  say ✗ Python "${PYTHON:-python3} lacks h5py/matplotlib (set PYTHON=)"
fi
if command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v munged >/dev/null; then
  say ✓ Slurm "$(slurmctld -V 2>/dev/null) and munge: the Slurm tests start one (jobs/local/slurm.sh)"
else
  say ✗ Slurm "not installed: the Slurm tests skip (make deps installs slurm-wlm and munge as root)"
fi
exit 0
