"""JAX's custom element types (extended dtypes other than PRNG keys) inside a program: JAX's own lowering gives their
physical form, so tinyjax hands the call to JAX, and the report says so."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax
from jax._src import core, dtypes  # NB: a custom element type is made with JAX's internals only
from jax._src.interpreters import mlir

import tinyjax
from oracle import assert_like_jax


class _SignedPairRules:
  @staticmethod
  def physical_element_aval(dtype):
    return core.ShapedArray((2,), np.dtype("float32"))


class SignedPair(dtypes.ExtendedDType):
  """A value and its negation, stored side by side."""
  type = dtypes.extended
  name = "signed_pair"
  _rules = _SignedPairRules

  def __hash__(self):
    return hash(SignedPair)

  def __eq__(self, other):
    return type(other) is SignedPair


pair_p, first_p = core.Primitive("make_signed_pair"), core.Primitive("first_of_signed_pair")
pair_p.def_abstract_eval(lambda x: core.ShapedArray(x.shape, SignedPair()))
first_p.def_abstract_eval(lambda p: core.ShapedArray(p.shape, np.dtype("float32")))


def _on_physical_values(fn):
  """A lowering of fn, which computes on the physical forms (a SignedPair as float32[..., 2])."""
  lowered = mlir.lower_fun(fn, multiple_results=False)
  return lambda ctx, *args: lowered(ctx.replace(avals_in=[core.physical_aval(a) for a in ctx.avals_in],
                                                avals_out=[core.physical_aval(a) for a in ctx.avals_out]), *args)


mlir.register_lowering(pair_p, _on_physical_values(lambda x: jnp.stack([x, -x], axis=-1)))
mlir.register_lowering(first_p, _on_physical_values(lambda p: (p[..., 0] - p[..., 1]) / 2))

PROGRAMS = {
  "made_and_taken": lambda x: jnp.sin(first_p.bind(pair_p.bind(x))),
  "sliced": lambda x: first_p.bind(lax.slice_in_dim(pair_p.bind(x), 1, 3)) * 2,
  "reversed": lambda x: first_p.bind(lax.rev(pair_p.bind(x), (0,))) + x,
}


@pytest.mark.parametrize("name", PROGRAMS)
def test_a_program_with_a_custom_element_type_runs_on_jax(name):
  x = np.array([0.5, -2.0, np.inf, -0.0], np.float32)
  before = tinyjax.report().eager.copy()
  actual = tinyjax.jit(PROGRAMS[name])(x)
  assert_like_jax(actual, jax.jit(PROGRAMS[name])(x))
  assert tinyjax.report().eager - before, "the call is not in the report as JAX's"
