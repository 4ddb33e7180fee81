"""tinyjax.Array's surface against jax.Array's: operators, indexing, `.at`, methods, conversions, repr, errors.

Every case runs on jax.numpy and on tinyjax.numpy and compares the results (shape, dtype, weak type, values) or
the types of the exceptions. The surface is the same whatever backend runs the flushed program, so the wide
parametrized sweeps run on the XLA backend (`xla` fixture: compiling on tinygrad costs ~1 s a program); the
tests that read data out of Arrays run on the default tinygrad backend. Whether each primitive computes like
XLA on tinygrad is tests/backends' business.
"""
import collections
import contextlib
import copy
import operator
import pickle

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import tinyjax
import tinyjax.numpy as tnp
import tinyjax.random
from oracle import assert_like_jax, on_tinygrad


def _expected(fn):
  """fn(jnp), jitted when it can be (one XLA compile instead of one per operation); eagerly otherwise."""
  try:
    return jax.jit(lambda: fn(jnp))()
  except Exception:  # value-dependent (boolean masks, nonzero), non-array results, or an error to see eagerly
    return fn(jnp)


def same(fn):
  """fn(jnp) and fn(tnp) agree: alike results (assert_like_jax), or exceptions of the same type."""
  try:
    expected = _expected(fn)
  except Exception as error:
    with pytest.raises(Exception) as info:
      fn(tnp)
      tinyjax.flush()
    assert type(info.value) is type(error), f"raised {info.type.__name__}, JAX raises {type(error).__name__}"
    return None
  actual = fn(tnp)
  tinyjax.flush()
  assert_like_jax(actual, expected)
  return actual


def raises_like_jax(fn):
  """fn(jnp) raises, and fn(tnp) raises an exception of the same type."""
  with pytest.raises(Exception) as jax_info:
    fn(jnp)
  same(fn)
  return jax_info.type


# --- laziness: metadata at once, data at a flush

def test_metadata_known_without_running():
  report = tinyjax.report()
  x = tnp.ones((3, 4), tnp.int8) + 1
  flushes = report.flushes
  assert not x.is_ready()
  assert (x.shape, x.dtype, x.ndim, x.size, x.weak_type) == ((3, 4), np.dtype(np.int8), 2, 12, False)
  assert (x.itemsize, x.nbytes) == (1, 12)
  assert tnp.asarray(2.0).weak_type and not tnp.float32(2.0).weak_type
  assert not x.is_ready() and report.flushes == flushes


def test_holds_a_concrete_buffer_after_reading():
  x = tnp.arange(4.0) * 2
  assert not x.is_ready()
  assert x.block_until_ready() is x
  assert x.is_ready() and x._value.buffers  # a buffer of the backend, not the host copy alone


# --- operators

BINARY = {"+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv, "//": operator.floordiv,
          "%": operator.mod, "**": operator.pow, "&": operator.and_, "|": operator.or_, "^": operator.xor,
          "<<": operator.lshift, ">>": operator.rshift, "<": operator.lt, "<=": operator.le, ">": operator.gt,
          ">=": operator.ge, "==": operator.eq, "!=": operator.ne, "divmod": divmod}
# the other operand: another Array, a NumPy array, a NumPy scalar, Python scalars (weakly typed), a list
OTHERS = {"array": lambda m, y: m.asarray(y), "numpy": lambda m, y: y, "np_scalar": lambda m, y: y[1],
          "int": lambda m, y: 2, "float": lambda m, y: 1.5, "bool": lambda m, y: True, "list": lambda m, y: [1, 2]}


def _operands(dtype):
  # NB: no zero divisors and small shift amounts: the edge values of each primitive are tests/backends' business
  x = np.array([[1, 2, 3], [5, 7, 6]]).astype(dtype)
  y = np.array([1, 2, 1]).astype(dtype)
  return x, y


def _each(ops, fn):
  """{op: fn(op)} for the ops that do not raise, and {op: exception type} for the others."""
  results, errors = {}, {}
  for name in ops:
    try:
      results[name] = fn(name)
    except Exception as error:
      errors[name] = type(error)
  return results, errors


# Every operator with every dtype against another Array and against a Python int; the other operand kinds with
# the dtypes whose promotion differs (weak Python scalars keep uint8 and turn ints into floats) and a few operators
# (the operators are made alike: what differs is the operand); each both ways round (reflected operators).
OPERATOR_CASES = [(dtype, "array") for dtype in (np.float32, np.int32, np.uint8, np.bool_)] + [
  (dtype, other) for dtype in (np.float32, np.int32) for other in OTHERS if other != "array"] + [
  (np.uint8, "int"), (np.bool_, "bool")]
SOME_OPERATORS = ["+", "-", "/", "//", "**", "&", "<<", "<", "==", "divmod"]


@pytest.mark.parametrize("reflected", [False, True], ids=["x_op_y", "y_op_x"])
@pytest.mark.parametrize("dtype,other", OPERATOR_CASES, ids=lambda p: getattr(p, "__name__", p))
def test_binary_operators(xla, dtype, other, reflected):
  x, y = _operands(dtype)

  def run(m):
    a, b = m.asarray(x), OTHERS[other](m, y)
    ops = BINARY if other in ("array", "int") else SOME_OPERATORS
    return _each(ops, lambda op: BINARY[op](b, a) if reflected else BINARY[op](a, b))
  expected_errors = {}

  def expected_results():  # jitted: one XLA compile, not one per operator
    results, errors = run(jnp)
    expected_errors.update(errors)
    return results
  expected = jax.jit(expected_results)()
  actual, actual_errors = run(tnp)
  tinyjax.flush()
  assert actual_errors == expected_errors
  assert_like_jax(actual, expected)


def test_a_concrete_integer_exponent_on_the_right_of_a_reflected_power_is_jaxs_integer_power():
  """JAX's eager x ** y reads a 0-d integer y's value, reflected too (y.__rpow__(x)): integer_pow, so the base's dtype
  stays (uint16 ** int16 is uint16, where a traced exponent promotes to int32) and an integer base refuses a
  negative one."""
  cases = [(np.array([[3], [0], [7]], np.uint16), np.int16(2)), (2, np.int32(3)), (2.5, np.int32(-3)),
           (np.float16(1.5), np.int8(2)), (np.array([1.5, -2.0], np.float32), np.uint8(3))]
  for base, exponent in cases:
    assert_like_jax(base ** tnp.asarray(exponent), base ** jnp.asarray(exponent))
    assert_like_jax(tnp.asarray(exponent).__rpow__(base), jnp.asarray(exponent).__rpow__(base))
  with pytest.raises(TypeError, match="Integers cannot be raised to negative powers"):
    2 ** jnp.asarray(np.int32(-1))
  with pytest.raises(TypeError, match="Integers cannot be raised to negative powers"):
    2 ** tnp.asarray(np.int32(-1))


def test_numpy_on_the_left_defers_to_tinyjax():
  x = tnp.arange(3.0)
  assert isinstance(np.ones(3, np.float32) + x, tinyjax.Array)
  assert isinstance(np.float32(2) * x, tinyjax.Array)
  assert isinstance(np.ones((2, 3), np.float32) @ x, tinyjax.Array)


@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.bool_], ids=lambda d: d.__name__)
def test_unary_operators(xla, dtype):
  x = np.array([[-2, 0, 3], [5, -7, 1]]).astype(dtype)
  ops = {"-": operator.neg, "+": operator.pos, "abs": abs, "~": operator.invert, "round": round,
         "round1": lambda a: round(a, 1)}
  expected, expected_errors = _each(ops, lambda op: ops[op](jnp.asarray(x)))
  actual, actual_errors = _each(ops, lambda op: ops[op](tnp.asarray(x)))
  tinyjax.flush()
  assert actual_errors == expected_errors
  assert_like_jax(actual, expected)


@pytest.mark.parametrize("shapes", [((2, 3), (3,)), ((3,), (3, 4)), ((2, 3), (3, 4)), ((5, 2, 3), (3, 2)),
                                    ((3,), (3,)), ((2, 3), (2, 3))], ids=str)
def test_matmul(xla, shapes):
  a = np.arange(np.prod(shapes[0]), dtype=np.float32).reshape(shapes[0])
  b = np.arange(np.prod(shapes[1]), dtype=np.float32).reshape(shapes[1]) - 3
  same(lambda m: m.asarray(a) @ m.asarray(b))
  same(lambda m: a @ m.asarray(b))
  same(lambda m: m.asarray(a) @ b)


def test_operators_on_tinygrad():
  """A few operators with the default backend: the results come back from tinygrad buffers."""
  x, y = _operands(np.float32)
  with on_tinygrad():
    same(lambda m: {"add": m.asarray(x) + y, "rsub": 2.0 - m.asarray(x), "lt": m.asarray(x) < 3,
                    "neg": -m.asarray(x), "matmul": m.asarray(x) @ y})


def test_contains(xla):
  same(lambda m: 2 in m.arange(3))
  same(lambda m: 7 in m.arange(3))
  same(lambda m: 1 in m.arange(4).reshape(2, 2))
  raises_like_jax(lambda m: None in m.arange(3))
  raises_like_jax(lambda m: "a" in m.arange(3))


# --- indexing

_X = np.arange(120, dtype=np.float32).reshape(4, 5, 6)
INDICES = {
  "int": 1, "negative_int": -1, "ints": (1, 2, 3), "slice": slice(1, 3), "step": slice(None, None, 2),
  "reversed": slice(None, None, -1), "negative_slice": slice(-3, -1), "negative_step": slice(3, 0, -2),
  "empty_slice": slice(3, 1), "slice_past_end": slice(2, 10), "steps_2d": (slice(1, -1, 2), slice(None, None, -2)),
  "none": None, "ellipsis_none": (Ellipsis, None), "ellipsis_int": (Ellipsis, 1), "int_ellipsis_int": (1, ..., 2),
  "slice_none_int": (slice(None), None, 1), "empty_tuple": (), "scalar_element": (0, 0, 0),
  "int_array": np.array([0, 2]), "int_array_2d": np.array([[0, 1], [2, 3]]), "negative_int_array": np.array([-1, 0]),
  "two_lists": ([0, 2], [1, 3]), "bool_mask": np.array([True, False, True, False]),
  "bool_mask_2d": np.arange(20).reshape(4, 5) % 3 == 0, "slice_and_array": (slice(1, 3), np.array([0, 4])),
  "arrays_split_by_slice": (np.array([0, 2]), slice(None), np.array([1, 5])),
  "array_and_none": (slice(None), np.array([0, 1]), None), "numpy_int": np.int32(2), "numpy_int64": np.int64(-2),
  "out_of_range_array": np.array([10, -10]), "out_of_range_int": 7, "bool_scalar": True,
}
BAD_INDICES = {"float": 1.0, "list_as_tuple": [0, 1], "string": "a", "too_many": (0, 0, 0, 0), "float_array":
               np.array([1.0])}


@pytest.mark.parametrize("index", INDICES)
def test_getitem(xla, index):
  same(lambda m: m.asarray(_X)[INDICES[index]])


@pytest.mark.parametrize("index", BAD_INDICES)
def test_getitem_errors(xla, index):
  raises_like_jax(lambda m: m.asarray(_X)[BAD_INDICES[index]])


def test_getitem_with_array_indices(xla):
  """Indices that are Arrays themselves: integer arrays, 0-d integers and (value-dependent) boolean masks."""
  same(lambda m: m.asarray(_X)[m.asarray([3, 0, 1])])
  same(lambda m: m.asarray(_X)[m.asarray(2), 1:])
  same(lambda m: m.asarray(_X)[m.asarray(_X) > 100])
  same(lambda m: m.asarray(_X)[1, m.asarray([True, False, True, True, False])])


def test_getitem_on_tinygrad():
  with on_tinygrad():
    same(lambda m: {"slices": m.asarray(_X)[1:3, ::-2, None, 2], "gather": m.asarray(_X)[np.array([2, 0]), :, -1]})


def test_setitem_raises_like_jax():
  raises_like_jax(lambda m: m.asarray(_X).__setitem__(0, 1.0))
  messages = []
  for module in (jnp, tnp):
    with pytest.raises(TypeError) as info:
      module.asarray(_X)[0] = 1.0
    messages.append(str(info.value))
  assert messages[1] == messages[0]


# --- .at[...]

_V = np.arange(10, dtype=np.float32) - 3
_I = np.array([[1, 2], [3, 4]], np.int32)
AT = {
  "set": lambda a: a.at[2].set(9.0), "set_slice": lambda a: a.at[2:5].set(np.array([7.0, 8.0, 9.0])),
  "set_negative": lambda a: a.at[-1].set(9.0), "set_array": lambda a: a.at[np.array([0, 5])].set(9.0),
  "add": lambda a: a.at[1:3].add(1.5), "add_repeated": lambda a: a.at[np.array([0, 0, 2])].add(1.0),
  "subtract": lambda a: a.at[::2].subtract(2.0), "multiply": lambda a: a.at[np.array([1, 1])].multiply(3.0),
  "mul": lambda a: a.at[3].mul(-2.0), "divide": lambda a: a.at[4:].divide(2.0),
  "power": lambda a: a.at[np.array([4, 5])].power(2.0), "min": lambda a: a.at[np.array([0, 9, 0])].min(-5.0),
  "max": lambda a: a.at[:4].max(0.0), "get": lambda a: a.at[np.array([1, 3])].get(),
  "apply": lambda a: a.at[np.array([1, 3])].apply(jnp.sin),
  "out_of_range_set_dropped": lambda a: a.at[np.array([12, 1])].set(9.0),
  "out_of_range_add_dropped": lambda a: a.at[12].add(9.0),
  "out_of_range_get_clamped": lambda a: a.at[12].get(),
  "mode_drop": lambda a: a.at[np.array([12, -12, 1])].set(9.0, mode="drop"),
  "mode_clip_set": lambda a: a.at[np.array([12, 1])].set(9.0, mode="clip"),
  "mode_clip_get": lambda a: a.at[np.array([12, -12])].get(mode="clip"),
  "mode_fill_get": lambda a: a.at[np.array([12, 2, -12])].get(mode="fill", fill_value=-1.0),
  "mode_fill_nan": lambda a: a.at[np.array([12, 2])].get(mode="fill"),
  "promise_in_bounds": lambda a: a.at[np.array([1, 2])].add(1.0, mode="promise_in_bounds"),
  "sorted_unique": lambda a: a.at[np.array([1, 2])].set(4.0, indices_are_sorted=True, unique_indices=True),
  "mask": lambda a: a.at[a > 2].set(0.0), "array_values": lambda a: a.at[1:4].set(jnp.arange(3.0)),
  "cast_values": lambda a: a.astype(np.int32).at[2].set(7.9), "bad_mode": lambda a: a.at[1].set(1.0, mode="bogus"),
  "2d_mixed": lambda a: a.reshape(2, 5).at[1, np.array([0, 4])].add(10.0),
  "2d_index_array": lambda a: a.reshape(5, 2).at[_I].set(0.0),
  "bad_operation": lambda a: a.at[1].set(np.ones(3, np.float32)),
}


@pytest.mark.parametrize("case", AT)
def test_at(xla, case):
  same(lambda m: AT[case](m.asarray(_V)))


def test_at_on_tinygrad():
  with on_tinygrad():
    same(lambda m: {"set": m.asarray(_V).at[2:4].set(1.0), "fill": m.asarray(_V).at[np.array([12, 2])].get(
      mode="fill", fill_value=-1.0), "add": m.asarray(_V).at[np.array([0, 0, 11])].add(2.0)})


# --- methods and properties

_M = np.arange(24, dtype=np.float32).reshape(2, 3, 4) - 5
METHODS = {
  "sum": lambda a: a.sum(), "sum_axis": lambda a: a.sum(axis=0), "sum_axes_keepdims": lambda a: a.sum((0, 2), keepdims=True),
  "sum_dtype": lambda a: a.sum(dtype=jnp.int32), "mean": lambda a: a.mean(), "mean_axis": lambda a: a.mean(axis=-1),
  "max": lambda a: a.max(axis=1), "min": lambda a: a.min(), "prod": lambda a: a.prod(axis=2),
  "argmax": lambda a: a.argmax(axis=0), "argmin": lambda a: a.argmin(), "std": lambda a: a.std(axis=1),
  "var": lambda a: a.var(ddof=1), "all": lambda a: a.all(axis=0), "any": lambda a: (a > 10).any(),
  "cumsum": lambda a: a.cumsum(axis=1), "cumprod": lambda a: a.cumprod(), "ptp": lambda a: a.ptp(axis=2),
  "reshape_args": lambda a: a.reshape(6, 4), "reshape_tuple": lambda a: a.reshape((4, 6)),
  "reshape_minus_one": lambda a: a.reshape(2, -1), "reshape_flat": lambda a: a.reshape(-1),
  "reshape_order_f": lambda a: a.reshape((4, 6), order="F"), "reshape_bad": lambda a: a.reshape(5, 5),
  "astype_int": lambda a: a.astype(jnp.int32), "astype_str": lambda a: a.astype("float16"),
  "astype_bool": lambda a: a.astype(bool), "T": lambda a: a.T, "mT": lambda a: a.mT,
  "transpose": lambda a: a.transpose(), "transpose_args": lambda a: a.transpose(2, 0, 1),
  "transpose_tuple": lambda a: a.transpose((1, 2, 0)), "transpose_bad": lambda a: a.transpose(0, 1),
  "swapaxes": lambda a: a.swapaxes(0, 2), "squeeze": lambda a: a[:1].squeeze(), "squeeze_axis": lambda a: a[:, :1].squeeze(1),
  "flatten": lambda a: a.flatten(), "ravel": lambda a: a.ravel(), "clip": lambda a: a.clip(-1, 5),
  "clip_min": lambda a: a.clip(min=0), "round": lambda a: (a / 3).round(1), "dot": lambda a: a[0].dot(a[1].T),
  "take": lambda a: a.take(np.array([0, 5, 23])), "take_axis": lambda a: a.take(np.array([2, 0]), axis=1),
  "repeat": lambda a: a.repeat(2, axis=0), "diagonal": lambda a: a.diagonal(axis1=1, axis2=2),
  "trace": lambda a: a[0].trace(), "sort": lambda a: (-a).sort(axis=1), "argsort": lambda a: (-a).argsort(axis=None),
  "searchsorted": lambda a: a.ravel().searchsorted(np.array([0.5, 3.0])), "conj": lambda a: a.conj(),
  "conjugate": lambda a: a.conjugate(), "real": lambda a: a.real, "imag": lambda a: a.imag,
  "view": lambda a: a.view(jnp.int32), "byteswap": lambda a: a.astype(jnp.int32).byteswap(),
  "compress": lambda a: a.compress(np.array([True, False, True]), axis=1),
  "choose": lambda a: (a[0, 0] % 2).astype(jnp.int32).choose([np.arange(4), np.arange(4) * 10]),
  "nonzero_size": lambda a: a.nonzero(size=30, fill_value=-1), "nonzero": lambda a: (a > 10).nonzero(),
  "argpartition": lambda a: a.ravel().argpartition(3)[:3].sort(), "copy": lambda a: a.copy(),
  "to_device": lambda a: a.to_device(None), "squeeze_bad": lambda a: a.squeeze(0),
}


@pytest.mark.parametrize("method", METHODS)
def test_methods(xla, method):
  same(lambda m: METHODS[method](m.asarray(_M)))


def test_methods_on_tinygrad():
  with on_tinygrad():
    same(lambda m: {"sum": m.asarray(_M).sum(axis=1), "reshape": m.asarray(_M).reshape(4, 6),
                    "T": m.asarray(_M).transpose(2, 0, 1), "astype": m.asarray(_M).astype(m.int32)})


@pytest.mark.parametrize("value", [np.float32(1.5), np.int32(-7), np.bool_(True), 2.5, 3], ids=repr)
def test_python_scalar_conversions(value):
  def convert(m):
    a = m.asarray(value)
    return {"float": float(a), "int": int(a), "bool": bool(a), "complex": complex(a), "item": a.item(),
            "tolist": a.tolist(), "format": f"{a:>8}"}
  expected, actual = convert(jnp), convert(tnp)
  assert actual == expected and {k: type(v) for k, v in actual.items()} == {k: type(v) for k, v in expected.items()}


def test_index_protocol():
  assert [10, 20, 30][tnp.asarray(2)] == 30
  assert hex(tnp.asarray(255)) == hex(jnp.asarray(255))
  assert list(range(5))[tnp.asarray(1):tnp.asarray(4)] == [1, 2, 3]


def test_item_tolist_format():
  x = np.arange(6, dtype=np.float32).reshape(2, 3) / 4
  t, j = tnp.asarray(x), jnp.asarray(x)
  assert t.item(4) == j.item(4) and type(t.item(4)) is type(j.item(4))
  assert t.item((1, 2)) == j.item((1, 2))
  assert t.tolist() == j.tolist()
  assert tnp.asarray(True).tolist() is True
  assert t.tobytes() == j.tobytes()
  assert f"{t}" == f"{j}" and str(t) == str(j) and f"{t[0, 1]:.3f}" == f"{j[0, 1]:.3f}"


MISUSE = {
  "hash": lambda m: hash(m.arange(3)), "hash_0d": lambda m: hash(m.asarray(1)),
  "float_1d": lambda m: float(m.arange(1.0)), "int_2": lambda m: int(m.arange(2)),
  "complex_2d": lambda m: complex(m.ones((1, 1))), "bool_empty": lambda m: bool(m.arange(0)),
  "bool_many": lambda m: bool(m.arange(2)), "index_float": lambda m: [1, 2][m.asarray(1.0)],
  "index_1d": lambda m: [1, 2][m.asarray([1])], "index_bool": lambda m: [1, 2][m.asarray(True)],
  "len_0d": lambda m: len(m.asarray(1.0)), "iter_0d": lambda m: iter(m.asarray(1.0)),
  "item_many": lambda m: m.arange(3).item(), "setitem": lambda m: m.arange(3).__setitem__(0, 1),
  "flat": lambda m: m.arange(3).flat, "format_spec_1d": lambda m: f"{m.arange(3.0):.2f}",
  "if_array": lambda m: 1 if m.arange(3) else 0, "reshape_bad": lambda m: m.arange(6).reshape(4, 2),
  "add_string": lambda m: m.arange(3) + "a", "float_of_list": lambda m: m.arange(3) < [1, 2],
  "astype_bad": lambda m: m.arange(3).astype("bogus"), "attribute": lambda m: m.arange(3).bogus,
}


@pytest.mark.parametrize("misuse", MISUSE)
def test_misuse_raises_like_jax(misuse):
  raises_like_jax(MISUSE[misuse])


# NB: Python writes JAX's class as 'jaxlib._jax.ArrayImpl' in its own messages, tinyjax's as 'ArrayImpl'
FOREIGN_OPERATORS = {"add": operator.add, "mul": operator.mul, "sub": operator.sub, "lt": operator.lt,
                     "eq": operator.eq, "ne": operator.ne, "pow": operator.pow, "rshift": operator.rshift}
FOREIGN_OPERANDS = {"list": [1.0, 2.0], "tuple": (1.0, 2.0), "dict": {}, "set": set()}


@pytest.mark.parametrize("other", FOREIGN_OPERANDS)
@pytest.mark.parametrize("op", FOREIGN_OPERATORS)
@pytest.mark.parametrize("side", ["left", "right"])
def test_operators_refuse_containers_as_jax_does(op, other, side):
  """Lists, tuples, dicts and sets are not operands (JAX's message where JAX writes one), and a NamedTuple answers
  the operator itself."""
  def apply(m):
    args = (m.ones(2), FOREIGN_OPERANDS[other])
    return FOREIGN_OPERATORS[op](*(args if side == "left" else args[::-1]))

  with pytest.raises(TypeError) as jax_info:
    apply(jnp)
  with pytest.raises(TypeError) as tinyjax_info:
    apply(tnp)
  assert str(tinyjax_info.value) == str(jax_info.value).replace("jaxlib._jax.ArrayImpl", "ArrayImpl")


def test_a_named_tuple_answers_operators_itself():
  class Pair(collections.namedtuple("Pair", "a b")):
    def __add__(self, other):
      return "pair first"

    def __radd__(self, other):
      return "pair second"
  for m in (jnp, tnp):
    assert (m.ones(2) + Pair(1, 2), Pair(1, 2) + m.ones(2)) == ("pair second", "pair first")


def test_traces_follow_jax_settings():
  """A trace made under one JAX setting is not reused under another (the cache key holds JAX's trace context)."""
  def set_int32_to_int16(m):
    return m.arange(3, dtype=np.int32).at[0].set(np.int16(1))
  same(set_int32_to_int16)
  with jax.numpy_dtype_promotion("strict"):
    raises_like_jax(set_int32_to_int16)


@pytest.mark.parametrize("index", [4, -3, (slice(None), 4)], ids=["4", "-3", "slice-4"])
def test_static_indices_are_checked_when_jax_checks_them(index):
  shape = (2,) if isinstance(index, int) else (2, 3)
  same(lambda m: m.zeros(shape)[index])  # clamped, as JAX clamps
  with _static_checks():
    raises_like_jax(lambda m: m.zeros(shape)[index])
    raises_like_jax(lambda m: m.zeros(shape).at[index].get())


@contextlib.contextmanager
def _static_checks():
  jax.config.update("jax_check_static_indices", True)
  try:
    yield
  finally:
    jax.config.update("jax_check_static_indices", False)


def test_len_iter_and_truth():
  x = np.arange(12, dtype=np.float32).reshape(3, 4)
  t = tnp.asarray(x) * 2
  assert len(t) == 3 and len(tnp.zeros((0, 2))) == 0
  rows = list(t)
  assert len(rows) == 3
  assert_like_jax(rows, list(jnp.asarray(x) * 2))
  assert_like_jax(list(tnp.asarray(2.0) * tnp.ones(3)), list(jnp.asarray(2.0) * jnp.ones(3)))
  assert_like_jax(list(tnp.asarray([1, 2]) * 2), list(jnp.asarray([1, 2]) * 2))  # weak types kept
  a, b = tnp.asarray(np.array([1.0, 2.0], np.float32))  # unpacking
  assert float(a) == 1.0 and float(b) == 2.0
  assert bool(tnp.asarray([0.5])) and not bool(tnp.asarray(0))
  assert list(tnp.zeros((0, 2))) == []


def test_iterating_a_long_array_is_cheap():
  """Iteration does not compile one slicing program per row."""
  report = tinyjax.report()
  x = tnp.arange(3000.0).reshape(1000, 3) + 1
  compiles = report.compiles
  rows = list(x)
  assert len(rows) == 1000 and report.compiles <= compiles + 1
  assert_like_jax(rows[999], jnp.arange(3000.0).reshape(1000, 3)[999] + 1)


# --- conversions to NumPy, DLPack, the array API and JAX

def test_array_protocol():
  x = np.arange(6, dtype=np.float32).reshape(2, 3)
  t = tnp.asarray(x) + 1
  assert_like_jax(t, jnp.asarray(x) + 1)
  host = np.asarray(t)
  np.testing.assert_array_equal(host, x + 1)
  assert host.dtype == np.float32
  assert not host.flags.writeable and not np.asarray(jnp.asarray(x)).flags.writeable  # as JAX: read-only
  with pytest.raises(ValueError):
    host[0, 0] = 5
  np.testing.assert_array_equal(np.asarray(t), x + 1)  # the Array is unchanged
  converted = np.asarray(t, dtype=np.int64)
  assert converted.dtype == np.int64 and converted[1, 2] == 6
  mine = np.array(t)  # a copy is the caller's own
  mine[0, 0] = 99
  assert mine.flags.writeable and np.asarray(t)[0, 0] == 1
  assert np.array(t, copy=False).dtype == np.float32
  with pytest.raises(ValueError):
    np.array(jnp.asarray(x), dtype=np.int32, copy=False)
  with pytest.raises(ValueError):
    np.array(t, dtype=np.int32, copy=False)
  assert np.array(t, copy=True).flags.writeable
  assert np.sum(t) == 21.0 and isinstance(np.sin(t), np.ndarray)


def test_dlpack():
  x = np.arange(6, dtype=np.int16).reshape(3, 2)
  t = tnp.asarray(x) * 3
  np.testing.assert_array_equal(np.from_dlpack(t), x * 3)
  np.testing.assert_array_equal(np.from_dlpack(t, copy=True), x * 3)
  assert np.from_dlpack(t, copy=True).flags.writeable
  assert t.__dlpack_device__() == jnp.asarray(x).__dlpack_device__()
  for kwargs in [{}, {"stream": None}, {"max_version": (1, 0)}, {"max_version": (1, 0), "copy": True},
                 {"dl_device": (1, 0)}]:
    capsule = t.__dlpack__(**kwargs)
    assert type(capsule).__name__ == "PyCapsule"
  with pytest.raises(TypeError):
    t.__dlpack__(None)  # keyword-only, as jax.Array's
  np.testing.assert_array_equal(np.asarray(jax.dlpack.from_dlpack(t)), x * 3)


def test_array_namespace():
  t = tnp.arange(4.0)
  xp = t.__array_namespace__()
  assert xp is tnp
  assert isinstance(xp.sum(t), tinyjax.Array)
  assert t.__array_namespace__(api_version="2023.12") is tnp


def test_jax_array_protocol():
  x = np.arange(4, dtype=np.float32)
  t = tnp.asarray(x) * 2
  j = jnp.asarray(t)
  assert isinstance(j, jax.Array) and not isinstance(j, tinyjax.Array)
  np.testing.assert_array_equal(np.asarray(j), x * 2)
  assert jnp.asarray(tnp.asarray(2.0)).aval.weak_type  # the weak type survives
  np.testing.assert_array_equal(np.asarray(jnp.sin(t)), np.asarray(jnp.sin(x * 2)))
  np.testing.assert_array_equal(np.asarray(jax.jit(lambda a: a + 1)(t)), x * 2 + 1)
  np.testing.assert_array_equal(np.asarray(jnp.asarray(t) + t), x * 4)


@pytest.mark.parametrize("weak", ["jax_array", "jax_host_literal"])
def test_a_weak_typed_input_stays_weak(weak):
  """A weak-typed JAX array, or lax's weak-typed host literal, promotes as JAX promotes it (to float16 here)."""
  from jax._src import core, literals  # NB: the literal is JAX's internal type (lax.stage's argument)
  make = {"jax_array": lambda: jax.device_put(1.5),
          "jax_host_literal": lambda: literals.TypedNdArray(np.array(1.5, np.float32),
                                                            aval=core.ShapedArray((), np.float32, weak_type=True))}[weak]
  half = np.array([2.0, -0.0], np.float16)
  assert_like_jax(tnp.add(make(), half), jnp.add(make(), half))
  assert_like_jax(tinyjax.jit(lambda a, b: a * b)(make(), half), jax.jit(lambda a, b: a * b)(make(), half))


def test_block_until_ready_and_device():
  t = tnp.arange(5) + 1
  assert t.block_until_ready() is t and t.is_ready()
  assert isinstance(t.device, tinyjax.Device) and t.device.platform == "tinygrad"
  assert str(t.device) in {str(d) for d in tinyjax.devices()}
  assert t.devices() == {t.device} and t.platform() == "tinygrad"
  assert t.addressable_data(0) is t and t.is_fully_addressable and t.is_fully_replicated
  assert t.on_device_size_in_bytes() == t.nbytes
  assert jax.block_until_ready({"a": t}) == {"a": t}


@pytest.mark.parametrize("make", ["zeros", "arange", "fftfreq", "asarray"])
def test_made_for_one_of_jaxs_devices(make):
  """device=<a JAX device>: the Array names that device as JAX's does (devices(), device, sharding, committed), and
  its values, dtype and weak type are JAX's; what is computed from it is computed by tinyjax as usual."""
  device = jax.devices()[-1]
  def made(np_):
    return {"zeros": lambda: np_.zeros(3, device=device), "arange": lambda: np_.arange(5, device=device),
            "fftfreq": lambda: np_.fft.fftfreq(8, d=0.5, device=device),
            "asarray": lambda: np_.asarray([1.5, 2.0], device=device)}[make]()
  ours, theirs = made(tnp), made(jnp)
  assert isinstance(ours, tinyjax.Array)
  assert (ours.devices(), ours.device, ours.sharding, ours.committed) == (
    theirs.devices(), theirs.device, theirs.sharding, theirs.committed)
  assert_like_jax(ours, theirs)
  assert_like_jax(ours * 2, theirs * 2)


# --- repr and str, exactly as JAX prints them

REPRS = {
  "floats_2d": lambda m: m.arange(6.0).reshape(2, 3), "ints": lambda m: m.arange(6), "bools": lambda m: m.arange(3) > 0,
  "weak_float": lambda m: m.asarray(2.0) * 1, "weak_int": lambda m: m.asarray(3) + 1, "0d": lambda m: m.float32(3.5) + 0,
  "0d_bool": lambda m: m.asarray(True), "empty": lambda m: m.zeros((0, 3)), "empty_int": lambda m: m.zeros((2, 0), m.int32),
  "big_summarised": lambda m: m.arange(2000.0), "multiline_wrapped": lambda m: m.arange(100.0).reshape(10, 10) / 7,
  "dtype_on_own_line": lambda m: m.arange(30.0) / 29, "scientific": lambda m: m.arange(12.0).reshape(3, 4) * 1234567.0,
  "tiny_and_huge": lambda m: m.asarray([1e10, 1e-10]), "nan_inf": lambda m: m.asarray([m.nan, m.inf, -m.inf, -0.0]),
  "uint8": lambda m: m.asarray([1, 255], m.uint8), "float16": lambda m: m.asarray([1.5, 2], m.float16),
  "bfloat16": lambda m: m.asarray([1, 2.5], m.bfloat16), "int8_3d": lambda m: m.arange(30, dtype=m.int8).reshape(2, 3, 5),
  "bool_2d": lambda m: m.asarray([[1, 2], [3, 4]]) > 2, "int64_x32": lambda m: m.asarray(np.int64(5)),
  "negative_ints": lambda m: -m.arange(12).reshape(3, 4), "empty_bool": lambda m: m.zeros(0, bool),
  # typed keys print their type above their data, str as repr (JAX's random-numbers page prints one)
  "typed_key": lambda m: _random(m).key(43), "typed_keys": lambda m: _random(m).split(_random(m).key(43)),
}


def _random(module):
  return jax.random if module is jnp else tinyjax.random


@pytest.mark.parametrize("case", REPRS)
def test_repr_like_jax(case):
  actual, expected = REPRS[case](tnp), REPRS[case](jnp)
  assert repr(actual) == repr(expected)
  assert str(actual) == str(expected)


def _outcome(fn, random):
  """What `fn(random)` gives, as a user reads it: its class's name and repr, or its exception's type and message."""
  try:
    result = fn(random)
  except Exception as error:
    return type(error).__name__, str(error)
  return type(result).__name__, repr(result)


# a key array as JAX's dispatch, NumPy, Python and pickle read it; `r` is jax.random or tinyjax.random
KEY_READS = {
  "class": lambda r: r.key(7), "device_get": lambda r: jax.device_get({"k": r.split(r.key(7), 3)})["k"],
  "pickled": lambda r: pickle.loads(pickle.dumps(r.split(r.key(7)))), "row": lambda r: list(r.split(r.key(7), 3))[2],
  "rows_of_one": lambda r: list(r.key(7)),
  "jax_jit": lambda r: jax.jit(lambda k: jax.random.split(k))(r.key(7)), "numpy": lambda r: np.asarray(r.key(7)),
  "bool": lambda r: bool(r.key(7)), "format": lambda r: format(r.key(7), ">5"), "formatted": lambda r: f"{r.key(7)}",
  "sum": lambda r: r.split(r.key(7)).sum(), "astype": lambda r: r.key(7).astype(np.uint32),
  "item": lambda r: r.key(7).item(), "reshape": lambda r: r.split(r.key(7), 4).reshape(2, 2).T,
  "placed_class": lambda r: (lambda k: (type(k).__name__, k.sharding.spec))(_placed_on_a_mesh(r.split(r.key(7), 4), r)),
  "placed_device_get": lambda r: jax.device_get(_placed_on_a_mesh(r.split(r.key(7), 4), r)),
}


def _placed_on_a_mesh(x, random):
  """x placed over two devices by tinyjax's device_put (JAX's for JAX's keys)."""
  sharding = jax.sharding.NamedSharding(jax.make_mesh((2,), ("x",)), jax.sharding.PartitionSpec("x"))
  return (jax if random is jax.random else tinyjax).device_put(x, sharding)


@pytest.mark.parametrize("case", KEY_READS)
def test_key_arrays_read_as_jaxs(case):
  assert _outcome(KEY_READS[case], tinyjax.random) == _outcome(KEY_READS[case], jax.random)


def test_repr_follows_numpy_print_options():
  with np.printoptions(linewidth=40, precision=2):
    assert repr(tnp.arange(10.0) / 3) == repr(jnp.arange(10.0) / 3)


# --- Python protocols: pytrees, pickling, copies

def test_pytree_leaf():
  x = tnp.arange(3) + 1
  assert jax.tree_util.tree_leaves({"a": x}) == [x]
  assert jax.tree_util.tree_leaves({"a": x, "b": [x, (x,)]}) == [x, x, x]
  doubled = jax.tree_util.tree_map(lambda a: a * 2, {"a": x})
  assert isinstance(doubled["a"], tinyjax.Array)
  assert_like_jax(doubled, {"a": (jnp.arange(3) + 1) * 2})


@pytest.mark.parametrize("make", [lambda m: m.arange(4.0) * 2, lambda m: m.asarray(2.0) * 1,
                                  lambda m: m.arange(6, dtype=m.uint8).reshape(2, 3)], ids=["f32", "weak", "u8"])
def test_pickle_and_copies(make):
  t = make(tnp)
  restored = pickle.loads(pickle.dumps(t))
  assert isinstance(restored, tinyjax.Array)
  assert_like_jax(restored, make(jnp))
  assert_like_jax(copy.copy(t), make(jnp))
  assert_like_jax(copy.deepcopy({"t": t}), {"t": make(jnp)})
  assert_like_jax(t.copy(), make(jnp))


def test_numpy_inputs_are_copied_at_the_call():
  """As JAX: a NumPy array written to after the call does not change the (still pending) result."""
  host = np.ones(3, np.float32)
  t = tnp.negative(host)
  u = tnp.asarray(host) + 0
  host[:] = 5
  assert_like_jax({"t": t, "u": u}, {"t": -jnp.ones(3), "u": jnp.ones(3)})
