"""tinyjax.export: functions written as C (compiled with `cc`, called through ctypes) and as WebGPU modules (their
kernels run on tinygrad's WEBGPU device, and the page in headless Chromium where it runs) equal jax.jit's results."""
import base64
import ctypes
import json
import os
import shutil
import subprocess
import sys
import threading
from functools import cache, partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import linen as nn
from typer.testing import CliRunner

import tinyjax
from tinyjax import ExportError
from tinyjax.cli.main import app
from tinyjax.standalone.webgpu import example_inputs, read_plan



def elementwise_and_reduction(x, y):
  return jnp.sum(jnp.sqrt(jnp.abs(x)) * y + jnp.maximum(x, y) ** 2 - jnp.where(x > 0.5, 1.0, y), axis=-1)


def scores_and_labels(x, w):
  scores = x @ w
  return scores, jnp.argmax(scores, axis=-1)


def mixed_dtypes(x, n, flags):
  table = jnp.array([-2147483648, 7, 2147483647], jnp.int32)  # a constant with int32's extremes
  return (x * n).astype(jnp.int32) + table[1], flags & (x > 0), jnp.sum(x), table[jnp.argmin(x) % 3]


class CNN(nn.Module):
  """The seed notebook's CNN (examples/seed_notebook.py)."""
  activation: object = nn.silu
  pool: object = nn.avg_pool

  @nn.compact
  def __call__(self, x):
    x = nn.Conv(features=32, kernel_size=(3, 3))(x)
    x = self.pool(self.activation(x), window_shape=(2, 2), strides=(2, 2))
    x = nn.Conv(features=64, kernel_size=(3, 3))(x)
    x = self.pool(self.activation(x), window_shape=(2, 2), strides=(2, 2))
    x = nn.Dense(features=256)(x.reshape((x.shape[0], -1)))
    return nn.Dense(features=10)(self.activation(x))


def seed_cnn(activation, pool):
  cnn = CNN(activation, pool)
  params = cnn.init(jax.random.key(42), jnp.ones([1, 28, 28, 1]))

  def apply_model(params, images):
    return cnn.apply(params, images)
  return apply_model, params


EXPORT_CASES = ["elementwise_and_reduction", "scores_and_labels", "seed_cnn_silu", "seed_cnn_relu"]


@cache
def export_cases() -> dict:
  """name -> (function, arguments), made at the first test that takes one: a CNN's init runs dozens of JAX programs,
  which at collection every pytest process (each worker of each run) paid."""
  rng = np.random.default_rng(0)
  x, y = (rng.standard_normal((5, 7)).astype(np.float32) for _ in range(2))
  images = np.asarray(jax.random.uniform(jax.random.key(1), (2, 28, 28, 1)))
  silu_cnn, silu_params = seed_cnn(nn.silu, nn.avg_pool)
  relu_cnn, relu_params = seed_cnn(nn.relu, nn.max_pool)
  return {"elementwise_and_reduction": (elementwise_and_reduction, (x, y)),
          "scores_and_labels": (scores_and_labels, (x, rng.standard_normal((7, 3)).astype(np.float32))),
          "seed_cnn_silu": (silu_cnn, (silu_params, images)), "seed_cnn_relu": (relu_cnn, (relu_params, images))}


def assert_like_jit(fn, args, results):
  expected = jax.tree_util.tree_leaves(jax.jit(fn)(*args))
  assert len(results) == len(expected)
  for result, want in zip(results, expected):
    want = np.asarray(want)
    assert result.shape == want.shape and result.dtype == want.dtype
    # float32 tolerance, absolute at the output's scale: sums that cancel (a CNN with random weights) leave an
    # error of a few ulp of their largest terms, not of the result
    np.testing.assert_allclose(result, want, rtol=1e-5, atol=1e-5 * float(np.abs(want).max(initial=1.0)))


# --- C

@pytest.fixture(scope="module")
def compiler():
  # NB: fails, not skips, without a compiler: the README's test command runs where one is (Debian ships gcc)
  assert shutil.which("cc") is not None, "no C compiler (cc) on this machine"
  return "cc"


def compiled(exported, directory, compiler):
  """The exported C, compiled by a plain `cc -O2` into a shared library and loaded."""
  exported.save(directory)
  library = directory / f"lib{exported.name}.so"
  subprocess.run([compiler, "-O2", "-std=c99", "-Werror=implicit-function-declaration", "-shared", "-fPIC",
                  "-o", str(library), str(directory / f"{exported.name}.c"), "-lm"], check=True)
  return getattr(ctypes.CDLL(str(library)), exported.name)


def call_c(function, exported, args) -> list[np.ndarray]:
  inputs = [np.ascontiguousarray(leaf) for leaf in jax.tree_util.tree_leaves(args)]
  outputs = [np.empty(exported.graph.buffers[i].shape, exported.graph.buffers[i].dtype)
             for i in exported.graph.outputs]
  function(*(a.ctypes.data_as(ctypes.c_void_p) for a in inputs + outputs))
  return outputs


@pytest.mark.parametrize("case", EXPORT_CASES)
def test_c_export_equals_jit(case, tmp_path, compiler):
  fn, args = export_cases()[case]
  exported = tinyjax.export(fn, *args, target="c")
  assert set(exported.files) == {f"{fn.__name__}.c", f"{fn.__name__}.h"}
  function = compiled(exported, tmp_path, compiler)
  assert_like_jit(fn, args, call_c(function, exported, args))
  rng = np.random.default_rng(1)  # a second call, on other inputs: nothing of the first call is left over
  other = jax.tree_util.tree_map(lambda a: rng.standard_normal(np.shape(a)).astype(np.asarray(a).dtype), args)
  assert_like_jit(fn, other, call_c(function, exported, other))


def test_c_header_documents_the_arguments(tmp_path):
  exported = tinyjax.export(scores_and_labels, jax.ShapeDtypeStruct((5, 7), np.float32),
                            jax.ShapeDtypeStruct((7, 3), np.float32))
  header = exported.files["scores_and_labels.h"]
  assert "void scores_and_labels(const float *x, const float *w, float *out0, int32_t *out1);" in header
  for line in ("input  x     float32[5, 7]", "output out1  int32[5]", "#define SCORES_AND_LABELS_OUT0_SIZE 15"):
    assert line in header
  assert [p.name for p in exported.save(tmp_path)] == ["scores_and_labels.c", "scores_and_labels.h"]


def test_c_export_uses_only_the_c_library():
  source = tinyjax.export(elementwise_and_reduction, np.ones((2, 3), np.float32), np.ones((2, 3), np.float32)).files
  includes = {line for text in source.values() for line in text.splitlines() if line.startswith("#include")}
  assert includes == {"#include <math.h>", "#include <stdbool.h>", "#include <stdint.h>", "#include <string.h>",
                      '#include "elementwise_and_reduction.h"'}
  assert "malloc" not in source["elementwise_and_reduction.c"]


def test_outputs_that_are_inputs_constants_or_repeated(tmp_path, compiler):
  def passthrough(x):
    return x, jnp.ones(3, jnp.float32), x[1:], x * 2, x * 2

  x = np.arange(4, dtype=np.float32)
  exported = tinyjax.export(passthrough, x)
  assert_like_jit(passthrough, (x,), call_c(compiled(exported, tmp_path, compiler), exported, (x,)))


def test_c_export_of_scalars_integers_and_booleans(tmp_path, compiler):
  args = (np.array([1.5, -2.0, 0.25], np.float32), np.int32(3), np.array([True, False, True]))
  exported = tinyjax.export(mixed_dtypes, *args)
  assert "void mixed_dtypes(const float *x, const int32_t *n, const bool *flags, int32_t *out0, bool *out1, " \
         "float *out2, int32_t *out3);" in exported.files["mixed_dtypes.h"]
  assert_like_jit(mixed_dtypes, args, call_c(compiled(exported, tmp_path, compiler), exported, args))


# --- WebGPU

@pytest.fixture(scope="module")
def webgpu():
  # NB: fails, not skips, without WebGPU: the README's test command installs Dawn (tinyjax[webgpu]) and lavapipe
  import tinyjax.backends.tinygrad  # noqa: F401  (finds Dawn's library in the dawn-python wheel)
  from tinygrad import Device
  return Device["WEBGPU"]


def run_plan(device, plan: dict, args) -> list[np.ndarray]:
  """The module's PLAN run on tinygrad's WEBGPU device, bound as the module's runtime binds it."""
  from tinygrad.device import Buffer, TinyELF
  from tinygrad.dtype import _from_np_dtype
  inputs = iter(np.ascontiguousarray(leaf) for leaf in jax.tree_util.tree_leaves(args))
  buffers = []
  for spec in plan["buffers"]:
    buffer = Buffer("WEBGPU", spec["size"], _from_np_dtype(np.dtype(spec["dtype"]))).allocate()
    data = next(inputs).tobytes() if spec["role"] == "input" else base64.b64decode(spec.get("data", ""))
    if data:
      buffer.allocator._copyin(buffer._buf, memoryview(data))
    buffers.append(buffer)
  for step in plan["steps"]:
    if "kernel" in step:
      kernel = plan["kernels"][step["kernel"]]
      program = device.runtime(TinyELF(kernel["code"].encode(), kernel["name"], device.renderer.target, ()))
      program(*(buffers[b]._buf for b in kernel["args"]), global_size=tuple(kernel["workgroups"]))
    else:
      dest, src, offset = step["copy"]
      data = bytes(buffers[src].as_memoryview())[offset:offset + plan["buffers"][dest]["bytes"]]
      buffers[dest].allocator._copyin(buffers[dest]._buf, memoryview(data))
  return [np.frombuffer(bytes(b.as_memoryview()), spec["dtype"]).reshape(spec["shape"])
          for spec, b in zip(plan["buffers"], buffers) if spec["role"] == "output"]


@pytest.mark.parametrize("case", EXPORT_CASES)
def test_webgpu_export_equals_jit(case, webgpu):
  fn, args = export_cases()[case]
  exported = tinyjax.export(fn, *args, target="webgpu")
  assert set(exported.files) == {f"{fn.__name__}.js", "index.html"}
  assert_like_jit(fn, args, run_plan(webgpu, read_plan(exported.files[f"{fn.__name__}.js"]), args))


def test_webgpu_export_of_scalars_integers_and_booleans(webgpu):
  args = (np.array([1.5, -2.0, 0.25], np.float32), np.int32(3), np.array([True, False, True]))
  exported = tinyjax.export(mixed_dtypes, *args, target="webgpu")
  assert_like_jit(mixed_dtypes, args, run_plan(webgpu, read_plan(exported.files["mixed_dtypes.js"]), args))


# --- complex values and FFTs: an argument or result of a complex dtype is its interleaved (real, imaginary) pairs,
# float32[..., 2] for complex64: the memory of a NumPy complex64 array

def spectral_filter(x, z):
  """A real signal smoothed through its spectrum, a complex one's spectrum rotated and transformed back, and the
  power spectrum of a 2-d transform: rfft, irfft, fft, ifft, fft2 of lengths 12 (4 x 3) and 10 (2 x 5)."""
  smoothed = jnp.fft.irfft(jnp.fft.rfft(x) * jnp.exp(-jnp.arange(7) / 3.0), 12)
  return smoothed, jnp.fft.ifft(jnp.fft.fft(z) * 1j) + z.conj(), jnp.abs(jnp.fft.fft2(z[:, :10])) ** 2


def fft_args():
  rng = np.random.default_rng(2)
  return (rng.standard_normal((3, 12)).astype(np.float32),
          (rng.standard_normal((4, 12)) + 1j * rng.standard_normal((4, 12))).astype(np.complex64))


def as_complex(results, exported) -> list[np.ndarray]:
  """The pairs of each complex output as the complex array they are."""
  return [r.view(np.dtype(b.pairs_of)).reshape(r.shape[:-1]) if b.pairs_of else r
          for r, b in zip(results, (exported.graph.buffers[i] for i in exported.graph.outputs))]


def test_c_export_of_ffts(tmp_path, compiler):
  exported = tinyjax.export(spectral_filter, *fft_args(), target="c")
  header = exported.files["spectral_filter.h"]
  assert "float32[4, 12, 2] (complex64: (real, imaginary) pairs) z" in header
  assert "void spectral_filter(const float *x, const float *z, float *out0, float *out1, float *out2);" in header
  function = compiled(exported, tmp_path, compiler)
  assert_like_jit(spectral_filter, fft_args(), as_complex(call_c(function, exported, fft_args()), exported))


def test_webgpu_export_of_ffts(webgpu):
  exported = tinyjax.export(spectral_filter, *fft_args(), target="webgpu")
  plan = read_plan(exported.files["spectral_filter.js"])
  assert [b.get("pairs_of") for b in plan["buffers"] if b["role"] == "input"] == [None, "complex64"]
  assert_like_jit(spectral_filter, fft_args(), as_complex(run_plan(webgpu, plan, fft_args()), exported))


# --- errors

def banded(d, x):
  return jax.lax.linalg.tridiagonal_solve(d, d + 3.0, d, x) * 2.0


BANDED_LINE = banded.__code__.co_firstlineno + 1


def test_primitive_without_rule_names_it_and_the_line():
  with pytest.raises(ExportError) as raised:
    tinyjax.export(banded, np.ones(8, np.float32), np.ones((8, 1), np.float32))
  message = str(raised.value)
  assert "tridiagonal_solve (no tinygrad rule)" in message and f"{__file__}:{BANDED_LINE}" in message
  assert "never on XLA" in message


def test_unknown_target():
  with pytest.raises(ExportError, match="unknown export target 'wasm'"):
    tinyjax.export(jnp.sin, np.ones(8, np.float32), target="wasm")


def test_webgpu_names_float64_it_cannot_render(webgpu):
  with jax.enable_x64(True), pytest.raises(ExportError, match=r"sin \(float64: a dtype the device lacks"):
    tinyjax.export(jnp.sin, np.ones(8, np.float64), target="webgpu")


# --- the command

MODEL = '''
import jax
import jax.numpy as jnp
import numpy as np

def predict(x, w):
  return jnp.maximum(x @ w, 0.0).sum(axis=-1)

def example_args():
  return np.ones((2, 3), np.float32), np.ones((3, 4), np.float32)

def banded(d):
  return jax.lax.linalg.tridiagonal_solve(d, d + 3.0, d, d[:, None])

def banded_args():
  return (np.ones(8, np.float32),)

def not_a_tuple():
  return np.ones(8, np.float32)

if __name__ == "__main__":
  raise SystemExit("the export must not run this")
'''


@pytest.fixture
def model(tmp_path):
  (path := tmp_path / "model.py").write_text(MODEL)
  return path


def invoke(*args):
  return CliRunner().invoke(app, ["export", *map(str, args)])


def test_command_writes_c(model, tmp_path, compiler):
  result = invoke(f"{model}:predict", "--to", "c", "-o", tmp_path / "out")
  assert result.exit_code == 0, result.output
  assert result.stdout.split() == [str(tmp_path / "out" / "predict.c"), str(tmp_path / "out" / "predict.h")]
  subprocess.run([compiler, "-O2", "-c", "-o", str(tmp_path / "predict.o"), str(tmp_path / "out" / "predict.c")],
                 check=True)


def test_command_writes_webgpu(model, tmp_path, webgpu):
  result = invoke(f"{model}:predict", "--to", "webgpu", "-o", tmp_path, "--name", "relu_sum")
  assert result.exit_code == 0, result.output
  assert sorted(os.listdir(tmp_path)) == ["index.html", "model.py", "relu_sum.js"]
  if node := shutil.which("node"):  # the module parses as JavaScript
    subprocess.run([node, "--check", str(tmp_path / "relu_sum.js")], check=True)


@pytest.mark.parametrize("args, message", [
  (("{model}:nowhere",),
   "defines no function 'nowhere' (it defines: banded, banded_args, example_args, not_a_tuple, predict"),
  (("{model}",), "give the function as FILE.py:FUNCTION"),
  (("{model}x:predict",), "no such file"),
  (("{model}:predict", "--example-args", "missing"), "defines no missing()"),
  (("{model}:predict", "--example-args", "not_a_tuple"), "not_a_tuple() returned a ndarray"),
  (("{model}:banded", "--example-args", "banded_args"), "tridiagonal_solve (no tinygrad rule) at {model}:13"),
])
def test_command_refuses_bad_input(model, args, message):
  result = invoke(*(a.format(model=model) for a in args))
  assert result.exit_code == 2
  assert result.stderr.startswith("tinyjax export: ") and message.format(model=model) in result.stderr


def test_command_error_in_the_function_is_the_users(model):
  result = invoke(f"{model}:banded")  # two example arguments for a function of one
  assert result.exit_code == 1 and "TypeError" in result.stderr and "banded()" in result.stderr


def test_command_as_a_subprocess(model, tmp_path):
  """`python -m tinyjax.cli.main export` as users run it: exit code and stderr of a refused export."""
  result = subprocess.run([sys.executable, "-m", "tinyjax.cli.main", "export", f"{model}:banded",
                           "--example-args", "banded_args"], capture_output=True, text=True, cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": os.path.dirname(os.path.dirname(__file__))})
  assert result.returncode == 2 and "tridiagonal_solve (no tinygrad rule)" in result.stderr and "Traceback" not in result.stderr


# --- the page, in a browser

def _chromium() -> str:
  # NB: fails, not skips, without a browser: the README's test command installs Debian's chromium
  browser = shutil.which("chromium") or shutil.which("chromium-browser")
  assert browser is not None, "no Chromium to run the page in"
  return browser


class QuietHandler(SimpleHTTPRequestHandler):
  def log_message(self, *args):
    pass


@pytest.mark.parametrize("fn, specs", [
  (elementwise_and_reduction, [((5, 7), np.float32)] * 2),
  (mixed_dtypes, [((3,), np.float32), ((), np.int32), ((3,), np.bool_)]),
], ids=["elementwise_and_reduction", "mixed_dtypes"])
def test_webgpu_page_runs_in_headless_chromium(fn, specs, tmp_path, webgpu):
  """index.html, served over HTTP, runs the module with the browser's WebGPU and logs what it computed."""
  exported = tinyjax.export(fn, *(jax.ShapeDtypeStruct(*spec) for spec in specs), target="webgpu")
  exported.save(tmp_path)
  server = ThreadingHTTPServer(("127.0.0.1", 0), partial(QuietHandler, directory=str(tmp_path)))
  threading.Thread(target=server.serve_forever, daemon=True).start()
  env = {**os.environ, "XDG_RUNTIME_DIR": str(tmp_path)}
  browser = subprocess.Popen([_chromium(), "--headless=new", "--no-sandbox", "--enable-unsafe-webgpu",
                              "--enable-features=Vulkan", "--ignore-gpu-blocklist", "--enable-logging=stderr",
                              f"--user-data-dir={tmp_path / 'profile'}", "--remote-debugging-port=0",
                              f"http://127.0.0.1:{server.server_port}/index.html"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
  timer = threading.Timer(120, browser.kill)
  timer.start()
  try:
    line = next((line for line in browser.stderr if "tinyjax-result " in line), "")
  finally:
    timer.cancel()
    browser.kill()
    browser.wait()
    server.shutdown()
  assert line, "the page logged no result within 120 s"
  # Chromium logs the console line as: ...:CONSOLE:37] "tinyjax-result {...}", source: http://... (37)
  logged = json.loads(line[line.index("tinyjax-result ") + len("tinyjax-result "):line.rindex('", source')])
  assert logged["ok"], logged
  args = example_inputs(exported.graph)
  results = [np.array(o["values"], o["dtype"]).reshape(o["shape"]) for o in logged["outputs"]]
  assert_like_jit(fn, args, results)
