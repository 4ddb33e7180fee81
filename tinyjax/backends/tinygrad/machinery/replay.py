"""A wholly native program's runs: its outputs realized together, then its kernels captured by TinyJit and replayed
by a launcher of our own."""
import dataclasses
import functools
import sys
import weakref

from tinygrad import Tensor, TinyJit
from tinygrad import tensor as tensor_module
from tinygrad.device import Buffer, MultiBuffer
from tinygrad.engine.jit import JitError
from tinygrad.engine.realize import get_call_arg_uops, get_runtime, run_linear
from tinygrad.helpers import Metadata
from tinygrad.runtime import ops_cpu
from tinygrad.tensor import all_tensors
from tinygrad.uop.ops import Ops, UOp, buffers

from tinyjax.backends.tinygrad.machinery import amendments
from tinyjax.backends.tinygrad.numerics import floatbits as fb
from tinyjax.ir import profile

# A replay's written outputs come from a pool of (at most) this many sets per program, when they total at most
# _POOLED_BYTES: the outputs of small programs, whose replay costs more in tinygrad's objects than in its kernels.
_POOL_SLOTS = 2
_POOLED_BYTES = 1 << 16

_REALIZED = (Ops.BUFFER, Ops.UNSHARD)


def realized(outs: list, device) -> list:
  """Realize the outputs together; each becomes a buffer on `device` (or a view of one)."""
  tensors = [t for t in outs if isinstance(t, Tensor)]  # the others are host arrays of dtypes the device lacks
  if pending := [t for t in tensors if not t.uop.is_realized]:
    Tensor.realize(*pending)
  # NB: tinygrad folds constant results (jnp.ones) into CONSTs with no buffer and no device; a Value needs a buffer,
  # on the backend's device (a plain clone would go to tinygrad's default device). A Tensor split over devices is
  # realized as UNSHARD of its blocks' buffer
  if folded := [i for i, t in enumerate(outs) if isinstance(t, Tensor) and t.uop.base.op not in _REALIZED]:
    outs = list(outs)
    for i in folded:
      outs[i] = outs[i].clone(device=device)
    Tensor.realize(*(outs[i] for i in folded))
  return outs


def distinct_buffers(device, tensors, taken=(), realize_with=()) -> list:
  """The tensors realized (with `realize_with`) as distinct buffers on `device`, none of them one of `taken`'s:
  what TinyJit takes as inputs and must return as outputs."""
  out, bases = [], {t.uop.base for t in taken}
  for t in tensors:
    # NB: tinygrad's constants have no device, and contiguous() leaves them so; contiguous() of a buffer is that
    # buffer, and of two equal lazy graphs (one zeros Tensor twice) one uop, so one buffer
    contiguous = None if t.device is None else t.contiguous()
    t = t.clone(device=device) if contiguous is None or contiguous.uop.base in bases else contiguous
    bases.add(t.uop.base)
    out.append(t)
  if pending := [*out, *realize_with]:
    Tensor.realize(*pending)
  # NB: contiguous() of a view that is contiguous in memory (a loop's row 0, `x[0:1].reshape(n)`) realizes as that
  # view of the other buffer, no buffer of its own: TinyJit then takes it for a constant of its capture, not an input,
  # and its replays read the captured row (a nested lax.map gave zeros from its second outer step). Such a view is
  # copied into a buffer of its own. NB: not an empty one, which has no buffer to realize (its copy neither: a
  # replay then looked its missing buffer up)
  if views := [i for i, t in enumerate(out) if t.uop.base.realized is None and t.numel()]:
    for i in views:
      out[i] = out[i].clone(device=device)
    Tensor.realize(*(out[i] for i in views))
  return out


def distinct_groups(device, *groups, taken=()) -> list[list]:
  """`groups` (lists of tensors) realized together, in one schedule, as distinct buffers (`distinct_buffers`), in
  their groups."""
  flat = distinct_buffers(device, [t for group in groups for t in group], taken=taken)
  out, start = [], 0
  for group in groups:
    out.append(flat[start:start + len(group)])
    start += len(group)
  return out


class Replayed:
  """Runs a wholly native program: plainly first (`plain_runs` times), then captured by TinyJit, and replayed after
  that by running the captured kernels directly on the inputs' buffers.

  NB: the computed outputs are inputs of the capture too: each is assigned into a buffer passed in, so that at
  every replay the kernels write the outputs straight into fresh buffers (TinyJit's own replay hands out the same
  buffers every time, which had to be copied out). Outputs that are inputs or constants are not computed; outputs
  of size zero have no buffer. A replay skips TinyJit's checks of its inputs: the program cache key fixes their
  avals, every input is a whole buffer (or a reshape of one) on this backend's device, and the kernels never
  write an input, so two inputs may share a buffer.
  """

  def __init__(self, run, lazy, program, const, plain_runs: int = 1):
    self.kernels = None  # the captured kernels resolved for launching, when every one is a plain kernel launch
    self.synchronous = False  # every one of them is a direct call (Launch.direct): a replay is done when it returns
    self.templates: list[OutputTemplate] = []  # of each written output
    self.run, self.lazy, self.program, self.const = run, lazy, program, const
    self.n_inputs = len(program.in_avals)
    self.computed = [i for i, a in enumerate(program.outputs) if isinstance(a, int) and a >= self.n_inputs]
    self.calls = 0
    self.plain_runs = plain_runs  # the runs before the capture
    self.broken = not self.computed  # nothing to capture, or TinyJit refused the capture: runs plainly
    self.written: list[int] = []  # computed outputs of nonzero size, written by the kernels into fresh buffers
    self.specs: list[tuple] = []  # (shape, size, dtype, device) of each written output
    self.empty: dict[int, object] = {}  # computed outputs of size zero: the first run's (they hold no data)
    self.linear = None  # the captured kernels, with the inputs' and the written outputs' buffers as parameters
    self.pool: list[_Slot] | None = None  # output sets handed out before, reused once nobody else holds them
    self.pool_next = 0  # the slot a new set replaces when none is free

  def __call__(self, inputs):
    if self.linear is not None:
      return self._replay(inputs)
    if self.broken:
      return self.run(inputs)
    self.calls += 1
    if self.calls == 1:
      return self._first_run(inputs)
    return self.run(inputs) if self.calls <= self.plain_runs else self._capture(inputs)

  def _first_run(self, inputs):
    outs = self.run(inputs)
    for i in self.computed:
      if outs[i].numel():
        self.written.append(i)
        self.specs.append((outs[i].shape, outs[i].numel(), outs[i].dtype, outs[i].device))
      else:
        self.empty[i] = outs[i]
    self.broken = not self.written
    if sum(size * dtype.itemsize for _, size, dtype, _ in self.specs) <= _POOLED_BYTES:
      self.pool = []
    return outs

  def _capture(self, inputs):
    jit = TinyJit(self._assign_outputs)
    targets = [Tensor.empty(*shape, dtype=dtype, device=device) for shape, _, dtype, device in self.specs]
    for target in targets:  # allocated, so that TinyJit takes them as inputs (the capture's parameters)
      target.uop.base.buffer.ensure_allocated()
    # NB: TinyJit runs a function plainly on its first call, to do the one-time work (kernels compiled, constants
    # realized) before it captures on the second; the first run here did that work, so the capture is the first call
    # (one scheduling of the program instead of two: the most of a program's second run)
    jit.cnt = 1
    try:
      jit(*inputs, *targets)
    except JitError:  # e.g. two inputs on one buffer (TinyJit refuses to capture them)
      self.broken = True
      return self.run(inputs)
    self.linear = jit.captured.linear
    self.kernels = launches(self.linear)
    self.synchronous = self.kernels is not None and all(k.direct is not None for k in self.kernels)
    return self._replay(inputs)

  def _assign_outputs(self, *buffers):
    outs = self.lazy(list(buffers[:self.n_inputs]))
    return tuple(target.assign(outs[i]) for target, i in zip(buffers[self.n_inputs:], self.written))

  def chainable(self) -> tuple | None:
    """(its kernels, the specs of its outputs) when the launcher replays it and its kernels
    write every output of the program (none is a constant, an input or empty): what a Chained launches; else None."""
    if self.kernels is None or len(self.written) != len(self.program.outputs):
      return None
    return self.kernels, self.specs

  def launched(self, inputs) -> list | None:
    """The outputs of a replay by the launcher, which makes no kernel (so it needs no kernel context); None when
    this run is not one (tinygrad makes or captures kernels, or replays them itself)."""
    if self.kernels is None:
      return None
    bases = [t.uop.base for t in inputs]
    if any(b.op is not Ops.BUFFER for b in bases):  # NB: cannot happen for a Value's buffer: a safety net
      return None
    slot = self._slot()
    launch(self.kernels, [buffers[u].ensure_allocated() for u in bases] + slot.buffers)
    return self._outputs(inputs, slot.tensors)

  def _slot(self) -> "_Slot":
    """The written outputs of a replay by the launcher: a pooled set that nobody holds any more, or a new one."""
    pool = self.pool
    if pool is None:
      return self._new_slot()
    for slot in pool:
      if slot.free():
        return slot
    slot = self._new_slot()
    slot.baseline = slot.counts()
    if len(pool) < _POOL_SLOTS:
      pool.append(slot)
    else:  # NB: the set replaced is still held (it was not free): it lives on as any other output, unpooled
      pool[self.pool_next] = slot
      self.pool_next = (self.pool_next + 1) % _POOL_SLOTS
    return slot

  def _new_slot(self) -> "_Slot":
    """New written outputs: a fresh BUFFER uop, allocated Buffer and Tensor each."""
    if not self.templates:
      self.templates = [OutputTemplate.of(*spec) for spec in self.specs]
    return _Slot(*fresh_outputs(self.templates))

  def _replay(self, inputs):
    if (outs := self.launched(inputs)) is not None:
      return outs
    bases = [t.uop.base for t in inputs]
    if any(b.op is not Ops.BUFFER for b in bases):  # NB: cannot happen for a Value's buffer: a safety net
      return self.run(inputs)
    slot = self._new_slot()
    run_linear(self.linear, None, input_uops=bases + [t.uop.base for t in slot.tensors], update_stats=False,
               jit=True)
    return self._outputs(inputs, slot.tensors)

  def _outputs(self, inputs, written: list) -> list:
    outs = [self.const(a) if not isinstance(a, int) else inputs[a] if a < self.n_inputs else self.empty.get(i)
            for i, a in enumerate(self.program.outputs)]
    for i, tensor in zip(self.written, written):
      outs[i] = tensor
    return outs


def fresh_outputs(templates: list) -> tuple[list, list]:
  """Outputs to be written by a replay: for each template a fresh BUFFER uop, its allocated Buffer (a list of the
  blocks' over a device set) and a Tensor."""
  tensors, made = [], []
  # NB: Tensor's methods (its __hash__, which registering a Tensor calls) are wrapped for tinygrad's metadata
  # tracing, which opens a profiling context at each call unless an operation's metadata is set already, as here
  outer = tensor_module._METADATA.set(_REPLAY_METADATA)
  try:
    for template in templates:
      target = template.fresh()
      # NB: each BUFFER uop's Buffer set in tinygrad's table directly: UOp.buffer computes the uop's shape and
      # base first, which costs more than the launches of a small program
      if isinstance(template.device, str):
        buffer = buffers[target] = Buffer(template.device, template.size, template.dtype).ref(1)
        made.append(buffer.ensure_allocated())
      else:
        buffer = buffers[target] = MultiBuffer(template.device, template.size, template.dtype).ref(1)
        made.append([block.ensure_allocated() for block in buffer.bufs])
      output = target if template.shape_operands is None else \
          UOp(Ops.RESHAPE, target.dtype, (target, *template.shape_operands))
      if template.split is not None:
        ranges, axes = template.split
        output = UOp(Ops.UNSHARD, output.dtype, (output, *ranges), axes)
      tensors.append(_tensor_of(output))
  finally:
    tensor_module._METADATA.set(outer)
  return tensors, made


class _Slot:
  """A set of written outputs (their Tensors and allocated Buffers) made by a replay; a pooled one is written again
  by a later replay once nobody else holds it.

  NB: free means that every object through which the outputs' memory can be reached (each Tensor, its uop, the
  BUFFER uop, the Buffer and the runtime's allocation) has exactly the references it had when the slot was pooled,
  before its outputs were handed out: an output whose Array is alive (or its Value, a pending call's input, a
  PairBuffer, a view into its Buffer, a lazy graph over its uop, a Tensor whose uop was replaced) holds one more,
  or has another uop, and its memory is never written again while it does."""
  __slots__ = ("tensors", "buffers", "objects", "baseline")

  def __init__(self, tensors: list, buffers: list):
    self.tensors, self.buffers = tensors, buffers
    self.objects = tuple(o for tensor, buffer in zip(tensors, buffers)
                         for o in (tensor, tensor.uop, tensor.uop.base, buffer, buffer._buf))
    self.baseline = None

  def counts(self) -> tuple:
    return tuple(map(sys.getrefcount, self.objects))

  def free(self) -> bool:
    objects = self.objects
    return self.counts() == self.baseline and all(t.uop is objects[5 * k + 1] for k, t in enumerate(self.tensors))


_REPLAY_METADATA = Metadata(name="tinyjax_replay")


def _tensor_of(uop):
  """A Tensor of a uop on the device, made as tinygrad's own Tensor._apply_uop makes its results.

  NB: not Tensor(uop): its constructor (wrapped for tinygrad's metadata tracing) checks the data's type, device and
  dtype, which costs more than the launches of a small program."""
  tensor = Tensor.__new__(Tensor)
  tensor.uop, tensor.grad, tensor.is_param = uop, None, True
  all_tensors[weakref.ref(tensor)] = None
  return tensor


@dataclasses.dataclass(frozen=True)
class OutputTemplate:
  """A written output's BUFFER uop and the operands of its reshape to the output's shape, made once; of an output over
  a device set (`device` a tuple), a block on each device, and where it is split, the operands of its UNSHARD.

  NB: tinygrad's UOp.new_buffer, reshape and unshard infer each uop's dtype and check and simplify the shape, which
  costs more than the launches of a small program: a replay makes its uops with the dtype and operands given."""
  buffer: object
  shape_operands: tuple | None  # None: the output has the buffer's own shape, (size,)
  size: int
  dtype: object
  device: str | tuple
  split: tuple | None = None  # (the UNSHARD's device ranges, its axes) of an output split over a device set

  @classmethod
  def of(cls, shape, size, dtype, device, axis: int | None = None):
    """The template of an output of `shape` (a block's, of an output split along `axis` over the device set)."""
    buffer = UOp.new_buffer(device, size, dtype)
    reshaped = buffer.reshape(shape)
    split = None if axis is None else ((unsharded := reshaped.unshard(axis)).src[1:], unsharded.arg)
    return cls(buffer, None if reshaped is buffer else reshaped.src[1:], size, dtype, device, split)

  def fresh(self):
    """A new BUFFER uop (a slot of its own) like the template's."""
    template = self.buffer.arg
    # NB: dataclasses.replace of the frozen ParamArg (nine fields) costs more than the launch of a small kernel: the
    # template's fields are copied as its own __init__ sets them, with a new slot
    arg = object.__new__(type(template))
    arg.__dict__.update(template.__dict__)
    arg.__dict__["slot"] = next(UOp.unique_num)
    return UOp(Ops.BUFFER, self.buffer.dtype, self.buffer.src, arg)


@dataclasses.dataclass(frozen=True)
class Launch:
  """One captured kernel, resolved: its runtime program, launch dimensions, and arguments, each either the index of
  a parameter buffer (the program's inputs, then its written outputs) or the runtime's handle of a buffer the
  capture keeps (an intermediate). A kernel of the CPU device on one thread is also `direct`: its ctypes function,
  called with `addresses`, where each parameter's (`parameters`: position, index) is filled in at the launch."""
  runtime: object
  device: str
  global_size: tuple
  local_size: tuple | None
  vals: tuple
  args: tuple
  direct: object = None
  addresses: tuple = ()
  parameters: tuple = ()

  @classmethod
  def of(cls, runtime, device, global_size, local_size, vals, args):
    direct = None
    if isinstance(runtime, ops_cpu.CPUProgram) and not vals and global_size[0] == 1:
      direct = amendments.cpu_function(runtime, len(args))
    if direct is None:
      return cls(runtime, device, global_size, local_size, vals, args)
    parameters = tuple((position, a) for position, a in enumerate(args) if isinstance(a, int))
    addresses = tuple(0 if isinstance(a, int) else a.va_addr for a in args)
    return cls(runtime, device, global_size, local_size, vals, args, direct, addresses, parameters)


def launches(linear) -> list[Launch] | None:
  """The captured calls resolved once, so that a replay binds its buffers and launches with no pattern matching
  (tinygrad's run_linear matches every call and resolves every argument at each replay); None if a call is other
  than a plain kernel on one device with no symbolic sizes or variables but the runtime's own (a copy, a graph), which
  run_linear then replays."""
  kernels = []
  for call in linear.src:
    program = call.src[0]
    # NB: a variable the runtime binds itself (the CPU device's core_id, of a kernel split across its threads) is
    # no symbolic size: vals() leaves it None for the runtime to fill
    if program.op is not Ops.PROGRAM or not isinstance(device := call.src[1].device, str) or \
        any(v.expr not in program.arg.runtimevars for v in program.arg.vars):
      return None
    params = get_call_arg_uops(call)
    args = []
    for index in program.arg.globals:
      param = params[index]
      if param.op is Ops.PARAM:
        args.append(param.arg.slot)
      elif all(u.op is not Ops.PARAM for u in param.toposort()):
        # an intermediate the capture keeps: a buffer, or a view into one (its memory planner shares buffers)
        args.append(param.buffer.ensure_allocated().get_buf(device))
      else:
        return None
    global_size, local_size = program.arg.launch_dims({})
    kernels.append(Launch.of(get_runtime(device, program), device, global_size, local_size, program.arg.vals({}),
                             tuple(args)))
  return kernels


def launch(kernels: list[Launch], buffers: list) -> None:
  """Launch the kernels in order on the parameter `buffers` (tinygrad Buffers, allocated)."""
  # NB: while a profile records, every kernel is called through its runtime program, which the profile times
  direct_calls = profile.active is None
  for k in kernels:
    if k.direct is not None and direct_calls:
      addresses = list(k.addresses)
      for position, a in k.parameters:
        addresses[position] = buffers[a].get_buf(k.device).va_addr
      k.direct(*addresses)
    else:
      k.runtime(*[buffers[a].get_buf(k.device) if isinstance(a, int) else a for a in k.args],
                global_size=k.global_size, local_size=k.local_size, vals=k.vals, wait=False)


class Chained:
  """Programs that the launcher replays (Replayed.chainable), run one after the other as one list of launches: a
  flush cut into chunks (core.pending.Sequence), run again. As the Sequence numbers them, the flush's inputs come
  first, then each program's outputs in order (`step_inputs`: where each program's inputs are; `released`: for each
  program, what no later one reads). The flush's `outputs` are written into fresh buffers at every run; every other
  value lives in a buffer the chain keeps, which a later value reuses once nothing reads it any more (and every run
  again): no program, Value or Tensor between the chunks."""

  def __init__(self, plans: list, step_inputs: list, n_inputs: int, outputs: tuple, released: list):
    kept: dict[int, Buffer] = {}
    free: dict[tuple, list] = {}  # (device, size, dtype) -> buffers no live value holds
    self.kernels, self.templates, self.fresh = [], [], []
    position = n_inputs  # of the next program's first output among the run's values
    for (kernels, specs), inputs, done in zip(plans, step_inputs, released, strict=True):
      at = (*inputs, *range(position, position + len(specs)))  # the program's parameters, numbered in the run
      self.kernels += [dataclasses.replace(k, args=tuple(at[a] if isinstance(a, int) else a for a in k.args),
                                           parameters=tuple((p, at[a]) for p, a in k.parameters)) for k in kernels]
      for shape, size, dtype, device in specs:
        if position in outputs:
          self.templates.append(OutputTemplate.of(shape, size, dtype, device))
          self.fresh.append(position)
        else:
          reusable = free.get((device, size, dtype))
          kept[position] = reusable.pop() if reusable else Buffer(device, size, dtype).ensure_allocated()
        position += 1
      for i in done:
        if (buffer := kept.get(i)) is not None:
          free.setdefault((buffer.device, buffer.size, buffer.dtype), []).append(buffer)
    self.table = [kept.get(i) for i in range(position)]
    self.order = [self.fresh.index(i) for i in outputs]  # each output of the flush among the fresh ones
    self.synchronous = all(k.direct is not None for k in self.kernels)

  def __call__(self, inputs: list) -> list | None:
    """The flush's outputs (Tensors) computed from its inputs (Tensors), or None when an input is not a whole
    buffer (a safety net: a Value's buffer is one)."""
    bases = [t.uop.base for t in inputs]
    if any(b.op is not Ops.BUFFER for b in bases):
      return None
    tensors, made = fresh_outputs(self.templates)
    table = list(self.table)
    for i, base in enumerate(bases):
      table[i] = buffers[base].ensure_allocated()
    for i, buffer in zip(self.fresh, made):
      table[i] = buffer
    launch(self.kernels, table)
    return [tensors[k] for k in self.order]


# --- loop steps replayed by TinyJits (control_flow.py's loops, linalg.py's and eigen.py's factorizations)

def capturing() -> bool:
  """Whether a TinyJit is capturing now (a TinyJit cannot run inside another's capture)."""
  from tinygrad.engine.realize import capturing
  return bool(capturing)


def _replay_or_recapture(jit, *args):
  """jit(*args); a TinyJit that rejects its inputs (laid out unlike the ones it captured) is captured anew."""
  from tinygrad.engine.jit import JitError
  # NB: TinyJit copies an input that is one of its outputs, so no kernel reads and writes one buffer, but it misses
  # an output written by read-modify-write, as WGSL writes packed arrays (bool, 8- and 16-bit integers). Passed
  # back, such an output was bound twice in one dispatch, which Dawn refuses: the kernel did not run, and a vmapped
  # while loop (its predicate a bool array) never ended on WEBGPU
  args = [a.clone() if isinstance(a, Tensor) and fb.packed_on_wgsl(a) else a for a in args]
  # NB: a new TinyJit captures at its first call, not at its second after a plain run: a loop's inputs are realized
  # before its first step, and the capture compiles the step's kernels as a plain run would (one schedule of the
  # step less, per TinyJit: two per loop of a new step)
  if jit.cnt == 0:
    jit.cnt = 1
  try:
    return jit(*args)
  except JitError:
    jit.reset()
    return jit(*args)


class Alternating:
  """A loop step replayed by two TinyJits of it in turn (`make(turn)` makes each, turn 0 or 1), for steps whose
  outputs are their next inputs: each TinyJit then reads the other's output buffers, never its own, which TinyJit
  copies before each replay (a device copy per carried value: most of a small step's time)."""

  def __init__(self, make):
    self.jits, self.turn = (make(0), make(1)), 0

  def __call__(self, *args):
    jit, self.turn = self.jits[self.turn], 1 - self.turn
    return _replay_or_recapture(jit, *args)


@functools.lru_cache(maxsize=64)
def step_jit(step, device: str, layout: tuple, turn: int):
  """A TinyJit of a loop's step function (a module-level function, or one cached by its parameters) for one device
  and one layout of its inputs (TinyJit captures buffers of one layout), and turn (Alternating): made once, so that
  every loop of that step and layout, in any program, replays it."""
  return TinyJit(step)
