"""TINYJAX_F64: what float64 (with jax_enable_x64) does on a device that lacks it.

Where the device computes float64 (tinygrad's CPU does; `supports_dtype` probes), float64 is computed in float64 and
this policy is never consulted. Elsewhere:
- "error" (the default): the call that would compute in float64 raises `Float64Error` (`selection.check_fallback`);
- "downcast": the flushed program is rewritten with float32 in place of float64 (avals, dtype params, constants and
  the jaxprs of control-flow primitives) and runs natively; arrays stay float64 to the user, their values converted
  on the way in and out.

NB: never a silent XLA fallback for float64 as a whole: running every float64 operation on the host's XLA while the
rest runs on the device would move each value across at every flush, which is rarely what a user of a GPU wants.
The XLA backend (TINYJAX_BACKEND=xla) is the way to get true float64 there.
"""
import dataclasses
import functools
import weakref

import jax
import numpy as np
from jax.extend.core import ClosedJaxpr, jaxprs_in_params, primitives

from tinyjax import config
from tinyjax.ir.backend import Compiled
from tinyjax.ir.program import Const, Eqn, Program, interpret, program_of, read_outputs

F64, F32 = np.dtype(np.float64), np.dtype(np.float32)
NARROWER = {F64: F32, np.dtype(np.complex128): np.dtype(np.complex64)}  # what downcast computes each wide dtype in
# Primitives whose result depends on the bit layout of float64 (jax.random's float64 samples are built this way):
# under downcast they keep float64, so XLA runs them, with conversions from and to float32 around them.
BIT_LAYOUT = frozenset({"bitcast_convert_type"})
_downcast: weakref.WeakSet = weakref.WeakSet()  # programs `downcast` made: their float64 is what must stay float64


def lacks_float64(backend) -> bool:
  return not backend.supports_dtype(F64)


def downcasting(backend) -> bool:
  """Whether float64 is computed in float32 on this backend now (TINYJAX_F64=downcast and no float64 here)."""
  return lacks_float64(backend) and config.validated("f64") == "downcast"


def uses_float64(eqn) -> bool:
  """Whether an equation (of a Program or of a jaxpr) computes in float64, itself or in a jaxpr of its params."""
  in_avals = eqn.in_avals if isinstance(eqn, Eqn) else [v.aval for v in eqn.invars]
  out_avals = eqn.out_avals if isinstance(eqn, Eqn) else [v.aval for v in eqn.outvars]
  return (any(a.dtype in NARROWER for a in (*in_avals, *out_avals))
          or any(uses_float64(e) for jaxpr in jaxprs_in_params(eqn.params) for e in jaxpr.eqns))


def narrow_eqn(eqn: Eqn) -> Eqn | None:
  """The equation computing in float32 where it computed in float64 (itself if it has no float64); None for an
  equation that must keep float64 (BIT_LAYOUT)."""
  if not uses_float64(eqn):
    return eqn
  if eqn.name in BIT_LAYOUT:
    return None
  return dataclasses.replace(eqn, params={k: _narrow(v) for k, v in eqn.params.items()},
                             inputs=tuple(map(_narrow_atom, eqn.inputs)), in_avals=tuple(map(_narrow, eqn.in_avals)),
                             out_avals=tuple(map(_narrow, eqn.out_avals)))


def downcast(program: Program) -> Program:
  """The program computing in float32 where it computed in float64 (the same object if it has no float64, or if
  `downcast` made it)."""
  if program in _downcast or (not any(a.dtype in NARROWER for a in program.in_avals)
                              and not any(map(uses_float64, program.eqns))):
    return program
  eqns, n_slots = [], program.n_slots
  for eqn in program.eqns:
    if (narrow := narrow_eqn(eqn)) is not None:
      eqns.append(narrow)
      continue
    # NB: kept in float64: its float32 operands are widened before it and its float64 results narrowed after it
    inputs, outputs, narrowing = list(eqn.inputs), list(eqn.outputs), []
    for i, (atom, aval) in enumerate(zip(eqn.inputs, eqn.in_avals)):
      if isinstance(atom, int) and aval.dtype in NARROWER:
        inputs[i], n_slots = n_slots, n_slots + 1
        eqns.append(_convert(atom, inputs[i], _narrow(aval), aval, eqn.source))
    for i, (slot, aval) in enumerate(zip(eqn.outputs, eqn.out_avals)):
      if aval.dtype in NARROWER:
        outputs[i], n_slots = n_slots, n_slots + 1
        narrowing.append(_convert(outputs[i], slot, aval, _narrow(aval), eqn.source))
    eqns += [dataclasses.replace(eqn, inputs=tuple(inputs), outputs=tuple(outputs)), *narrowing]
  narrow = Program(tuple(map(_narrow, program.in_avals)), tuple(eqns), tuple(map(_narrow_atom, program.outputs)),
                   n_slots)
  _downcast.add(narrow)
  return narrow


class Widened(Compiled):
  """`compiled`, the downcast `program`, run on `program`'s buffers: float64 inputs (host arrays, which is how the
  backend keeps a dtype its device lacks) enter as float32, float64 outputs leave as float64 host arrays."""

  def __init__(self, backend, compiled: Compiled, program: Program):
    self.backend, self.compiled = backend, compiled
    avals = dict(enumerate(program.in_avals))
    avals.update((s, a) for e in program.eqns for s, a in zip(e.outputs, e.out_avals))
    self.wide_in = {i for i, a in enumerate(program.in_avals) if a.dtype in NARROWER}
    self.wide_out = {i: aval.dtype for i, a in enumerate(program.outputs)
                     if (aval := avals[a] if isinstance(a, int) else a.aval).dtype in NARROWER}

  def run(self, inputs):
    backend, wide_out = self.backend, self.wide_out
    outs, placement = self.compiled.run([backend.put(_narrowed(backend.get(x))) if i in self.wide_in else x
                                         for i, x in enumerate(inputs)])
    # NB: downcast values are float32 on the device; read as the float64 arrays the program promised
    return [np.asarray(backend.get(x), wide_out[i]) if i in wide_out else x for i, x in enumerate(outs)], placement


def _narrowed(value) -> np.ndarray:
  value = np.asarray(value)
  with np.errstate(over="ignore"):  # NB: beyond float32's range is infinity, as float32 arithmetic would make it
    return value.astype(NARROWER.get(value.dtype, value.dtype))


def _convert(source: int, target: int, from_aval, to_aval, where: str) -> Eqn:
  params = {"new_dtype": to_aval.dtype, "weak_type": to_aval.weak_type, "sharding": None}
  return Eqn(primitives.convert_element_type_p, params, (source,), (target,), (from_aval,), (to_aval,), where)


def _narrow(x):
  """A param or aval with float32 for float64 (complex64 for complex128); jaxprs in params are traced again."""
  if isinstance(x, np.dtype):
    return NARROWER.get(x, x)
  if isinstance(x, jax.core.ShapedArray):
    return x.update(dtype=NARROWER[x.dtype]) if x.dtype in NARROWER else x
  if isinstance(x, ClosedJaxpr):
    return _narrow_closed(x)
  if isinstance(x, tuple):
    items = tuple(map(_narrow, x))
    return x._make(items) if hasattr(x, "_make") else items  # namedtuples (custom_linear_solve's jaxprs) stay so
  return x


def _narrow_atom(atom):
  if isinstance(atom, Const) and atom.aval.dtype in NARROWER:
    return Const(_narrowed(atom.value), _narrow(atom.aval))
  return atom


@functools.lru_cache(maxsize=512)
def _narrow_closed(closed: ClosedJaxpr) -> ClosedJaxpr:
  """The jaxpr traced again from its downcast program (calls inlined, BIT_LAYOUT kept in float64)."""
  if not any(map(uses_float64, closed.jaxpr.eqns)) and not any(v.aval.dtype in NARROWER for v in closed.jaxpr.invars):
    return closed
  program = downcast(program_of(closed))
  specs = [jax.ShapeDtypeStruct(a.shape, a.dtype, weak_type=a.weak_type) for a in program.in_avals]
  return jax.make_jaxpr(lambda *args: _bound(program, args))(*specs)


def _bound(program: Program, args) -> list:
  """The program's equations bound on JAX tracers."""
  env = [None] * program.n_slots
  env[:len(args)] = args
  interpret(program.eqns, env, apply=_bind, const=_value)
  return read_outputs(program, env, _value)


def _bind(eqn, inputs) -> list:
  out = eqn.primitive.bind(*inputs, **eqn.params)
  return out if eqn.primitive.multiple_results else [out]


def _value(const: Const):
  return const.value
