"""A flushed program on tinygrad, through its states: built by tinygrad (run plainly, then captured), launched by
tinyjax's launcher, or rescued by XLA when tinygrad fails to compile one of its kernels (e.g. clang rejecting a
generated kernel). Under TINYJAX_FALLBACK=error a rescue raises instead.

NB: a rescued program's result is still JAX's, and the report counts its equations as XLA's.
"""
import collections
import dataclasses
import subprocess
import warnings

import numpy as np

from tinyjax import config
from tinyjax.backends import xla
from tinyjax.backends.tinygrad.machinery.amendments import kernel_context
from tinyjax.backends.tinygrad.machinery.plan import Segment, crossing_bytes
from tinyjax.backends.tinygrad.machinery.replay import Replayed
from tinyjax.backends.tinygrad.machinery.split import Splittable
from tinyjax.backends.tinygrad.numerics import carried
from tinyjax.ir import profile
from tinyjax.ir.backend import Compiled, FallbackError, FallbackWarning, Placement


class KernelCompileError(FallbackError):
  """tinygrad failed to compile a kernel of a flushed program, and TINYJAX_FALLBACK=error (otherwise XLA runs it)."""


def _compile_failures() -> tuple:
  from tinygrad.device import CompileError
  return (CompileError, subprocess.CalledProcessError)


_COMPILE_FAILURES = _compile_failures()
# the RuntimeErrors by which tinygrad's code generation gives up on a kernel (seen in JAX's own numpy tests: a median
# and a masked reduction failed its UOp verification, intersect1d and setxor1d looped in its graph rewrite)
_CODEGEN_FAILURES = ("UOp verification failed", "infinite loop in graph_rewrite")


class TinygradProgram(Compiled):
  """A flushed program and the state it is in, which is the method that runs it (`state`):
  - built (`_built`): tinygrad makes, captures (TinyJit) or replays its kernels (`runner`: replay.Replayed for a
    program TinyJit can capture, split.Splittable over a device set, else the plain run), under the backend's kernel
    context, complex inputs and outputs as the backend hands them out (carried.at_boundary);
  - launched (`_launched`): once captured as plain kernels (and no input or output complex), tinyjax's launcher
    runs them, which makes no kernel;
  - rescued (`_rescued`): tinygrad failed to compile one of its kernels; XLA runs it from then on.
  Each run returns the outputs and what it executed where (`placement`, which a rescue and a program over a device
  set that runs gathered change)."""

  def __init__(self, backend, runner, program, placement: Placement):
    self.backend, self.runner, self.program = backend, runner, program
    self.at_boundary = carried.at_boundary(runner, program)  # NB: the runner itself when nothing is complex
    self.placement = placement
    if isinstance(runner, Splittable):
      self.placement = dataclasses.replace(placement, reason=runner.reason)
    self.state = self._built
    self.on_xla = None  # the program compiled by XLA, once rescued

  def run(self, inputs):
    if profile.active is not None:
      return self._recorded_run(profile.active, inputs)
    return self.state(inputs)

  def launch_plan(self) -> tuple | None:
    """What a chain of programs launches of this one (Replayed.chainable), once the launcher runs it; else None."""
    return self.runner.chainable() if self.state == self._launched else None

  def _built(self, inputs):
    self.backend.idle = False
    runner = self.runner
    try:
      with kernel_context(**self.backend.contexts):
        outs = self.at_boundary(inputs)
    except (*_COMPILE_FAILURES, RuntimeError) as error:
      if isinstance(error, RuntimeError) and not str(error).startswith(_CODEGEN_FAILURES):
        raise
      self._rescue(error)
      return self._rescued(inputs)
    if isinstance(runner, Replayed) and runner.kernels is not None and self.at_boundary is runner:
      self.state = self._launched
    elif isinstance(runner, Splittable) and runner.reason is not self.placement.reason:  # gathered since this run
      self.placement = dataclasses.replace(self.placement, reason=runner.reason)
    return outs, self.placement

  def _launched(self, inputs):
    runner = self.runner
    if not runner.synchronous:  # NB: kernels that all run in this thread are done when it returns: the backend
      self.backend.idle = False  # stays idle (a wait for its outputs has nothing to wait for)
    outs = runner.launched(inputs)
    return (outs, self.placement) if outs is not None else self._built(inputs)

  def _rescued(self, inputs):
    backend = self.backend
    backend.idle = False
    return [backend.put(np.asarray(x)) for x in self.on_xla(*[backend.get(t) for t in inputs])], self.placement

  def _recorded_run(self, recording, inputs):
    """A run while a profile records: this same run (its kernels waited for and timed), as a span of the calling
    thread."""
    with recording.span("run program", "program", backend=self.backend.name, device=self.backend.device.name,
                        equations=len(self.program.eqns), on_xla=self.on_xla is not None):
      return self.state(inputs)

  def _rescue(self, error):
    program = self.program
    message = (f"tinygrad could not compile a kernel of a program of {len(program.eqns)} equations "
               f"({_summary(program.eqns)}; {type(error).__name__}: {_first_line(error)})")
    if config.validated("fallback") == "error":
      raise KernelCompileError(message + " (TINYJAX_FALLBACK=error)") from error
    n_inputs = len(program.in_avals)
    self.on_xla = xla.compile_eqns(program.eqns, range(n_inputs), program.in_avals, program.outputs, program.n_slots)
    self.state = self._rescued
    source = program.eqns[-1].source if program.eqns else "<unknown>"
    filename, _, line = source.rpartition(":")
    warnings.warn_explicit(message + "; XLA runs that program instead", FallbackWarning, filename,
                           int(line) if line.isdigit() else 0)
    crossed = crossing_bytes(Segment(False, program.eqns, tuple(range(n_inputs)), ()),
                             dict(enumerate(program.in_avals)))
    self.placement = Placement(collections.Counter(("xla", e.name) for e in program.eqns), ("xla",), crossed)


def _summary(eqns, most: int = 5) -> str:
  """The primitives of `eqns` and the user's lines that made them, for an error message."""
  names = collections.Counter(e.name for e in eqns)
  sources = list(dict.fromkeys(e.source for e in eqns if e.source))
  return (", ".join(f"{name} x{n}" for name, n in names.most_common(most)) + (", ..." if len(names) > most else "")
          + "; called at " + (", ".join(sources[:most]) + (", ..." if len(sources) > most else "") or "<unknown>"))


def _first_line(error) -> str:
  text = str(error).strip() or getattr(error, "stderr", None) or ""
  return (text.decode(errors="replace") if isinstance(text, bytes) else str(text)).strip().partition("\n")[0]
