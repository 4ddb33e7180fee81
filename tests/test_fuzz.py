"""Random programs against JAX: chains of 2..8 jax.numpy calls on random shapes, dtypes and edge values, run by
tinyjax eagerly and under tinyjax.jit, every intermediate compared with JAX.

A program is generated one call at a time from OPS, a table of op specs (a Python template and the dtype kinds it
takes); each call is checked with jax.eval_shape as it is drawn, so the generator knows every value's shape, dtype
and weak type. A call that JAX rejects (e.g. argmax of an empty axis) ends the program: tinyjax must raise the same
exception type, eagerly and under jit. A failing example prints as Python source (see `Program.__repr__`).

Each value tinyjax computes is compared with JAX's call on the same operands (tinyjax's own earlier results, so
that an ulp of difference in one call does not grow through the next ones), as tests/oracle.py compares: shape,
dtype, weak type, NaN, inf, signed zeros, per-dtype tolerance (sums within that tolerance of their operands' sizes).
Calls compose, so a program whose calls are all exact matches JAX's run of the whole program bit for bit.

The bounded run (part of the suite) is deterministic: CI_EXAMPLES examples each, derandomized. The long run is
`bash scripts/fuzz.sh [examples] [seed]` (TINYJAX_FUZZ_EXAMPLES=n: n examples from a random seed, which it prints);
`pytest --hypothesis-show-statistics` shows how many programs raised, were rescued or were not compared.
The differences it found are at the end of this file: reproducers of their tests/xfail.py entries, and of the fixed
ones.
"""
import dataclasses
import functools
import os
import pathlib
import re
import warnings
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, assume, event, given, note, settings
from hypothesis import strategies as st

import tinyjax
import tinyjax.backends.tinygrad  # noqa: F401  (tinygrad raises the recursion limit at import: not mid-test)
import tinyjax.numpy as tnp
from oracle import RTOL, assert_like_jax, assert_values, check, native, x64
from xfail import XFAIL_ON_DEVICE, device_under_test, param

# programs per test in the suite: fewer on the device legs (CL and WEBGPU compile 2-3x slower than clang)
CPU_EXAMPLES, LEG_EXAMPLES = 25, 10
CI_EXAMPLES = CPU_EXAMPLES if device_under_test() in ("", "CPU") else LEG_EXAMPLES
FUZZ_EXAMPLES = int(os.environ.get("TINYJAX_FUZZ_EXAMPLES", "0"))
SETTINGS = settings(deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
                    **({"max_examples": FUZZ_EXAMPLES, "derandomize": False, "print_blob": True} if FUZZ_EXAMPLES
                       else {"max_examples": CI_EXAMPLES, "derandomize": True}))

DTYPES = ("float32", "float16", "int32", "int8", "uint8", "bool")
DTYPES_X64 = DTYPES + ("float64", "int64")


@dataclasses.dataclass(frozen=True)
class Op:
  """One jax.numpy call: `template` is its Python text over {x} (the chain's value), {y} (a second operand) and
  {p} (parameters drawn by `params(draw, x_aval, dtypes)`)."""
  template: str
  kinds: str  # the dtype kinds of x it takes: b(ool), i(nteger), u(nsigned), f(loat)
  operand: str | None = None  # how y is drawn: "broadcast" (elementwise) or "concatenate"
  params: Callable | None = None
  reduces: str | None = None  # "sum" or "product" of many elements, rounded in an order of its own (see _tolerance)
  not_on: tuple[str, ...] = ()  # dtypes of x it does not take (known differences, see tests/xfail.py)


def _axis(draw, aval, dtypes):
  if not aval.shape or draw(st.booleans()):
    return f"axis=None, keepdims={draw(st.booleans())}"
  return f"axis={draw(st.integers(-aval.ndim, aval.ndim - 1))}, keepdims={draw(st.booleans())}"


def _shapes_of_size(size: int) -> list[tuple]:
  """Every shape of up to 3 dims (each at most max(size, 3)) with `size` elements."""
  dims = range(max(size, 3) + 1)
  shapes = [()] if size == 1 else []
  shapes += [(a,) for a in dims if a == size]
  shapes += [(a, b) for a in dims for b in dims if a * b == size]
  shapes += [(a, b, c) for a in dims for b in dims for c in dims if a * b * c == size]
  return shapes


def _reshape(draw, aval, dtypes):
  shape = list(draw(st.sampled_from(_shapes_of_size(int(np.prod(aval.shape))))))
  if shape and 0 not in shape and draw(st.booleans()):
    shape[draw(st.integers(0, len(shape) - 1))] = -1
  return repr(tuple(shape))


def _transpose(draw, aval, dtypes):
  return repr(tuple(draw(st.permutations(range(aval.ndim)))))


def _broadcast(draw, aval, dtypes):
  lead = draw(st.lists(st.integers(1, 3), max_size=max(0, 3 - aval.ndim)))
  return repr(tuple(lead) + tuple(draw(st.sampled_from([1, 2, 3])) if d == 1 else d for d in aval.shape))


def _index(draw, aval, dtypes):
  """A basic index: per leading axis a slice (any start, stop and step, out of range too), an integer or None."""
  bound = st.none() | st.integers(-4, 4)
  parts = []
  for d in aval.shape[:draw(st.integers(0, aval.ndim))]:
    kind = draw(st.sampled_from(["slice", "int", "newaxis"] if d else ["slice", "newaxis"]))
    if kind == "int":
      parts.append(str(draw(st.integers(-d, d - 1))))
    elif kind == "newaxis":
      parts.append("None")
    else:
      start, stop, step = draw(bound), draw(bound), draw(st.sampled_from([None, 1, 2, -1, -2]))
      parts.append(":".join("" if v is None else str(v) for v in (start, stop, step)))
  return ", ".join(parts) or "..."


def _astype(draw, aval, dtypes):
  return draw(st.sampled_from(dtypes))


def _concat_axis(draw, aval, dtypes):
  return str(draw(st.integers(-aval.ndim, aval.ndim - 1))) if aval.ndim else "0"


OPS = {
  # unary
  "negative": Op("np_.negative({x})", "iuf"),
  "abs": Op("np_.abs({x})", "biuf"),
  "sign": Op("np_.sign({x})", "iuf"),
  "floor": Op("np_.floor({x})", "biuf"),
  "ceil": Op("np_.ceil({x})", "iuf"),
  "round": Op("np_.round({x})", "iuf"),
  "square": Op("np_.square({x})", "iuf"),
  "reciprocal": Op("np_.reciprocal({x})", "iuf"),
  "sqrt": Op("np_.sqrt({x})", "biuf"),
  "sin": Op("np_.sin({x})", "biuf"),
  "cos": Op("np_.cos({x})", "iuf"),
  "exp": Op("np_.exp({x})", "biuf"),
  "expm1": Op("np_.expm1({x})", "f"),
  "log": Op("np_.log({x})", "iuf"),
  "log1p": Op("np_.log1p({x})", "f"),
  "tanh": Op("np_.tanh({x})", "iuf"),
  "isnan": Op("np_.isnan({x})", "f"),
  "logical_not": Op("np_.logical_not({x})", "biu"),
  # binary, with JAX's promotion between the operands (an array of any dtype, or a Python scalar)
  "add": Op("np_.add({x}, {y})", "biuf", "broadcast"),
  "subtract": Op("np_.subtract({x}, {y})", "iuf", "broadcast"),
  "multiply": Op("np_.multiply({x}, {y})", "biuf", "broadcast"),
  "divide": Op("np_.divide({x}, {y})", "biuf", "broadcast"),
  "floor_divide": Op("np_.floor_divide({x}, {y})", "iuf", "broadcast"),
  "remainder": Op("np_.remainder({x}, {y})", "iuf", "broadcast"),
  "power": Op("np_.power({x}, {y})", "iuf", "broadcast"),
  "maximum": Op("np_.maximum({x}, {y})", "biuf", "broadcast"),
  "minimum": Op("np_.minimum({x}, {y})", "biuf", "broadcast"),
  "greater": Op("np_.greater({x}, {y})", "biuf", "broadcast"),
  "less_equal": Op("np_.less_equal({x}, {y})", "biuf", "broadcast"),
  "equal": Op("np_.equal({x}, {y})", "biuf", "broadcast"),
  "not_equal": Op("np_.not_equal({x}, {y})", "biuf", "broadcast"),
  "where": Op("np_.where({x} > {y}, {x}, {y})", "biuf", "broadcast"),
  "bitwise_xor": Op("np_.bitwise_xor({x}, {y})", "biu", "broadcast"),
  # reductions
  "sum": Op("np_.sum({x}, {p})", "biuf", params=_axis, reduces="sum"),
  "prod": Op("np_.prod({x}, {p})", "iuf", params=_axis, reduces="product"),
  "mean": Op("np_.mean({x}, {p})", "biuf", params=_axis, reduces="sum"),
  "max": Op("np_.max({x}, {p})", "biuf", params=_axis),
  "min": Op("np_.min({x}, {p})", "biuf", params=_axis),
  "argmax": Op("np_.argmax({x}, {p})", "biuf", params=_axis),
  # shapes
  "reshape": Op("{x}.reshape({p})", "biuf", params=_reshape),
  "transpose": Op("np_.transpose({x}, {p})", "biuf", params=_transpose),
  "broadcast_to": Op("np_.broadcast_to({x}, {p})", "biuf", params=_broadcast),
  "index": Op("{x}[{p}]", "biuf", params=_index),
  "concatenate": Op("np_.concatenate([{x}, {y}], axis={p})", "biuf", "concatenate", params=_concat_axis),
  "astype": Op("{x}.astype(np_.{p})", "biuf", params=_astype),
}


def _float_values(dtype):
  info = np.finfo(dtype)
  # NB: no denormal inputs (XLA's CPU backend flushes them to zero, tinygrad keeps them: tests/xfail.py "denormals")
  edges = [np.nan, np.inf, -np.inf, -0.0, 0.0, 1.0, -1.0, 0.5, -2.5, 3.0, float(info.max), float(-info.max), 1e4]
  magnitudes = st.floats(float(np.dtype(dtype).type(1e-3)), 1e4, width=info.bits)
  return st.sampled_from(edges) | st.integers(-64, 64).map(lambda i: i / 4) | magnitudes | magnitudes.map(lambda v: -v)


def _int_values(dtype):
  info = np.iinfo(dtype)
  edges = [0, 1, -1, 2, -2, 3, 7, info.min, info.max, info.min + 1, info.max - 1]
  return st.sampled_from([e for e in edges if info.min <= e <= info.max]) | st.integers(info.min, info.max)


def _values(dtype):
  kind = np.dtype(dtype).kind
  return st.booleans() if kind == "b" else _float_values(dtype) if kind == "f" else _int_values(dtype)


@st.composite
def arrays(draw, shape, dtypes):
  dtype = draw(st.sampled_from(dtypes))
  elements = draw(st.lists(_values(dtype), min_size=int(np.prod(shape)), max_size=int(np.prod(shape))))
  return np.array(elements, dtype).reshape(shape)


# NB: Hypothesis favours the first choice, so the commonest draws come first (it also shrinks towards them)
SIZES = st.sampled_from([2, 3, 1, 4, 0])
CHAIN_LENGTHS = st.sampled_from([5, 8, 3, 6, 2, 7, 4])



def _broadcastable(draw, shape):
  """A shape that broadcasts with `shape`: some trailing dims of it, each kept or 1 (or grown from 1)."""
  kept = shape[len(shape) - draw(st.integers(0, len(shape))):]
  return tuple(draw(st.sampled_from([1, 2, 0])) if d == 1 else draw(st.sampled_from([d, 1])) for d in kept)


SCALARS = ["0", "1", "2", "-1", "3", "0.5", "-2.5", "-0.0", "float('inf')", "float('nan')", "True"]


@dataclasses.dataclass(frozen=True)
class Call:
  op: str  # its name in OPS
  expr: str  # the Python expression, e.g. "np_.add(v2, a1)"
  operands: tuple[str, ...]  # the names of the values it reads


@dataclasses.dataclass(repr=False)
class Program:
  inputs: list  # NumPy arrays, the arguments a0, a1, ...
  calls: list  # Call v0, v1, ...
  raises: type | None = None  # the exception type JAX raises at the last call

  @property
  def source(self) -> str:
    args = ", ".join(f"a{i}" for i in range(len(self.inputs)))
    values = ", ".join(f"v{i}" for i in range(len(self.calls)))
    # the NumPy inputs become arrays of the namespace first, so that methods and indexing are its own
    body = [f"  {args}, = [np_.asarray(a) for a in ({args},)]"]
    body += [f"  v{i} = {call.expr}" for i, call in enumerate(self.calls)]
    return f"def program(np_, {args}):\n" + "\n".join(body) + f"\n  return [{values}]\n"

  @functools.cached_property
  def function(self) -> Callable:
    namespace: dict = {}
    exec(compile(self.source, "<fuzz program>", "exec"), namespace)
    return namespace["program"]

  def __repr__(self):
    inputs = "\n".join(f"a{i} = np.{a!r}" for i, a in enumerate(self.inputs))
    raises = f"\n# JAX raises {self.raises.__name__} at the last line" if self.raises else ""
    return f"\n{inputs}\n{self.source}{raises}"


@st.composite
def programs(draw, dtypes=DTYPES):
  """A chain of 2..8 calls, each on the previous result (and maybe a second operand), checked by jax.eval_shape."""
  program = Program([], [])
  avals: dict[str, jax.ShapeDtypeStruct] = {}  # of every value so far, by name
  x = _new_input(draw, program, avals, tuple(draw(SIZES) for _ in range(draw(st.sampled_from([2, 1, 3, 0])))), dtypes)
  for _ in range(draw(CHAIN_LENGTHS)):
    dtype = avals[x].dtype
    op_name = draw(st.sampled_from([name for name, op in OPS.items()
                                    if dtype.kind in op.kinds and dtype.name not in op.not_on]))
    op = OPS[op_name]
    y = _draw_operand(draw, op, x, program, avals, dtypes) if op.operand else None
    expr = op.template.format(x=x, y=y, p=op.params(draw, avals[x], dtypes) if op.params else "")
    operands = tuple(name for name in avals if name in _words(expr))
    program.calls.append(Call(op_name, expr, operands))
    # NB: JAX's eager jnp.power reads a 0-d integer exponent's value (integer_pow; a negative one raises), where
    # jax.jit and eval_shape see only its type: a program, run eagerly and under jit, cannot give both
    assume(not (op_name == "power" and y in avals and not avals[y].ndim and avals[y].dtype.kind in "iu"))
    try:
      aval = jax.eval_shape(_expression(operands, expr), *[avals[name] for name in operands])
    except Exception as error:  # JAX rejects the call: the program ends here, and tinyjax must reject it too
      program.raises = type(error)
      return program
    # NB: known difference (tests/xfail.py "mul(convert(bool), x)"): XLA multiplies by a converted bool, and divides
    # a converted bool by a constant, as a select
    converted = [dtype, _dtype_of(y, avals)] if op_name == "multiply" else [dtype] if op_name == "divide" else []
    assume(not (aval.dtype.kind == "f" and np.dtype(bool) in converted))
    x = f"v{len(program.calls) - 1}"
    avals[x] = aval
  return program


def _dtype_of(operand: str, avals) -> np.dtype:
  return avals[operand].dtype if operand in avals else np.dtype(type(eval(operand)))


def _words(expr: str) -> set:
  return set("".join(c if c.isalnum() or c == "_" else " " for c in expr).split())


@functools.cache
def _expression(arg_names: tuple, expr: str):
  return eval(f"lambda {', '.join(arg_names)}: {expr}", {"np_": jnp})


def _new_input(draw, program, avals, shape, dtypes) -> str:
  program.inputs.append(draw(arrays(shape, dtypes)))
  name = f"a{len(program.inputs) - 1}"
  avals[name] = jax.ShapeDtypeStruct(shape, program.inputs[-1].dtype)
  return name


def _draw_operand(draw, op, x, program, avals, dtypes) -> str:
  """The second operand: a Python scalar, an earlier value that fits, or a new input."""
  shape = avals[x].shape
  if op.operand == "concatenate":
    if shape:  # NB: else JAX rejects concatenating 0-d arrays, and the program tests that error
      axis = draw(st.integers(0, len(shape) - 1))
      shape = shape[:axis] + (draw(SIZES),) + shape[axis + 1:]
    return _new_input(draw, program, avals, shape, dtypes)
  fitting = [name for name, aval in avals.items() if _broadcasts(aval.shape, shape)]
  source = draw(st.sampled_from(["scalar", "value", "input"] if fitting else ["scalar", "input"]))
  if source == "scalar":
    return draw(st.sampled_from(SCALARS))
  if source == "value":
    return draw(st.sampled_from(fitting))
  return _new_input(draw, program, avals, _broadcastable(draw, shape), dtypes)


def _broadcasts(a, b) -> bool:
  return all(p == q or 1 in (p, q) for p, q in zip(a[::-1], b[::-1]))


# --- running a program

def check_program(program: Program):
  """Eagerly and under tinyjax.jit, natively (a program XLA rescues fails: tinyjax.FallbackWarning is an error)."""
  note(repr(program))
  event(f"JAX raises {program.raises.__name__}" if program.raises else f"{len(program.calls)} calls")
  if program.raises is not None:
    with pytest.raises(Exception) as eager:
      program.function(tnp, *program.inputs)
    with pytest.raises(Exception) as jitted:
      tinyjax.jit(functools.partial(program.function, tnp))(*program.inputs)
    assert (type(eager.value), type(jitted.value)) == (program.raises, program.raises), \
      f"JAX raises {program.raises.__name__}; tinyjax raises {type(eager.value).__name__} eagerly and " \
      f"{type(jitted.value).__name__} under jit"
    return
  with native():
    eager = program.function(tnp, *program.inputs)
    tinyjax.flush()
    jitted = tinyjax.jit(functools.partial(program.function, tnp))(*program.inputs)
  _compare_calls(program, eager, "eagerly")
  _compare_calls(program, jitted, "under tinyjax.jit")


def _compare_calls(program: Program, actual: list, how: str):
  """Each value tinyjax computed against JAX's call on the same operands (the inputs, tinyjax's earlier values)."""
  values = {f"a{i}": jnp.asarray(a) for i, a in enumerate(program.inputs)}
  for i, (call, result) in enumerate(zip(program.calls, actual)):
    operands = [values[name] for name in call.operands]
    values[f"v{i}"] = _as_jax(result)
    if any(map(_has_denormals, operands)):
      # NB: known difference (tests/xfail.py "denormals"): XLA reads a denormal operand as zero, tinygrad as itself
      event("a call on denormals tinyjax kept: not compared")
      continue
    expected = _expression(call.operands, call.expr)(*operands)
    tolerance = _tolerance(OPS[call.op], operands, expected)
    try:
      assert_like_jax(result, expected, **tolerance)
    except AssertionError as error:
      if not (_fused_multiply_add(program, call, values, result, expected)
              or _same_once_flushed(result, expected, tolerance)):
        raise AssertionError(f"{how}: v{i} = {call.expr} differs from JAX's on the same operands: {error}") from None


# The ops that carry a product unchanged into the next call, in the same kernel (a view, or a negation that clang
# folds into the fused multiply-add)
_CARRY_A_PRODUCT = ("reshape", "transpose", "broadcast_to", "index", "negative")
_TWO_OPERANDS = re.compile(r"^np_\.(\w+)\((\w+), (.+)\)$")  # np_.add(v1, a0), np_.multiply(v0, 2.5), ...
_FUSED_DTYPES = (np.dtype(np.float32), np.dtype(np.float16))  # factors exact in a float64 product


def _exact_product(program: Program, name: str, values: dict) -> np.ndarray | None:
  """The value `name` computed with its product exact (float64), where it is a product, or views and negations of
  one: the factors as the multiply saw them (converted to its dtype), multiplied in float64, then the same views."""
  views = []
  while name.startswith("v"):
    call = program.calls[int(name[1:])]
    if call.op == "square":
      factors = [values[call.operands[0]]] * 2
      break
    if call.op == "multiply":
      x, y = _TWO_OPERANDS.match(call.expr).group(2, 3)
      factors = [values[x], values[y] if y in values else eval(y)]
      break
    if call.op not in _CARRY_A_PRODUCT:
      return None
    views.append(call)
    name = call.operands[0]
  else:
    return None
  dtype = np.asarray(values[name]).dtype
  product = np.multiply(*[np.asarray(np.asarray(f).astype(dtype), np.float64) for f in factors])
  with x64():
    for call in reversed(views):  # NB: as JAX computes them (an index out of range is clamped)
      product = _expression(call.operands, call.expr)(jnp.asarray(product))
    return np.asarray(product, np.float64)


def _rounded_sum(a: np.ndarray, b: np.ndarray, dtype) -> np.ndarray:
  """a + b, each exact in float64, rounded once to `dtype` (to nearest, ties to even). The float64 sum s rounds
  too: TwoSum's exact remainder e (a + b = s + e) decides where s lands on a tie of `dtype`."""
  with np.errstate(invalid="ignore", over="ignore"):
    s = a + b
    z = s - a
    e = (a - (s - z)) + (b - z)
    rounded = s.astype(dtype)
    other = np.nextafter(rounded, np.where(s > rounded, np.inf, -np.inf).astype(dtype))
    tie = (s != rounded) & (s == (rounded.astype(np.float64) + other.astype(np.float64)) / 2)
    return np.where(tie & (e > 0), np.maximum(rounded, other), np.where(tie & (e < 0), np.minimum(rounded, other),
                                                                         rounded))


def _fused_multiply_add(program: Program, call: Call, values: dict, result, expected) -> bool:
  """Whether a float sum of a product differs from JAX's only where the product is fused into it: the same dtype,
  weak type and shape, and each element either JAX's or the sum recomputed with one of its products exact and
  rounded once (bit for bit: NaN, infinities and the sign of zero included).

  NB: known difference (tests/xfail.py "a * b + c, fused"): clang, POCL and NVRTC contract a product and a sum in one
  kernel into a fused multiply-add, as XLA does under jax.jit (not in JAX's eager calls, which the fuzzer compares
  with). Only on those devices, only for an add or subtract of a product.
  """
  fusing = {device for device, name, _ in XFAIL_ON_DEVICE if name == "a * b + c, fused"}
  actual, wanted = np.asarray(result), np.asarray(expected)
  if (call.op not in ("add", "subtract") or (device_under_test() or "CPU") not in fusing
          or actual.dtype not in _FUSED_DTYPES
          or (actual.dtype, actual.shape, result.weak_type) != (wanted.dtype, wanted.shape, expected.aval.weak_type)):
    return False
  x, y = _TWO_OPERANDS.match(call.expr).group(2, 3)
  terms = [np.asarray(values[x]), np.asarray(values[y]) if y in values else np.asarray(eval(y))]
  terms = [np.broadcast_to(np.asarray(t.astype(actual.dtype), np.float64), actual.shape) for t in terms]
  sign = 1.0 if call.op == "add" else -1.0
  possible = [wanted]
  for i, name in enumerate((x, y)):
    if name in values and (product := _exact_product(program, name, values)) is not None:
      exact = [np.broadcast_to(product, actual.shape) if j == i else t for j, t in enumerate(terms)]
      possible.append(_rounded_sum(exact[0], sign * exact[1], actual.dtype))
  if len(possible) == 1:
    return False
  same = np.zeros(actual.shape, bool)
  for value in possible:
    same |= ((actual == value) & (np.signbit(actual) == np.signbit(value))) | (np.isnan(actual) & np.isnan(value))
  return bool(same.all())


def _tolerance(op: Op, operands: list, expected) -> dict:
  """A float reduction's rounding depends on its order: a sum is within the dtype's tolerance of its terms'
  magnitudes, a product within that tolerance per factor."""
  if not (op.reduces and jnp.issubdtype(expected.dtype, jnp.inexact) and operands[0].size):
    return {}
  rtol, terms = RTOL[np.dtype(expected.dtype)], operands[0].size // max(expected.size, 1)
  if op.reduces == "product":
    return {"rtol": rtol * terms}
  magnitudes = np.abs(np.asarray(operands[0], np.float64))
  largest = magnitudes[np.isfinite(magnitudes)].max(initial=0.0)
  return {"atol": rtol * terms * largest} if largest else {}


def _as_jax(array):
  """A tinyjax result as a jax.Array, weak type included (so that JAX's next call promotes as in the program)."""
  from jax._src.lax.lax import _convert_element_type  # NB: JAX has no public way to make a weakly typed array
  value = jnp.asarray(np.asarray(array))
  return _convert_element_type(value, weak_type=True) if array.weak_type else value


def _same_once_flushed(result, expected, tolerance: dict) -> bool:
  """Whether a float32/float64 result is JAX's once its denormals are flushed to zero of their sign.

  NB: known difference (tests/xfail.py "denormals"): XLA's CPU backend flushes float32/float64 denormal results to
  zero (and reads denormal inputs as zero: the next call's operands are tinyjax's values, which JAX flushes itself).
  """
  host = np.asarray(result)
  if not _has_denormals(host):
    return False
  denormal = (host != 0) & (np.abs(host) < np.finfo(host.dtype).smallest_normal)
  try:
    assert_values(np.where(denormal, np.copysign(np.zeros_like(host), host), host), np.asarray(expected), **tolerance)
  except AssertionError:
    return False
  return True


def _has_denormals(array) -> bool:
  host = np.asarray(array)
  if host.dtype not in (np.float32, np.float64):
    return False
  return bool(np.any((host != 0) & (np.abs(host) < np.finfo(host.dtype).smallest_normal)))


def test_the_docs_state_the_number_of_programs():
  text = " ".join((pathlib.Path(__file__).parent.parent / "docs" / "guarantees.md").read_text().split())
  assert f"a fixed, deterministic set of {CPU_EXAMPLES} programs per test ({LEG_EXAMPLES} on CL and WEBGPU" in text


@SETTINGS
@given(programs())
def test_random_programs_match_jax(program):
  check_program(program)


@pytest.mark.float64
@SETTINGS
@given(st.data())
def test_random_programs_match_jax_x64(data):
  with jax.enable_x64(True):
    check_program(data.draw(programs(DTYPES_X64)))


# --- the fused multiply-add the fuzzer forgives: only the fusion, recomputed

def _product_then_sum(sum_op: str, fused: bool):
  """a0 * a1 then +/- a2 (a2 - 1 where a product rounds to 1: the fusion shows), computed as JAX's eager calls do, or
  under jax.jit, which XLA contracts into a fused multiply-add."""
  a = np.array([1 + 2 ** -23, 3.0, -0.0, np.inf, 1e30, 0.1], np.float32)
  b = np.array([1 - 2 ** -23, 1 / 3, 5.0, 0.0, 1e30, 10.0], np.float32)
  c = np.array([1.0, 1.0, 0.0, 1.0, -np.inf, 1.0], np.float32)
  program = Program([a, b, c], [Call("multiply", "np_.multiply(a0, a1)", ("a0", "a1")),
                                Call(sum_op, f"np_.{sum_op}(v0, a2)", ("v0", "a2"))])
  function = functools.partial(program.function, jnp)
  return program, (jax.jit(function) if fused else function)(a, b, c)


@pytest.mark.parametrize("sum_op", ["add", "subtract"])
def test_the_fused_multiply_add_is_recomputed_not_assumed(sum_op):
  """JAX's jit result (fused) is forgiven against JAX's eager one where the device's compiler fuses (never elsewhere);
  a result one ulp off elsewhere, of another dtype, or with another sign of zero is not."""
  program, (product, eager) = _product_then_sum(sum_op, fused=False)
  _, (_, fused) = _product_then_sum(sum_op, fused=True)
  assert not np.array_equal(np.asarray(fused), np.asarray(eager))  # the case shows a fusion
  values = {"a0": jnp.asarray(program.inputs[0]), "a1": jnp.asarray(program.inputs[1]),
            "a2": jnp.asarray(program.inputs[2]), "v0": product}
  call = program.calls[1]
  fusing = {device for device, name, _ in XFAIL_ON_DEVICE if name == "a * b + c, fused"}
  assert _fused_multiply_add(program, call, values, tinyjax.numpy.asarray(fused), eager) == (
    (device_under_test() or "CPU") in fusing)
  off = np.asarray(fused).copy()
  off[1] = np.nextafter(off[1], np.float32(np.inf))
  assert not _fused_multiply_add(program, call, values, tinyjax.numpy.asarray(off), eager)
  assert not _fused_multiply_add(program, call, values, tinyjax.numpy.asarray(np.asarray(fused, np.float16)), eager)
  zero_sign = np.asarray(fused).copy()
  zero_sign[2] = -zero_sign[2]  # -0.0 * 5 + 0.0 is +0.0, fused or not
  assert not _fused_multiply_add(program, call, values, tinyjax.numpy.asarray(zero_sign), eager)


# --- known differences the fuzzer found: reproducers of their tests/xfail.py entries (the generator avoids them)

def _bool_times_float():
  check(lambda np_, mask, x: np_.multiply(np_.asarray(mask), np_.asarray(x)),
        np.array([False, False, False, True]), np.array([np.inf, np.nan, -2.5, 3.0], np.float32))


def _fused_multiply_add_of_eager_calls():
  a, b = np.float32(1 + 2 ** -23), np.float32(1 - 2 ** -23)  # a * b rounds to 1.0; fused, a * b - 1 is -2**-46
  check(lambda np_, a, b: np_.asarray(a) * np_.asarray(b) - 1.0, a, b)


KNOWN_DIFFERENCES = {"mul(convert(bool), x)": (_bool_times_float, None),
                     "a * b + c, fused": (_fused_multiply_add_of_eager_calls, np.float32)}


@pytest.mark.parametrize("reproduce", [param(fn, name=name, dtype=dtype, id=name)
                                       for name, (fn, dtype) in KNOWN_DIFFERENCES.items()])
def test_known_difference(reproduce):
  reproduce()


# --- differences the fuzzer found that are fixed (in backends/tinygrad/elementwise.py, floatmath.py and, for the
# replayed view, __init__.py)

def check_jit(fn, *args):
  """fn (written with jax.numpy) under tinyjax.jit against jax.jit: its constants are literals of the program."""
  with native():
    actual = tinyjax.jit(fn)(*args)
  assert_like_jax(actual, jax.jit(fn)(*args))


def _on_array(np_, host, fn):
  return fn(np_.asarray(host))  # one array (one value of the program), used twice by fn


def _replayed_view_of_an_input():
  for i in range(4):  # run plainly, captured by TinyJit, then replayed
    data = np.arange(37, dtype=np.float32) + 100 * i  # NB: a size of its own, so that the program is new
    x = tnp.asarray(data)
    view, computed = x.reshape(37, 1), tnp.isnan(x)  # noqa: F841  (one program: a view of x beside a kernel)
    tinyjax.flush()
    assert_like_jax(view, jnp.asarray(data).reshape(37, 1))


def _tanh_of_a_constant():
  with warnings.catch_warnings():
    warnings.simplefilter("error", RuntimeWarning)  # the rescue by XLA warns
    check(lambda np_: np_.tanh(np_.ones(11)))  # NB: a shape of its own: a rescued program stays rescued


EDGES = np.array([-0.0, 0.0, np.inf, -np.inf, np.nan, -2.0, 3.5], np.float32)
UINT8 = np.array([0, 1, 127, 128, 200, 236, 255], np.uint8)
def _sin_cos_of_huge_float64():
  """Reduced exactly (floatmath._reduce_pi_over_2_64): 1e-9 off at 1e38 before, and cos of a float64 within 5e-19 of
  an odd multiple of pi/2 (the hardest case of the reduction) to the last ulps."""
  huge = np.array([3.4028234663852886e38, 1e35, -1e300, 1.7976931348623157e308, 6381956970095103 * 2.0 ** 797,
                   5.319372648326541e255, 2.0 ** 1023, 1e22, 8.0, -8.5], np.float64)
  with jax.enable_x64(True):
    check(lambda np_, x: [np_.sin(np_.asarray(x)), np_.cos(np_.asarray(x))], huge, rtol=1e-14)


FIXED = {
  "sin/cos of float64 beyond 1e30": _sin_cos_of_huge_float64,
  # tinygrad's x - y is x + y * -1, which its simplifier merged with other terms in x: x - x -> 0 for inf and NaN
  "x - x": lambda: check(lambda np_, a: _on_array(np_, a, lambda x: np_.subtract(x, x)), EDGES),
  "(y + x) - x": lambda: check(lambda np_, a: _on_array(np_, a, lambda x: (1e-8 + x) - x), EDGES),
  "-x + x": lambda: check(lambda np_, a: _on_array(np_, a, lambda x: np_.negative(x) + x), EDGES),
  "minimum(x * -1, x)": lambda: check_jit(lambda a: (jnp.minimum(a * -1, a), jnp.maximum(a * -1, a)), EDGES),
  "0.0 - x (a literal zero)": lambda: check_jit(lambda a: (0.0 - a, -0.0 - a, a - 0.0, a * -1.0), EDGES),
  "x - 0 on an empty array": lambda: check_jit(lambda a: a - 0.0, np.zeros((0, 3), np.float32)),
  # tinygrad's range analysis took uint8 -> int8 to keep values, so x < 0 folded to False
  "uint8 -> int8, abs and < 0": lambda: check(lambda np_, a: (np_.abs(np_.asarray(a).astype(np_.int8)),
                                                              np_.asarray(a).astype(np_.int8) < 0), UINT8),
  # a cast to int pushed into asin's NaN branch (ValueError), and NaN != NaN folded to False (isnan of asin)
  "asin(x).astype(int32), isnan(asin(x))": lambda: check(
    lambda np_, a: (np_.arcsin(np_.asarray(a)).astype(np_.int32), np_.isnan(np_.arcsin(np_.asarray(a)))),
    np.array([0.5, 2.0, -1.0, 1e10], np.float32)),
  # tinygrad folds floor and ceil of constants with Python's math.floor and math.ceil, which lose -0.0
  "floor and ceil of a folded -0.0": lambda: check(
    lambda np_, a: _on_array(np_, a, lambda x: (np_.floor(-np_.sqrt(x > x)), np_.ceil(np_.sqrt(x > x) - 0.5))),
    np.full(2, np.nan, np.float32)),
  # tinygrad folded x + 0.0 -> x and x * 0.0 -> 0.0 on a zero it computed (NaN > NaN is False, and sqrt of it)
  "arithmetic on a folded zero": lambda: check(
    lambda np_, a: _on_array(np_, a, lambda x: (lambda zero: (zero - 0, zero * x, zero / 0, -zero + zero))(
      np_.sqrt(x > x))), np.full(2, np.nan, np.float32)),
  # tinygrad folded constant integer arithmetic without wrapping
  "constant uint32 and uint8 arithmetic wraps": lambda: check_jit(
    lambda: ((jnp.full(2, 65536, jnp.uint32) * jnp.uint32(65536)) % jnp.uint32(4294967295),
             (jnp.full(2, 200, jnp.uint8) + jnp.uint8(100)) % jnp.uint8(7),
             (jnp.full(2, 255, jnp.uint8) << jnp.uint8(4)) % jnp.uint8(7),
             jnp.uint32(65536) % jnp.full(1, -1, jnp.int32).astype(jnp.uint32))),
  # tinygrad folded c * 1 -> c keeping a weakly typed c, which its C renderer bitcast at the wrong width inside
  # float64 tanh (float32 math is float32 now): the program was rescued by XLA with a RuntimeWarning
  "tanh of a constant": _tanh_of_a_constant,
  # TinyJit replays kernels only: a replay returned the view of the captured run's input
  "a replayed program's output that is a view of its input": _replayed_view_of_an_input,
}


@pytest.mark.parametrize("name", [param(name, name=name, id=name,
                                          marks=[pytest.mark.float64] if "float64" in name else [])
                                    for name in FIXED])
def test_fixed_difference(name):
  FIXED[name]()
