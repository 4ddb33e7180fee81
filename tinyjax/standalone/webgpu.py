"""The WebGPU target: NAME.js, an ES module with tinygrad's WGSL kernels inside, and index.html, which runs it.

The module holds the program as data (`PLAN`: buffers, constants, kernels with their launch sizes, steps) and a
small runtime (webgpu_module.js) that binds buffers the way tinygrad's WEBGPU device does: binding 0 a uniform
holding INFINITY, then one storage buffer per kernel argument, dispatched with the kernel's global size in
workgroups.
"""
import base64
import json
import pathlib

import numpy as np

from tinyjax.standalone.capture import ExportError, Graph, Kernel

RUNTIME = pathlib.Path(__file__).with_name("webgpu_module.js")
PLAN_MARKERS = ("/* PLAN */", "/* END PLAN */")


def renderer():
  from tinygrad import Device
  return Device["WEBGPU"].renderer


def plan(graph: Graph) -> dict:
  """The program as the module's runtime reads it (JSON)."""
  buffers = []
  for b in graph.buffers:
    entry = {"name": b.name, "path": b.path, "role": b.role, "dtype": b.dtype.name, "shape": list(b.shape),
             "size": b.size, "bytes": b.nbytes, **({"pairs_of": b.pairs_of} if b.pairs_of else {})}
    if b.role == "const":
      entry["data"] = base64.b64encode(np.ascontiguousarray(b.data).tobytes()).decode()
    buffers.append(entry)
  kernels, steps = [], []
  for step in graph.steps:
    if isinstance(step, Kernel):
      if any(offset for _, offset in step.args):
        raise ExportError(f"kernel {step.name} reads a buffer at an offset, which WebGPU bindings cannot")
      steps.append({"kernel": len(kernels)})
      kernels.append({"name": step.name, "code": step.source, "workgroups": list(step.global_size),
                      "args": [b for b, _ in step.args]})
    else:
      src, offset = step.src
      byte_offset = offset * graph.buffers[src].dtype.itemsize
      if byte_offset % 4:
        raise ExportError("an output starts inside a 4-byte word of another buffer, which WebGPU cannot copy")
      steps.append({"copy": [step.dest, src, byte_offset]})
  return {"name": graph.name, "buffers": buffers, "kernels": kernels, "steps": steps}


def read_plan(module_text: str) -> dict:
  """The PLAN of a module this target wrote."""
  start, end = (module_text.index(m) for m in PLAN_MARKERS)
  return json.loads(module_text[start + len(PLAN_MARKERS[0]):end])


def example_inputs(graph: Graph) -> list[np.ndarray]:
  """The inputs index.html makes (the same formula in JavaScript): floats in [-1, 1), small integers, alternating
  booleans; exact in every dtype, so a test can compute what the page should show."""
  arrays = []
  for n, i in enumerate(graph.inputs):
    b = graph.buffers[i]
    k = (np.arange(b.size, dtype=np.int64) * 7 + n * 13) % 17
    values = k / 8 - 1 if b.dtype.kind == "f" else k % 2 if b.dtype.kind == "b" else k
    arrays.append(values.astype(b.dtype).reshape(b.shape))
  return arrays


PAGE = """<!doctype html>
<html>
<head><meta charset="utf-8"><title>__NAME__ (WebGPU, exported by tinyjax)</title></head>
<body>
<h1>__NAME__</h1>
<p>Runs <code>__NAME__.js</code> on example inputs with WebGPU. Serve this folder over HTTP (ES modules do not load
from file://), e.g. <code>python -m http.server</code>, and open it in a browser with WebGPU.</p>
<pre id="result">running...</pre>
<script type="module">
import { __NAME__, requestDevice, inputs, outputs } from "./__NAME__.js";

const TYPED_ARRAYS = { float32: Float32Array, float16: Uint16Array, int32: Int32Array, uint32: Uint32Array,
  int16: Int16Array, uint16: Uint16Array, int8: Int8Array, uint8: Uint8Array, bool: Uint8Array };
// the same example inputs as tinyjax.standalone.webgpu.example_inputs
function example(spec, n) {
  const size = spec.shape.reduce((a, b) => a * b, 1), array = new TYPED_ARRAYS[spec.dtype](size);
  for (let j = 0; j < size; j++) {
    const k = (j * 7 + n * 13) % 17;
    array[j] = spec.dtype.startsWith("float") ? k / 8 - 1 : spec.dtype === "bool" ? k % 2 : k;
  }
  return array;
}

const show = document.getElementById("result");
try {
  const device = await requestDevice();
  const arrays = inputs.map(example);
  const start = performance.now();
  const results = await __NAME__(device, ...arrays);
  const ms = performance.now() - start;
  const report = outputs.map((spec, i) => ({ name: spec.name, dtype: spec.dtype, shape: spec.shape,
    values: Array.from(results[i], Number) }));
  show.textContent = JSON.stringify({ ok: true, ms, outputs: report });
} catch (error) {
  show.textContent = JSON.stringify({ ok: false, error: String(error) });
}
console.log("tinyjax-result " + show.textContent);  // for headless browsers: the console goes to their log
document.title = "done";
</script>
</body>
</html>
"""


# the module's own top-level names: the exported function cannot take one
MODULE_NAMES = frozenset({"PLAN", "TYPED_ARRAYS", "describe", "inputs", "outputs", "requestDevice", "padded",
                          "decode", "prepared", "prepare"})


def write(graph: Graph, summary: str) -> dict[str, str]:
  if graph.name in MODULE_NAMES:
    raise ExportError(f"the WebGPU module defines {graph.name!r} itself: export the function under another name "
                      "(name=...)")
  plan_json = json.dumps(plan(graph), separators=(",", ":"))
  module = RUNTIME.read_text().replace("__NAME__", graph.name).replace("__SUMMARY__", summary)
  return {f"{graph.name}.js": module.replace("__PLAN__", plan_json), "index.html": PAGE.replace("__NAME__", graph.name)}
