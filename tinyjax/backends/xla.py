"""The XLA backend: JAX runs the equations (jitted, so each program compiles once). It is also the fallback
that runs, inside a tinygrad program, the segments tinygrad has no rule for."""
import collections
import time

import jax
import numpy as np

from tinyjax.ir import keys, profile
from tinyjax.ir.backend import Backend, Compiled, Device, DeviceNotFoundError, Placement
from tinyjax.ir.program import interpret


def available_devices() -> list[Device]:
  return [Device("xla", f"{d.platform}:{d.id}") for d in jax.devices()]


def bind(eqn, inputs):
  """An equation applied by JAX itself (as jax.core.eval_jaxpr binds one: a primitive that takes a function, as
  shard_map does, gets it from its jaxpr parameter)."""
  out = eqn.primitive.bind(*inputs, **eqn.primitive.get_bind_params(eqn.params))
  return out if eqn.primitive.multiple_results else [out]


def _const(c):
  return c.value if keys.is_key(c.aval.dtype) else np.asarray(c.value, c.aval.dtype)


def compile_eqns(eqns, in_slots, in_avals, out_atoms, n_slots):
  """A jitted function from the values in `in_slots` to the values of `out_atoms`.

  Typed PRNG keys enter and leave as their raw uint32 data (tinyjax.ir.keys)."""
  def run(*inputs):
    env = [None] * n_slots
    for slot, value, aval in zip(in_slots, inputs, in_avals):
      env[slot] = keys.wrap(value, aval)
    interpret(eqns, env, bind, _const)
    return [keys.key_data(env[a] if isinstance(a, int) else _const(a)) for a in out_atoms]
  return jax.jit(run)


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
    n_in, n_eqns = len(program.in_avals), len(program.eqns)
    # NB: jax.jit compiles at the first run: XLA's compile is in that run's span
    with profile.spanned("compile program", "program", backend=self.name, device=self.device.name, equations=n_eqns):
      fn = compile_eqns(program.eqns, range(n_in), program.in_avals, program.outputs, program.n_slots)
    counts = collections.Counter(("xla", e.name) for e in program.eqns)

    def run(inputs):
      if profile.active is not None:
        with profile.active.span("run program", "program", backend=self.name, device=self.device.name,
                                 equations=n_eqns):
          return jax.block_until_ready(fn(*inputs))  # NB: waited for, so that the span is the run's
      return fn(*inputs)
    return Compiled.placed(run, Placement(counts, ("xla",) if program.eqns else (), 0))
