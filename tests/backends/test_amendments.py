"""tinyjax's amendments to tinygrad (tinyjax/backends/tinygrad/machinery/amendments.py): each against JAX on XLA, and the
tinygrad they are written for."""
import functools
import importlib.metadata
import inspect
import os
import re
import subprocess
import sys

import numpy as np
import pytest
from jax import lax
from tinygrad import codegen, dtypes
from tinygrad.runtime import ops_cpu, ops_cuda
from tinygrad.uop.ops import UOp

from oracle import check, check_traced
from xfail import param
from tinyjax.backends.tinygrad.machinery import amendments, program_cache


def test_written_for_this_tinygrad():
  """A new tinygrad needs each amendment checked again (and the docstring's version changed)."""
  assert importlib.metadata.version("tinygrad").startswith("0.14."), "amendments.py is written for tinygrad 0.14"
  assert "tinygrad 0.14" in amendments.__doc__


@pytest.mark.parametrize("dtype", [dtypes.int32, dtypes.uint8, dtypes.bool])
def test_zero_folds_kept_for_integers(dtype):
  """x + 0 -> x and x * 0 -> 0 still fold on integers and bools (index arithmetic depends on them)."""
  x = UOp.variable("x", 0, 10, dtypes.int32).cast(dtype)
  assert {pattern.op[0].name: fxn(x=x) is not None for pattern, fxn in amendments.zero_folds()} == {"ADD": True,
                                                                                                  "MUL": True}


def test_zero_folds_declined_for_floats():
  x = UOp.variable("x", 0, 10, dtypes.int32).cast(dtypes.float32)
  assert [fxn(x=x) for _, fxn in amendments.zero_folds()] == [None, None]


@pytest.mark.parametrize("case", [param(case, name="arithmetic on a computed zero", id=case)
                                  for case in ("add", "sub", "mul", "div", "neg_add")])
def test_arithmetic_on_a_computed_zero(case):
  """A zero tinygrad computes at compile time (x > x is False, sqrt of it 0.0) meets NaN, inf and signed zeros:
  IEEE's results (0.0 * NaN is NaN, -0.0 + 0.0 is +0.0)."""
  ops = {"add": lambda z, x: (z + x, x + z), "sub": lambda z, x: (z - 0, z - x, x - z), "mul": lambda z, x: (z * x,),
         "div": lambda z, x: (z / 0, z / x), "neg_add": lambda z, x: (-z + z, z + -z, -x * z)}[case]
  edges = np.array([np.nan, np.inf, -np.inf, -0.0, 0.0, -2.5], np.float32)
  check(lambda np_, e: (lambda x: ops(np_.sqrt(x > x), x))(np_.asarray(e)), edges)


@pytest.mark.parametrize("function", [param(function, name="a loop's first index", id=function)
                                      for function in ("geomspace", "pad")]
                         + [param("geomspace of a small kernel", name="a small kernel's first index", id="small")])
def test_a_loops_first_index(function):
  """An upcast loop's first index is the constant 0: log(-1) * 0 is NaN (jnp.geomspace's first sample), and a
  padded ramp's -0.0 + 0.0 is +0.0 (jnp.pad's linear_ramp). geomspace's kernel is made large enough to be optimized
  (kernel_opts.SMALL_KERNEL: a small kernel is not upcast), and again small."""
  starts = np.array([2.0, 0.5, -1.0, 4.0], np.float32)
  if function == "pad":
    check(lambda np_, a: np_.pad(np_.asarray(a), 2, mode="linear_ramp"),
          np.array([[-2.5, -0.0], [0.0, 1.0]], np.float32))
  else:
    check(lambda np_, a: np_.geomspace(np_.asarray(a), 8.0, 3),
          starts if function.endswith("small kernel") else np.resize(starts, 512), rtol=1e-6)


def test_float_sums_and_products_keep_their_order():
  """x + (y + z) is not (x + y) + z in floats: 1e8 + (-1e8 + 1) is 0.0 and x ** 5 is x * (x2 * x2), as XLA rounds."""
  big = np.array([1e8, -1e8, 1.0, 3.0], np.float32)
  spread = np.random.default_rng(0).uniform(-10, 10, 64).astype(np.float32)
  check_traced(lambda b, x: [lax.add(b[:1], lax.add(b[1:2], b[2:3])), lax.mul(b[3:], lax.mul(b[:1], b[1:2])),
                             lax.integer_pow(x, 5), lax.integer_pow(x, 13), lax.integer_pow(x, -7)], big, spread)


_GROUPED = {
  "float sums, grouped as XLA groups them": lambda x, y: [
    1.0 + 676.52 / (x + 1.0) + -1259.14 / (x + 2.0) + 771.32 / (x + 3.0), (x + 0.3) + 0.7, (x * 3.3) * 5.1,
    (x + 0.3) + y, (x * 3.3) * y, (y + x) + x, x / x, (x * y) / y, x * -1.0 * -1.0, -(x - y), 1.0 - (x - y)],
  "float sums of products, grouped as XLA groups them": lambda x, y: [
    x * 0.7 + x * 0.2, x + x * 0.3, (y + x * 0.7) + x * 0.2, (y + x) + x * 0.3],
}


@pytest.mark.parametrize("name", [param(name, name=name, id=name) for name in _GROUPED])
def test_float_arithmetic_is_not_regrouped(name):
  """Float arithmetic grouped as XLA groups it, bit for bit: tinygrad's rules that regroup it where XLA does not
  (constants moved to the end of a chain, common factors taken out) or cancel an operand (x / x, x * y / y) are
  declined for floats; the regroupings XLA makes too ((x + 0.3) + 0.7, (x * 3.3) * 5.1) stay. The first is lgamma's
  Lanczos sum; XLA's jit computes x * 0.7 + x * 0.2 as a fused multiply-add. NB: no subnormal operands (XLA's jit
  flushes them to zero, its eager operations do not)."""
  x = np.concatenate([np.linspace(0.6, 30, 4001), [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-3, 3e38, -2.5]])
  x = x.astype(np.float32)
  check_traced(_GROUPED[name], x, np.roll(x, 7), jax_jit=True, rtol=0)


def test_float_regrouping_rules_declined_for_floats_only():
  """Each of tinygrad's regrouping rules amended (amendments.float_inexact_rules) still folds integers."""
  found = amendments.float_inexact_rules()
  assert all(found.values()), {text: fxns for text, fxns in found.items() if not fxns}
  assert all(fxn.__code__ is amendments._FLOAT_INEXACT_RULES[text][1].__code__
             for text, fxns in found.items() for fxn in fxns)
  i = UOp.variable("i", 0, 10, dtypes.int32)
  f = i.cast(dtypes.float32)
  for regrouped in (lambda v: (v + 3) + v, lambda v: v * 3 + v * 4, lambda v: v + v * 3, lambda v: (v * 3) * v):
    assert regrouped(i).simplify() is not regrouped(i) and regrouped(f).simplify() is regrouped(f)


def test_gates_are_simplified_integer_masks_left_alone():
  """tinygrad's simplify_valid still simplifies a gate (an AND of conditions), and no longer walks the graph below an
  integer AND (a float16 rounding's mask), which made long chains of roundings quadratic to rewrite."""
  from tinygrad.uop import symbolic
  x = UOp.variable("x", 0, 100, dtypes.int32)
  mask = x.cast(dtypes.uint32) & 7
  assert symbolic.simplify_valid(mask) is None and "backward_slice" not in vars(mask)
  gate = (x < 10) & ((x * 2) < 50)  # x < 10 implies x * 2 < 50
  assert symbolic.simplify_valid(gate) is not None


@pytest.mark.parametrize("dtype", [np.uint8, np.int16, np.int32, np.float32])
def test_a_range_of_a_buffer_at_any_offset(dtype):
  """x[o:o+n] of an input at every offset, as a result and read by a kernel: tinygrad made the range a view of the
  input 2 int32s past a 16-byte boundary, and its vector loads from there killed the CPU backend (a segfault)."""
  x = np.arange(40).astype(dtype)
  check(lambda np_, x: [y for o in range(17) for y in (np_.asarray(x)[o:o + 20], np_.asarray(x)[o:o + 20] * 2)], x)


@pytest.mark.parametrize("dtype", [np.int32, np.uint8, np.bool_, np.float16])
def test_a_gated_load_keeps_an_inexact_alternative(dtype):
  """A float array joined with converted scalars of another dtype: tinygrad folded each piece's select into the
  load's alternative, cast to the load's dtype, so the float piece came out truncated (jnp.r_[-1:1:6j, [0] * 3, 5])."""
  scalars = np.array([1, 0, 1, 1], dtype)
  check(lambda np_, x, s: np_.concatenate([x / 5, *[np_.asarray(v).astype(np.float32)[None] for v in s]]),
        np.arange(5, dtype=np.float32) - 2.5, scalars)
  check(lambda np_: np_.r_[-1:1:6j, [0] * 3, 5, 6])


def test_constants_keep_their_values_in_every_renderer():
  """A kernel that stores a constant -0.0 (tinygrad folds `-sqrt(x > x)` of NaNs into one: WGSL's `-0.0f` stored
  +0.0 on WEBGPU), and one whose index math casts an integer that is no int32 to uint32 (`jnp.diagflat(v, k=-1)`:
  WGSL refused `bitcast<u32>(-4294967295)`). NB: one test, so that the device leg runs both."""
  for negated in (lambda np_, zero: -zero, lambda np_, zero: np_.floor(-zero), lambda np_, zero: np_.ceil(zero - 0.5)):
    check(lambda np_, x: (lambda a: negated(np_, np_.sqrt(a > a)))(np_.asarray(x)), np.full(3, np.nan, np.float32))
  check(lambda np_, v: [np_.diagflat(v, k=k) for k in (-1, 2)], np.arange(1, 5, dtype=np.float32))


def test_emulated_float16_converts_as_xla_does():
  """tinygrad's emulation of float16 (where the renderer lacks it: POCL; forced here on the run's device) against
  XLA's conversions: every float16 bit pattern widened to float32, and float32 values narrowed to float16 around
  each subnormal step (the halfway points among them: ties to even), across the smallest normal and up to the overflow
  bound (65519.99 is 65504, 65520 infinite). tinygrad flushed subnormals to zero both ways and made 65504 < |x| <
  65520 infinite."""
  import jax.numpy as jnp
  from tinygrad import Tensor
  device = os.environ["TINYJAX_DEVICE"]
  patterns = np.arange(2 ** 16, dtype=np.uint16)
  steps = np.arange(-2100, 2100, dtype=np.float32) * np.float32(2.0 ** -25)  # float16's subnormal steps, halved
  edges = [2 ** -14, 2 ** -14 * 0.99999, 2 ** -25, 2 ** -25 * 1.0001, 2 ** -26, 1e-30, 65504, 65519.99, 65520, 7e4,
           3e38, np.inf, np.nan, 1.0009765625, 1.00048828125, 2049.0, 2051.0]
  values = np.concatenate([steps, np.array(edges + [-e for e in edges], np.float32)])
  with amendments.kernel_context(EMULATED_DTYPES="float16"):
    widened = Tensor(patterns, device=device).bitcast(dtypes.half).cast(dtypes.float).numpy()
    narrowed = Tensor(values, device=device).cast(dtypes.half).bitcast(dtypes.ushort).numpy()
  expected = np.asarray(jnp.asarray(patterns).view(jnp.float16).astype(jnp.float32))
  nan = np.isnan(expected)
  np.testing.assert_array_equal(widened[~nan].view(np.uint32), expected[~nan].view(np.uint32))
  assert np.isnan(widened[nan]).all()
  expected = np.asarray(jnp.asarray(values).astype(jnp.float16)).view(np.uint16)
  nan = np.isnan(values)
  np.testing.assert_array_equal(narrowed[~nan], expected[~nan])
  assert np.isnan(narrowed[nan].view(np.float16)).all()


def test_an_emulated_floats_running_product_compiles():
  """A product's running value in a register (cumprod, prod) of an emulated float16 (POCL's, forced here on the run's
  device): tinygrad's verifier refused the kernel. The emulation computes in float32 and rounds at the store."""
  import jax.numpy as jnp
  from tinygrad import Tensor
  x = np.linspace(0.5, 1.5, 40).astype(np.float16)
  with amendments.kernel_context(EMULATED_DTYPES="float16"):
    running, whole = (f(Tensor(x, device=os.environ["TINYJAX_DEVICE"])).numpy() for f in (lambda t: t.cumprod(0),
                                                                                        lambda t: t.prod()))
  products = jnp.cumprod(x.astype(np.float32))
  np.testing.assert_allclose(running, products.astype(jnp.float16), rtol=float(jnp.finfo(jnp.float16).eps))
  np.testing.assert_allclose(whole, products[-1].astype(jnp.float16), rtol=float(jnp.finfo(jnp.float16).eps))


def test_lowering_goes_through_the_program_cache():
  """tinygrad's lowering function, which amendments.py wraps with the disk cache: its name, its arguments, its callers
  (tinygrad's in-memory cache, and the CPU device, which imports it by name), and the compile a hit redoes."""
  assert re.search(r"\ndef do_to_program\(ast: ?UOp, renderer: ?Renderer\) -> UOp:", inspect.getsource(codegen))
  assert "do_to_program(ast, renderer)" in inspect.getsource(codegen.to_program)
  assert ops_cpu.do_to_program is codegen.do_to_program
  assert codegen.do_to_program.__wrapped__.__code__.co_filename == program_cache.__file__  # inside compile_together's
  assert list(inspect.signature(codegen.do_compile).parameters) == ["ctx", "prg", "source"]


def test_new_kernels_compile_together_through_tinygrads_hooks():
  """compile_together.py's hooks in tinygrad: `compile_linear` calls `lower_and_compile` by its name; the CPU device's
  compile is ClangCompiler's `compile_cached` in lowering, CL's is `compile_cached` of the source in its runtime; the
  CPU runtime and its queues enter a program at `program.addr` (moved to the kernel's symbol)."""
  from tinygrad.engine import realize
  from tinygrad.runtime.support.compiler_cpu import ClangCompiler
  from tinyjax.backends.tinygrad.machinery import compile_together
  assert "linear = lower_and_compile(linear)" in inspect.getsource(realize.compile_linear)
  assert realize.lower_and_compile.__code__.co_filename == compile_together.__file__
  assert codegen.do_to_program.__code__.co_filename == compile_together.__file__
  assert ClangCompiler.compile_cached.__code__.co_filename == compile_together.__file__
  assert "lib = ctx.compiler.compile_cached(source.arg)" in inspect.getsource(codegen.do_compile)
  assert "ctypes.CFUNCTYPE(None)(self.addr)" in inspect.getsource(ops_cpu.CPUProgram)
  assert "UOp.const(p.addr, dtypes.uint64)" in inspect.getsource(ops_cpu.cpu_cmd)
  try:
    from tinygrad.runtime import ops_cl
  except (ImportError, OSError):  # no OpenCL library here
    return
  assert "device.cl_compiler.compile_cached(obj.lib.decode())" in inspect.getsource(ops_cl)
  assert "cl.clCreateKernel(self.program, obj.name.encode()" in inspect.getsource(ops_cl)


def test_kernel_programs_are_named_for_a_profile():
  """tinygrad makes each kernel's runtime program by Compiled.runtime from a TinyELF whose profile_key is the PROGRAM's
  key, which its cache of programs is keyed by: each program knows its device, name and key (a profile reads them,
  amendments.kernels_timed)."""
  from tinygrad.device import Compiled, TinyELF
  from tinygrad.engine import realize
  assert "Device[device].runtime(ast.to_elf())" in inspect.getsource(realize.get_runtime)
  assert "runtime_cache.get(key:=(ast.key, device))" in inspect.getsource(realize.get_runtime)
  assert "TinyELF(self.src[3].arg, self.arg.function_name, self.arg.target, sig, self.key)" in \
      inspect.getsource(UOp.to_elf)
  assert list(inspect.signature(TinyELF).parameters)[1:] == ["name", "target", "signature", "profile_key"]
  assert Compiled.runtime.__code__.co_filename == amendments.__file__
  import tinyjax.numpy as tnp
  np.asarray(tnp.arange(13.0) * 3)
  assert realize.runtime_cache
  for (key, device), program in realize.runtime_cache.items():
    assert program.tinyjax_kernel[0] == device and program.tinyjax_kernel[2] == key


def test_a_kernel_that_drops_one_of_its_buffers():
  """A complex cholesky's step compiles to a kernel whose parameters skip a buffer (data0..data3, data5..data7 on CL):
  tinygrad's CL runtime took its arguments by the parameters' numbers and raised IndexError at launch."""
  import jax
  import tinyjax
  import tinyjax.numpy as tnp
  rng = np.random.default_rng(0)
  x = (rng.standard_normal((3, 3)) + 1j * rng.standard_normal((3, 3))).astype(np.complex64)
  a = x @ x.conj().T + 3 * np.eye(3, dtype=np.complex64)
  check(lambda np_, m: (tinyjax if np_ is tnp else jax).lax.linalg.cholesky(m, symmetrize_input=False), a,
        rtol=2e-6, atol=1e-6)


def test_a_captures_intermediates_share_buffers():
  """A jitted cholesky of 48 x 48 runs 48 column steps, each writing a matrix: its capture by TinyJit (on the second
  call) kept all 48 on CL and WEBGPU, where tinygrad's memory planner does nothing. The buffers a compiled program
  holds once replayed are a few matrices on every device, and its result is JAX's."""
  import gc
  import jax
  import tinyjax
  from tinygrad.device import Buffer

  def held() -> int:
    gc.collect()
    return sum(b.nbytes for b in gc.get_objects() if isinstance(b, Buffer) and b._base is None and b.is_allocated())
  rng = np.random.default_rng(1)
  x = rng.standard_normal((48, 96)).astype(np.float32)
  a = x @ x.T
  np.asarray(tinyjax.numpy.asarray(a) + 1)  # the device opened, its own buffers made
  fn = lambda lax_, m: lax_.linalg.cholesky(m, symmetrize_input=False) * 0.5
  jitted = tinyjax.jit(functools.partial(fn, tinyjax.lax))
  before = held()
  results = [np.asarray(jitted(a)) for _ in range(3)]  # run, captured, replayed
  assert held() - before <= 8 * a.nbytes
  expected = np.asarray(jax.jit(functools.partial(fn, lax))(a))
  for result in results:
    np.testing.assert_allclose(result, expected, rtol=1e-5, atol=1e-5)


def _resident_bytes() -> int:
  return int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def test_pocl_kernels_are_compiled_in_a_helper_process():
  """A POCL program built in the process that compiled its source held ~2 MB for its life, and tinygrad keeps every
  kernel it runs (JAX's linalg tests on CL grew a process by 1.2 GB in 67 tests): the source is compiled in a helper
  process. 40 kernels no process compiled before, built and kept, hold well under 1 MB each (~2 MB before); the
  helper is another process; a kernel that does not compile raises tinygrad's CompileError with POCL's log."""
  from tinygrad import Device
  from tinygrad.device import CompileError
  from tinygrad.runtime.ops_cl import CLProgram
  device = Device["CL"]
  salt = int.from_bytes(os.urandom(3), "little")  # sources new to POCL's and tinygrad's caches
  sources = [f"__kernel void k{n}(__global float* a) {{ a[get_global_id(0)] *= {n}.5f + {salt}.0f; }}"
             for n in range(41)]
  kernel = lambda n, source: type("Kernel", (), {"lib": source.encode(), "signature": (), "name": f"k{n}"})()
  programs = [CLProgram(device, kernel(0, sources[0]))]  # the helper started, POCL's compiler loaded
  before = _resident_bytes()
  programs += [CLProgram(device, kernel(n, source)) for n, source in enumerate(sources) if n]
  assert _resident_bytes() - before < 40 * 2**19, "a POCL program held half a megabyte or more"
  helper = amendments._pocl_helpers[device.device].process
  assert helper.poll() is None and helper.pid != os.getpid()
  with pytest.raises(CompileError, match="undeclared identifier"):
    device.cl_compiler.compile(f"__kernel void broken{salt}(__global float* a) {{ a[0] = missing; }}")
  assert helper.poll() is None  # the same helper compiles the next kernel


_SVD_GRADIENT = """
import sys
import numpy as np
import tinyjax, tinyjax.numpy as jnp
x = np.random.default_rng(0).standard_normal((2, 3, 2, 7)).astype(np.float32)
np.save(sys.argv[1], np.asarray(tinyjax.grad(lambda x: jnp.sum(jnp.linalg.svd(x, compute_uv=False) ** 2))(x)))
"""


def test_bool_logic_compiles_on_opencl(tmp_path):
  """The gradient of svd's singular values of a batch of 2 x 7 matrices has a kernel of 48 ANDs of bools, which POCL's
  LLVM aborted the process compiling while it was rendered `a&b` (hence a subprocess): it runs on CL, as JAX's."""
  import jax
  import jax.numpy as jnp
  script, out = tmp_path / "svd_gradient.py", tmp_path / "gradient.npy"
  script.write_text(_SVD_GRADIENT)
  env = {**os.environ, "TINYJAX_DEVICE": "CL", "TINYJAX_FALLBACK": "error"}
  done = subprocess.run([sys.executable, str(script), str(out)], env=env, capture_output=True, text=True, timeout=600)
  assert done.returncode == 0, done.stderr[-2000:]
  x = np.random.default_rng(0).standard_normal((2, 3, 2, 7)).astype(np.float32)
  expected = jax.grad(lambda x: jnp.sum(jnp.linalg.svd(x, compute_uv=False) ** 2))(x)
  np.testing.assert_allclose(np.load(out), expected, rtol=1e-5, atol=1e-5)
  assert amendments.cstyle.OpenCLRenderer.code_for_op[amendments.Ops.AND]("a", "b", dtypes.bool) == "(a&&b)"


_ON_THE_SECOND_CL_DEVICE = """
import sys
import numpy as np
import tinyjax, tinyjax.numpy as jnp
from tinygrad import Device
x = np.linspace(-3, 3, 12, dtype=np.float32).reshape(3, 4)
with tinyjax.default_device("CL:1"):
  result = jnp.tanh(x) @ x.T + jnp.arange(3.0)
  result.block_until_ready()
buffer, = result._value.buffers.values()
print(Device["CL"].count(), buffer.device, Device["CL:1"].cl_dev is not Device["CL"].cl_dev)
np.save(sys.argv[1], np.asarray(result))
# an array placed on a mesh of two of JAX's devices is split over the two CL devices, and so is the work on it
import jax
mesh = jax.make_mesh((2,), ("d",))
with tinyjax.default_device("CL"):
  ran = tinyjax.explain(lambda: np.save(sys.argv[2], np.asarray(jnp.sin(tinyjax.device_put(
      x.reshape(4, 3), jax.NamedSharding(mesh, jax.P("d")))).sum(0))))()
print("|".join(ran.choices))
"""


def test_every_cl_device_is_listed(tmp_path):
  """POCL with two CPU devices (POCL_DEVICES="pthread pthread"): tinygrad listed its default device only; now CL:1
  opens the second, where tinyjax computes a program (its kernels compiled by that device's helper process): JAX's
  values."""
  import jax.numpy as jnp
  script, out, split = tmp_path / "second_device.py", tmp_path / "result.npy", tmp_path / "split.npy"
  script.write_text(_ON_THE_SECOND_CL_DEVICE)
  env = {**os.environ, "POCL_DEVICES": "pthread pthread", "TINYJAX_FALLBACK": "error", "JAX_NUM_CPU_DEVICES": "2"}
  done = subprocess.run([sys.executable, str(script), str(out), str(split)], env=env, capture_output=True, text=True,
                        timeout=600)
  assert done.returncode == 0, done.stderr[-2000:]
  assert done.stdout.split("\n")[:2] == ["2 CL:1 True", "split over CL,CL:1"], done.stdout
  x = np.linspace(-3, 3, 12, dtype=np.float32).reshape(3, 4)
  np.testing.assert_allclose(np.load(out), jnp.tanh(x) @ x.T + jnp.arange(3.0), rtol=2e-6, atol=1e-5)
  np.testing.assert_allclose(np.load(split), jnp.sin(x.reshape(4, 3)).sum(0), rtol=2e-6)


def test_cl_arguments_are_read_by_position():
  class Program:
    def __init__(self):
      self.signature = (("data0", 0, dtypes.float32, (4,)), ("data2", 2, dtypes.float32, (4,)), ("n", 3, dtypes.int32, ()))
  amended = type("Amended", (Program,), {"__init__": amendments._position(Program.__init__)})
  assert [slot for _, slot, _, _ in amended().signature] == [0, 1, 2]


def test_synchronize_is_tinygrads_with_views_made_once():
  """amendments._synchronize is tinygrad's HCQ synchronize with its signal views made once per device: tinygrad's
  still reads those two signals and waits for the timeline to reach the value's count."""
  from tinygrad.runtime.support import hcq2
  source = inspect.getsource(hcq2)
  assert 'sig = self.signal("timeline")._buf.cpu_view().view(fmt=\'Q\')' in source
  assert 'tl = self.signal("value", 1, device="CPU")._buf.cpu_view().view(fmt=\'Q\')' in source
  assert "self._wait_signal(sig, tl[0] - 1, timeout)" in source
  assert hcq2.HCQ2Compiled.synchronize is amendments._synchronize


def test_cpu_kernels_are_called_through_typed_pointers():
  """amendments._call_cpu_program passes what tinygrad's CPUProgram.__call__ passes: each buffer's address, then the
  variables' values, the thread's index in place of core_id (a kernel split across the CPU's threads), once per
  thread; a lavapipe program goes through tinygrad's own call."""
  source = inspect.getsource(amendments._CPU_PROGRAM_CALL)
  assert "args = [*[cast(int, b.va_addr) for b in bufs], *cast(tuple[int, ...], vals)]" in source
  assert "if 'core_id' in self.runtimevars: args[self.runtimevars['core_id']] = tid" in source
  assert "self.fxn(*[ctypes.c_uint64(x) for x in args])" in source
  assert ops_cpu.CPUProgram.__call__ is amendments._call_cpu_program


@pytest.mark.parametrize("size", [7, 1 << 20])  # one thread; a kernel split across threads (core_id)
def test_cpu_kernels_on_typed_pointers_compute_as_xla(size):
  """Through the typed call: a jitted elementwise function and a sum, replayed, as XLA computes them."""
  import jax
  import tinyjax
  f = lambda x, y: (x * y + 1.0, (x - y).sum())  # noqa: E731
  x = np.linspace(-3, 3, size, dtype=np.float32)
  y = np.cos(x)
  step = tinyjax.jit(f)
  for _ in range(3):  # traced, captured, replayed by the launcher
    got = step(x, y)
  expected = jax.jit(f)(x, y)
  # NB: a tolerance: on a device whose compiler does not contract x * y + 1.0 into a fused multiply-add (WGSL's), the
  # product's last bit differs from jax.jit's (tests/xfail.py, 'a * b + c, fused'): 2 ulps of |x * y| <= 9
  np.testing.assert_allclose(np.asarray(got[0]), np.asarray(expected[0]), rtol=0, atol=2e-6)
  np.testing.assert_allclose(np.asarray(got[1]), np.asarray(expected[1]), rtol=1e-5)


def test_cuda_devices_have_no_graph_for_tinyjit():
  """A CUDA device keeps no graph runtime whatever tinygrad's Compiled.__init__ sets (it sets CUDAGraph), so
  TinyJit's capture stays plain kernels (engine/jit.py batches only where `graph is not None`), which the launcher
  replays. (The suite's device leg on CUDA runs the captures themselves: test_eigen, test_linalg.)"""
  from tinygrad.engine import jit
  assert "graph_t = graph_class(devs[0]) if devs[0].graph is not None else None" in inspect.getsource(jit)
  assert "CUDAGraph" in inspect.getsource(ops_cuda.CUDADevice.__init__)
  device = ops_cuda.CUDADevice.__new__(ops_cuda.CUDADevice)  # NB: no __init__: no GPU here
  device.graph = object()
  assert device.graph is None


def test_a_kernel_over_several_devices_is_walked_once(monkeypatch):
  """amendments._per_device is tinygrad's unwrap_multi with its walk of a kernel's program (does it bind the device's
  number?) made once per program: a sharded sum with a sharded arange (a kernel that binds it) computes JAX's values
  on two CPU devices, run again it walks no program."""
  import jax.numpy as jnp
  from tinygrad import Tensor
  from tinygrad.engine import jit, realize
  from tinygrad.uop import Ops
  source = inspect.getsource(realize)
  assert "has_dnum = any((x.op is Ops.RANGE and x.arg[-1] is AxisType.DEVICE) or (x.op is Ops.PARAM and " \
         "x.arg.name == '_device_num')" in source and "for x in call.src[0].toposort())" in source
  assert 'yield list(per_dev), {"_device_num": j} if has_dnum else {}' in source
  assert realize.unwrap_multi is jit.unwrap_multi is amendments._per_device
  devices = ("CPU", "CPU:1")
  values = np.linspace(-1, 1, 8, dtype=np.float32)
  x = Tensor(values).shard(devices, axis=0).realize()
  walked, toposort = [], UOp.toposort

  def counted(self, *args, **kwargs):
    walked.append(self.op)
    return toposort(self, *args, **kwargs)
  expected = np.asarray(jnp.asarray(values) + jnp.arange(8, dtype=jnp.float32))
  for run in range(2):
    y = (x + Tensor.arange(8, dtype=dtypes.float32).shard(devices, axis=0)).realize()
    np.testing.assert_array_equal(y.numpy(), expected)
    if run == 0:
      monkeypatch.setattr(UOp, "toposort", counted)
  assert Ops.PROGRAM not in walked


def test_block_until_ready_waits_for_each_call():
  """A chain of jitted calls, each result waited for and then read: every wait saw its call's kernels finish."""
  import jax
  import tinyjax
  import tinyjax.numpy as tnp
  f = lambda x: x * 1.5 + 1.0  # noqa: E731
  step, jax_step = tinyjax.jit(f), jax.jit(f)
  x = expected = np.arange(4096, dtype=np.float32)
  for _ in range(8):
    x, expected = step(x).block_until_ready(), jax_step(expected).block_until_ready()
  np.testing.assert_array_equal(np.asarray(x), np.asarray(expected))
