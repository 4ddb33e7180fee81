// __NAME__.js: __SUMMARY__.
// WGSL kernels rendered by tinygrad; runs with WebGPU (a browser, or Deno/Node with a WebGPU implementation).
//
//   import { __NAME__, requestDevice, inputs, outputs } from "./__NAME__.js";
//   const device = await requestDevice();
//   const [out0, ...] = await __NAME__(device, input0, input1, ...);
//
// Inputs and outputs are typed arrays of the flattened (row-major) values, in the flattened pytree order of the
// Python function's arguments and results; `inputs` and `outputs` list their names, shapes and dtypes. bool is a
// Uint8Array of 0 and 1; float16 is a Uint16Array of the raw bits.

const PLAN = /* PLAN */ __PLAN__ /* END PLAN */;

const TYPED_ARRAYS = {
  float32: Float32Array, float16: Uint16Array, int32: Int32Array, uint32: Uint32Array, int16: Int16Array,
  uint16: Uint16Array, int8: Int8Array, uint8: Uint8Array, bool: Uint8Array,
};

// pairs_of: a complex argument's dtype ("complex64"), given as its interleaved (real, imaginary) pairs (shape [..., 2])
const describe = ({ name, path, dtype, shape, pairs_of }) => ({ name, path, dtype, shape, ...(pairs_of && { pairs_of }) });
export const inputs = PLAN.buffers.filter((b) => b.role === "input").map(describe);
export const outputs = PLAN.buffers.filter((b) => b.role === "output").map(describe);

// A device with the adapter's own limits: a kernel may bind more storage buffers than WebGPU's default of 8.
export async function requestDevice(adapter) {
  adapter ??= await globalThis.navigator?.gpu?.requestAdapter();
  if (!adapter) throw new Error("WebGPU is not available here (navigator.gpu gave no adapter)");
  const limits = {};
  for (const name of ["maxStorageBuffersPerShaderStage", "maxBufferSize", "maxStorageBufferBindingSize",
                      "maxComputeWorkgroupStorageSize", "maxComputeInvocationsPerWorkgroup"]) {
    limits[name] = adapter.limits[name];
  }
  const requiredFeatures = adapter.features.has("shader-f16") ? ["shader-f16"] : [];
  return adapter.requestDevice({ requiredFeatures, requiredLimits: limits });
}

const padded = (bytes) => (bytes % 4 ? bytes + 4 - (bytes % 4) : bytes);  // WebGPU copies whole 4-byte words

function decode(base64) {
  const text = atob(base64);
  const bytes = new Uint8Array(padded(text.length));
  for (let i = 0; i < text.length; i++) bytes[i] = text.charCodeAt(i);
  return bytes;
}

// Per device, made on the first call: buffers, constants, pipelines and bind groups (reused by every call).
const prepared = new WeakMap();

async function prepare(device) {
  device.pushErrorScope("validation");
  const usage = GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_SRC | GPUBufferUsage.COPY_DST;
  const buffers = PLAN.buffers.map((b) => device.createBuffer({ size: padded(b.bytes), usage }));
  PLAN.buffers.forEach((b, i) => { if (b.role === "const") device.queue.writeBuffer(buffers[i], 0, decode(b.data)); });
  // binding 0 of every kernel: the uniform INFINITY (WGSL has no literal for it)
  const infinity = device.createBuffer({ size: 4, usage: GPUBufferUsage.UNIFORM | GPUBufferUsage.COPY_DST });
  device.queue.writeBuffer(infinity, 0, new Float32Array([Infinity]));
  const kernels = [];
  for (const kernel of PLAN.kernels) {
    const entries = [{ binding: 0, visibility: GPUShaderStage.COMPUTE, buffer: { type: "uniform" } },
      ...kernel.args.map((_, i) => ({ binding: i + 1, visibility: GPUShaderStage.COMPUTE, buffer: { type: "storage" } }))];
    const layout = device.createBindGroupLayout({ entries });
    const pipeline = await device.createComputePipelineAsync({
      layout: device.createPipelineLayout({ bindGroupLayouts: [layout] }),
      compute: { module: device.createShaderModule({ code: kernel.code }), entryPoint: kernel.name },
    });
    const bindGroup = device.createBindGroup({ layout, entries: [{ binding: 0, resource: { buffer: infinity } },
      ...kernel.args.map((b, i) => ({ binding: i + 1, resource: { buffer: buffers[b] } }))] });
    kernels.push({ pipeline, bindGroup, workgroups: kernel.workgroups });
  }
  const error = await device.popErrorScope();
  if (error) throw new Error(`__NAME__: WebGPU rejected the program: ${error.message}`);
  return { buffers, kernels };
}

export async function __NAME__(device, ...arrays) {
  const inputIndexes = PLAN.buffers.flatMap((b, i) => (b.role === "input" ? [i] : []));
  if (arrays.length !== inputIndexes.length) {
    throw new Error(`__NAME__ takes ${inputIndexes.length} arrays (${inputs.map((b) => b.name).join(", ")}), got ${arrays.length}`);
  }
  if (!prepared.has(device)) prepared.set(device, prepare(device));
  const { buffers, kernels } = await prepared.get(device);
  inputIndexes.forEach((b, i) => {
    const spec = PLAN.buffers[b], Type = TYPED_ARRAYS[spec.dtype], array = arrays[i];
    if (!(array instanceof Type) || array.length !== spec.size) {
      throw new Error(`__NAME__: ${spec.name} must be a ${Type.name} of ${spec.size} elements (${spec.dtype}[${spec.shape}])`);
    }
    const bytes = new Uint8Array(padded(spec.bytes));
    bytes.set(new Uint8Array(array.buffer, array.byteOffset, spec.bytes));
    device.queue.writeBuffer(buffers[b], 0, bytes);
  });
  const encoder = device.createCommandEncoder();
  let pass = null;
  for (const step of PLAN.steps) {
    if (step.kernel !== undefined) {
      const kernel = kernels[step.kernel];
      pass ??= encoder.beginComputePass();
      pass.setPipeline(kernel.pipeline);
      pass.setBindGroup(0, kernel.bindGroup);
      pass.dispatchWorkgroups(...kernel.workgroups);
    } else {
      pass?.end();
      pass = null;
      const [dest, src, srcOffset] = step.copy;
      encoder.copyBufferToBuffer(buffers[src], srcOffset, buffers[dest], 0, padded(PLAN.buffers[dest].bytes));
    }
  }
  pass?.end();
  const outputIndexes = PLAN.buffers.flatMap((b, i) => (b.role === "output" ? [i] : []));
  const staging = outputIndexes.map((b) => {
    const size = padded(PLAN.buffers[b].bytes);
    const read = device.createBuffer({ size, usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST });
    encoder.copyBufferToBuffer(buffers[b], 0, read, 0, size);
    return read;
  });
  device.queue.submit([encoder.finish()]);
  await Promise.all(staging.map((read) => read.mapAsync(GPUMapMode.READ)));
  return staging.map((read, i) => {
    const spec = PLAN.buffers[outputIndexes[i]];
    const result = new TYPED_ARRAYS[spec.dtype](read.getMappedRange().slice(0, spec.bytes));
    read.unmap();
    read.destroy();
    return result;
  });
}
