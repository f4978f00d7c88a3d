#!/usr/bin/env bash
# env.sh — sets up this ringtrain bundle: its bin/ on PATH, its OpenMPI relocated here, and
# CUDA's libraries (cudart, cuBLAS, cuDNN, NCCL: not carried, found on this machine).
#
#   source /path/to/ringtrain/env.sh      in bash; then mpirun -np 2 ringtrain --deck ...
#   /path/to/ringtrain/env.sh --check     says where each CUDA library was found and whether
#                                         every binary's libraries resolve; exit 1 if not
#
# CUDA's libraries are looked for in this order, each library in the first place that has it:
#   1. RINGTRAIN_CUDA_LIBS  folders separated by ':' (then nothing else is searched)
#   2. CUDNN_ROOT, NCCL_ROOT, CUDA_HOME, CUDA_PATH  (their lib64/ or lib/)
#   3. the pip wheels of RINGTRAIN_PYTHON (default: the python3 on PATH): site-packages/nvidia/*/lib
#   4. the system: the loader's cache (ldconfig -p), then /usr/local/cuda/lib64
# The sonames pin the major versions (libcudnn.so.9 next to libcublas.so.13 of CUDA 13), so
# cuDNN always sits beside a cuBLAS of its own CUDA.

rt_bundle_dir() {
  local here=${BASH_SOURCE[0]:-$0}
  (cd "$(dirname "$here")" >/dev/null && pwd -P)
}

# Candidate folders, one per line: "<folder>\t<where it came from>".
rt_cuda_candidates() {
  local dir root name py
  if [ -n "${RINGTRAIN_CUDA_LIBS:-}" ]; then
    local IFS=:
    for dir in $RINGTRAIN_CUDA_LIBS; do printf '%s\tRINGTRAIN_CUDA_LIBS\n' "$dir"; done
    return 0
  fi
  for name in CUDNN_ROOT NCCL_ROOT CUDA_HOME CUDA_PATH; do
    root=${!name:-}
    [ -n "$root" ] || continue
    for dir in "$root/lib64" "$root/lib"; do
      [ -d "$dir" ] && printf '%s\t%s\n' "$dir" "$name"
    done
  done
  py=${RINGTRAIN_PYTHON:-python3}
  if command -v "$py" >/dev/null 2>&1; then
    "$py" - 2>/dev/null <<'PY' | sed "s|\$|\twheels of $py|"
import os
try:
    import nvidia
except ImportError:
    raise SystemExit(0)
for root in list(nvidia.__path__):
    for name in sorted(os.listdir(root)):
        lib = os.path.join(root, name, "lib")
        if os.path.isdir(lib):
            print(lib)
PY
  fi
  if command -v ldconfig >/dev/null 2>&1; then
    ldconfig -p 2>/dev/null | sed -n 's/.* => \(.*\)\/[^/]*$/\1/p' | awk '!seen[$0]++' |
      sed 's/$/\tthe system (ldconfig)/'
  fi
  printf '%s\tthe system\n' /usr/local/cuda/lib64
}

# For each CUDA library the binaries need: "<soname>\t<folder>\t<where>", or the folder "-".
rt_find_cuda_libs() {
  local bundle=$1 soname candidates found dir where
  candidates=$(rt_cuda_candidates)
  while read -r soname; do
    [ -n "$soname" ] || continue
    found="-	-"
    while IFS=$'\t' read -r dir where; do
      if [ -e "$dir/$soname" ]; then
        found="$dir	$where"
        break
      fi
    done <<<"$candidates"
    printf '%s\t%s\n' "$soname" "$found"
  done <"$bundle/lib/cuda-libraries.txt"
}

rt_setup() {
  local bundle found dirs="" soname dir where missing=0
  bundle=$(rt_bundle_dir)
  found=$(rt_find_cuda_libs "$bundle")
  while IFS=$'\t' read -r soname dir where; do
    [ -n "$soname" ] || continue
    if [ "$dir" = - ]; then
      missing=1
      continue
    fi
    case ":$dirs:" in *":$dir:"*) ;; *) dirs=${dirs:+$dirs:}$dir ;; esac
  done <<<"$found"
  export RINGTRAIN_BUNDLE=$bundle
  export PATH=$bundle/bin${PATH:+:$PATH}
  export LD_LIBRARY_PATH=$bundle/lib${dirs:+:$dirs}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  export OPAL_PREFIX=$bundle                                # OpenMPI: plugins, help files
  # PMIx, which OpenMPI loads: the bundled Debian 12 PMIx 4.2 reads PMIX_PREFIX (its libpmix
  # holds that name beside PMIX_EXEC_PREFIX and the rest), later PMIx PMIX_INSTALL_PREFIX.
  # Debian built it with its folders spelled out whole, not under the prefix, so each one it
  # reads is moved too: its plugins (the zlib compressor; without it PMIx warns that it found no
  # compression library) and its help files.
  export PMIX_PREFIX=$bundle/lib/x86_64-linux-gnu/pmix2
  export PMIX_INSTALL_PREFIX=$PMIX_PREFIX
  export PMIX_LIBDIR=$PMIX_PREFIX/lib PMIX_PKGLIBDIR=$PMIX_PREFIX/lib/pmix
  export PMIX_DATADIR=$PMIX_PREFIX/share PMIX_PKGDATADIR=$PMIX_PREFIX/share/pmix
  export OMPI_MCA_mca_base_param_files=$bundle/etc/openmpi-mca-params.conf
  # OpenMPI starts even one process without mpirun through its ssh launcher, which fails where
  # there is no ssh or rsh (a bare GPU machine); its "isolated" launcher runs on this node only.
  if [ -z "${OMPI_MCA_plm:-}" ] && ! command -v ssh >/dev/null 2>&1 &&
    ! command -v rsh >/dev/null 2>&1; then
    export OMPI_MCA_plm=isolated
  fi
  RT_FOUND=$found
  return $missing
}

rt_check() {
  local soname dir where failed=0 f lib missing
  echo "ringtrain bundle: $RINGTRAIN_BUNDLE ($(sed -n 2p "$RINGTRAIN_BUNDLE/VERSION"))"
  while IFS=$'\t' read -r soname dir where; do
    [ -n "$soname" ] || continue
    if [ "$dir" = - ]; then
      printf '  ✗ %-22s not found\n' "$soname"
      failed=1
    else
      printf '  ✓ %-22s %s (%s)\n' "$soname" "$dir" "$where"
    fi
  done <<<"$RT_FOUND"
  # Whatever else a binary cannot load (a glibc too old, a library of the bundle missing); the
  # CUDA libraries are named above.
  for f in "$RINGTRAIN_BUNDLE"/bin/* "$RINGTRAIN_BUNDLE"/bin/tests/*; do
    [ -f "$f" ] || continue
    missing=""
    while read -r lib; do
      grep -qxF -- "$lib" "$RINGTRAIN_BUNDLE/lib/cuda-libraries.txt" || missing+=" $lib"
    done < <(ldd "$f" 2>&1 | sed -n 's/^[[:space:]]*\([^ ]*\) => not found.*/\1/p; s/.*: \(version .* not found\).*/\1/p')
    [ -z "$missing" ] && continue
    echo "  ✗ $(basename "$f") cannot load:$missing"
    failed=1
  done
  if [ "$failed" = 1 ]; then
    echo "  hint: set CUDA_HOME (or CUDNN_ROOT, NCCL_ROOT), RINGTRAIN_CUDA_LIBS=dir:dir, or" \
      "RINGTRAIN_PYTHON to a python with the nvidia-*-cu13 wheels; a bundle built with make" \
      "bundle CUDA=0 needs none"
    return 1
  fi
  echo "  every binary's libraries resolve"
}

if [ "${1:-}" = --check ]; then
  rt_setup
  rt_check
  rt_status=$?
  # Executed: end with the verdict; sourced: leave the shell as it is.
  if [ "${BASH_SOURCE[0]:-$0}" = "$0" ]; then exit $rt_status; fi
  return $rt_status
fi
if ! rt_setup; then
  echo "ringtrain env.sh: some CUDA libraries were not found; run $(rt_bundle_dir)/env.sh --check" >&2
fi
