"""Effects happen at the call, as JAX's calls make them happen, whether or not a result is ever read: jax.debug.print
inside vmap, lax.map and jit, io_callback, jax.debug.callback, in order with the program's own prints."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import io_callback

import tinyjax


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
