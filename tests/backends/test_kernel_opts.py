"""tinyjax's amendments to tinygrad's kernel options (tinyjax/backends/tinygrad/machinery/kernel_opts.py)."""
import math

import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax
from tinygrad.uop.ops import AxisType, Ops

import tinyjax
import tinyjax.numpy as tnp
from helpers import default_settings  # noqa: F401  (the fixture, for every test here)
from oracle import assert_like_jax, check, check_traced, native
from tinyjax.choosing import selection

pytestmark = pytest.mark.usefixtures("default_settings")


@pytest.fixture(autouse=True)
def _amended_first():
  """The backend made (and tinygrad amended) before a test wraps the heuristic: amended after, the heuristic a test
  put in place would be the one amended, and the test's undo would leave tinygrad's own, unamended, to the next."""
  selection.current_backend()


def test_elementwise_kernels_on_the_cpu_are_left_to_clangs_vectorizer(monkeypatch):
  """On the CPU device an elementwise kernel above the small kernels' size is not upcast (clang vectorizes the plain
  loop: kernel_opts.py); a kernel with a reduction keeps tinygrad's choice (an upcast)."""
  from tinygrad.codegen.opt import OptOps, heuristic
  tinyjax.config.update("device", "CPU")  # NB: the defaults' device is CL where POCL is installed
  chosen = {}
  optimize = heuristic.hand_coded_optimizations

  def recording(kernel):
    tuned = optimize(kernel)
    chosen[kernel.reduceop is not None] = [opt.op for opt in tuned.applied_opts]
    return tuned
  monkeypatch.setattr(heuristic, "hand_coded_optimizations", recording)
  x = np.linspace(-3, 3, 16 * 73, dtype=np.float32).reshape(16, 73)  # NB: a shape no other test uses
  with native():
    y, total = tnp.exp(x) * 2 - 1, tnp.max(x * x, axis=1)
    assert_like_jax(y, jnp.exp(x) * 2 - 1)
    assert_like_jax(total, jnp.max(x * x, axis=1))
  assert set(chosen) == {False, True}
  assert OptOps.UPCAST not in chosen[False] and OptOps.UPCAST in chosen[True], chosen


def test_small_kernels_take_no_optimization(monkeypatch):
  """A kernel of fewer than kernel_opts.SMALL_KERNEL elements of work is lowered as it is, where tinygrad's heuristic
  would upcast its reduction and its output; its values are JAX's."""
  from tinygrad.codegen.opt import heuristic
  from tinyjax.backends.tinygrad.machinery import kernel_opts
  chosen = []  # (elements of work, tinygrad's options, ours) of each kernel lowered
  optimize = heuristic.hand_coded_optimizations

  def recording(kernel):
    tuned = optimize(kernel)
    chosen.append((math.prod(kernel.full_shape), optimize.__wrapped__(kernel).applied_opts, tuned.applied_opts))
    return tuned
  monkeypatch.setattr(heuristic, "hand_coded_optimizations", recording)
  rng = np.random.default_rng(5)  # NB: shapes no other test uses, so that the kernels are lowered here
  a, b = rng.normal(size=(6, 11)).astype(np.float32), rng.normal(size=(11, 9)).astype(np.float32)
  check(lambda m, a, b: m.tanh(a @ b) + m.sum(a, axis=1, keepdims=True)[:, :1], a, b, rtol=1e-5, atol=1e-6)
  assert chosen and all(work < kernel_opts.SMALL_KERNEL for work, _, _ in chosen), chosen
  assert any(theirs for _, theirs, _ in chosen), chosen  # the heuristic would have optimized one of them
  assert all(ours == [] for _, _, ours in chosen), chosen


def test_upcasts_copy_a_kernels_body_within_the_budget(monkeypatch):
  """A reduction over a long fused body (exp, tanh and arcsinh per term) is not copied 4x4x6 times, as tinygrad's
  heuristic chose: its kernel stays within kernel_opts.EXPANDED_BODY, with JAX's results. NB: the first assertion is
  the premise (tinygrad's choice over the budget); it moves with the size of the functions' kernels."""
  from tinygrad.codegen.opt import heuristic
  from tinyjax.backends.tinygrad.machinery import kernel_opts
  sizes = []  # (AST nodes, tinygrad's copies, ours) of each reduction kernel
  optimize = heuristic.hand_coded_optimizations

  def recording(kernel):
    tuned = optimize(kernel)
    if kernel.reduceop is not None:
      sizes.append((len(kernel.ast.toposort()), optimize.__wrapped__(kernel).upcast_size(), tuned.upcast_size()))
    return tuned
  monkeypatch.setattr(heuristic, "hand_coded_optimizations", recording)
  rng = np.random.default_rng(3)  # NB: shapes no other test uses, so that the kernel is compiled here
  x, w = rng.normal(size=(44, 24)).astype(np.float32), rng.normal(size=(24, 52)).astype(np.float32)
  fn = lambda m, x, w: m.sum(m.exp(m.tanh(x[:, :, None]) * m.tanh(w[None])) * m.tanh(x[:, :, None] - w[None])
                             * m.arcsinh(x[:, :, None] * w[None]), axis=1)
  check(fn, x, w, rtol=1e-5, atol=1e-5)  # sums of 24 terms of either sign: some results are near zero
  assert any(body * theirs > kernel_opts.EXPANDED_BODY for body, theirs, _ in sizes), sizes
  assert all(body * ours <= kernel_opts.EXPANDED_BODY for body, _, ours in sizes), sizes


def test_matmul_blocks_and_column_sums_widened_on_the_cpu(monkeypatch):
  """On the CPU device a matmul's or a convolution's 4x4 register block is widened to kernel_opts.WIDE_BLOCK along
  the inner of its axes along which an operand is read contiguously (a matmul's columns, a convolution's output
  channels), or the outer where there is none (a right operand read transposed); a sum over rows (which tinygrad's
  heuristic does not upcast) sums WIDE_BLOCK contiguous columns at once. Values are JAX's, edge values included.
  NB: the premise (tinygrad's own choice) is asserted first; it moves with tinygrad's heuristic."""
  from tinygrad.codegen.opt import OptOps, heuristic
  from tinyjax.backends.tinygrad.machinery import kernel_opts
  tinyjax.config.update("device", "CPU")  # NB: the defaults' device is CL where POCL is installed
  chosen = []  # (full shape, tinygrad's upcasts, ours) of each reduction kernel, as {axis's size: amount}
  optimize = heuristic.hand_coded_optimizations

  def upcasts(kernel, tuned):  # NB: an UPCAST's axis indexes the kernel's shape, before and after
    return {kernel.full_shape[opt.axis]: opt.arg for opt in tuned.applied_opts if opt.op is OptOps.UPCAST}

  def recording(kernel):
    tuned = optimize(kernel)
    if kernel.reduceop is not None:
      chosen.append((tuple(kernel.full_shape), upcasts(kernel, optimize.__wrapped__(kernel.copy())),
                     upcasts(kernel, tuned)))
    return tuned
  monkeypatch.setattr(heuristic, "hand_coded_optimizations", recording)
  rng = np.random.default_rng(11)  # NB: shapes no other test uses, so that the kernels are lowered here
  a, b = rng.normal(size=(128, 40)).astype(np.float32), rng.normal(size=(40, 112)).astype(np.float32)
  a[0, 0], a[1, :], b[2, 3] = np.inf, -0.0, np.nan
  check(lambda m, a, b: m.matmul(a, b), a, b, rtol=1e-5, atol=1e-5)
  rows = rng.normal(size=(112, 56)).astype(np.float32)
  check_traced(lambda a, b: jnp.matmul(a, b.T), rng.normal(size=(128, 56)).astype(np.float32), rows, rtol=1e-5,
               atol=1e-5)
  columns = rng.normal(size=(96, 64)).astype(np.float32)
  columns[5, 1], columns[:, 2], columns[7, 3] = np.inf, -0.0, np.nan
  check(lambda m, c: m.sum(c, axis=0), columns, rtol=1e-5, atol=1e-5)
  images = rng.normal(size=(16, 14, 14, 32)).astype(np.float32)
  weights = rng.normal(size=(3, 3, 32, 64)).astype(np.float32)
  images[0, 0, 0, 0], images[1, 2, 3, 4], weights[1, 1, 2, 3] = np.inf, -0.0, np.nan
  check_traced(lambda x, w: lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC")),
               images, weights, rtol=1e-5, atol=1e-4)  # NB: sums of 288 terms of about 1: float32's rounding
  wide = kernel_opts.WIDE_BLOCK
  by_shape = {}
  for shape, theirs, ours in chosen:
    by_shape.setdefault(shape, []).append((theirs, ours))
  # the columns, read contiguously from b; the rows, where b is read transposed
  assert by_shape[128, 112, 40] == [({112: 4, 128: 4}, {112: wide, 128: 4})], chosen
  assert by_shape[128, 112, 56] == [({112: 4, 128: 4}, {112: 4, 128: wide})], chosen
  # the output channels, read contiguously from the weights; the batch not upcast, to keep within the budget
  assert [ours for shape, theirs, ours in chosen if len(shape) > 3] == [{64: wide}], chosen
  assert by_shape[64, 96] == [({}, {64: wide})], chosen


def test_reductions_unrolled_whole_are_left_to_clangs_vectorizer(monkeypatch):
  """On the CPU device a reduction that tinygrad's heuristic unrolls whole (a 2x2 pooling window, with the activation
  and bias before it) is not upcast, as an elementwise kernel is not (kernel_opts.py); values are JAX's, edge values included.
  NB: the premise (tinygrad's own upcast of it) is asserted first; it moves with tinygrad's heuristic."""
  from tinygrad.codegen.opt import OptOps, heuristic
  tinyjax.config.update("device", "CPU")  # NB: the defaults' device is CL where POCL is installed
  chosen = []  # (tinygrad's options, ours) of each kernel whose reduction is unrolled whole
  optimize = heuristic.hand_coded_optimizations

  def recording(kernel):
    tuned = optimize(kernel)
    if kernel.reduceop is not None and not tuned.axes_of(AxisType.REDUCE):
      theirs = optimize.__wrapped__(kernel).applied_opts
      chosen.append(([opt.op for opt in theirs], [opt.op for opt in tuned.applied_opts]))
    return tuned
  monkeypatch.setattr(heuristic, "hand_coded_optimizations", recording)
  x = np.random.default_rng(13).normal(size=(6, 36, 20, 8)).astype(np.float32)  # NB: a shape no other test uses
  x[0, 0, 0, 0], x[1, 2, 3, 4], x[2, 4, 6, 1] = np.inf, np.nan, -0.0
  bias = np.linspace(-1, 1, 8, dtype=np.float32)  # NB: a bias read alike along the window: the heuristic upcasts there
  check_traced(lambda x: lax.reduce_window(jnp.tanh(x + bias), 0.0, lax.add, (1, 2, 2, 1), (1, 2, 2, 1), "VALID"), x,
               rtol=1e-6, atol=1e-6)
  assert chosen and any(OptOps.UPCAST in theirs for theirs, _ in chosen), chosen
  assert all(OptOps.UPCAST not in ours for _, ours in chosen), chosen


def scheduled_matmul():
  """A 256x256 by 256x256 matmul's kernel on the device under test, as tinygrad's search is given it: (the kernel,
  its buffers, its variables)."""
  from tinygrad import Device, Tensor
  from tinygrad.codegen.opt.postrange import Scheduler, args_from_ast
  device = selection.current_backend().tg_device
  a, b = (Tensor(np.ones((256, 256), np.float32), device=device).realize() for _ in range(2))
  ast = next(call.src[0] for call in (a @ b).schedule_linear().src if call.src[0].op is Ops.SINK)
  kernel = Scheduler(ast, Device[device].renderer)
  kernel.convert_loop_to_global()
  return (kernel, *args_from_ast(ast, device))


def test_a_search_slower_than_the_heuristic_gives_way_to_it():
  """tinygrad's search starts from no options: where what it finds runs slower than the heuristic's choice (here a
  search that found nothing: a matmul with no register blocking, several times slower on any device), the kernel is
  the heuristic's, both timed on the device."""
  from tinygrad.codegen.opt import heuristic
  from tinyjax.backends.tinygrad.machinery import kernel_opts
  kernel, buffers, variables = scheduled_matmul()
  search = kernel_opts._faster_of_search_and_heuristic(lambda found, *arguments: found.copy())
  chosen = heuristic.hand_coded_optimizations(kernel.copy()).applied_opts
  assert chosen and search(kernel, buffers, variables, 1, disable_cache=True).applied_opts == chosen


def test_a_faster_search_is_taken_and_the_comparison_kept(monkeypatch, tmp_path):
  """Where the search's kernel runs faster it is the one lowered; the comparison's outcome is kept in tinygrad's disk
  cache (CACHEDB), so a later lowering of the kernel times nothing."""
  import sqlite3
  from tinygrad import helpers
  from tinyjax.backends.tinygrad.machinery import kernel_opts
  monkeypatch.setattr(helpers, "_db_connection", sqlite3.connect(tmp_path / "cache.db"))
  monkeypatch.setattr(helpers, "_db_tables", set())
  timed = []

  def run_time(kernel, *arguments):  # the search's kernel (no options) timed faster than the heuristic's
    timed.append(kernel.applied_opts)
    return 2.0 if kernel.applied_opts else 1.0
  monkeypatch.setattr(kernel_opts, "_run_time", run_time)
  kernel, buffers, variables = scheduled_matmul()
  search = kernel_opts._faster_of_search_and_heuristic(lambda found, *arguments: found.copy())
  assert search(kernel, buffers, variables, 1).applied_opts == [] and len(timed) == 2
  assert search(kernel, buffers, variables, 1).applied_opts == [] and len(timed) == 2
  assert search(kernel, buffers, variables, 1, disable_cache=True).applied_opts == [] and len(timed) == 4
