"""The tinygrad backend: each equation's rule builds lazy tinygrad Tensors, and one realize at the end of the
program lets tinygrad fuse them into few kernels. A program that runs wholly on tinygrad is captured by
TinyJit on its second run and replayed after that; equations without a rule run as XLA segments."""
import collections
import contextlib
import ctypes
import dataclasses
import functools
import os
import subprocess
import sys
import warnings

import ml_dtypes
import numpy as np

from tinyjax import config
from tinyjax.backends import float64, mixed, xla
from tinyjax.ir.backend import (Backend, Compiled, Device, DeviceNotFoundError, FallbackError,
                                   FallbackWarning)
from tinyjax.backends.tinygrad import (  # noqa: F401  (each module fills the rule table)
  contraction, control_flow, elementwise, indexing, linalg, random, reduction, rounding, shape, sorting, special)
from tinyjax.backends.tinygrad import depth
from tinyjax.backends.tinygrad.table import (EXPANSIONS, KEY_LAYOUTS, KEY_RULES, RULES, RuleContext, tg_dtype,
                                             uses_host_sync)
from jax.extend.core import ClosedJaxpr

from tinyjax.backends.tinygrad.amendments import amend, kernel_context
from tinyjax.backends.tinygrad.runtimes import locate_dawn
from tinyjax.ir import keys
from tinyjax.ir.program import interpret, program_of, read_outputs

locate_dawn()  # importing tinygrad opens no device: this is before its WEBGPU device looks for Dawn
amend()  # before any kernel: tinygrad compiles its rules at their first use

@dataclasses.dataclass(frozen=True)
class Plan:
  steps: list
  counts: collections.Counter
  segments: list
  bytes_crossed: int
  jittable: bool  # wholly native and no host reads: TinyJit can capture it


# NB: NumPy's buffer protocol cannot carry these (bfloat16 is its 'E'): their bits cross as unsigned ints of their width
_CARRIED_AS_BITS = {np.dtype(ml_dtypes.bfloat16): np.dtype(np.uint16)}
OLD_NAMES = {"CLANG": "CPU", "GPU": "CL", "LLVM": "CPU:LLVM"}  # NB: tinygrad renamed these devices


def canonical(device: str) -> str:
  """tinygrad's name of a device string: old names renamed, upper case, no ":0" (CLANG, cpu:0 and CPU are "CPU")."""
  head, sep, tail = device.upper().partition(":")
  name = OLD_NAMES.get(head, head) + (sep + tail if sep and not OLD_NAMES.get(head, "").count(":") else "")
  return name.removesuffix(":0")


def available_devices() -> list[Device]:
  from tinygrad import Device as TgDevice
  return [Device("tinygrad", name) for name in TgDevice.get_available_devices()]


_PENDING_COPIES_KEPT = 64


class TinygradBackend(Backend):
  name = "tinygrad"

  def __init__(self, device: str):
    from tinygrad import Device as TgDevice
    requested = canonical(device) if device else None
    try:
      name = requested.partition(":")[0] if requested else TgDevice.DEFAULT
      TgDevice[name]
    except Exception as error:
      available = ", ".join(d.name for d in available_devices()) or "none"
      wanted = device or f"DEV={os.environ['DEV']}" if device or os.environ.get("DEV") else "(tinygrad's default)"
      raise DeviceNotFoundError(f"tinygrad device {wanted!r} is not available here ({error}); available: "
                                f"{available}") from None
    self.tg_device = name
    self.device = Device("tinygrad", requested or name)
    self.contexts: dict[str, str] = {}  # tinygrad settings its kernels compile under (EMULATED_DTYPES, from probes)

  # --- moving data
  def put(self, host):
    """A host array (any layout, read-only or not, 0-d or empty) as a buffer on this device.

    NB: the copy reads the array through its buffer protocol: OpenCL's copy needs a writable one (a jax.Array's is
    read-only), and a 0-d array would become a constant with no buffer (it travels as 1 element)."""
    host = np.require(host, requirements=["C", "W"])  # NB: np.ascontiguousarray makes a 0-d array 1-d
    if not self.supports_dtype(host.dtype):  # NB: the device cannot compute it: only XLA segments read it
      return host
    buffer = self._copy_in(host).realize()
    self._release_copied_hosts()
    return buffer

  def _release_copied_hosts(self):
    """NB: tinygrad's OpenCL runtime keeps each host array it copies from until its queue is synchronized
    (ops_cl.py, pending_copyin): a training loop that passes NumPy batches to every call and reads no result grew
    by a batch a step. A synchronization every _PENDING_COPIES_KEPT copies frees them."""
    from tinygrad import Device
    if len(getattr(Device[self.tg_device], "pending_copyin", ())) > _PENDING_COPIES_KEPT:
      Device[self.tg_device].synchronize()

  def _copy_in(self, host):
    """A C-contiguous, writable host array as a lazy copy on the device."""
    from tinygrad import Tensor
    if host.dtype in _CARRIED_AS_BITS:  # NB: a bitcast on the device would be a kernel, which may flush subnormals
      return Tensor(host.tobytes(), dtype=tg_dtype(host.dtype), device=self.tg_device).reshape(host.shape)
    return Tensor(host.reshape(host.shape or (1,)), device=self.tg_device).reshape(host.shape)

  def get(self, buffer):
    if isinstance(buffer, np.ndarray):
      return buffer
    for host_dtype, carrier in _CARRIED_AS_BITS.items():
      if buffer.dtype == tg_dtype(host_dtype):
        return buffer.bitcast(tg_dtype(carrier)).numpy().view(host_dtype)
    return buffer.numpy()

  def wait(self, buffer):
    from tinygrad import Device
    if not isinstance(buffer, np.ndarray):
      Device[self.tg_device].synchronize()

  def address(self, buffer):
    if isinstance(buffer, np.ndarray):  # NB: a dtype the device lacks stays on the host
      return buffer.ctypes.data
    raw = buffer.uop.buffer.ensure_allocated()._buf
    # NB: each runtime has its own handle: an HCQ buffer (CPU, NV, AMD) has a virtual address, OpenCL's is a cl_mem
    if hasattr(raw, "va_addr"):
      return raw.va_addr
    try:
      return ctypes.cast(raw, ctypes.c_void_p).value
    except (TypeError, ctypes.ArgumentError):
      return super().address(buffer)

  def const(self, c):
    from tinygrad import Tensor
    value = np.asarray(keys.key_data(c.value)) if keys.is_key(c.aval.dtype) else np.asarray(c.value, c.aval.dtype)
    if value.ndim == 0:  # a constant in the kernels' code (it has no device: it takes its operands')
      return Tensor(value.item(), dtype=tg_dtype(value.dtype), device=self.tg_device)
    return self._copy_in(np.require(value, requirements=["C", "W"]))

  # --- what runs here
  def supports(self, eqn) -> bool:
    if eqn.name not in RULES:
      return False
    takes_keys = eqn.name in KEY_RULES or eqn.name in KEY_LAYOUTS
    if not all(self.supports_dtype(a.dtype) or (takes_keys and keys.is_threefry(a.dtype))
               for a in eqn.in_avals + eqn.out_avals):
      return False
    # a control-flow rule runs its sub-jaxprs here, an expanded primitive its expansion: unless they are wholly
    # native, XLA runs the whole primitive
    subs = _closed_jaxprs_in(eqn.params)
    if eqn.name in EXPANSIONS:
      subs.append(EXPANSIONS[eqn.name](eqn.in_avals, **eqn.params))
    return all(self.supports(e) for sub in subs for e in _program_of(sub).eqns)

  @functools.cache
  def supports_dtype(self, dtype) -> bool:
    """Whether the device computes this dtype: checked once by running a small kernel in it; a 16-bit float that the
    device's compiler rejects (bfloat16 under clang before 17) is computed by tinygrad's emulation, in float32 on its
    16 stored bits, if that runs."""
    try:
      dt = tg_dtype(dtype)
    except KeyError:
      return False
    if self._probe(dt):
      return True
    if (name := rounding.ROUNDED.get(dt)) and self._probe(dt, EMULATED_DTYPES=name):
      self.contexts["EMULATED_DTYPES"] = ",".join(filter(None, [self.contexts.get("EMULATED_DTYPES"), name]))
      return True
    return False

  def _probe(self, dt, **context) -> bool:
    """Whether a small kernel in `dt` runs under tinygrad's `context`."""
    from tinygrad import Tensor
    from tinygrad.helpers import Context
    try:
      with Context(**context), _compiler_messages_silenced():
        probe = Tensor([1, 2], dtype=dt, device=self.tg_device) + Tensor([1, 0], dtype=dt, device=self.tg_device)
        return probe.numpy().shape == (2,)
    except Exception:
      return False

  def apply(self, eqn, inputs):
    in_avals, out_avals, params = eqn.in_avals, eqn.out_avals, eqn.params
    if eqn.name in KEY_LAYOUTS and any(keys.is_key(a.dtype) for a in in_avals + out_avals):
      # NB: a layout primitive on typed keys moves their raw data, which has a trailing key dimension
      in_avals, out_avals = [tuple(keys.physical_aval(a) if keys.is_key(a.dtype) else a for a in avals)
                             for avals in (in_avals, out_avals)]
      params = KEY_LAYOUTS[eqn.name](eqn.out_avals, **params)
    ctx = RuleContext(in_avals, out_avals, self.tg_device, self)
    out = RULES[eqn.name](ctx, *inputs, **params)
    out = out if eqn.primitive.multiple_results else [out]
    if eqn.name in KEY_LAYOUTS:  # moves values: nothing to round
      return out
    # NB: a 16-bit float result is rounded here, after each operation as XLA rounds it (see rounding.py)
    return [t if isinstance(t, np.ndarray) or t.dtype not in rounding.ROUNDED else rounding.rounded(t) for t in out]

  def capturable(self, closed_jaxpr) -> bool:
    """Whether TinyJit can capture runs of a ClosedJaxpr (a loop body): wholly native, and no host reads."""
    return self.plan(_program_of(closed_jaxpr)).jittable

  def run_jaxpr(self, closed_jaxpr, *args) -> list:
    """Run a ClosedJaxpr on Tensors, lazily (control-flow bodies, the `tiny` decorator); XLA runs what has no rule."""
    program = _program_of(closed_jaxpr)
    return self._execute(program, self.plan(program).steps, list(args))

  def _execute(self, program, steps, inputs) -> list:
    env = [None] * program.n_slots
    env[:len(inputs)] = inputs
    for step in steps:
      step(env)
    return read_outputs(program, env, self.const)

  @functools.lru_cache(maxsize=1024)
  def plan(self, program) -> "Plan":
    """The program's segments as steps on the slot environment, and what one run executes where."""
    avals = dict(enumerate(program.in_avals))
    avals.update((s, a) for e in program.eqns for s, a in zip(e.outputs, e.out_avals))
    segments = mixed.partition(program, self.supports)
    steps, crossed = [], 0
    for segment in segments:
      if segment.native:
        steps.append(functools.partial(self._native_step, segment.eqns))
      else:
        crossed += mixed.crossing_bytes(segment, avals)
        steps.append(self._fallback_step(segment, [avals[s] for s in segment.inputs], program.n_slots))
    counts = collections.Counter(("tinygrad" if s.native else "xla", e.name) for s in segments for e in s.eqns)
    return Plan(steps, counts, ["tinygrad" if s.native else "xla" for s in segments], crossed,
                len(segments) == 1 and segments[0].native and not uses_host_sync(program.eqns))

  # --- compiling a flushed program
  def compile(self, program) -> Compiled:
    if float64.downcasting(self) and (narrow := float64.downcast(program)) is not program:
      return float64.widened(self, self.compile(narrow), program)  # NB: TINYJAX_F64=downcast computes in float32
    plan = self.plan(program)

    def lazy(inputs):
      return self._execute(program, plan.steps, inputs)

    def run(inputs):
      # NB: computed outputs are made contiguous, so each is a buffer of its own (or a reshape of one)
      outs = [t if isinstance(a, int) and a < len(inputs) or isinstance(t, np.ndarray) else t.contiguous()
              for a, t in zip(program.outputs, lazy(inputs))]
      return _realize(outs, self.tg_device)

    runner = _Replayed(run, lazy, program, self.const) if plan.jittable else run
    compiled = Compiled(None, plan.counts, plan.segments, plan.bytes_crossed)
    compiled.run = functools.partial(self._run_or_rescue, compiled, runner, program)
    return compiled

  def _run_or_rescue(self, compiled, runner, program, inputs):
    """Run natively; if tinygrad fails to compile a kernel, run this program on XLA from then on (and say so), or
    raise under TINYJAX_FALLBACK=error.

    NB: a safety net for tinygrad code-generation bugs (e.g. clang rejecting a generated kernel): the result is
    still JAX's, and the report counts the program's equations as XLA's.
    """
    try:
      with kernel_context(**self.contexts):
        return runner(inputs)
    except (*_TINYGRAD_COMPILE_FAILURES, RuntimeError) as error:
      if isinstance(error, RuntimeError) and not str(error).startswith(_TINYGRAD_CODEGEN_BUGS):
        raise
      message = (f"tinygrad could not compile a kernel of a program of {len(program.eqns)} equations "
                 f"({_summary(program.eqns)}; {type(error).__name__}: {_first_line(error)})")
      if config.validated("fallback") == "error":
        raise KernelCompileError(message + " (TINYJAX_FALLBACK=error)") from error
      fn = xla.compile_eqns(program.eqns, range(len(inputs)), program.in_avals, program.outputs, program.n_slots)
      source = program.eqns[-1].source if program.eqns else "<unknown>"
      filename, _, line = source.rpartition(":")
      warnings.warn_explicit(message + "; XLA runs that program instead", FallbackWarning, filename,
                             int(line) if line.isdigit() else 0)
      compiled.counts = collections.Counter(("xla", e.name) for e in program.eqns)
      compiled.segments = ["xla"]
      compiled.bytes_crossed = mixed.crossing_bytes(mixed.Segment(False, program.eqns, tuple(range(len(inputs))),
                                                                  ()), dict(enumerate(program.in_avals)))
      compiled.run = lambda inputs: [self.put(np.asarray(x)) for x in fn(*[self.get(t) for t in inputs])]
      return compiled.run(inputs)

  def _native_step(self, eqns, env):
    interpret(eqns, env, apply=depth.Bounded(self.apply), const=self.const)

  def _fallback_step(self, segment, in_avals, n_slots):
    fn = xla.compile_eqns(segment.eqns, segment.inputs, in_avals, segment.outputs, n_slots)

    def step(env):
      import jax
      results = fn(*[jax.device_put(self.get(env[s])) for s in segment.inputs])
      for slot, value in zip(segment.outputs, results):
        env[slot] = self.put(np.asarray(value))
    return step


@contextlib.contextmanager
def _compiler_messages_silenced():
  """NB: a compiler that rejects a probed dtype (clang 14 and __bf16) prints its errors on the process's stderr, which
  the user would see at the first use of that dtype: the probe's stderr goes nowhere."""
  sys.stderr.flush()
  saved = os.dup(2)
  try:
    with open(os.devnull, "w") as devnull:
      os.dup2(devnull.fileno(), 2)
      yield
  finally:
    os.dup2(saved, 2)
    os.close(saved)


class KernelCompileError(FallbackError):
  """tinygrad failed to compile a kernel of a flushed program, and TINYJAX_FALLBACK=error (otherwise XLA runs it)."""


def _summary(eqns, most: int = 5) -> str:
  """The primitives of `eqns` and the user's lines that made them, for an error message."""
  names = collections.Counter(e.name for e in eqns)
  sources = list(dict.fromkeys(e.source for e in eqns if e.source))
  return (", ".join(f"{name} x{n}" for name, n in names.most_common(most)) + (", ..." if len(names) > most else "")
          + "; called at " + (", ".join(sources[:most]) + (", ..." if len(sources) > most else "") or "<unknown>"))


def _first_line(error) -> str:
  text = str(error).strip() or getattr(error, "stderr", None) or ""
  return (text.decode(errors="replace") if isinstance(text, bytes) else str(text)).strip().partition("\n")[0]


def _compile_failures() -> tuple:
  from tinygrad.device import CompileError
  return (CompileError, subprocess.CalledProcessError)


_TINYGRAD_COMPILE_FAILURES = _compile_failures()
# the RuntimeErrors by which tinygrad's code generation gives up on a kernel (seen in JAX's own numpy tests: a median
# and a masked reduction failed its UOp verification, intersect1d and setxor1d looped in its graph rewrite)
_TINYGRAD_CODEGEN_BUGS = ("UOp verification failed", "infinite loop in graph_rewrite")


def _realize(outs: list, device: str) -> list:
  """Realize the outputs together; each becomes a buffer on `device` (or a view of one)."""
  from tinygrad import Tensor
  from tinygrad.uop.ops import Ops
  tensors = [t for t in outs if isinstance(t, Tensor)]  # the others are host arrays of dtypes the device lacks
  if pending := [t for t in tensors if not t.uop.is_realized]:
    Tensor.realize(*pending)
  # NB: tinygrad folds constant results (jnp.ones) into CONSTs with no buffer and no device; a Value needs a buffer,
  # on the backend's device (a plain clone would go to tinygrad's default device)
  if folded := [i for i, t in enumerate(outs) if isinstance(t, Tensor) and t.uop.base.op is not Ops.BUFFER]:
    outs = list(outs)
    for i in folded:
      outs[i] = outs[i].clone(device=device)
    Tensor.realize(*(outs[i] for i in folded))
  return outs


@functools.lru_cache(maxsize=1024)
def _program_of(closed_jaxpr):
  return program_of(closed_jaxpr)


def _closed_jaxprs_in(params) -> list:
  """The ClosedJaxprs among an equation's params (cond branches, loop bodies, ...)."""
  return [v for value in params.values() for v in (value if isinstance(value, tuple) else (value,))
          if isinstance(v, ClosedJaxpr)]


class _Replayed:
  """Runs a wholly native program: plainly first, captured by TinyJit on the second call, and replayed after that
  by running the captured kernels directly on the inputs' buffers.

  NB: the computed outputs are inputs of the capture too: each is assigned into a buffer passed in, so that at
  every replay the kernels write the outputs straight into fresh buffers (TinyJit's own replay hands out the same
  buffers every time, which had to be copied out). Outputs that are inputs or constants are not computed; outputs
  of size zero have no buffer. A replay skips TinyJit's checks of its inputs: the program cache key fixes their
  avals, every input is a whole buffer (or a reshape of one) on this backend's device, and the kernels never
  write an input, so two inputs may share a buffer.
  """

  def __init__(self, run, lazy, program, const):
    self.run, self.lazy, self.program, self.const = run, lazy, program, const
    self.n_inputs = len(program.in_avals)
    self.computed = [i for i, a in enumerate(program.outputs) if isinstance(a, int) and a >= self.n_inputs]
    self.calls = 0
    self.broken = not self.computed  # nothing to capture, or TinyJit refused the capture: runs plainly
    self.written: list[int] = []  # computed outputs of nonzero size, written by the kernels into fresh buffers
    self.specs: list[tuple] = []  # (shape, size, dtype, device) of each written output
    self.empty: dict[int, object] = {}  # computed outputs of size zero: the first run's (they hold no data)
    self.linear = None  # the captured kernels, with the inputs' and the written outputs' buffers as parameters

  def __call__(self, inputs):
    if self.linear is not None:
      return self._replay(inputs)
    if self.broken:
      return self.run(inputs)
    self.calls += 1
    return self._first_run(inputs) if self.calls == 1 else self._capture(inputs)

  def _first_run(self, inputs):
    outs = self.run(inputs)
    for i in self.computed:
      if outs[i].numel():
        self.written.append(i)
        self.specs.append((outs[i].shape, outs[i].numel(), outs[i].dtype, outs[i].device))
      else:
        self.empty[i] = outs[i]
    self.broken = not self.written
    return outs

  def _capture(self, inputs):
    from tinygrad import Tensor, TinyJit
    from tinygrad.engine.jit import JitError
    jit = TinyJit(self._assign_outputs)
    targets = [Tensor.empty(*shape, dtype=dtype, device=device) for shape, _, dtype, device in self.specs]
    try:
      for _ in range(2):  # NB: TinyJit runs the function plainly on its first call, and captures it on the second
        jit(*inputs, *targets)
    except JitError:  # e.g. two inputs on one buffer (TinyJit refuses to capture them)
      self.broken = True
      return self.run(inputs)
    self.linear = jit.captured.linear
    return self._replay(inputs)

  def _assign_outputs(self, *buffers):
    outs = self.lazy(list(buffers[:self.n_inputs]))
    return tuple(target.assign(outs[i]) for target, i in zip(buffers[self.n_inputs:], self.written))

  def _replay(self, inputs):
    from tinygrad import Tensor
    from tinygrad.engine.realize import run_linear
    from tinygrad.uop.ops import Ops, UOp
    bases = [t.uop.base for t in inputs]
    if any(b.op is not Ops.BUFFER for b in bases):  # NB: cannot happen for a Value's buffer: a safety net
      return self.run(inputs)
    targets = [UOp.new_buffer(device, size, dtype) for _, size, dtype, device in self.specs]
    run_linear(self.linear, None, input_uops=bases + targets, update_stats=False, jit=True)
    outs = [self.const(a) if not isinstance(a, int) else inputs[a] if a < self.n_inputs else self.empty.get(i)
            for i, a in enumerate(self.program.outputs)]
    for i, target, (shape, *_) in zip(self.written, targets, self.specs):
      outs[i] = Tensor(target.reshape(shape))
    return outs
