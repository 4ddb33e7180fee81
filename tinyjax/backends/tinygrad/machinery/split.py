"""Programs over a device set (a mesh's devices): tinygrad's multi-device Tensors run each kernel on every device's
block, a reduction over the split axis becoming tinygrad's allreduce. What tinygrad cannot split (a pad or a
concatenation along the split axis, a cumulative sum along it: tinygrad 0.14's schedule/multi.py asserts) runs
gathered: on the set's first device, its inputs gathered there and its outputs copied to every device.

NB: the values are the same either way; only where the work runs differs, and the report says which.
"""
import math

from tinygrad import Tensor, TinyJit
from tinygrad.engine.jit import JitError
from tinygrad.uop.ops import Ops

from tinyjax.backends.tinygrad.machinery.replay import OutputTemplate, fresh_outputs, realized


class SplitReplay:
  """A wholly native program over a device set: run plainly first, captured by TinyJit on its second run and replayed
  by TinyJit's capture after that (tinygrad's own replay, which launches each kernel on every device of the set:
  tinyjax's launcher, replay.Replayed, launches kernels of one device). As in Replayed, the computed outputs are inputs
  of the capture, each assigned into a buffer passed in (made from a template of the first run's output, split as it
  was), so that every replay writes them into fresh buffers; and a replay skips TinyJit's checks of its inputs (the
  program cache key fixes their avals). NB: TinyJit's own outputs are the same buffers at every replay."""

  def __init__(self, run, lazy, program, const, devices: tuple):
    self.run, self.lazy, self.program, self.const, self.devices = run, lazy, program, const, devices
    self.n_inputs = len(program.in_avals)
    self.computed = [i for i, a in enumerate(program.outputs) if isinstance(a, int) and a >= self.n_inputs]
    self.jit = TinyJit(self._assign_outputs) if self.computed else None
    self.targets: list[OutputTemplate] = []  # of each computed output
    self.calls = 0

  def _assign_outputs(self, *buffers):
    outs = self.lazy(list(buffers[:self.n_inputs]))
    return tuple(target.assign(outs[i]) for target, i in zip(buffers[self.n_inputs:], self.computed))

  def _template(self, output: Tensor) -> OutputTemplate:
    """The template of a computed output's buffer over the device set: a block on each device, or a copy on each
    where it is not split."""
    axis, devices = output.uop.axis, self.devices
    block = tuple(n // len(devices) if d == axis else n for d, n in enumerate(output.shape))
    return OutputTemplate.of(block, math.prod(block), output.dtype, devices, axis)

  def __call__(self, inputs):
    self.calls += 1
    if self.jit is None or self.calls == 1:
      outs = self.run(inputs)
      computed = [outs[i] for i in self.computed]
      if self.jit is not None and all(isinstance(t, Tensor) and t.numel() for t in computed):
        self.targets = [self._template(t) for t in computed]
      else:  # nothing to capture, or an output with no buffer to write (empty, or a host array): runs plainly
        self.jit = None
      return outs
    if self.jit.cnt == 0:
      self.jit.cnt = 1  # NB: the first run did TinyJit's one-time work: its second call captures (as Replayed's)
    targets, _ = fresh_outputs(self.targets)  # NB: TinyJit takes only allocated buffers for inputs (else: constants)
    if self.jit.captured is not None:
      self.jit.captured([_buffer(t) for t in (*inputs, *targets) if t.__class__ is Tensor], {})
    else:
      try:
        self.jit(*inputs, *targets)  # NB: what it returns are the capture's tensors: the targets hold this run's
      except JitError:  # e.g. two inputs on one buffer (TinyJit refuses to capture them)
        self.jit = None
        return self.run(inputs)
    outs = [self.const(a) if not isinstance(a, int) else inputs[a] if a < self.n_inputs else None
            for a in self.program.outputs]
    for i, target in zip(self.computed, targets):
      outs[i] = target
    return realized(outs, self.devices)


def _buffer(tensor: Tensor):
  """The buffer a Tensor over a device set reads (its blocks', where it is split), as TinyJit takes its inputs."""
  return (tensor.uop.src[0] if tensor.uop.op is Ops.UNSHARD else tensor.uop).base


def is_split(buffer) -> bool:
  """Whether a buffer over a device set is split over it (not a copy on each device)."""
  return isinstance(buffer, Tensor) and buffer.uop.base.op is Ops.UNSHARD


class Splittable:
  """Runs `split_run` (the program over the device set) or, once it failed, the program on the first device (made by
  `gathered_runner()`) on the inputs gathered there, its outputs copied back to every device of `devices`.
  `reason`: where it runs, for the report: split over the set, or gathered and why."""

  def __init__(self, split_run, gathered_runner, devices: tuple):
    self.split_run, self.gathered_runner, self.devices = split_run, gathered_runner, devices
    self.gathered_run = None  # once gathered
    self.reason = f"split over {','.join(devices)}"
    self.checked = False  # a split run's outputs were checked whole (_whole)

  def __call__(self, inputs):
    if self.gathered_run is None:
      try:
        if self.checked:  # NB: a program's outputs are the same views at every run: the first run's copy checks them
          return self.split_run(inputs)
        outs = _whole(self.split_run(inputs))
        self.checked = True
        return outs
      except Exception as error:  # noqa: BLE001  (tinygrad's multi-device rewrites assert; gathered is the plain run)
        self.reason = (f"gathered on {self.devices[0]} from {','.join(self.devices)} (tinygrad does not split it: "
                       f"{type(error).__name__}: {str(error).partition(chr(10))[0]})")
        self.gathered_run = self.gathered_runner()
    # NB: the inputs gathered are realized first: a program built on the lazy gathers is one graph, which tinygrad's
    # rewrite of the copies between devices may not finish
    gathered = [t.to(self.devices[0]) if isinstance(t, Tensor) else t for t in inputs]
    if tensors := [t for t in gathered if isinstance(t, Tensor)]:
      Tensor.realize(*tensors)
    outs = self.gathered_run(gathered)
    return realized([t.to(self.devices) if isinstance(t, Tensor) else t for t in outs], self.devices)


def _whole(outs: list) -> list:
  """The outputs, each a buffer of its own: an output that is a view of one (a reshape) is copied. NB: tinygrad checks
  a view of a split Tensor when it is used, not when it is made (a reshape that moves items between the blocks raises
  at the read): a copy checks it now, while the program can still run gathered."""
  views = [i for i, t in enumerate(outs) if isinstance(t, Tensor) and t.uop is not t.uop.base]
  if views:
    outs = list(outs)
    for i in views:
      outs[i] = outs[i].clone()
    Tensor.realize(*(outs[i] for i in views))
  return outs
