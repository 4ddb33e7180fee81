"""The XLA backend: JAX runs the equations (jitted, so each program compiles once). It is also the fallback
that runs, inside a tinygrad program, the segments tinygrad has no rule for."""
import collections
import time

import jax
import numpy as np
from jax.extend.core import ClosedJaxpr, DebugInfo, Jaxpr, Var, new_jaxpr_eqn
from jax.extend.core.primitives import jit_p

from tinyjax.ir import keys, profile
from tinyjax.ir.backend import Backend, Compiled, Device, DeviceNotFoundError, Placement


def available_devices() -> list[Device]:
  return [Device("xla", f"{d.platform}:{d.id}") for d in jax.devices()]


def _const(c):
  return c.value if keys.is_key(c.aval.dtype) else np.asarray(c.value, c.aval.dtype)


def as_jaxpr(eqns, in_slots, in_avals, out_atoms, n_slots) -> tuple[ClosedJaxpr, list]:
  """The equations as one jaxpr over the values in `in_slots` and then the program's constants (the second result),
  giving the values of `out_atoms`: each equation as it was traced (its avals, weak types included, its effects)."""
  slots: list = [None] * n_slots
  consts: dict[int, tuple] = {}  # id(Const) -> (its invar, its value)

  def read(atom):
    if isinstance(atom, int):
      return slots[atom]
    if id(atom) not in consts:
      consts[id(atom)] = (Var(atom.aval), _const(atom))
    return consts[id(atom)][0]

  traced_avals = dict(zip(in_slots, in_avals))  # an input as its first user traced it (weak type and all)
  for eqn in reversed(eqns):
    traced_avals.update((a, aval) for a, aval in zip(eqn.inputs, eqn.in_avals) if a in traced_avals)
  for slot in in_slots:
    slots[slot] = Var(traced_avals[slot])
  jaxpr_eqns = []
  for eqn in eqns:
    invars = [read(a) for a in eqn.inputs]
    outvars = [Var(aval) for aval in eqn.out_avals]
    for slot, var in zip(eqn.outputs, outvars):
      slots[slot] = var
    jaxpr_eqns.append(new_jaxpr_eqn(invars, outvars, eqn.primitive, eqn.params, eqn.effects))
  outvars = [read(a) for a in out_atoms]
  constvars, constants = zip(*consts.values()) if consts else ((), ())
  invars = [slots[s] for s in in_slots] + list(constvars)
  debug = DebugInfo("jit", "tinyjax segment", tuple(f"x{i}" for i in range(len(invars))),
                    tuple(f"result[{i}]" for i in range(len(outvars))))
  effects = frozenset().union(*(e.effects for e in eqns))
  return ClosedJaxpr(Jaxpr((), invars, outvars, jaxpr_eqns, effects, debug), []), list(constants)


def compile_eqns(eqns, in_slots, in_avals, out_atoms, n_slots):
  """A function from the values in `in_slots` to the values of `out_atoms`, compiled by XLA at its first call for
  where its inputs are.

  The equations reach JAX as the jaxpr they were traced into (a `jit` equation of it), not traced a second time: a
  primitive's abstract evaluation runs once, as under JAX's jit, and the lowering sees the traced avals, weak types
  included, the arguments' too. Constants enter as the outer function's, as JAX's tracing makes them. Typed PRNG keys
  enter and leave as their raw uint32 data (tinyjax.ir.keys)."""
  closed, constants = as_jaxpr(eqns, in_slots, in_avals, out_atoms, n_slots)
  n_in, n_out = len(closed.in_avals), len(closed.out_avals)
  params = dict(_JIT_PARAMS, jaxpr=closed, in_shardings=(_UNSPECIFIED,) * n_in, out_shardings=(_UNSPECIFIED,) * n_out,
                in_layouts=(None,) * n_in, out_layouts=(None,) * n_out, donated_invars=(False,) * n_in)
  # NB: the Python scalars among the constants (tinyjax folds a call's scalars into its program) enter as arguments,
  # as JAX's jit takes them: its lowering then meets their weak types before the results' types, as JAX's does
  const_avals = closed.in_avals[len(in_avals):]
  passed = [i for i, aval in enumerate(const_avals) if _a_python_scalar(aval)]
  scalars = [constants[i].item() for i in passed]

  def run(*inputs):
    values = [keys.wrap(value, aval) for value, aval in zip(inputs, in_avals)]
    consts = list(constants)
    for i, scalar in zip(passed, inputs[len(in_avals):]):
      consts[i] = scalar
    return [keys.key_data(out) for out in jit_p.bind(*values, *consts, **params)]

  arg_avals = [keys.physical_aval(a) if keys.is_key(a.dtype) else a for a in closed.in_avals[:len(in_avals)]]
  arg_avals += [const_avals[i] for i in passed]
  compiled = {}  # the inputs' shardings -> the executable XLA compiled for them

  def call(*inputs):
    inputs = (*inputs, *scalars)
    shardings = tuple(getattr(x, "sharding", None) for x in inputs)  # NB: none for NumPy's, on JAX's default device
    if shardings not in compiled:
      arg_types = [jax.ShapeDtypeStruct(a.shape, a.dtype, weak_type=a.weak_type, sharding=sharding)
                   for a, sharding in zip(arg_avals, shardings)]
      compiled[shardings] = jax.jit(run).trace(*arg_types).lower().compile()
    return compiled[shardings](*inputs)
  return call


def _a_python_scalar(aval) -> bool:
  """Whether a constant of `aval` is one a Python scalar stands for: weakly typed, of the dtype JAX gives Python's
  int, float or complex (under x64 or not)."""
  return aval.weak_type and aval.shape == () and aval.dtype in {
    jax.dtypes.canonicalize_dtype(t) for t in (np.int64, np.float64, np.complex128)}


def _jit_params_of_a_call() -> dict:
  """The parameters of a `jit` equation that JAX makes for a plain call (no shardings, layouts or donation)."""
  return dict(jax.make_jaxpr(jax.jit(lambda x: x))(0).eqns[0].params)


# NB: jax.extend has jit_p but not its parameters' defaults (UNSPECIFIED shardings): they are read from a traced call.
# Not inlined: an inlined jit is traced again, equation by equation, with its arguments' avals (weak types lost)
_JIT_PARAMS = {**_jit_params_of_a_call(), "name": "tinyjax_segment", "inline": False}
_UNSPECIFIED = _JIT_PARAMS["in_shardings"][0]


class XlaBackend(Backend):
  name = "xla"

  def __init__(self, device: str):
    choices = jax.devices()
    self._jax_device = choices[0]
    if device:
      matches = [d for d in choices if device.lower() in (d.platform, f"{d.platform}:{d.id}", str(d).lower())]
      if not matches:
        raise DeviceNotFoundError(f"XLA has no device {device!r}; available: "
                                  f"{', '.join(str(d) for d in available_devices())}")
      self._jax_device = matches[0]
    self.device = Device("xla", f"{self._jax_device.platform}:{self._jax_device.id}")

  def put(self, host):
    if profile.active is not None:
      return self._transfer_recorded(profile.active, "put", host)
    return jax.device_put(host, self._jax_device)

  def get(self, buffer):
    if profile.active is not None:
      return self._transfer_recorded(profile.active, "get", buffer)
    return np.asarray(buffer)

  def _transfer_recorded(self, recording, direction: str, value):
    """A put or get while a profile records, on the device's row. NB: a put is waited for (JAX's is asynchronous),
    so that its span is the copy's."""
    start = time.perf_counter_ns()
    moved = jax.device_put(value, self._jax_device).block_until_ready() if direction == "put" else np.asarray(value)
    host = value if direction == "put" else moved
    recording.transfer(f"XLA {self.device.name}", direction, start, np.asarray(host))
    return moved

  def wait(self, buffer):
    buffer.block_until_ready()

  def address(self, buffer):
    return buffer.unsafe_buffer_pointer()

  def why_not(self, eqn):
    return None

  def compile(self, program):
    # NB: jax.jit compiles at the first run: XLA's compile is in that run's span
    with profile.spanned("compile program", "program", backend=self.name, device=self.device.name,
                         equations=len(program.eqns)):
      return XlaProgram(self, program)


class XlaProgram(Compiled):
  """A flushed program as one jax.jit of its equations; it always runs on XLA."""

  def __init__(self, backend: XlaBackend, program):
    self.backend, self.n_eqns = backend, len(program.eqns)
    self.function = compile_eqns(program.eqns, range(len(program.in_avals)), program.in_avals, program.outputs,
                                 program.n_slots)
    self.placement = Placement(collections.Counter(("xla", e.name) for e in program.eqns),
                               ("xla",) if program.eqns else (), 0)

  def run(self, inputs):
    if profile.active is not None:
      backend = self.backend
      with profile.active.span("run program", "program", backend=backend.name, device=backend.device.name,
                               equations=self.n_eqns):
        return jax.block_until_ready(self.function(*inputs)), self.placement  # NB: waited for: the span is the run's
    return self.function(*inputs), self.placement
