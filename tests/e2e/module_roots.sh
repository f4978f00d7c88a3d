#!/usr/bin/env bash
# module_roots.sh — make links against dependencies from install prefixes, as cluster modules
# give them (MPI_HOME, HDF5_ROOT, DNNL_ROOT, BOOST_ROOT, CUDNN_ROOT, NCCL_ROOT), and cuDNN and
# NCCL from pip-wheel folders that hold only the versioned files (libcudnn.so.9, libnccl.so.2).
# Fake prefixes of symlinks to this machine's libraries stand in for the modules; ringtrain is
# relinked from the built objects, and its RUNPATH and what the loader resolves must come
# from those prefixes. Before: -lcudnn -lnccl failed to link from a wheel folder ("cannot find
# -lcudnn"), and no *_ROOT was read.
source "$(dirname "$0")/lib/e2e.sh"
e2e_workdir module-roots

grep -q 'RINGTRAIN_HAS_CUDA 1' build/include/ringtrain/build_config.hpp 2>/dev/null ||
  { echo "SKIP: this build has no CUDA backend (nothing for CUDNN_ROOT/NCCL_ROOT to find)"; exit 0; }
multiarch=/usr/lib/x86_64-linux-gnu
mods=$work/modules
mkdir -p "$mods"/{mpi/bin,hdf5/lib,dnnl/lib,boost/lib} "$mods/site/nvidia"/{cudnn,nccl}/lib
ln -s /usr/bin/mpicxx "$mods/mpi/bin/mpicxx"
ln -s /usr/include/hdf5/serial "$mods/hdf5/include"
ln -s "$multiarch/libhdf5_serial.so" "$mods/hdf5/lib/libhdf5.so"
ln -s "$(readlink -f "$multiarch/libhdf5_serial.so")" "$mods/hdf5/lib/$(objdump -p "$multiarch/libhdf5_serial.so" | awk '/SONAME/ {print $2}')"
for lib in "$multiarch"/libdnnl.so*; do ln -s "$lib" "$mods/dnnl/lib/"; done
for lib in "$multiarch"/libboost_program_options.so*; do ln -s "$lib" "$mods/boost/lib/"; done
ln -s /usr/include "$mods/dnnl/include"
ln -s /usr/include "$mods/boost/include"
# The wheels' layout: headers, and only the versioned library.
for pair in cudnn:libcudnn.so.9 nccl:libnccl.so.2; do
  name=${pair%%:*}
  mkdir -p "$mods/site/nvidia/$name/include"
  ln -s "/usr/local/cuda/lib64/${pair#*:}" "$mods/site/nvidia/$name/lib/"
  for h in /usr/local/cuda/include/$name*.h; do ln -s "$h" "$mods/site/nvidia/$name/include/"; done
done

# Only the link runs (make -o: the objects and the library as built), never a rebuild in the
# shared build folder beside the other lane's scripts.
make --no-print-directory -o build/src/main.o -o build/libringtrain.a BIN="$work/bin" \
  MPI_HOME="$mods/mpi" HDF5_ROOT="$mods/hdf5" \
  DNNL_ROOT="$mods/dnnl" BOOST_ROOT="$mods/boost" CUDNN_ROOT="$mods/site/nvidia/cudnn" \
  NCCL_ROOT="$mods/site/nvidia/nccl" VERBOSE=1 "$work/bin/ringtrain" >"$work/make.log" 2>&1 ||
  { cat "$work/make.log"; fail "make with the module roots"; }
link=$(grep -- "-o $work/bin/ringtrain" "$work/make.log")
for want in "$mods/mpi/bin/mpicxx " "-l:libcudnn.so.9" "-l:libnccl.so.2" "-L$mods/hdf5/lib" "-lhdf5 "; do
  grep -qF -- "$want" <<<"$link" || fail "the link line lacks '$want': $link"
done
runpath=$(readelf -d "$work/bin/ringtrain" | sed -n 's/.*(RUNPATH).*\[\(.*\)\]/\1/p')
for dir in hdf5/lib dnnl/lib boost/lib site/nvidia/cudnn/lib site/nvidia/nccl/lib; do
  grep -qF "$mods/$dir" <<<"$runpath" || fail "RUNPATH lacks $mods/$dir: $runpath"
done
resolved=$(env -u LD_LIBRARY_PATH ldd "$work/bin/ringtrain")
for pair in libcudnn.so.9:site/nvidia/cudnn/lib libnccl.so.2:site/nvidia/nccl/lib \
  libdnnl.so.2:dnnl/lib libhdf5_serial.so.103:hdf5/lib; do
  grep -qF "${pair%%:*} => $mods/${pair#*:}/" <<<"$resolved" ||
    fail "${pair%%:*} does not resolve from $mods/${pair#*:}: $(grep "${pair%%:*}" <<<"$resolved")"
done
"$work/bin/ringtrain" --help >/dev/null 2>&1 || fail "the relinked ringtrain does not run"
echo "module_roots: linked from MPI_HOME, HDF5_ROOT, DNNL_ROOT, BOOST_ROOT and wheel-style CUDNN_ROOT/NCCL_ROOT"
