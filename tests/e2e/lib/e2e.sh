# e2e.sh — sourced by the end-to-end scripts: strict mode, BIN and PYTHON, OpenMPI as root, a
# work directory removed at exit, fail, and a tiny fiber dataset.
set -euo pipefail
BIN=${BIN:-bin}
PYTHON=${PYTHON:-/usr/bin/python3}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

fail() { echo "FAIL: $*"; exit 1; }

# e2e_workdir NAME [CLEANUP]: $work becomes a new directory under /tmp, removed at exit after
# CLEANUP (a command line, e.g. taking an emulated cluster down) has run.
e2e_workdir() {
  work=$(mktemp -d "/tmp/rt-e2e-$1.XXXXXX")
  E2E_CLEANUP=${2:-true}
  trap 'eval "$E2E_CLEANUP" >/dev/null 2>&1; rm -rf "$work"' EXIT
}

# own_ompi_sessions NAME: this (sub)shell's mpiruns keep their OpenMPI session folders under
# $work/ompi-NAME. For lanes of one script run at once: an mpirun that ends removes the session
# folder it shares when it is empty, under a starting one in the other lane (seen in
# e2e/train: "ORTE_ERROR_LOG: Error in file ../../../orte/util/session_dir.c"). tests/run.sh
# gives each script its own; this gives each lane its own.
own_ompi_sessions() {
  mkdir -p "$work/ompi-$1"
  export OMPI_MCA_orte_tmpdir_base=$work/ompi-$1
}

# tiny_fiber_data DIR [COUNT] [SEED]: a small fiber dataset in two shards, in a second or two.
# Under tests/run.sh (RT_E2E_DATA_CACHE, a folder it removes at exit) each COUNT and SEED is
# generated once and copied after that: a dozen scripts take the same dataset, and
# tests/e2e/fibergen.sh tests the generator itself. The copy is the test's own to change.
tiny_fiber_data() {
  local count=${2:-400} seed=${3:-11}
  if [ -z "${RT_E2E_DATA_CACHE:-}" ]; then
    "$BIN/rt-fibergen" --output "$1" --count "$count" --seed "$seed" --shards 2 >/dev/null
    return
  fi
  local cached=$RT_E2E_DATA_CACHE/fiber-$count-$seed
  if [ ! -d "$cached" ]; then
    # Scripts run two at a time: each generates into a folder of its own, and the first to
    # finish names the cache; the other's copy is dropped.
    local mine=$cached.tmp.$$
    "$BIN/rt-fibergen" --output "$mine" --count "$count" --seed "$seed" --shards 2 >/dev/null
    mv -T "$mine" "$cached" 2>/dev/null || rm -rf "$mine"
  fi
  mkdir -p "$1" && cp -a "$cached/." "$1/"
}

# tiny_deck FILE DATA OUT [LINE...]: a deck training cnn_small on DATA's train split for one
# epoch of 8-image batches, results into OUT. Each LINE is "key = value" for [train] or
# "section.key = value" for any section ("comm.fusion_mib = 0.1", "data.eval_split = val"): it
# replaces that key's default or adds the key; a LINE without "=" ("data.eval_split") leaves the
# key out, to ringtrain's own default. Sections come in the deck's order.
tiny_deck() {
  local file=$1 data=$2 out=$3
  shift 3
  local -A value=([data.dir]=$data [data.eval_split]= [data.test_split]= [model.name]=cnn_small
                  [train.epochs]=1 [train.batch_per_rank]=8 [output.dir]=$out)
  local -a order=(data.dir data.eval_split data.test_split model.name train.epochs
                  train.batch_per_rank output.dir)
  local line key section header
  for line in "$@"; do
    key=${line%%=*} && key=${key% } && [[ $key == *.* ]] || key=train.$key
    if [[ $line != *=* ]]; then
      unset "value[$key]"
      continue
    fi
    [ -n "${value[$key]+set}" ] || order+=("$key")
    value[$key]=${line#*=} && value[$key]=${value[$key]# }
  done
  for section in data model train comm output; do
    header="[$section]"
    for key in "${order[@]}"; do
      [ "${key%%.*}" = "$section" ] && [ -n "${value[$key]+set}" ] || continue
      [ -z "$header" ] || { printf '%s\n' "$header"; header=; }
      printf '%s =%s\n' "${key#*.}" "${value[$key]:+ ${value[$key]}}"
    done
  done >"$file"
}

# run_np2 NAME ARGS...: ringtrain on 2 ranks (the environment reaches them); stderr in
# $work/NAME.err, stdout in $work/NAME.out, each rank's exit code in $work/NAME.codes (lines
# "RANK CODE"). The wrapper itself exits 0, so mpirun never tears down a rank before it has
# written its code.
run_np2() {
  local name=$1; shift
  mpirun -q -np 2 --oversubscribe --allow-run-as-root --bind-to none bash -c \
    '"$0" "$@"; echo "$OMPI_COMM_WORLD_RANK $?" >>"'"$work/$name.codes"'"' \
    "$BIN/ringtrain" "$@" >"$work/$name.out" 2>"$work/$name.err" || fail "$name: mpirun failed"
}

# expect_refused NAME MESSAGE ARGS...: run_np2, then exactly the line "ringtrain: error: MESSAGE"
# on stderr, exit 2 on both ranks, no epoch trained and no .h5 file under $work/out (nor under
# the paths in $results_too, where a script sets it).
expect_refused() {
  local name=$1 message=$2; shift 2
  run_np2 "$name" "$@"
  [ "$(sort "$work/$name.codes" | tr '\n' ' ')" = "0 2 1 2 " ] ||
    fail "$name: rank exit codes '$(tr '\n' ' ' <"$work/$name.codes")', expected 2 on both ($(cat "$work/$name.err"))"
  [ "$(cat "$work/$name.err")" = "ringtrain: error: $message" ] ||
    fail "$name: stderr '$(cat "$work/$name.err")', expected 'ringtrain: error: $message'"
  ! grep -q '^epoch' "$work/$name.out" || fail "$name: trained before failing"
  # shellcheck disable=SC2086
  [ -z "$(find "$work/out" ${results_too:-} -name '*.h5' 2>/dev/null)" ] ||
    fail "$name: wrote $(find "$work/out" ${results_too:-} -name '*.h5' 2>/dev/null)"
}

# built_with_cuda: whether $BIN/ringtrain has the CUDA backend (it needs the CUDA runtime);
# make builds it where nvcc and cudnn.h are found, so a CPU-only machine's binary has none.
# Not `objdump | grep -q`: under pipefail, objdump killed by the pipe grep closed early would
# make a CUDA build's answer "no" now and then.
built_with_cuda() { grep -q 'NEEDED *libcudart\.' <<<"$(objdump -p "$BIN/ringtrain")"; }

# cluster_up_or_skip PREFIX: two emulated nodes (jobs/local/cluster.sh), or exit 0 with the
# reason where namespaces are not permitted.
cluster_up_or_skip() {
  local status=0
  jobs/local/cluster.sh up --nodes 2 --rate 1gbit --slots 2 --prefix "$1" >"$work/up.log" 2>&1 || status=$?
  if [ "$status" = 2 ] && ! grep -q "error:" "$work/up.log"; then
    echo "SKIP: $(head -1 "$work/up.log")"
    exit 0
  fi
  [ "$status" = 0 ] || { cat "$work/up.log"; fail "cluster.sh up"; }
}

# compare_checkpoints A B [STEP]: every dataset of /params, /optimizer and (where A has the
# weight averages) /ema bitwise equal, at the same global step (STEP, when given).
compare_checkpoints() {
  "$PYTHON" - "$1" "$2" "${3:-}" <<'PY'
import sys, h5py, numpy as np
a, b = (h5py.File(p, "r") for p in sys.argv[1:3])
step = a.attrs["global_step"]
assert step == b.attrs["global_step"], (step, b.attrs["global_step"])
assert not sys.argv[3] or step == int(sys.argv[3]), (step, sys.argv[3])
names = []
for group in ["params", "optimizer"] + (["ema"] if "ema" in a else []):
    a[group].visit(lambda n, g=group: names.append(f"{g}/{n}") if isinstance(a[f"{g}/{n}"], h5py.Dataset) else None)
assert len(names) > 4, names
for n in names:
    x, y = a[n][()], b[n][()]
    assert x.shape == y.shape and x.tobytes() == y.tobytes(), f"{n} differs: max {np.abs(x - y).max()}"
print(f"bitwise equal: {len(names)} datasets at step {step}")
PY
}

# bomb_png FILE WIDTH HEIGHT: a decompression bomb's header: a valid PNG whose IHDR declares
# WIDTH x HEIGHT 8-bit grey pixels over one tiny IDAT (a few dozen bytes in all). A decoder that
# believes the header allocates WIDTH x HEIGHT bytes before it finds the data missing.
bomb_png() {
  "$PYTHON" - "$@" <<'PY'
import struct, sys, zlib
path, w, h = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
def chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 0, 0, 0, 0))
open(path, "wb").write(png + chunk(b"IDAT", zlib.compress(b"\0" * 64)) + chunk(b"IEND", b""))
PY
}
