"""The functions of JAX's computing modules whose result depends on an argument's value, which a trace on abstract
values cannot see: tinyjax's versions (tinyjax.identity puts them in the mirror modules, in place of the wrapped
JAX function; patch mode uses them too).

- `jnp.power` / `jnp.pow`: JAX's eager call computes a concrete integer exponent as `integer_pow` (repeated
  multiplication; an integer base with a negative exponent raises TypeError) and any other one as `pow`.
- `jnp.from_dlpack`: reads its producer's data through `__dlpack__` (an abstract value has none): it runs eagerly.
"""
import functools

import jax.numpy as jnp

from tinyjax.core import tracing


def _power(jax_power):
  """`jax_power` (jnp.power or its alias jnp.pow), with a concrete integer exponent static: one trace per exponent,
  as JAX's integer_pow is one primitive per exponent."""
  @functools.wraps(jax_power)
  def power(x1, x2, /):
    exponent = tracing.concrete_integer(x2)
    if type(exponent) is int:
      return tracing.call(tracing.integer_power, (x1,), {"exponent": exponent})
    return tracing.call(jax_power, (x1, x2))
  return power


@functools.wraps(jnp.from_dlpack)
def from_dlpack(x, /, *, device=None, copy=None):
  return tracing.eager(jnp.from_dlpack, (x,), {"device": device, "copy": copy})


# by JAX module (as tinyjax.identity names them), then name
OVERRIDES = {"numpy": {"power": _power(jnp.power), "pow": _power(jnp.pow), "from_dlpack": from_dlpack}}
