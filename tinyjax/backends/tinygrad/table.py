"""The tinygrad rule table: primitive name -> rule, filled by `register` placed right under each rule.

A rule is `rule(ctx, *operands, **params)`: operands are tinygrad Tensors (jaxpr literals arrive as constant
Tensors), params are the equation's params exactly as the jaxpr has them. It returns what `primitive.bind`
would: one Tensor, or a list for primitives with multiple results. `ctx` gives the avals and the device.
"""
import dataclasses
from typing import Any, Callable

RULES: dict[str, Callable] = {}
HOST_SYNC: set[str] = set()  # rules that read values on the host (a data-dependent loop): never captured by TinyJit


@dataclasses.dataclass(frozen=True)
class RuleContext:
  in_avals: tuple
  out_avals: tuple
  device: str
  backend: Any  # the TinygradBackend, for rules that run sub-jaxprs

  @property
  def out_aval(self):
    return self.out_avals[0]


def register(*names: str, host_sync: bool = False):
  """Decorator: `rule` implements the primitives `names` on tinygrad."""
  def decorate(rule):
    for name in names:
      assert name not in RULES, f"two tinygrad rules for {name}"
      RULES[name] = rule
      if host_sync:
        HOST_SYNC.add(name)
    return rule
  return decorate


def tg_dtype(dtype):
  """The tinygrad dtype of a NumPy/JAX dtype (KeyError for dtypes tinygrad lacks, e.g. complex or key<fry>)."""
  import numpy as np
  from tinygrad.dtype import _from_np_dtype
  try:
    return _from_np_dtype(np.dtype(dtype))
  except (TypeError, AttributeError, KeyError) as error:
    raise KeyError(str(dtype)) from error
