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
# Values the device carries with a trailing dimension of 2 (carried.py): typed threefry keys (`key<fry>`) as their
# raw uint32 data, complex numbers as (real, imaginary) pairs of floats.
CARRIED_AS_IS: set[str] = set()  # rules that take carried values as they are (control flow, the random rules)
LAYOUTS: dict[str, Callable] = {}  # rules that run on carried data as on real data: name -> params for it
COMPLEX_RULES: dict[str, Callable] = {}  # rules for complex operands (as pairs), used in place of RULES' rule
# Rules that run loops of steps replayed by TinyJits of their own outside a capture, and plainly inside one (every
# step scheduled by tinygrad): a program with one is captured only after a few plain runs (replay.Replayed).
STEPPED: set[str] = set()
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


def register(*names: str, host_sync: bool | Callable[..., bool] = False, carried: bool = False,
             expansion: Callable | None = None, stepped: bool = False):
  """Decorator: `rule` implements the primitives `names` on tinygrad. `host_sync`: True, or a predicate of the
  equation's params (`host_sync(**params)`); `carried`: the rule also takes carried values (typed keys, complex
  numbers) as they are; `expansion`: the rule runs the jaxpr `expansion(in_avals, **params)`; `stepped`: the rule
  runs loops of replayed steps (STEPPED)."""
  def decorate(rule):
    for name in names:
      assert name not in RULES, f"two tinygrad rules for {name}"
      RULES[name] = rule
      if host_sync:
        HOST_SYNC[name] = host_sync if callable(host_sync) else lambda **params: True
      if carried:
        CARRIED_AS_IS.add(name)
      if expansion:
        EXPANSIONS[name] = expansion
      if stepped:
        STEPPED.add(name)
    return rule
  return decorate


def holds_stepped_loops(eqns) -> bool:
  """Whether any equation, or any equation of a jaxpr in its params, runs loops of replayed steps (STEPPED)."""
  from jax.extend.core import jaxprs_in_params
  return any(eqn.primitive.name in STEPPED or any(holds_stepped_loops(j.eqns) for j in jaxprs_in_params(eqn.params))
             for eqn in eqns)


def uses_host_sync(eqns) -> bool:
  """Whether any equation, or any equation of a jaxpr in its params, reads values on the host (or replays a TinyJit
  of its own): such a program cannot be captured by TinyJit."""
  from jax.extend.core import jaxprs_in_params
  return any(HOST_SYNC.get(eqn.primitive.name, lambda **_: False)(**eqn.params)
             or any(uses_host_sync(j.eqns) for j in jaxprs_in_params(eqn.params)) for eqn in eqns)


def layout(*names: str):
  """Decorator: the primitives `names` (slice, reshape, add, reduce_sum, ...) run on carried values through their own
  rule, applied to the carried data (trailing dimension of 2) with the params that `adjust(in_avals, out_avals,
  **params)` returns (the avals are the equation's)."""
  def decorate(adjust):
    for name in names:
      LAYOUTS[name] = adjust
    return adjust
  return decorate


def takes_complex(name: str) -> bool:
  """Whether the primitive `name` runs natively on complex operands (docs/primitives.md's complex column)."""
  return name in COMPLEX_RULES or name in LAYOUTS or name in CARRIED_AS_IS


def register_complex(*names: str):
  """Decorator: `rule` implements the primitives `names` for complex operands, given as (real, imaginary) pairs
  (float[..., 2]); ctx has the equation's complex avals. RULES' rule for the name serves real operands."""
  def decorate(rule):
    for name in names:
      assert name not in COMPLEX_RULES, f"two complex rules for {name}"
      COMPLEX_RULES[name] = rule
    return rule
  return decorate


def tg_dtype(dtype):
  """The tinygrad dtype of a NumPy/JAX dtype (KeyError for dtypes tinygrad lacks, e.g. complex or key<fry>: see
  carried.py)."""
  import numpy as np
  from tinygrad.dtype import _from_np_dtype
  try:
    return _from_np_dtype(np.dtype(dtype))
  except (TypeError, AttributeError, KeyError) as error:
    raise KeyError(str(dtype)) from error
