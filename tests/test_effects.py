"""Effects and errors happen at the call, as JAX's calls make them happen, whether or not a result is ever read:
jax.debug.print inside vmap, lax.map and jit, io_callback, jax.debug.callback, in order with the program's own prints;
the jvp of a custom_vjp function's TypeError; the function jax.vjp returns, a pytree of its residuals as JAX's;
the user's lines in the source information of what tinyjax traced."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import io_callback

import tinyjax
from oracle import assert_like_jax


def _printed(x):
  jax.debug.print("x = {}", x)
  return x * 2


def _logged(x):
  io_callback(lambda v: print("log:", v), None, x, ordered=True)
  return jnp.sin(x)


PROGRAMS = {
  "debug.print in vmap": lambda: jax.vmap(_printed)(jnp.arange(3.0)),
  "debug.print in lax.map": lambda: jax.lax.map(_printed, jnp.arange(3.0)),
  "debug.print in jit": lambda: jax.jit(_printed)(np.float32(1.5)),
  "io_callback with no result": lambda: _logged(0.5),
  "debug.callback": lambda: jax.debug.callback(lambda v: print("hello", v), 3),
  "a print in a loop": lambda: [_printed(jnp.float32(i)) for i in range(3)],
}


@pytest.mark.parametrize("name", PROGRAMS)
def test_effects_happen_at_the_call_in_order(name, capsys):
  def run():
    print("before")
    PROGRAMS[name]()  # its results are never read
    print("after")
    jax.effects_barrier()
    return capsys.readouterr().out

  expected = run()
  with tinyjax.patch():
    actual = run()
  assert "after" in expected and actual == expected


def test_jvp_of_a_custom_vjp_function_raises_at_the_call():
  @jax.custom_vjp
  def f(x):
    return jnp.sin(x)
  f.defvjp(lambda x: (jnp.sin(x), jnp.cos(x)), lambda cos, g: (cos * g,))
  with pytest.raises(TypeError) as expected:
    jax.jvp(f, (3.0,), (1.0,))
  with tinyjax.patch(), pytest.raises(TypeError) as actual:
    jax.jvp(f, (3.0,), (1.0,))  # its result never read
  assert str(actual.value) == str(expected.value)
  expected = jax.jvp(jax.grad(f), (3.0,), (1.0,))  # the order JAX accepts: forward over the custom reverse mode
  with tinyjax.patch():
    assert_like_jax(jax.jvp(jax.grad(f), (3.0,), (1.0,)), expected)


@pytest.mark.parametrize("init", [0.0, np.float32(0.0)], ids=["python init", "numpy init"])
def test_a_reduction_over_an_axis_named_twice_raises_at_the_call(init):
  """JAX raises ValueError for lax.reduce over axes (0, 0), eagerly (its shape rule) and under jit (its lowering);
  tinyjax at the call, its result never read."""
  x = np.ones((2, 3), np.float32)
  with pytest.raises(ValueError) as expected:
    jax.lax.reduce(x, init, jax.lax.add, (0, 0))
  with tinyjax.patch(), pytest.raises(ValueError) as actual:
    jax.lax.reduce(x, init, jax.lax.add, (0, 0))
  assert str(actual.value) == str(expected.value)


def test_the_function_vjp_returns_is_a_pytree_of_its_residuals():
  def program():
    _, vjp_fun = jax.vjp(lambda x: jnp.sin(x) * x, jnp.arange(3.0))
    return (len(jax.tree_util.tree_leaves(vjp_fun)), jax.jit(lambda f, c: f(c))(vjp_fun, jnp.ones(3)),
            jax.tree_util.tree_map(lambda a: a * 0, vjp_fun)(jnp.ones(3)))
  expected = program()
  with tinyjax.patch():
    actual = program()
  assert_like_jax(actual, expected)


def test_saved_residuals_name_the_users_lines(capsys):
  from jax.ad_checkpoint import print_saved_residuals

  def f(x):
    return jnp.cos(jnp.sin(x)) * x

  print_saved_residuals(f, jnp.ones(3))
  expected = capsys.readouterr().out
  with tinyjax.patch():
    print_saved_residuals(f, jnp.ones(3))
  actual = capsys.readouterr().out
  assert "test_effects.py" in expected and actual == expected
