#!/usr/bin/env bash
# bundle.sh — assembles a relocatable ringtrain folder and its tarball from a bundle build (make
# bundle runs it): the binaries, the tests, OpenMPI's launcher with its plugins and help files,
# h5dump, every shared library they need but glibc and CUDA's own, and env.sh, which finds
# CUDA's libraries on the target. The result runs from any path on x86-64 Linux with glibc >=
# the build machine's and none of the Debian packages it came from.
#
#   tools/bundle.sh BUILT_BIN OUT      e.g. tools/bundle.sh build/bundle/bin dist/ringtrain
#                                      writes OUT/ and OUT.tar.xz
set -euo pipefail
cd "$(dirname "$0")/.."
built=${1:?usage: tools/bundle.sh BUILT_BIN OUT}
out=${2:?usage: tools/bundle.sh BUILT_BIN OUT}
multiarch=x86_64-linux-gnu
ompi_libdir=/usr/lib/$multiarch/openmpi/lib
pmix_dir=/usr/lib/$multiarch/pmix2

die() { echo "bundle: error: $*" >&2; exit 1; }
[ -x "$built/ringtrain" ] || die "no $built/ringtrain: build it first (make bundle does)"
for f in /usr/bin/orterun /usr/bin/orted /usr/bin/h5dump "$ompi_libdir/openmpi3"; do
  [ -e "$f" ] || die "$f is missing (make deps installs OpenMPI and hdf5-tools)"
done

# The version as the Makefile writes it into every build's build_config.hpp (BUILT_BIN need not
# sit beside its build folder: make's default build is bin/ with build/include).
version=$(sed -n 's/.*RINGTRAIN_VERSION "\([^"]*\)".*/\1/p' Makefile | head -1)
[ -n "$version" ] || die "no RINGTRAIN_VERSION in the Makefile"

rm -rf "$out" "$out.tar.xz"
mkdir -p "$out/bin/tests" "$out/lib" "$out/share/ringtrain"

# ---- what runs: ours, stripped of debug sections (symbols stay for backtraces) ---------------
# (not a NAME.part an interrupted link left: make renames a program into place when it is whole)
for f in "$built"/ringtrain "$built"/rt-*; do
  [ -x "$f" ] && [ ! -d "$f" ] && [ "${f%.part}" = "$f" ] && cp "$f" "$out/bin/"
done
for f in "$built"/tests/unit "$built"/tests/mpi_*; do
  [ "${f%.part}" = "$f" ] && cp "$f" "$out/bin/tests/"
done
find "$out/bin" -type f -exec strip --strip-debug {} +
# OpenMPI's launcher (OPAL_PREFIX in env.sh relocates it), and the HDF5 tools to read results.
cp /usr/bin/orterun "$out/bin/orterun"
ln -s orterun "$out/bin/mpirun"
ln -s orterun "$out/bin/mpiexec"
cp /usr/bin/orted /usr/bin/ompi_info /usr/bin/h5dump /usr/bin/h5ls "$out/bin/"

# OpenMPI's plugins and help files where a prefix of $out puts them (ompi_info --path all), less
# the fabric plugins (UCX, libfabric, verbs, PSM): they need the cluster's own drivers, and
# there the cluster's MPI is the one to build against (make MPI_HOME=...).
plugins=$out/lib/$multiarch/openmpi/lib/openmpi3
mkdir -p "$plugins" "$out/share"
for p in "$ompi_libdir"/openmpi3/*.so; do
  case $(basename "$p") in
    *ucx* | mca_btl_ofi.so | mca_mtl_ofi.so | mca_btl_openib.so | mca_mtl_psm*.so) continue ;;
  esac
  cp "$p" "$plugins/"
done
cp -r /usr/share/openmpi "$out/share/openmpi"
mkdir -p "$out/etc"
cp /etc/openmpi/openmpi-mca-params.conf "$out/etc/" 2>/dev/null || true
# PMIx, which OpenMPI's launcher loads, with its own plugins and help (PMIX_PREFIX in env.sh).
mkdir -p "$out/lib/$multiarch/pmix2/lib"
cp -r "$pmix_dir/lib/pmix" "$out/lib/$multiarch/pmix2/lib/"
cp -r "$pmix_dir/share" "$out/lib/$multiarch/pmix2/"

# ---- every shared library they load, but glibc's and CUDA's ------------------------------------
is_glibc() {
  case $1 in
    linux-vdso.so.* | ld-linux-x86-64.so.* | libc.so.* | libm.so.* | libpthread.so.* | libdl.so.* | \
      librt.so.* | libresolv.so.* | libutil.so.* | libanl.so.* | libmvec.so.* | libnss_*.so.* | \
      libBrokenLocale.so.* | libthread_db.so.*) return 0 ;;
  esac
  return 1
}
is_cuda() {
  case $1 in
    libcuda.so.* | libcudart.so.* | libcudnn*.so.* | libcublas*.so.* | libnccl.so.* | libnvidia-*.so.* | \
      libnvrtc*.so.*) return 0 ;;
  esac
  return 1
}
declare -A copied=() cuda=()
elves=$(find "$out/bin" "$out/lib/$multiarch" -type f \( -perm -u+x -o -name '*.so*' \) | sort)
for elf in $elves; do
  needs=$(ldd "$elf" 2>/dev/null) || continue  # not a dynamic ELF file
  while read -r name arrow path _; do
    if is_cuda "$name"; then cuda[$name]=1; continue; fi
    is_glibc "$name" && continue
    [ -n "${copied[$name]:-}" ] && continue
    [ "$arrow" = "=>" ] && [ -f "$path" ] || die "$elf needs $name, which is not found here"
    cp -L "$path" "$out/lib/$name"
    copied[$name]=1
  done < <(sed -n 's/^[[:space:]]*\([^ ]*\) \(=>\) \([^ ]*\).*/\1 \2 \3/p' <<<"$needs")
done
printf '%s\n' "${!cuda[@]}" | sort >"$out/lib/cuda-libraries.txt"

# ---- env.sh, the scripts and decks a user needs, what was built --------------------------------
cp tools/bundle/env.sh "$out/env.sh"
cp tools/bundle/README.txt "$out/README.txt"
cp -r inputs "$out/share/ringtrain/inputs"
mkdir -p "$out/share/ringtrain/jobs" "$out/share/ringtrain/tools"
cp -r jobs/local "$out/share/ringtrain/jobs/"
cp tools/*.sh tools/*.py "$out/share/ringtrain/tools/"
{
  echo "ringtrain $version"
  echo "commit $(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD 2>/dev/null || echo -dirty)"
  echo "built $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -m), glibc $(ldd --version | sed -n '1s/.* //p')"
  echo "cuda libraries needed: $(tr '\n' ' ' <"$out/lib/cuda-libraries.txt")"
} >"$out/VERSION"

XZ_OPT=${XZ_OPT:--6 -T0} tar -C "$(dirname "$out")" -cJf "$out.tar.xz" "$(basename "$out")"
echo "bundle: $out ($(du -sh "$out" | cut -f1) unpacked, $(ls "$out/lib" | grep -c '\.so') libraries)" \
  "and $out.tar.xz ($(du -h "$out.tar.xz" | cut -f1))"
