"""The tinygrad backend: each equation's rule builds lazy tinygrad Tensors, and one realize at the end of the
program lets tinygrad fuse them into few kernels. A program that runs wholly on tinygrad is captured by TinyJit on
its second run (its fifth if it holds a factorization) and replayed after that; equations without a rule run as XLA
segments.

The parts, in the order a flush uses them: device.py (the device, data in and out), plan.py (what runs where, the
segments), the rule table (table.py, filled by the rule modules), replay.py (realize, capture, replay) and
program.py (a compiled program's states: built, launched, rescued by XLA when tinygrad cannot compile a kernel).
"""
import functools
import time

import numpy as np
from tinygrad import Tensor

from tinyjax.backends.tinygrad.machinery import depth, device, plan
from tinyjax.backends.tinygrad.numerics import carried, rounding
from tinyjax.backends.tinygrad.rules import (  # noqa: F401  (each module fills the rule table)
  complexmath, contraction, control_flow, eigen, elementwise, fft, indexing, linalg, random, reduction, shape, sorting,
  special)
from tinyjax.backends.tinygrad.machinery.amendments import amend, kernel_context, kernels_timed
from tinyjax.backends.tinygrad.machinery.replay import Chained, Replayed, realized
from tinyjax.backends.tinygrad.machinery.program import TinygradProgram
from tinyjax.backends.tinygrad.machinery.split import SplitReplay, Splittable, is_split
from tinyjax.backends.tinygrad.machinery.runtimes import locate_dawn
from tinyjax.backends.tinygrad.table import COMPLEX_RULES, LAYOUTS, RULES, RuleContext, tg_dtype
from tinyjax.ir import float64, profile
from tinyjax.ir.backend import Backend, Placement
from tinyjax.ir.spmd import split_axis
from tinyjax.ir.program import interpret, read_outputs

locate_dawn()  # importing tinygrad opens no device: this is before its WEBGPU device looks for Dawn
amend()  # before any kernel: tinygrad compiles its rules at their first use
profile.instrument(kernels_timed)  # after amend(): a profile's timing wraps the amended functions


# A program that runs loops of replayed steps (table.STEPPED: the factorizations) runs plainly this many times before
# TinyJit captures it: plainly, the steps are replays of TinyJits shared by every program (a 48x48 solve: ~0.3 s);
# captured, each step is scheduled by tinygrad once (~5 s), which pays off only for a program run again and again
# (replayed: ~0.08 s). JAX's own tests call each program three times.
STEPPED_PLAIN_RUNS = 4

# tinygrad's own dtypes, which every device of it computes: `supports_dtype` runs no kernel to tell
EVERY_DEVICE_COMPUTES = frozenset(map(np.dtype, (np.bool_, np.int32, np.float32)))


def _all_empty(avals) -> bool:
  """Whether an equation's outputs are all empty arrays (a zero in each shape)."""
  return bool(avals) and all(0 in getattr(a, "shape", (1,)) for a in avals)


class TinygradBackend(Backend):
  name = "tinygrad"
  cuts_long_flushes = True  # NB: tinygrad rewrites a program's fused graph in time that grows faster than its size

  def __init__(self, device_name: str):
    self.tg_device, self.device = device.opened(device_name)
    # over a device set (a mesh's devices, "CPU:0,CPU:1"): its Tensors are tinygrad's multi-device Tensors, split
    # along one axis or copied on each device, and tinygrad runs each kernel on every device's block
    self.spans_devices = isinstance(self.tg_device, tuple)
    self.kind = (self.tg_device[0] if self.spans_devices else self.tg_device).partition(":")[0]
    # tinygrad settings its kernels are made under: EMULATED_DTYPES (from the probes), and DEV, the device of
    # tinygrad's own device-less constants (`const_like`). NB: without DEV, the first of those in a process makes
    # tinygrad choose its default device, which opens every runtime it knows (most of a warm start's time)
    self.contexts: dict[str, str] = {"DEV": self.kind}
    # False once this backend queued work (a copy in, a program's run: each buffer a Value holds comes from one)
    # that no synchronization has waited for since: a wait with nothing queued skips the device's synchronize,
    # which costs more than a small program's launch (4 us on the CPU device)
    self.idle = True

  # --- moving data
  def put(self, host, sharding=None):
    """A host array (any layout, read-only or not, 0-d or empty) as a buffer on this device; over a device set,
    split as `sharding` (a NamedSharding on the mesh of those devices) splits it, or copied on each device.

    NB: the copy reads the array through its buffer protocol: OpenCL's copy needs a writable one (a jax.Array's is
    read-only), and a 0-d array would become a constant with no buffer (it travels as 1 element)."""
    if profile.active is not None:
      return self._transfer_recorded(profile.active, "put", functools.partial(self._put, sharding=sharding), host)
    return self._put(host, sharding)

  def _put(self, host, sharding=None):
    host = np.require(host, requirements=["C", "W"])  # NB: np.ascontiguousarray makes a 0-d array 1-d
    if not self.supports_dtype(host.dtype):  # NB: the device cannot compute it: only XLA segments read it
      return host
    data = carried.to_pairs(host) if carried.is_complex(host.dtype) else host
    self.idle = False
    if self.spans_devices:  # NB: the split is a kernel on each device, made as a program's kernels are
      with kernel_context(**self.contexts):
        return device.split(data, self.tg_device, split_axis(sharding, len(self.tg_device))).realize()
    buffer = device.written(data, self.tg_device)
    device.release_copied_hosts(self.tg_device)
    return carried.PairBuffer(buffer, host.dtype) if data is not host else buffer

  def get(self, buffer):
    if profile.active is not None:
      return self._transfer_recorded(profile.active, "get", self._get, buffer)
    return self._get(buffer)

  def _get(self, buffer):
    if isinstance(buffer, carried.PairBuffer):
      return carried.from_pairs(device.copied_out(buffer.pairs), buffer.dtype)
    return buffer if isinstance(buffer, np.ndarray) else device.copied_out(buffer)

  def _transfer_recorded(self, recording, direction: str, move, value):
    """A put or get while a profile records, on the device's row (nothing moves for a host array of a dtype the
    device lacks). NB: a copy in is waited for, so that its span is the copy's, not its enqueueing."""
    start = time.perf_counter_ns()
    moved = move(value)
    host, buffer = (value, moved) if direction == "put" else (moved, value)
    if isinstance(buffer, np.ndarray):
      return moved
    if direction == "put":
      device.synchronize(self.tg_device)
    recording.transfer(self.device.name, direction, start, np.asarray(host))
    return moved

  def is_split(self, buffer) -> bool:
    return self.spans_devices and is_split(buffer)

  def wait(self, buffer):
    if not self.idle and not isinstance(buffer, np.ndarray):
      self.idle = True  # NB: before the synchronize: work another thread queues meanwhile makes it False again
      device.synchronize(self.tg_device)

  def address(self, buffer):
    if isinstance(buffer, np.ndarray):  # NB: a dtype the device lacks stays on the host
      return buffer.ctypes.data
    found = None if self.spans_devices else device.address(carried.unwrapped(buffer))
    return super().address(buffer) if found is None else found

  def const(self, c):
    return device.constant(c, self.tg_device)

  # --- what runs here
  def why_not(self, eqn) -> str | None:
    return plan.why_not(eqn, self.supports_dtype)

  @functools.cache
  def supports_dtype(self, dtype) -> bool:
    """Whether the device computes this dtype: checked once by running a small kernel in it; a 16-bit float that the
    device's compiler rejects (bfloat16 under clang before 17) is computed by tinygrad's emulation, in float32 on its
    16 stored bits, if that runs."""
    if carried.is_complex(dtype):  # as pairs of its parts
      return self.supports_dtype(carried.real_dtype(dtype))
    if np.dtype(dtype) in EVERY_DEVICE_COMPUTES:  # no probe: its kernel was ~0.1 s of a cold process's first call
      return True
    try:
      dt = tg_dtype(dtype)
    except KeyError:
      return False
    if device.runs_kernel_in(dt, self.tg_device):
      return True
    if (name := rounding.ROUNDED.get(dt)) and device.runs_kernel_in(dt, self.tg_device, EMULATED_DTYPES=name):
      self.contexts["EMULATED_DTYPES"] = ",".join(filter(None, [self.contexts.get("EMULATED_DTYPES"), name]))
      return True
    return False

  def apply(self, eqn, inputs):
    if _all_empty(eqn.out_avals):  # nothing to compute (a rule's loop would still run its steps on no data)
      return [Tensor.zeros(a.shape, dtype=tg_dtype(a.dtype), device=self.tg_device)
              for a in map(carried.carried_aval, eqn.out_avals)]
    in_avals, out_avals, params = eqn.in_avals, eqn.out_avals, eqn.params
    rule, carries = RULES.get(eqn.name), carried.carries(eqn)
    if carries:
      if eqn.name in COMPLEX_RULES:
        rule = COMPLEX_RULES[eqn.name]
      elif eqn.name in LAYOUTS:  # NB: on the carried data, which has a trailing dimension of 2
        in_avals, out_avals = [tuple(map(carried.carried_aval, avals)) for avals in (in_avals, out_avals)]
        params = LAYOUTS[eqn.name](eqn.in_avals, eqn.out_avals, **params)
    out = rule(RuleContext(in_avals, out_avals, self.tg_device, self), *inputs, **params)
    out = out if eqn.primitive.multiple_results else [out]
    if carries and eqn.name in LAYOUTS:  # moves values: nothing to round
      return out
    # NB: a 16-bit float result is rounded here, after each operation as XLA rounds it (see rounding.py)
    return [t if isinstance(t, np.ndarray) or t.dtype not in rounding.ROUNDED else rounding.rounded(t) for t in out]

  def interpret(self, eqns, env):
    """Run native equations on the slot environment, lazily."""
    interpret(eqns, env, apply=depth.Bounded(self.apply), const=self.const)

  @functools.lru_cache(maxsize=1024)
  def plan_of(self, program) -> plan.Plan:
    return plan.plan(program, self)

  def capturable(self, closed_jaxpr) -> bool:
    """Whether TinyJit can capture runs of a ClosedJaxpr (a loop body): wholly native, and no host reads."""
    return self.plan_of(plan.cached_program_of(closed_jaxpr)).jittable

  def run_jaxpr(self, closed_jaxpr, *args) -> list:
    """Run a ClosedJaxpr on Tensors, lazily (control-flow bodies, the `tiny` decorator); XLA runs what has no rule."""
    return self.run_lazily(plan.cached_program_of(closed_jaxpr), list(args))

  def run_lazily(self, program, inputs: list) -> list:
    """The program's outputs as lazy Tensors (host arrays for dtypes the device lacks), nothing realized."""
    env = [None] * program.n_slots
    env[:len(inputs)] = inputs
    for step in self.plan_of(program).steps:
      step(env)
    return read_outputs(program, env, self.const)

  def runner(self, program):
    """inputs -> the program's outputs, realized; a program TinyJit can capture is replayed after its capture."""
    def lazy(inputs):
      return self.run_lazily(program, inputs)

    def run(inputs):
      # NB: computed outputs are made contiguous, so each is a buffer of its own (or a reshape of one)
      outs = [t if isinstance(a, int) and a < len(inputs) or isinstance(t, np.ndarray) else t.contiguous()
              for a, t in zip(program.outputs, lazy(inputs))]
      return realized(outs, self.tg_device)

    planned = self.plan_of(program)
    if self.spans_devices:
      replayable = planned.jittable and not planned.stepped
      split = SplitReplay(run, lazy, program, self.const, self.tg_device) if replayable else run
      return Splittable(split, lambda: self.first_device.runner(program), self.tg_device)
    if not planned.jittable:
      return run
    return Replayed(run, lazy, program, self.const, plain_runs=STEPPED_PLAIN_RUNS if planned.stepped else 1)

  def chain(self, steps, n_inputs, outputs, released):
    """The programs as one list of launches (replay.Chained), once the launcher runs each of them."""
    plans = [compiled.launch_plan() if isinstance(compiled, TinygradProgram) else None for compiled, _, _ in steps]
    if None in plans:
      return None
    chained = Chained(plans, [inputs for _, inputs, _ in steps], n_inputs, outputs, released)

    def run(inputs):
      if not chained.synchronous:
        self.idle = False
      return chained(inputs)
    return run

  @functools.cached_property
  def first_device(self) -> "TinygradBackend":
    """Over a device set: the backend of its first device, which runs what tinygrad cannot split over the set."""
    return TinygradBackend(self.tg_device[0])

  # --- compiling a flushed program
  def compile(self, program):
    if float64.downcasting(self) and (narrow := float64.downcast(program)) is not program:
      return float64.Widened(self, self.compile(narrow), program)  # NB: TINYJAX_F64=downcast computes in float32
    # NB: tinygrad compiles the kernels at the program's first run: their compiles are in that run's span
    with profile.spanned("compile program", "program", backend=self.name, device=self.device.name,
                         equations=len(program.eqns)):
      planned = self.plan_of(program)
      placement = Placement(planned.counts, planned.segments, planned.bytes_crossed)
      return TinygradProgram(self, self.runner(program), program, placement)
