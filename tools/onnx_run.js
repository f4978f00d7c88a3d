// onnx_run.js — runs an ONNX model in ONNX Runtime (the npm package onnxruntime-node, its
// CPU runtime) on one raw little-endian float32 input, for the export tests: writes each
// output as raw float32 to PREFIX.<name>.f32 and prints {name: shape} as JSON.
//   NODE_PATH=DIR/node_modules node tools/onnx_run.js MODEL.onnx INPUT.f32 N,C,H,W PREFIX
const fs = require('fs');
const ort = require('onnxruntime-node');

async function main() {
  const [model, inputPath, dimsText, prefix] = process.argv.slice(2);
  if (!prefix) throw new Error('usage: onnx_run.js MODEL.onnx INPUT.f32 N,C,H,W PREFIX');
  const dims = dimsText.split(',').map(Number);
  const bytes = fs.readFileSync(inputPath);
  const data = new Float32Array(bytes.buffer, bytes.byteOffset, bytes.length / 4);
  const session = await ort.InferenceSession.create(model);
  const results = await session.run({[session.inputNames[0]]: new ort.Tensor('float32', data, dims)});
  const shapes = {};
  for (const name of session.outputNames) {
    const out = results[name];
    fs.writeFileSync(`${prefix}.${name}.f32`, Buffer.from(out.data.buffer, out.data.byteOffset,
                                                          out.data.byteLength));
    shapes[name] = out.dims;
  }
  console.log(JSON.stringify(shapes));
}

main().catch((e) => {
  console.error(`onnx_run.js: error: ${e.message}`);
  process.exit(1);
});
