#!/usr/bin/env bash
# export.sh — rt-export end to end: a trained fibernet's model file as ONNX, which ONNX's own
# Python checker accepts (full check, with shape inference) and ONNX Runtime (npm's
# onnxruntime-node, installed under output/) evaluates to ringtrain predict's probabilities
# within 1e-4 (the class heads, and each output of the inspection heads); as a PyTorch state_dict whose pickle and storages read back to the model file's
# tensors (and, where torch is installed, that the zoo's torch model loads with strict=True and
# evaluates to the same probabilities); bad inputs give one line, exit 2 and no file.
source "$(dirname "$0")/lib/e2e.sh"
e2e_workdir export

[ -x "$BIN/rt-export" ] || { echo "SKIP: $BIN/rt-export not built (no ONNX headers: make deps)"; exit 0; }
tiny_fiber_data "$work/data"
"$BIN/ringtrain" --deck inputs/quickstart.deck --data.dir="$work/data" --train.epochs=1 \
  --train.max_steps=4 --data.eval_split= --output.dir="$work/out" --output.name=fiber \
  --output.timeline=false --output.checkpoint_dir="$work/ckpt" >"$work/train.log" 2>&1 ||
  { cat "$work/train.log"; fail "training"; }
model=$work/ckpt/fiber.ckpt.h5
"$BIN/rt-export" --model "$model" --onnx "$work/fiber.onnx" --torch "$work/fiber.pt" |
  tee "$work/export.log"
grep -q ' -> .*fiber.onnx: [0-9]* ONNX nodes, opset 13, checked$' "$work/export.log" || fail "onnx line"
grep -q ' -> .*fiber.pt: a state_dict of [0-9]* tensors$' "$work/export.log" || fail "torch line"

# ---- ONNX's checker, and the metadata ------------------------------------------------------------
"$PYTHON" - "$work/fiber.onnx" <<'PY' || fail "onnx checker"
import json, sys, onnx
m = onnx.load(sys.argv[1])
onnx.checker.check_model(m, full_check=True)
meta = {p.key: p.value for p in m.metadata_props}
assert meta["model"] == "fibernet" and meta["heads"] == "class", meta
assert json.loads(meta["class_names"]) == ["clean", "scratch", "contamination", "chip_pit", "crack"], meta
assert json.loads(meta["input_shape"]) == [1, 64, 64], meta
assert len(json.loads(meta["mean"])) == 1 and len(json.loads(meta["std"])) == 1, meta
assert m.opset_import[0].version == 13
ops = {n.op_type for n in m.graph.node}
assert {"Conv", "BatchNormalization", "Relu", "MaxPool", "Add", "GlobalAveragePool", "Gemm", "Softmax"} <= ops, ops
print(f"onnx checker: ok, {len(m.graph.node)} nodes, ops {sorted(ops)}")
PY

# ---- ringtrain predict on the test split: the reference -------------------------------------------
"$BIN/ringtrain" predict --model "$model" --input "$work"/data/test-*.h5 --output "$work/pred" \
  >"$work/predict.log" 2>&1 || { rc=$?; cat "$work/predict.log"; fail "ringtrain predict: exit $rc"; }
# The same images, normalised as the metadata says, as raw float32 for the runtime.
"$PYTHON" - "$work/data" "$work/fiber.onnx" "$work/input.f32" <<'PY'
import glob, json, sys, h5py, numpy as np, onnx
meta = {p.key: p.value for p in onnx.load(sys.argv[2]).metadata_props}
mean = np.array(json.loads(meta["mean"]), np.float32).reshape(1, -1, 1, 1)
std = np.array(json.loads(meta["std"]), np.float32).reshape(1, -1, 1, 1)
images = np.concatenate([h5py.File(f, "r")["images"][()] for f in sorted(glob.glob(sys.argv[1] + "/test-*.h5"))])
((images.astype(np.float32) / 255 - mean) / std).astype("<f4").tofile(sys.argv[3])
print(f"{len(images)} test images")
PY
count=$("$PYTHON" -c "import os; print(os.path.getsize('$work/input.f32') // (4 * 64 * 64))")

# compare_probabilities WHAT FILE.f32: max |p - predict's| over every image and class <= 1e-4.
compare_probabilities() {
  "$PYTHON" - "$2" "$work/pred.h5" "$1" <<'PY'
import sys, h5py, numpy as np
got = np.fromfile(sys.argv[1], "<f4")
with h5py.File(sys.argv[2], "r") as f:
    want = f["probs"][()].astype(np.float32)
got = got.reshape(want.shape)
worst = float(np.abs(got - want).max())
print(f"{sys.argv[3]}: {want.shape[0]} images, max |p - ringtrain predict| = {worst:.2e} (tolerance 1e-4)")
sys.exit(0 if worst <= 1e-4 else 1)
PY
}

# ---- ONNX Runtime (npm's onnxruntime-node carries its CPU runtime) --------------------------------
ort=output/onnxruntime-node
if [ ! -d "$ort/node_modules/onnxruntime-node" ]; then
  mkdir -p "$ort"
  npm install --prefix "$ort" --ignore-scripts --no-audit --no-fund onnxruntime-node@1.30 \
    >"$work/npm.log" 2>&1 || rm -rf "$ort/node_modules"
fi
if ! command -v node >/dev/null || [ ! -d "$ort/node_modules/onnxruntime-node" ]; then
  echo "SKIP onnx runtime: cannot install onnxruntime-node from npm ($(tail -1 "$work/npm.log" 2>/dev/null))"
else
  NODE_PATH=$ort/node_modules node tools/onnx_run.js "$work/fiber.onnx" "$work/input.f32" \
    "$count,1,64,64" "$work/ort" || fail "onnx runtime"
  compare_probabilities "onnx runtime" "$work/ort.probabilities.f32" || fail "onnx runtime vs predict"
fi

# ---- the state_dict: read back without torch, and with it where it is installed --------------------
"$PYTHON" - "$work/fiber.pt" "$model" <<'PY' || fail "state_dict contents"
import pickle, sys, zipfile, h5py, numpy as np
z = zipfile.ZipFile(sys.argv[1])
class Reader(pickle.Unpickler):
    def find_class(self, module, name):
        if (module, name) == ("torch._utils", "_rebuild_tensor_v2"):
            return lambda storage, offset, size, stride, grad, hooks: storage[offset:].reshape(size)
        if (module, name) in (("torch", "FloatStorage"), ("torch", "LongStorage")):
            return np.float32 if name == "FloatStorage" else np.int64
        if (module, name) == ("collections", "OrderedDict"):
            return dict
        raise pickle.UnpicklingError(f"unexpected {module}.{name}")
    def persistent_load(self, pid):
        kind, dtype, key, location, numel = pid
        assert kind == "storage" and location == "cpu", pid
        data = np.frombuffer(z.read(f"archive/data/{key}"), dtype)
        assert data.size == numel, (key, data.size, numel)
        return data
assert z.read("archive/version") == b"3\n"
sd = Reader(z.open("archive/data.pkl")).load()
with h5py.File(sys.argv[2], "r") as f:
    names = []
    f["params"].visit(lambda n: names.append(n) if isinstance(f["params"][n], h5py.Dataset) else None)
    for n in names:
        key = n.replace("/", ".")
        assert key in sd and np.array_equal(sd[key], f["params"][n][()]), key
bn = [k for k in sd if k.endswith("num_batches_tracked")]
assert len(bn) == sum(k.endswith("running_var") for k in sd) > 0, bn
print(f"state_dict: {len(sd)} entries, every model-file tensor bitwise, {len(bn)} num_batches_tracked")
PY
if "$PYTHON" -c 'import torch' 2>/dev/null; then
  (cd tools && "$PYTHON" - "$work/fiber.pt" "$work/input.f32" "$count" "$work/torch.f32") <<'PY' || fail "torch"
import sys, numpy as np, torch
from bench_compute_torch import make_model
model = make_model("fibernet", 1, 64, 64, 5)
print("load_state_dict(strict=True):", model.load_state_dict(torch.load(sys.argv[1]), strict=True))
model.eval()
x = torch.from_numpy(np.fromfile(sys.argv[2], "<f4").reshape(int(sys.argv[3]), 1, 64, 64))
with torch.inference_mode():
    torch.softmax(model(x), 1).numpy().astype("<f4").tofile(sys.argv[4])
PY
  compare_probabilities "torch" "$work/torch.f32" || fail "torch vs predict"
else
  echo "SKIP torch: $PYTHON has no torch (make bench-deps installs it); the state_dict was read without it"
fi

# ---- inspection heads: the defect, pass and zone sigmoids beside the class softmax -----------------
"$BIN/ringtrain" --deck inputs/quickstart.deck --data.dir="$work/data" --train.epochs=1 \
  --train.max_steps=4 --model.heads=inspect --output.dir="$work/out" --output.name=inspect \
  --output.timeline=false --output.checkpoint_dir="$work/ckpt" >"$work/train-inspect.log" 2>&1 ||
  { cat "$work/train-inspect.log"; fail "training the inspection heads"; }
"$BIN/rt-export" --model "$work/ckpt/inspect.ckpt.h5" --onnx "$work/inspect.onnx" >/dev/null
"$BIN/ringtrain" predict --model "$work/ckpt/inspect.ckpt.h5" --input "$work"/data/test-*.h5 \
  --output "$work/pred-inspect" >"$work/predict-inspect.log" 2>&1 ||
  { rc=$?; cat "$work/predict-inspect.log"; fail "predict (inspect): exit $rc"; }
"$PYTHON" - "$work/inspect.onnx" <<'PY' || fail "inspect onnx"
import json, sys, onnx
m = onnx.load(sys.argv[1])
onnx.checker.check_model(m, full_check=True)
meta = {p.key: p.value for p in m.metadata_props}
assert meta["heads"] == "inspect" and json.loads(meta["zone_names"]) == ["A", "B", "C", "D"], meta
assert len(json.loads(meta["defect_names"])) == 5 and 0 < float(meta["pass_threshold"]) < 1, meta
outputs = [o.name for o in m.graph.output]
assert outputs == ["logits", "probabilities", "defect_probabilities", "pass_probability",
                   "zone_pass_probabilities"], outputs
print("inspect onnx: checker ok, outputs", outputs)
PY
if [ -d "$ort/node_modules/onnxruntime-node" ] && command -v node >/dev/null; then
  NODE_PATH=$ort/node_modules node tools/onnx_run.js "$work/inspect.onnx" "$work/input.f32" \
    "$count,1,64,64" "$work/ort-inspect" >/dev/null || fail "onnx runtime (inspect)"
  "$PYTHON" - "$work/ort-inspect" "$work/pred-inspect.h5" <<'PY' || fail "inspect heads vs predict"
import sys, h5py, numpy as np
with h5py.File(sys.argv[2], "r") as f:
    for onnx_name, ours in [("probabilities", "probs"), ("defect_probabilities", "defect_probs"),
                            ("pass_probability", "pass_prob"), ("zone_pass_probabilities", "zone_probs")]:
        want = f[ours][()].astype(np.float32)
        got = np.fromfile(f"{sys.argv[1]}.{onnx_name}.f32", "<f4").reshape(want.shape)
        worst = float(np.abs(got - want).max())
        print(f"onnx runtime {onnx_name}: max |p - predict's {ours}| = {worst:.2e} (tolerance 1e-4)")
        assert worst <= 1e-4, onnx_name
PY
fi

# ---- bad inputs ---------------------------------------------------------------------------------------
expect_bad() {  # expect_bad MESSAGE ARGS...
  local message=$1 status=0 err
  shift
  err=$("$BIN/rt-export" "$@" 2>&1 >/dev/null) || status=$?
  [ "$status" = 2 ] || fail "exit $status for $*: $err"
  [ "$err" = "rt-export: error: $message" ] || fail "message '$err' for $*"
  [ ! -e "$work/bad.onnx" ] || fail "$* wrote $work/bad.onnx"
}
# The one re-save hint (io::kResaveHint), the same as ringtrain predict's.
hint="re-save it as a model file by resuming its run: ringtrain --deck DECK --resume (with its train.epochs reached it trains no further and rewrites the checkpoint as format_version 2)"
expect_bad "$work/data/train-00000-of-00002.h5: not a ringtrain model file (no format attribute 'ringtrain-checkpoint')" \
  --model "$work/data/train-00000-of-00002.h5" --onnx "$work/bad.onnx"
cp "$model" "$work/v1.h5"
"$PYTHON" -c "import h5py; f = h5py.File('$work/v1.h5', 'a'); del f.attrs['input_shape']"
expect_bad "$work/v1.h5: checkpoint format_version 2 lacks what inference needs (input_shape); $hint" \
  --model "$work/v1.h5" --onnx "$work/bad.onnx"
expect_bad "nothing to write: give --onnx FILE, --torch FILE or both" --model "$model"
echo "export: ok"
