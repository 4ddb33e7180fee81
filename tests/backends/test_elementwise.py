"""Elementwise rules on tinygrad against JAX on XLA: each primitive on the dtypes where its rule does something
dtype-specific, over arrays of edge values (NaN, +-inf, -0.0, 0, INT_MIN/INT_MAX, uint max, out-of-range casts,
division by zero, shifts past the width). Binary ops take every pair of edge values.

Floats avoid denormals: XLA's CPU backend flushes them to zero and tinygrad does not (see the xfail test at the end).
"""
import os
import signal
import subprocess
import sys
import textwrap

import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax
from jax.extend.core import primitives

from helpers import dtype_name
from oracle import check, check_lax, check_traced
from xfail import param

F32, F16 = np.float32, np.float16



# --- edge values
EDGES = [0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 1.5, -2.5, 2.5, -3.0, 0.1, -0.999, 0.999, np.inf, -np.inf, np.nan]


def float_values(dtype):
  """Edges and a spread of magnitudes, for unary functions (no result is denormal)."""
  big, small = (6e4, 1e-4) if dtype == F16 else (1e30, 1e-30)
  magnitudes = np.geomspace(small, big, 25)
  largest = [np.finfo(dtype).max, -np.finfo(dtype).max]
  return np.concatenate([EDGES, largest, np.linspace(-8, 8, 129), magnitudes, -magnitudes]).astype(dtype)


def moderate_values(dtype):
  """Edges and values between -8 and 8, for powers (whose results must not be denormal either)."""
  return np.concatenate([EDGES, np.linspace(-8, 8, 129)]).astype(dtype)


def float_pairs(dtype):
  """Every pair of edge values (no pair has a denormal sum, product, quotient or power)."""
  edges = np.array([0.0, -0.0, 1.0, -1.0, 0.5, -2.5, 3.0, 0.1, -7.25, 1e3, np.inf, -np.inf, np.nan], dtype)
  x, y = np.meshgrid(edges, edges)
  return x.ravel(), y.ravel()


def int_values(dtype):
  info = np.iinfo(dtype)
  values = [0, 1, 2, 3, 7, 8, 9, 15, 16, 17, 31, 32, 33, 100, -1, -2, -7, -8, -33,
            info.min, info.max, info.min + 1, info.max - 1]
  return np.array(values, np.int64).astype(dtype)  # wraps negatives for unsigned dtypes


def int_pairs(dtype):
  x, y = np.meshgrid(int_values(dtype), int_values(dtype))
  return x.ravel(), y.ravel()


BOOLS = (np.array([False, False, True, True]), np.array([False, True, False, True]))


# --- unary float functions
# The tolerance a primitive needs beyond the oracle's (a few ulp): lgamma and digamma replay XLA's Lanczos formula,
# which cancels near the functions' zeros, where one ulp of a term is a large relative error.
TOLERANCE = {"lgamma": {F32: dict(rtol=2e-6, atol=2e-6), F16: dict(atol=1e-3)},
             "digamma": {F32: dict(rtol=2e-6, atol=2e-6), F16: dict(atol=1e-3)}}
UNARY_FLOAT = ["neg", "abs", "sign", "floor", "ceil", "is_finite", "exp", "exp2", "log", "log1p", "expm1", "tanh",
               "logistic", "sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh",
               "sqrt", "rsqrt", "cbrt", "erf", "erfc", "erf_inv", "lgamma", "digamma", "square"]
# float16 where the rule does something of its own for it: rounding per op, or XLA's float32 evaluation
UNARY_FLOAT16 = ["abs", "sign", "exp2", "logistic", "tanh", "sinh", "erf", "erf_inv", "lgamma", "sqrt", "square"]


@pytest.mark.parametrize("prim, dtype", [param(p, F32, name=p, dtype=F32, id=f"{p}-float32") for p in UNARY_FLOAT] +
                         [param(p, F16, name=p, dtype=F16, id=f"{p}-float16") for p in UNARY_FLOAT16])
def test_unary_float(prim, dtype):
  x = moderate_values(dtype) if prim == "square" else float_values(dtype)
  check_lax(prim, x, **TOLERANCE.get(prim, {}).get(dtype, {}))


@pytest.mark.parametrize("name", [param("log1p near 0, fused as XLA fuses", name="log1p near 0, fused as XLA fuses")])
def test_log1p_near_zero_is_xlas(name):
  """log1p below sqrt(2) - 1 as XLA's CPU backend expands it (Cephes' rational approximation, its polynomials in
  Horner's form, each step a fused multiply-add under XLA's jit): XLA's float32 bits, where the device's compiler
  fuses as XLA's does."""
  x = np.random.default_rng(3).uniform(-0.414, 0.414, 20000).astype(np.float32)
  check_traced(lax.log1p, x, jax_jit=True, rtol=0)


@pytest.mark.parametrize("name", [param("tanh, fused as XLA fuses", name="tanh, fused as XLA fuses")])
def test_tanh_is_xlas(name):
  """float32 tanh as XLA's CPU backend expands it (Eigen's rational approximation of a clamped x, its polynomials in
  Horner's form with fused multiply-adds; x itself below 4e-4): XLA's bits, where the device's compiler fuses as
  XLA's does. JAX's documentation's finite differences of a loss through tanh divide its last ulp by 1e-4."""
  rng = np.random.default_rng(4)
  x = np.concatenate([rng.uniform(-9, 9, 20000), rng.uniform(-1e-3, 1e-3, 2000),
                      [7.99881172, 7.9988118, -8.0, 4e-4, -4e-4, 3.99e-4, 1e-40, -0.0, 0.0]]).astype(np.float32)
  check_traced(lax.tanh, x, jax_jit=True, rtol=0)


def _trig_arguments(rng):
  return np.concatenate([rng.uniform(-8, 8, 20000), rng.uniform(-120, 120, 10000), rng.uniform(-1e4, 1e4, 5000),
                         10 ** rng.uniform(2, 38, 5000), rng.uniform(-1e-3, 1e-3, 2000),
                         [0.75, 0.74999994, 120.0, 119.99999, np.pi / 4, np.pi / 2, -0.0, 0.0, np.inf, np.nan]])


def _atan_arguments(rng):
  signs = np.where(rng.uniform(size=4000) < 0.5, -1.0, 1.0)
  edges = [0.4375, 0.6875, 1.1875, 2.4375, 2.0 ** 25, -(2.0 ** 25), 2.0 ** -29, -0.0, 0.0, np.inf, -np.inf, np.nan]
  return np.concatenate([rng.normal(0, 3, 20000), rng.uniform(-80, 80, 5000),
                         signs * 10 ** rng.uniform(-30, 38, 4000), edges])


def _atan2_arguments(rng):
  grid = np.array([0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.nan, 3.0, 2e30, -3e-30])
  y, x = np.meshgrid(grid, grid)
  return (np.concatenate([rng.normal(0, 3, 20000), y.ravel()]), np.concatenate([rng.normal(0, 3, 20000), x.ravel()]))


def _unit_arguments(rng):
  return np.concatenate([rng.uniform(-1, 1, 20000), [1.0, -1.0, 0.0, -0.0, 1.0000001, np.nan, 0.99999994]])


LIBM_CASES = [  # (the name of its expected failures in tests/xfail.py, function, arguments, dtype)
  ("sin and cos, glibc's in float64", lax.sin, _trig_arguments, F32),
  ("sin and cos, glibc's in float64", lax.cos, _trig_arguments, F32),
  ("atan, glibc's steps", lax.atan, _atan_arguments, F32), ("atan, glibc's steps", lax.atan, _atan_arguments, F16),
  ("atan2, glibc's steps", lax.atan2, _atan2_arguments, F32),
  ("asin, glibc's steps", lax.asin, _unit_arguments, F32), ("asin, glibc's steps", lax.asin, _unit_arguments, F16),
  ("acos, glibc's steps", lax.acos, _unit_arguments, F32), ("acos, glibc's steps", lax.acos, _unit_arguments, F16),
]


@pytest.mark.parametrize("fn,arguments,dtype", [
  param(fn, arguments, dtype, name=name, id=f"{fn.__name__}-{dtype_name(dtype)}")
  for name, fn, arguments, dtype in LIBM_CASES])
def test_libm_functions_are_xlas(fn, arguments, dtype):
  """float32 sin, cos, atan and atan2 as XLA's CPU code computes them (it calls glibc's sinf, cosf, atanf and atan2f:
  sin and cos in float64, rounded once; atan and atan2 by FreeBSD's float32 steps, none fused), asin and acos as XLA
  expands them on atan2 (each operation in the operand's dtype: float16's rounded to float16): XLA's bits. A scan's
  second-order finite differences in JAX's tests divide their last ulp by 1e-4, amplified by each step."""
  values = arguments(np.random.default_rng(5))
  check_traced(fn, *(np.asarray(v).astype(dtype) for v in (values if isinstance(values, tuple) else (values,))),
               jax_jit=True, rtol=0)


@pytest.mark.parametrize("method", [0, 1], ids=["away_from_zero", "to_nearest_even"])
@pytest.mark.parametrize("dtype", [F32, F16], ids=dtype_name)
def test_round(method, dtype):
  halves = np.array([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 0.49999997, -0.4, 2 ** 23 + 1, 1e30], np.float64)
  check_lax("round", np.concatenate([float_values(dtype), halves.astype(dtype)]), rounding_method=method)


@pytest.mark.parametrize("y", [-3, -1, 0, 1, 2, 3, 7])
def test_integer_pow_float(y):
  check_lax("integer_pow", moderate_values(F32), y=y)


@pytest.mark.parametrize("dtype", [np.int8, np.int32, np.uint32], ids=dtype_name)
def test_integer_pow_int(dtype):
  check_lax("integer_pow", int_values(dtype), y=5)  # wraps around


@pytest.mark.parametrize("dtype", [F32, F16], ids=dtype_name)
def test_reduce_precision(dtype):
  x = float_values(dtype)
  bits = [(5, 10), (8, 7), (4, 3)] if dtype == F32 else [(5, 4), (4, 3)]
  check_traced(lambda v: [lax.reduce_precision(v, exponent_bits=e, mantissa_bits=m) for e, m in bits], x)


# --- binary float functions
BINARY_FLOAT = ["add", "sub", "mul", "div", "rem", "pow", "max", "min", "atan2", "nextafter",
                "eq", "ne", "lt", "le", "gt", "ge"]
BINARY_FLOAT16 = ["add", "mul", "div", "rem", "pow", "max", "min", "nextafter", "le"]


@pytest.mark.parametrize("prim, dtype", [param(p, F32, name=p, dtype=F32, id=f"{p}-float32") for p in BINARY_FLOAT] +
                         [param(p, F16, name=p, dtype=F16, id=f"{p}-float16") for p in BINARY_FLOAT16])
def test_binary_float(prim, dtype):
  check_lax(prim, *float_pairs(dtype))


def test_rem_is_exact():
  """C fmod, also for quotients far beyond float32's 24 bits."""
  x = np.array([1e30, -1e30, 3.4e38, 1e-30, 7.5, 1e10, 2 ** 60, 123456.78, -1e20, 3.4028235e38, -3.1e38], F32)
  y = np.array([3.0, 7.1, 1.1e-37, 3e-31, 2.0, 0.3, 3.0, 1e-3, 0.77, 1.1754944e-38, 1.9e-38], F32)  # gaps to 253
  check_lax("rem", x, y, rtol=0)


@pytest.mark.parametrize("dtype", [F32, F16], ids=dtype_name)
def test_division_by_a_broadcast_operand(dtype):
  """XLA divides by a broadcast operand as a multiplication by its reciprocal: bit for bit the same here."""
  x = (np.arange(1, 201) * 1.37).astype(dtype)
  check(lambda np_, v: np_.divide(v, 7.5), x, rtol=0)
  check(lambda np_, v, w: np_.divide(v, w), x.reshape(20, 10), x[:20].reshape(20, 1), rtol=0)
  check_lax("div", x, x[::-1].copy(), rtol=0)


def test_add_any():
  """The cotangent sum of gradients."""
  x, y = float_pairs(F32)
  check_traced(primitives.add_jaxvals_p.bind, x, y)


def test_pow_integer_exponent():
  check_lax("pow", np.array([2.0, -2.0, 0.0, -0.0, 0.5, np.inf, -np.inf, np.nan], F32),
            np.array([3, 3, -1, -1, -2, -1, 3, 0], np.int32))


@pytest.mark.parametrize("dtype", [F32, F16], ids=dtype_name)
def test_division_by_a_constant_zero(dtype):
  """A zero divisor known when the kernel is compiled (a literal of the jaxpr: jnp.mean of an empty array divides
  by its count, 0): IEEE's NaN and infinities. On WebGPU 0 / 0.0 was 0.0: its shader compilers fold a division by a
  literal zero."""
  x = np.array([0.0, -0.0, 1.0, -2.5, np.inf, -np.inf, np.nan], dtype)
  check(lambda np_, x: [np_.asarray(x) / 0.0, np_.asarray(x) / -0.0, np_.mean(np_.asarray(x)[:0]),
                        np_.nanmean(np_.full((2, 3), np.nan, dtype), axis=1)], x)


@pytest.mark.parametrize("dtype", [F32, F16, jnp.bfloat16], ids=dtype_name)
def test_pow_by_a_constant_exponent(dtype):
  """A power whose exponent is known when the kernel is compiled (a Python scalar): NaN ** -1.5 is NaN and
  NaN ** 0.0 is 1. On WebGPU NaN ** -1.5 was 1.0: the shader compilers, assuming no NaN, took NaN == 1."""
  x = np.array([np.nan, -np.nan, 1.0, -1.0, 0.0, -0.0, 2.0, -2.0, np.inf, -np.inf], dtype)
  check(lambda np_, x: [np_.asarray(x) ** exponent for exponent in (-1.5, 0.5, 0.0, 2.5, np.inf)], x)


@pytest.mark.parametrize("prim", ["eq_to", "lt_to", "le_to"])
@pytest.mark.parametrize("dtype", [F32, np.int32], ids=dtype_name)
def test_total_order_comparisons(prim, dtype):
  """XLA's TOTALORDER comparisons (used by searchsorted): -NaN < -inf < ... < -0.0 < 0.0 < ... < inf < NaN."""
  x, y = float_pairs(dtype) if dtype == F32 else int_pairs(dtype)
  if dtype == F32:
    x, y = np.concatenate([x, -np.abs(x[:3])]), np.concatenate([y, np.full(3, np.nan, F32)])
    x[-1] = -np.nan  # a NaN with its sign bit set
  check_traced(getattr(primitives, f"{prim}_p").bind, x, y)


# --- integers
@pytest.mark.parametrize("prim, dtype", [(p, d) for p in ("neg", "abs", "sign", "bitwise_not")
                                         for d in (np.int8, np.int32, np.uint32) if (p, d) != ("abs", np.uint32)],
                         ids=lambda v: v if isinstance(v, str) else dtype_name(v))
def test_unary_int(prim, dtype):
  check_lax(prim, int_values(dtype))


@pytest.mark.parametrize("prim", ["population_count", "clz"])
@pytest.mark.parametrize("dtype", [np.int8, np.uint16, np.int32, np.uint32], ids=dtype_name)
def test_bit_count(prim, dtype):
  check_lax(prim, int_values(dtype))


@pytest.mark.parametrize("prim", ["add", "sub", "mul", "div", "rem"])
@pytest.mark.parametrize("dtype", [np.int8, np.int16, np.int32, np.uint8, np.uint32], ids=dtype_name)
def test_int_arithmetic(prim, dtype):
  """Wraparound, x / 0 = -1 (all ones), x % 0 = x, INT_MIN / -1 = INT_MIN: without a SIGFPE."""
  check_lax(prim, *int_pairs(dtype))


@pytest.mark.parametrize("prim", ["max", "min", "bitwise_and", "bitwise_or", "bitwise_xor", "le"])
@pytest.mark.parametrize("dtype", [np.int8, np.uint32], ids=dtype_name)
def test_int_binary(prim, dtype):
  check_lax(prim, *int_pairs(dtype))


@pytest.mark.parametrize("prim", ["shift_left", "shift_right_logical", "shift_right_arithmetic"])
@pytest.mark.parametrize("dtype", [np.int8, np.int32, np.uint8, np.uint32], ids=dtype_name)
def test_shift(prim, dtype):
  """Shifts by the width or more, or by a negative amount: 0, or the sign bit for arithmetic shifts."""
  check_lax(prim, *int_pairs(dtype))


def test_fused_wraparound():
  """Overflowing narrow and signed integers stay wrapped when the next op runs in the same kernel."""
  for dtype in (np.int8, np.uint8, np.int32):
    x = int_values(dtype)
    check(lambda np_, v: np_.greater(np_.add(v, np_.ones_like(v)), v), x)
    check(lambda np_, v: np_.floor_divide(np_.multiply(v, 3), 2), x)


def test_fused_float16_rounds_each_op():
  """float16 ops in one kernel round like XLA after each op, not once at the end."""
  a, b, c = (np.random.default_rng(seed).standard_normal(500).astype(F16) for seed in range(3))
  check(lambda np_, x, y, z: np_.sqrt(np_.abs(np_.add(np_.multiply(x, y), z))) / y, a, b, c, rtol=0)


@pytest.mark.parametrize("prim", ["bitwise_and", "bitwise_or", "bitwise_xor", "max", "min", "eq", "lt", "ge"])
def test_bool_binary(prim):
  check_lax(prim, *BOOLS)


def test_bool_not():
  check_lax("bitwise_not", BOOLS[0])


# --- selection
@pytest.mark.parametrize("n_cases", [1, 2, 3, 5])
def test_select_n(n_cases):
  cases = [np.arange(6, dtype=F32) * (k + 1) - k for k in range(n_cases)]
  check_lax("select_n", np.array([0, 1, 2, 4, 0, 1], np.int32) % n_cases, *cases)
  if n_cases <= 2:
    check_lax("select_n", np.array([True, False, True, True, False, False]), *cases)


def test_select_n_scalar_predicate():
  check_lax("select_n", np.array(True), np.zeros(3, np.int8), np.ones(3, np.int8))


@pytest.mark.parametrize("dtype", [F32, np.int32], ids=dtype_name)
def test_clamp(dtype):
  if dtype == F32:  # NaN in each position, -0.0 against 0.0
    low = np.array([0, np.nan, 0, 0, -0.0, 0, -1], F32)
    x = np.array([np.nan, 0.5, 0.5, -0.0, 0.0, 2.0, -5], F32)
    high = np.array([1, 1, np.nan, 1, 1, 1, np.inf], F32)
  else:
    low, x, high = np.array([0, 5, -3], dtype), np.array([-7, 1, 9], dtype), np.array([3, 3, 4], dtype)
  check_lax("clamp", low, x, high)
  check_lax("clamp", dtype(0), x, dtype(1))  # scalar bounds


# --- casts and bit-level conversions
CONVERSIONS = [(F32, d) for d in (np.int8, np.int32, np.uint8, np.uint32, F16, np.bool_)] + \
              [(F16, d) for d in (np.int16, np.int32, np.uint8, F32, np.bool_)] + \
              [(np.int32, d) for d in (np.int8, np.uint16, F16, F32, np.bool_)] + \
              [(np.uint32, np.int32), (np.uint32, F32), (np.int8, np.uint32), (np.bool_, F32), (np.bool_, np.int32)]


def cast_values(dtype):
  if dtype == np.bool_:
    return BOOLS[1]
  if np.issubdtype(dtype, np.integer):
    return int_values(dtype)
  extra = [2.0 ** 31, -2.0 ** 31, 2.0 ** 32, 255.5, 256.0, -0.7, 70000.0, 65519.0, 65520.0, 3e9, -3e9]
  return np.concatenate([float_values(dtype), np.array(extra, dtype)])


@pytest.mark.parametrize("src, dst", CONVERSIONS, ids=dtype_name)
def test_convert_element_type(src, dst):
  """Float to int saturates (NaN -> 0), int to int wraps, to bool is x != 0, int to float16 overflows to inf."""
  check_lax("convert_element_type", cast_values(src), new_dtype=dst)


@pytest.mark.parametrize("src, dst", [(F32, np.int32), (np.uint32, F32), (F16, np.int16), (np.int8, np.uint8),
                                      (F32, np.uint8), (F32, np.uint16)], ids=dtype_name)
def test_bitcast_convert_type(src, dst):
  check_lax("bitcast_convert_type", np.resize(cast_values(src), (2, 12)), new_dtype=dst)


def test_bitcast_to_wider():
  check_lax("bitcast_convert_type", np.arange(24, dtype=np.uint8).reshape(2, 3, 4), new_dtype=F32)
  check_lax("bitcast_convert_type", (np.arange(4, dtype=np.uint16) * 999).reshape(2, 2), new_dtype=F32)


# --- shapes, literals and weak types
def test_scalars_and_literals():
  x = np.linspace(-3, 3, 12, dtype=F32).reshape(3, 4)
  check(lambda np_, v: np_.maximum(np_.asarray(v) * 2.5 + 1, 0.0) - np_.float32(1) / np_.asarray(v), x)
  check_lax("add", F32(1.5), F32(-0.0))
  check_lax("atan2", np.zeros((0, 3), F32), np.ones((0, 3), F32))


def test_jnp_functions_that_compose_these_rules():
  x = np.array([-7.5, -2.5, -0.5, -0.0, 0.5, 1.5, 2.5, 7.0, np.inf, np.nan], F32)
  i = np.array([-7, -1, 0, 7, -2 ** 31, 2 ** 31 - 1], np.int32)
  j = np.array([2, 0, -3, 0, -1, 5], np.int32)
  check(lambda np_, a: [np_.sign(a), np_.round(a), np_.clip(a, -1.0, 2.0), np_.where(np_.greater(a, 0), a, -a)], x)
  check(lambda np_, a, b: [np_.floor_divide(a, b), np_.remainder(a, b)], i, j)
  check(lambda np_, a: [np_.floor_divide(a, 2.0), np_.remainder(a, -1.5), np_.round(a * 1.2345, 2), np_.log2(a)], x)


# --- bfloat16 runs natively on every device, emulated where the renderer lacks it (docs/devices.md)
def test_bfloat16_runs_natively():
  x = np.linspace(-2, 2, 9).astype(jnp.bfloat16)
  check_lax("add", x, x)
  check_lax("exp", x)


# --- processes
def run_python(code: str, timeout=300, **env) -> subprocess.CompletedProcess:
  # in a session of its own: a timeout also ends the compilers it started (a kernel that compiles for minutes)
  process = subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env={**os.environ, **env},
                             cwd=os.path.dirname(os.path.dirname(__file__)), start_new_session=True)
  try:
    out, err = process.communicate(timeout=timeout)
  except subprocess.TimeoutExpired:
    os.killpg(process.pid, signal.SIGKILL)
    process.communicate()
    raise
  return subprocess.CompletedProcess(process.args, process.returncode, out, err)


def test_integer_division_by_zero_does_not_kill_the_process():
  """tinygrad would die with SIGFPE on x / 0 and INT_MIN / -1; the rules must never let those reach a kernel."""
  result = run_python("""
    import numpy as np
    import tinyjax
    import tinyjax.numpy as tnp
    tinyjax.config.update("fallback", "error")
    x = np.array([7, -7, 0, -2**31, -2**31], np.int32)
    y = np.array([0, 0, 0, -1, 0], np.int32)
    print([np.asarray(f(x, y)).tolist() for f in (tnp.floor_divide, tnp.remainder, tnp.fmod)])
    import jax.numpy as jnp
    print([np.asarray(f(x, y)).tolist() for f in (jnp.floor_divide, jnp.remainder, jnp.fmod)])
    """)
  assert result.returncode == 0, result.stderr[-2000:]
  ours, jax_results = result.stdout.strip().splitlines()[-2:]
  assert ours == jax_results


@pytest.mark.float64
def test_x64_dtypes_in_a_subprocess():
  """int64, uint64 and float64 need jax_enable_x64, which is global: checked in a process of their own."""
  result = run_python("""
    import sys
    sys.path.insert(0, "tests")
    import numpy as np
    from oracle import check_lax
    i = np.array([0, 1, -1, 7, -2**63, 2**63 - 1, 64, 65, -3], np.int64)
    for prim in ("mul", "div", "rem", "shift_right_arithmetic"):
      check_lax(prim, i, i[::-1].copy())
    u = i.astype(np.uint64)
    check_lax("shift_right_logical", u, u[::-1].copy())
    check_lax("population_count", u)
    f = np.array([0.0, -0.0, 1.5, -2.5, 1e25, -1e-300, 3.3, np.inf, -np.inf, np.nan, 0.1, 77.25], np.float64)
    for prim in ("exp", "log1p", "tanh", "sin", "erf", "erf_inv", "round"):
      check_lax(prim, f, **({"rounding_method": 1} if prim == "round" else {}))
    for prim in ("pow", "atan2", "nextafter"):
      check_lax(prim, f, f[::-1].copy())
    check_lax("rem", np.array([1e20, -7.5, 1e25, 0.0, np.inf, 5.0]), np.array([3.3, 2.0, 1e-5, 0.0, 1.0, np.inf]))
    check_lax("lgamma", f, atol=1e-12)
    check_lax("convert_element_type", f, new_dtype=np.int64)
    print("x64 ok")
    """, JAX_ENABLE_X64="1")
  assert result.returncode == 0 and "x64 ok" in result.stdout, result.stdout[-1000:] + result.stderr[-3000:]


def test_rem_by_a_constant_compiles_at_once(tmp_path):
  """With empty caches, fftfreq's rem(arange + n // 2, n) compiles in a moment: steps that each took min(gap, 8) off
  the last one's exponent gap kept clang's constant propagation busy for minutes (issue 40)."""
  result = run_python("""
    import sys
    sys.path.insert(0, "tests")
    from oracle import check
    check(lambda np_: np_.fft.fftfreq(8, d=0.5) * 2)
    print("rem ok")
    """, timeout=120, CACHEDB=str(tmp_path / "cache.db"), TINYJAX_PROGRAM_CACHE=str(tmp_path / "programs"))
  assert result.returncode == 0 and "rem ok" in result.stdout, result.stderr[-2000:]


# --- known differences
@pytest.mark.parametrize("dtype", [param(F32, name="denormals", dtype=F32, id="float32")])
def test_denormals_flush_like_xla(dtype):
  """XLA's CPU backend runs with denormals flushed to zero (inputs and results); tinygrad keeps them."""
  check_lax("mul", np.array([1e-40, 2e-39], dtype), np.array([1.0, 0.5], dtype))


# --- constant zeros: tinygrad's simplifier would fold x * 0 -> 0 and x + 0 -> x (inf * 0 is NaN, -0.0 + 0.0 is +0.0)
ZERO_CASES = {
  "zeros_times_x": lambda np_, a: np_.zeros(7) * a,
  "x_times_literal_zero": lambda np_, a: a * 0.0,
  "x_times_negative_zero": lambda np_, a: a * -0.0,
  "x_plus_zero": lambda np_, a: a + 0.0,
  "zeros_plus_literal": lambda np_, a: np_.zeros(7) + 1.0,
  "x_minus_negative_zero": lambda np_, a: a - (-0.0),
  "zero_minus_x": lambda np_, a: 0.0 - a,
  "broadcast_zeros_times_x": lambda np_, a: np_.zeros((2, 7)) * a,
  "x_plus_broadcast_zeros": lambda np_, a: a + np_.zeros((3, 1)),
}


@pytest.mark.parametrize("name", sorted(ZERO_CASES))
def test_constant_zero_operands_keep_ieee_semantics(name):
  x = np.array([-0.0, 0.0, np.inf, -np.inf, np.nan, -2.0, 3.0], np.float32)
  check(lambda np_, a: ZERO_CASES[name](np_, np_.asarray(a)), x)


# --- what tinygrad generates
def test_every_renderer_divides():
  """Ops.FDIV (IEEE division, which floatmath.div emits) renders on every tinygrad renderer, not only clang's."""
  from tinygrad.renderer import Renderer, cstyle, llvmir, nir, ptx, wgsl  # noqa: F401
  from tinygrad.renderer.isa import x86  # noqa: F401
  from tinygrad.uop.ops import Ops

  import tinyjax.backends.tinygrad  # noqa: F401  (its amendments teach the renderers)
  pending, renderers = [Renderer], []
  while pending:
    renderers.append(pending.pop())
    pending.extend(renderers[-1].__subclasses__())
  lacking = [r.__name__ for r in renderers if r.code_for_op and Ops.FDIV not in r.code_for_op
             and r.__module__.startswith("tinygrad.renderer")]
  assert not lacking, lacking
  assert ptx.asm_for_op[Ops.FDIV]("%d", "%a", "%b", None, "f32") == "div.rn.f32 %d, %a, %b;"
  for renderer in renderers:
    if issubclass(renderer, cstyle.CStyleLanguage):
      assert renderer.code_for_op[Ops.FDIV]("a", "b", None) == "(a/b)", renderer.__name__


def test_float32_programs_have_no_float64():
  """Float32 math runs in float32 (WebGPU and Metal have no float64): no kernel of a float32 program names double,
  but sin's and cos's on the host's CPU, which are glibc's in float64 (test_libm_functions_are_xlas)."""
  from unittest import mock

  from tinygrad import Device

  from tinyjax.backends.tinygrad.numerics.floatmath import computes_on_the_host
  from tinyjax.choosing.selection import current_backend
  backend = current_backend()
  device = getattr(backend, "tg_device", Device.DEFAULT)
  backend.supports_dtype(np.dtype(np.float64))  # the backend's probe of float64 support is no part of the program
  renderer_class = type(Device[device].renderer)
  sources, render = [], renderer_class.render

  def recording(self, uops):
    sources.append(render(self, uops))
    return sources[-1]
  x = np.linspace(-30, 30, 47, dtype=F32)  # a size no other test uses: its kernels are rendered anew
  trig = (lambda np_, v: []) if computes_on_the_host(device) else \
    (lambda np_, v: [np_.sin(v * 1e5), np_.cos(v), np_.tan(v)])
  with mock.patch.object(renderer_class, "render", recording):
    check(lambda np_, v: [*trig(np_, v), np_.exp(v), np_.log(np_.abs(v)),
                          np_.arctan2(v, 3.0), np_.power(np_.abs(v), v * 0.5), np_.fmod(v, 0.7), np_.tanh(v),
                          np_.log1p(np_.abs(v)),
                          np_.expm1(v), np_.cbrt(v), np_.arcsinh(v), np_.arctanh(v / 31)], x)
  assert sources
  for source in sources:
    assert not any(word in source for word in ("double", "f64")), source
