"""The tinygrad rule table: primitive name -> rule, filled by `register` placed right under each rule.

A rule is `rule(ctx, *operands, **params)`: operands are tinygrad Tensors (jaxpr literals arrive as constant
Tensors), params are the equation's params exactly as the jaxpr has them. It returns what `primitive.bind`
would: one Tensor, or a list for primitives with multiple results. `ctx` gives the avals and the device.
"""
import dataclasses
from typing import Any, Callable

RULES: dict[str, Callable] = {}
# Rules that read values on the host (a data-dependent loop) or replay a TinyJit of their own: a program with one
# is never captured by TinyJit. name -> whether the equation's params make it so.
HOST_SYNC: dict[str, Callable[..., bool]] = {}
KEY_RULES: set[str] = set()  # rules that take typed threefry keys (`key<fry>`), as their raw uint32 data
KEY_LAYOUTS: dict[str, Callable] = {}  # layout rules that run on a key array's raw data: name -> params for it
# Rules that run a jaxpr of their own (an expansion of the primitive, traced for the equation's avals): name ->
# expansion(in_avals, **params), the ClosedJaxpr, so that the backend claims the primitive only if that runs here.
EXPANSIONS: dict[str, Callable] = {}


@dataclasses.dataclass(frozen=True)
class RuleContext:
  in_avals: tuple
  out_avals: tuple
  device: str
  backend: Any  # the TinygradBackend, for rules that run sub-jaxprs

  @property
  def out_aval(self):
    return self.out_avals[0]


def register(*names: str, host_sync: bool | Callable[..., bool] = False, keys: bool = False,
             expansion: Callable | None = None):
  """Decorator: `rule` implements the primitives `names` on tinygrad. `host_sync`: True, or a predicate of the
  equation's params (`host_sync(**params)`); `keys`: the rule also takes typed threefry keys; `expansion`: the rule
  runs the jaxpr `expansion(in_avals, **params)`."""
  def decorate(rule):
    for name in names:
      assert name not in RULES, f"two tinygrad rules for {name}"
      RULES[name] = rule
      if host_sync:
        HOST_SYNC[name] = host_sync if callable(host_sync) else lambda **params: True
      if keys:
        KEY_RULES.add(name)
      if expansion:
        EXPANSIONS[name] = expansion
    return rule
  return decorate


def uses_host_sync(eqns) -> bool:
  """Whether any equation, or any equation of a jaxpr in its params, reads values on the host (or replays a TinyJit
  of its own): such a program cannot be captured by TinyJit."""
  from jax.extend.core import jaxprs_in_params
  return any(HOST_SYNC.get(eqn.primitive.name, lambda **_: False)(**eqn.params)
             or any(uses_host_sync(j.eqns) for j in jaxprs_in_params(eqn.params)) for eqn in eqns)


def key_layout(name: str):
  """Decorator: the layout primitive `name` (slice, reshape, ...) runs on typed keys through its own rule, applied
  to the keys' raw data (trailing key dimension) with the params that `adjust(out_avals, **params)` returns."""
  def decorate(adjust):
    KEY_LAYOUTS[name] = adjust
    return adjust
  return decorate


def tg_dtype(dtype):
  """The tinygrad dtype of a NumPy/JAX dtype (KeyError for dtypes tinygrad lacks, e.g. complex or key<fry>)."""
  import numpy as np
  from tinygrad.dtype import _from_np_dtype
  try:
    return _from_np_dtype(np.dtype(dtype))
  except (TypeError, AttributeError, KeyError) as error:
    raise KeyError(str(dtype)) from error
