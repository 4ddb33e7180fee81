"""A wholly native program's runs: its outputs realized together, then its kernels captured by TinyJit and replayed."""

def realized(outs: list, device: str) -> list:
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


class Replayed:
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
