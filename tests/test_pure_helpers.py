"""Pure helpers stay pure (issue 42): a public function of jax.lax, jax.numpy or jax that JAX answers with no array
(a shape, a dtype, a tuple of padding pairs, dimension numbers) returns the very same kind of value under
tinyjax.patch() and through tinyjax's mirrors, not Arrays made of its numbers (tinyjax.core.tracing keeps the part
of a traced result that is no array as JAX's value)."""
import contextlib
import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import tinyjax
import tinyjax.lax as tlax
import tinyjax.numpy as tnp
from tinyjax.core import tracing

NAMESPACES = {"jax.lax": lax, "jax.numpy": jnp, "jax": jax}
MIRRORS = {"jax.lax": tlax, "jax.numpy": tnp}  # NB: tinyjax's own top-level names (devices, jit) differ on purpose

# The static argument sets each function is tried on, in this order: the first that plain JAX answers with no array
# (and the same answer twice) is the one tested.
STATIC_ARGUMENTS = (
  (),
  (1.0,),
  (1,),
  (np.float32,),
  ("int32",),
  (np.float32, np.int32),
  ((2, 1), (1, 3)),  # two shapes
  ((1, 1, 3, 3), (1, 1, 2, 2), ("NCHW", "OIHW", "NCHW")),  # lax.conv_dimension_numbers's
  ((5, 5), (2, 2), (1, 1), "SAME"),  # lax.padtype_to_pads's
  ((1, 1, 5, 5), (1, 1, 2, 2), (1, 1), ((0, 1), (0, 1))),  # lax.conv_shape_tuple's
  ((1, 1, 5, 5), (1, 1, 2, 2), (1, 1), ((0, 1), (0, 1)), ("NCHW", "OIHW", "NCHW")),  # conv_general_shape_tuple's
  ((1, 5, 5), (1, 2, 2), (1, 1, 1), ((0, 0), (0, 1), (0, 1))),  # lax.reduce_window_shape_tuple's
)

# Functions the walk does not call: they act on the world, or answer about it rather than on their arguments.
NOT_CALLED = {
  "jax.numpy.save": "writes a file",
  "jax.numpy.savez": "writes a file",
  "jax.numpy.load": "reads a file",
  "jax.numpy.set_printoptions": "changes how every array prints for the rest of the session",
  "jax.clear_caches": "drops every compiled function: the rest of the session would compile again",
  "jax.print_environment_info": "prints (and runs a subprocess)",
  "jax.make_user_context": "registers a new configuration option at each call",
  "jax.live_arrays": "the arrays alive in the process, which every other test changes",
}


def _has_array(result) -> bool:
  return any(isinstance(leaf, (jax.core.Tracer, jax.Array, np.ndarray)) for leaf in jax.tree_util.tree_leaves(result))


def _same(a, b) -> bool:
  """The same value of the same types, container by container (NaN equal to NaN)."""
  leaves_a, tree_a = jax.tree_util.tree_flatten(a)
  leaves_b, tree_b = jax.tree_util.tree_flatten(b)
  return tree_a == tree_b and all(type(x) is type(y) and (x == y or x != x and y != y)
                                  for x, y in zip(leaves_a, leaves_b))


def _traced_answers(fn) -> list:
  """The argument sets on which `fn`, traced (no input, nothing compiled), returns no array: a cheap first look,
  all sets in one trace, before plain JAX is asked."""
  found = []

  def probe():
    for args in STATIC_ARGUMENTS:
      try:
        result = fn(*args)
      except Exception:  # any function, any arguments: most refuse them
        continue
      if not _has_array(result):
        found.append(args)
    return ()
  try:
    jax.make_jaxpr(probe)()
  except Exception:  # a function that leaves the trace broken: not a helper
    return []
  return found


def _answer(fn, args):
  """`(answer,)`: plain JAX's answer to `fn(*args)`, when it holds no array and is the same twice; else None."""
  try:
    first, second = fn(*args), fn(*args)
  except Exception:  # refused: not these arguments
    return None
  return None if _has_array(first) or not _same(first, second) else (first,)


def _pure_helpers() -> list:
  """(namespace, name, arguments, JAX's answer) for each public function JAX answers on static arguments."""
  found = []
  for namespace, module in NAMESPACES.items():
    for name in sorted(n for n in dir(module) if not n.startswith("_")):
      fn = getattr(module, name)
      if f"{namespace}.{name}" in NOT_CALLED or isinstance(fn, (type, types.ModuleType)) or not callable(fn):
        continue
      for args in _traced_answers(fn):
        if (answer := _answer(fn, args)) is not None:
          found.append(pytest.param(namespace, name, args, answer[0], id=f"{namespace}.{name}"))
          break
  return found


PURE_HELPERS = _pure_helpers()


def test_the_walk_finds_the_helpers():
  """The walk reaches the functions of the issue (and so is not vacuous)."""
  names = {p.id for p in PURE_HELPERS}
  assert {"jax.lax.conv_dimension_numbers", "jax.lax.padtype_to_pads", "jax.lax.broadcast_shapes", "jax.lax.dtype",
          "jax.lax.conv_shape_tuple", "jax.lax.conv_general_shape_tuple", "jax.lax.conv_transpose_shape_tuple",
          "jax.lax.reduce_window_shape_tuple", "jax.numpy.broadcast_shapes", "jax.numpy.result_type",
          "jax.eval_shape", "jax.typeof"} <= names, sorted(names)


@pytest.mark.parametrize("namespace, name, args, expected", PURE_HELPERS)
def test_under_patch(namespace, name, args, expected):
  with tinyjax.patch():
    got = getattr(NAMESPACES[namespace], name)(*args)
  assert _same(got, expected), (got, expected)


@pytest.mark.parametrize("namespace, name, args, expected", [p for p in PURE_HELPERS if p.values[0] in MIRRORS])
def test_through_mirror(namespace, name, args, expected):
  got = getattr(MIRRORS[namespace], name)(*args)
  assert _same(got, expected), (got, expected)
  assert _same(getattr(MIRRORS[namespace], name)(*args), expected)  # the second call: from the trace cache


LHS, RHS, SPEC = (1, 2, 6, 5), (3, 2, 3, 2), ("NCHW", "OIHW", "NCHW")


@pytest.mark.parametrize("how", ["patch", "mirror"])
def test_issue_cases(how):
  """The helpers of JAX's convolutions page, each JAX's value of JAX's types."""
  expected = (lax.conv_dimension_numbers(LHS, RHS, SPEC), lax.padtype_to_pads(LHS[2:], RHS[2:], (1, 1), "SAME"),
              lax.broadcast_shapes((2, 1), (1, 3)), lax.dtype(1.0), lax.dtype(1))
  assert expected[0] == lax.ConvDimensionNumbers((0, 1, 2, 3), (0, 1, 2, 3), (0, 1, 2, 3))
  with tinyjax.patch() if how == "patch" else contextlib.nullcontext():
    module = lax if how == "patch" else tlax
    got = (module.conv_dimension_numbers(LHS, RHS, SPEC), module.padtype_to_pads(LHS[2:], RHS[2:], (1, 1), "SAME"),
           module.broadcast_shapes((2, 1), (1, 3)), module.dtype(1.0), module.dtype(1))
  for g, e in zip(got, expected):
    assert _same(g, e), (g, e)
  assert type(got[0]) is lax.ConvDimensionNumbers and type(got[1]) is list and got[3] == np.float32


@pytest.mark.parametrize("how", ["patch", "mirror"])
def test_convolution_given_their_results(how):
  """lax.conv_general_dilated given the helpers' results (as JAX's convolutions page does) runs on tinyjax and
  computes JAX's values, dtype and shape."""
  rng = np.random.default_rng(0)
  x, w = rng.standard_normal(LHS, np.float32), rng.standard_normal(RHS, np.float32)

  def convolve(module, x, w):
    dn = module.conv_dimension_numbers(x.shape, w.shape, SPEC)
    pads = module.padtype_to_pads(x.shape[2:], w.shape[2:], (1, 1), "SAME")
    return module.conv_general_dilated(x, w, (1, 1), pads, (1, 1), (2, 1), dn)

  expected = convolve(lax, jnp.asarray(x), jnp.asarray(w))
  if how == "patch":
    with tinyjax.patch():
      got = convolve(lax, jnp.asarray(x), jnp.asarray(w))
  else:
    got = convolve(tlax, tnp.asarray(x), tnp.asarray(w))
  assert isinstance(got, tinyjax.Array)  # computed by tinyjax, not by JAX behind its back
  assert got.shape == expected.shape and got.dtype == expected.dtype
  np.testing.assert_allclose(np.asarray(got), np.asarray(expected), rtol=1e-5, atol=1e-5)


def test_an_effect_with_no_array_result_happens_at_the_call(capfd):
  """A function that prints and answers with no array is JAX's own call: the print is not dropped with the trace."""
  def shape_seen(x):
    jax.debug.print("seen {}", x)
    return x.shape

  assert _same(tracing.call(shape_seen, (tnp.ones(2),)), (2,))
  jax.effects_barrier()
  assert "seen [1. 1.]" in capfd.readouterr().out


def test_a_result_of_no_leaves_stays_as_it_was():
  """A function run for its effect returns None (no leaves, no array): the call is appended as any, and a jitted one
  on its fast path (pending.run_alone) returns None too, not the empty tuple its trace returned."""
  returns_none = tinyjax.jit(lambda x: None)
  x = tnp.ones(3)
  assert [returns_none(x) for _ in range(3)] == [None, None, None]
