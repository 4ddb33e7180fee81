"""The pending queue: traced calls waiting to run, and the flush that runs them as one program.

A `Value` is either concrete (a buffer on one or more backends, or a host array) or pending (output `index`
of a `Node`, one traced call). Arrays hold Values; the queue holds weak references to the Arrays whose Values
are pending, so a value nobody can read any more is never computed, and a flush runs only what live Arrays
need, all together, so that tinygrad fuses it into few kernels.

Compiled programs are cached by the flushed structure (which traced jaxprs, wired how), so a Python loop of
eager operations compiles once and replays after that.
"""
import collections
import sys
import threading
import weakref

import numpy as np
from jax.extend.core import Literal

from tinyjax import config
from tinyjax.choosing import check
from tinyjax.choosing.selection import current_choice, still_chosen
from tinyjax.core import report
from tinyjax.ir import profile, show
from tinyjax.ir.program import Builder
from tinyjax.ir.spmd import not_split_because


class Value:
  __slots__ = ("aval", "node", "index", "buffers", "host")

  def __init__(self, aval, node=None, index=0, host=None):
    self.aval, self.node, self.index = aval, node, index
    self.buffers: dict = {}  # backend -> that backend's buffer
    self.host = host  # a NumPy array, when the value came from the host and has not been needed yet

  @property
  def pending(self) -> bool:
    return self.node is not None

  def buffer_on(self, backend):
    """This value's buffer on `backend`, transferring it (through the host) if it lives elsewhere."""
    if (buffer := self.buffers.get(backend)) is None:
      host = self.to_host()
      with flush_lock:  # NB: as reads (below)
        buffer = self.buffers[backend] = backend.put(host)
    return buffer

  def placed_on(self, backend, aval=None, sharding=None) -> "Value":
    """A concrete copy of this value whose one buffer is on `backend` (of type `aval`: the same data, placed on a
    mesh; split over its devices as `sharding` says, where `backend` spans them)."""
    placed = Value(aval or self.aval, host=self.to_host())
    placed.buffers = {backend: backend.put(placed.host, sharding) if backend.spans_devices
                      else placed.buffer_on(backend)}
    if backend.spans_devices and (why := not_split_because(sharding, sharding.mesh.size)):
      report.record_copy(f"placed whole on each of {backend.device.name}, not split ({why}; tinygrad splits one "
                         "dimension evenly over all the devices)")
    return placed

  def to_host(self) -> np.ndarray:
    if self.node is not None:
      flush((self,))
    if self.host is None:
      # NB: under the flush lock: tinygrad is not thread-safe, and a read while another thread's flush is being
      # captured by TinyJit raised JitError (or would be captured into it)
      with flush_lock:
        backend, buffer = next(iter(self.buffers.items()))
        self.host = backend.get(buffer)
    return self.host


class DeletedValue(Value):
  """The value of a deleted Array (Array.delete): reading it raises JAX's error."""
  __slots__ = ()

  def to_host(self):
    raise RuntimeError(f"Array has been deleted with shape={self.aval.str_short()}.")

  def buffer_on(self, backend):
    self.to_host()


class Node:
  """One traced call in the pending queue: its ClosedJaxpr, its input Values and the user's line that made it."""
  __slots__ = ("traced", "inputs", "serial", "source")
  _serials = iter(range(1 << 62))

  def __init__(self, traced, inputs, source):
    self.traced, self.inputs, self.source = traced, inputs, source
    self.serial = next(Node._serials)


class _ThreadQueue(threading.local):
  def __init__(self):
    self.pending: list[weakref.ref] = []  # Arrays whose values are pending
    self.n_eqns = 0


_queue = _ThreadQueue()


def anything_pending() -> bool:
  """Whether this thread's buffer holds calls not yet flushed."""
  return bool(_queue.pending)


def queued() -> tuple[int, int]:
  """What this thread's next flush would run: (pending Arrays, equations)."""
  return len(_queue.pending), _queue.n_eqns


flush_lock = threading.RLock()  # NB: flushes are serialised; tinygrad's scheduler is not thread-safe.
_programs: collections.OrderedDict = collections.OrderedDict()
_PROGRAM_CACHE_SIZE = 512


# A flush is cut into programs whose cost reaches CHUNK_COST at most by their last call (`_cut`). An equation costs 1,
# or more when it expands into a long formula: the operations tinygrad builds for one element, measured on float32
# (mul: 4; exp: 83; sin: 344; lgamma: 689), divided by 4.
CHUNK_COST = 64
EXPANSION_COST = {
  **dict.fromkeys(("sin", "cos", "tan", "pow", "sinh", "cosh", "cbrt", "erf_inv"), 64),
  **dict.fromkeys(("lgamma", "digamma", "igamma", "igammac", "igamma_grad_a", "random_gamma_grad", "polygamma", "zeta",
                   "bessel_i0e", "bessel_i1e", "regularized_incomplete_beta"), 160),
  **dict.fromkeys(("exp", "exp2", "log", "log1p", "expm1", "tanh", "logistic", "erf", "erfc", "atan2", "atan", "asin",
                   "acos", "asinh", "acosh", "atanh"), 24),
}


def equation_cost(eqn) -> int:
  return EXPANSION_COST.get(eqn.name, 1)


# How each output of a traced call is made (`outputs_of`): computed by the call, a literal, a constant of the trace,
# or one of its inputs unchanged
COMPUTED, LITERAL, CONST, INPUT = range(4)


def outputs_of(closed_jaxpr) -> tuple:
  """(kind, aval, payload) for each output of a traced call: its index (COMPUTED), its value (LITERAL, CONST), or
  the index of the input it is (INPUT)."""
  jaxpr = closed_jaxpr.jaxpr
  outputs = []
  for index, var in enumerate(jaxpr.outvars):
    if isinstance(var, Literal):
      outputs.append((LITERAL, var.aval, _read_only(np.array(var.val, var.aval.dtype))))
    elif var in jaxpr.constvars:
      outputs.append((CONST, var.aval, _read_only(np.array(closed_jaxpr.consts[jaxpr.constvars.index(var)]))))
    elif var in jaxpr.invars:
      outputs.append((INPUT, None, jaxpr.invars.index(var)))
    else:
      outputs.append((COMPUTED, var.aval, index))
  return tuple(outputs)


def _read_only(host: np.ndarray) -> np.ndarray:
  host.flags.writeable = False  # NB: every call's output Value shares it
  return host


def append(traced, inputs: list[Value], source: str) -> list[Value]:
  """Add a traced call to the pending queue; returns its output Values (pending unless known without running)."""
  outs, node = _outputs(traced, inputs, source)
  if node is not None:
    _queue.n_eqns += traced.n_eqns
  return outs


def _outputs(traced, inputs: list[Value], source: str | None) -> tuple[list[Value], Node | None]:
  """The output Values of a traced call, and the Node that computes those it computes (None if none): pending on
  the node, an input returned unchanged, or a constant (known now)."""
  node = None
  outs = []
  for kind, aval, payload in traced.outputs:
    if kind == COMPUTED:
      node = node or Node(traced, inputs, source)
      outs.append(Value(aval, node, payload))
    elif kind == INPUT:
      outs.append(inputs[payload])
    else:
      outs.append(Value(aval, host=payload))
  return outs, node


def alone_key(traced) -> tuple:
  """(wiring, outputs) of the program of a flush of this call alone, on distinct inputs (`_wired`'s numbering)."""
  return (((traced.serial, tuple(-1 - i for i in range(len(traced.jaxpr.in_avals)))),),
          tuple((0, index) for kind, _, index in traced.outputs if kind == COMPUTED))


def run_alone(traced, inputs: list[Value]) -> list[Value] | None:
  """The output Values of a call whose inputs are concrete, with nothing else pending, computed now by the program a
  flush of the call alone compiled (under the same key), or None while there is none: no buffer, no collection of
  the queue, no wiring (a jitted call's fast path)."""
  values, node = _outputs(traced, inputs, None)
  if node is None:  # nothing to compute: its outputs are inputs or constants
    return values
  backend = placed_backend(flush_backend(), inputs)
  wiring, outs = traced.alone_key
  program_inputs = inputs
  if len(set(map(id, inputs))) < len(inputs):  # a Value passed twice is one input of the program, as in a flush
    wiring, program_inputs, _ = _wired([node], ())
  with flush_lock:
    compiled = _compiled((backend, wiring, outs))
    if compiled is None:
      return None
    execute(compiled, backend, [v for v in values if v.node is node], program_inputs)
  return values


def track(arrays) -> None:
  """Register the Arrays among `arrays` whose values are pending; flush when the queue has grown past its bound
  (TINYJAX_BUFFER_LIMIT)."""
  queue = _queue
  for array in arrays:
    if array._value.node is not None:
      queue.pending.append(weakref.ref(array))
  if queue.n_eqns > _buffer_limit():
    flush(whole=False)


_buffer_limit = config.reader("buffer_limit")


def flush(extra=(), whole: bool = True) -> None:
  """Run every pending value that a live Array (or `extra`) can still read, as one program (or a few: `run`).

  Not `whole` (the queue's bound reached, nothing read): the last chunk stays pending, so that the next flush
  begins where a chunk would (`_cut`), not at the call that crossed the bound."""
  with flush_lock:
    arrays = [a for r in _queue.pending if (a := r()) is not None]
    _queue.pending.clear()
    _queue.n_eqns = 0
    values = list({id(v): v for v in [a._value for a in arrays] + list(extra) if v.node is not None}.values())
    if not values:
      return
    backend = flush_backend()
    try:
      # NB: values whose run fails stay pending but untracked: reading one raises again, while later flushes of
      # other values do not rerun (and fail on) equations that nobody asked for
      recording = profile.active
      if recording is None:
        rest = run(values, backend, whole)
      else:
        with recording.span("flush", "flush", values=len(values)):
          rest = run(values, backend, whole)
      if rest is not None:
        track(a for a in arrays if a._value.node is not None)
        _queue.n_eqns = sum(node.traced.n_eqns for node in rest)
      return
    except Exception:
      asked = list({id(v): v for v in extra if v.node is not None}.values())
      if not asked or len(asked) == len(values):
        raise
    run(asked, backend)  # the values read may not need what failed: they alone decide whether the read raises


_FLUSH_SETTINGS = config.state_of("backend", "device", "check")
_flush_backends: dict = {}  # the state of those settings -> (the backend in effect's choice, the flush's backend)
_FLUSH_BACKENDS_KEPT = 64


def flush_backend():
  """The backend a flush runs on now: the one in effect, checked against XLA under TINYJAX_CHECK=1.

  NB: remembered by the state of the settings that choose it, while the choice is still the registry's backend (a
  jitted call asks at every call; choosing again costs twice as much)."""
  state = _FLUSH_SETTINGS()
  remembered = _flush_backends.get(state)
  if remembered is not None and still_chosen(remembered[0]):
    return remembered[1]
  choice = current_choice()
  backend = check.checked(choice[1])
  if len(_flush_backends) >= _FLUSH_BACKENDS_KEPT:
    _flush_backends.clear()
  _flush_backends[state] = (choice, backend)
  return backend


def placed_backend(backend, input_values):
  """The backend a program of these inputs runs on: the flush's, or the one over a set of devices of its kind where an
  input lives split (an array placed on a mesh, or computed from one), so that the work runs split as its data is."""
  kind = backend.kind
  if kind is not None:
    for v in input_values:
      if backend not in v.buffers:
        for placed, buffer in v.buffers.items():
          if placed.spans_devices and placed.kind == kind and placed.is_split(buffer):
            return placed
  return backend


def _collect(values):
  """The nodes the values need, in the order they were traced."""
  nodes, stack = {}, [v.node for v in values]
  while stack:
    node = stack.pop()
    if node.serial not in nodes:
      nodes[node.serial] = node
      for v in node.inputs:  # NB: a loop, not a generator: a flush walks every buffered call
        if v.node is not None:
          stack.append(v.node)
  return [nodes[s] for s in sorted(nodes)]


def run(values: list[Value], backend, whole: bool = True) -> list | None:
  """Compute the values: the calls they need as one program, or as a sequence of programs when its cost is high.
  Not `whole`: the calls of the last of several chunks stay pending (returned)."""
  nodes = _collect(values)
  wiring, input_values, outs = _wired(nodes, values)
  backend = placed_backend(backend, input_values)
  key = (backend, wiring, outs)
  compiled = _compiled(key)
  if compiled is None and backend.cuts_long_flushes and len(chunks := _cut(nodes)) > 1:
    del nodes  # NB: the chunks alone hold the calls: each is let go once run (_run_chunks), and what it read with it
    if not whole:
      later = chunks.pop()
      _run_chunks(chunks, values, input_values, backend, later)
      return later
    _remember(key, _run_chunks(chunks, values, input_values, backend))
    return None
  if compiled is None:
    compiled = _remember(key, _compile(nodes, wiring, input_values, outs, backend))
  if type(compiled) is Sequence:
    compiled.run(backend, values, input_values)
  else:
    execute(compiled, backend, values, input_values)
  return None


def _wired(nodes, values) -> tuple:
  """The structure of a program of `nodes` computing `values`: for each node its trace and where each input comes
  from (an earlier node's output (position, index), or program input i as -1 - i); its inputs; its outputs."""
  position = {node.serial: i for i, node in enumerate(nodes)}
  inputs: dict[int, int] = {}  # id(value) -> input position
  input_values: list[Value] = []
  wiring = []
  for node in nodes:
    refs = []
    for v in node.inputs:
      made_by = v.node
      if made_by is not None:
        refs.append((position[made_by.serial], v.index))
      else:
        at = inputs.get(id(v))
        if at is None:
          at = inputs[id(v)] = len(input_values)
          input_values.append(v)
        refs.append(-1 - at)
    wiring.append((node.traced.serial, tuple(refs)))
  return tuple(wiring), input_values, tuple((position[v.node.serial], v.index) for v in values)


def _compile(nodes, wiring, input_values, outs, backend):
  program = _build(nodes, wiring, input_values, outs)
  if config.validated("check_types") == "1":
    show.check_types(program)
  compiled = backend.compile(program)
  report.record_compile()
  if config.validated("log_compiles") == "1":
    print(f"tinyjax: compiling a program of {len(program.eqns)} equations for {backend!r} "
          f"(a new structure of {len(nodes)} buffered calls, the last from {nodes[-1].source}):\n"
          f"{show.show(program, backend.why_not)}", file=sys.stderr)
  return compiled


def _remember(key, compiled):
  _programs[key] = compiled
  if len(_programs) > _PROGRAM_CACHE_SIZE:
    _programs.popitem(last=False)
  return compiled


def _cut(nodes) -> list[list[Node]]:
  """The nodes, in order, cut into chunks of bounded cost (`Traced.cost`), each a program of its own.

  Building a program costs time that grows faster than its size (tinygrad's rewrites of one fused graph, a kernel's
  compile): a long eager chain flushed whole was one program whose build took minutes. Cut into chunks, each
  program's build is bounded, and a loop's chunks repeat: the same structure, compiled once and replayed. Once a
  chunk's cost reaches CHUNK_COST, it ends before the next call of the function traced first among its calls: the
  cuts of a loop fall at the same place of its step whatever the phase the flush began at (a flush by the queue
  limit ends anywhere in a step), so its chunks have one structure (a few, when that function is called more than
  once a step). Cut before that call, not after it, a loop that begins at that call is whole steps from its first
  chunk to its last (cut after it, the first and the last chunks were two structures more, each a new kernel). A
  chunk that finds no such call ends at 4 times CHUNK_COST; a flush that costs less than that is not cut (tinygrad
  fuses across what a cut would separate)."""
  if sum(node.traced.cost for node in nodes) < 4 * CHUNK_COST:
    return [nodes]
  chunks, chunk, total, first = [], [], 0, None
  for node in nodes:
    serial = node.traced.serial
    if total >= CHUNK_COST and serial == first or total >= 4 * CHUNK_COST:
      chunks.append(chunk)
      chunk, total, first = [], 0, None
    chunk.append(node)
    total += node.traced.cost
    first = serial if first is None else min(first, serial)
  chunks.append(chunk)
  return chunks


CHAIN_TRIES = 6  # the runs of a Sequence at which its backend is asked to chain its steps (Sequence._chain)


class Sequence:
  """A flush cut into chunks, as it ran the first time: each chunk's compiled program (in the cache under the chunk's
  own key, shared with every flush that holds the same chunk) and where its inputs come from, in order. A flush of
  the same structure runs it again without cutting, wiring and looking up each chunk; once the backend can run the
  chunks' programs together (Backend.chain: tinygrad's launcher, one list of their kernels), it runs them so."""
  __slots__ = ("steps", "outputs", "released", "placed", "chained", "counted", "tries")

  def __init__(self, steps, outputs, placed):
    self.steps = steps  # (compiled, positions of its inputs in the run's values, avals of its outputs)
    self.outputs = outputs  # positions of the flush's outputs in the run's values
    # NB: a value between chunks is let go after the last chunk that reads it, so that a chunk run again and again
    # writes into the outputs it made before (replay.py's pool) instead of new buffers
    last_read = {i: k for k, (_, inputs, _) in enumerate(steps) for i in inputs}
    self.released = [[] for _ in steps]
    for i, k in last_read.items():
      if i not in outputs:
        self.released[k].append(i)
    self.placed = placed  # what each step's last run executed where
    self.chained = None  # the steps run as one by the backend (Backend.chain), once it can
    self.counted: list = []  # (placement, runs) of the steps, counted at each chained run
    self.tries = CHAIN_TRIES

  def run(self, backend, values: list[Value], input_values: list[Value]) -> None:
    if profile.active is None and (self.chained is not None or self._chain(backend, len(input_values))):
      outs = self.chained([v.buffer_on(backend) for v in input_values])
      if outs is not None:  # NB: each step executed where its last run did (Backend.chain)
        for placement, runs in self.counted:
          report.record_run(placement, runs)
        for value, out in zip(values, outs, strict=True):
          value.buffers, value.node, value.host = {backend: out}, None, None
        return
    made = list(input_values)  # NB: the values of a run: the flush's inputs, then each chunk's outputs in order
    for k, ((compiled, inputs, avals), released) in enumerate(zip(self.steps, self.released)):
      outs = [Value(aval) for aval in avals]
      self.placed[k] = execute(compiled, backend, outs, [made[i] for i in inputs])
      made += outs
      for i in released:
        made[i] = None
    for value, at in zip(values, self.outputs, strict=True):
      value.buffers, value.node, value.host = made[at].buffers, None, None

  def _chain(self, backend, n_inputs: int) -> bool:
    """Whether the backend now runs the steps as one (asked at each of the first runs until it does: a step's
    program is replayed by tinygrad's launcher once it ran twice, a factorization's five times). NB: the report
    counts each step's run as before."""
    if not self.tries:
      return False
    self.tries -= 1
    self.chained = backend.chain(self.steps, n_inputs, self.outputs, self.released)
    if self.chained is None:
      return False
    runs = {}  # id -> [placement, runs]
    for placement in self.placed:
      runs.setdefault(id(placement), [placement, 0])[1] += 1
    self.counted = list(runs.values())
    return True


def _run_chunks(chunks, values: list[Value], input_values: list[Value], backend, later=()) -> Sequence | None:
  """Run the chunks in order, each a program of its own (its outputs: the values asked for, then those later chunks
  read, `later`'s calls among their readers); the Sequence that runs them again, when there are no `later` calls."""
  chunk_of = {node.serial: i for i, chunk in enumerate([*chunks, later]) for node in chunk}
  outputs: list[list[Value]] = [[] for _ in chunks]
  seen = {id(v) for v in values if chunk_of[v.node.serial] == len(chunks)}  # computed later
  for v in values:
    if id(v) not in seen:
      seen.add(id(v))
      outputs[chunk_of[v.node.serial]].append(v)
  for i, chunk in enumerate([*chunks, later]):
    for node in chunk:
      for v in node.inputs:
        if v.node is not None and id(v) not in seen and chunk_of[v.node.serial] != i:
          seen.add(id(v))
          outputs[chunk_of[v.node.serial]].append(v)
  made = {id(v): i for i, v in enumerate(input_values)}  # id(value) -> its position in a run's values
  steps, placed = [], []
  for k, chunk in enumerate(chunks):
    outs, outputs[k] = outputs[k], None
    wiring, chunk_inputs, positions = _wired(chunk, outs)
    key = (backend, wiring, positions)
    compiled = _compiled(key) or _remember(key, _compile(chunk, wiring, chunk_inputs, positions, backend))
    steps.append((compiled, tuple(made[id(v)] for v in chunk_inputs), tuple(v.aval for v in outs)))
    placed.append(execute(compiled, backend, outs, chunk_inputs))  # NB: its outputs concrete: later chunks read them
    made.update({id(v): len(made) + i for i, v in enumerate(outs)})
    chunks[k] = chunk = None  # NB: run: its calls, and the values they read, are let go (memory stays flat)
  return None if later else Sequence(steps, tuple(made[id(v)] for v in values), placed)


def _compiled(key):
  """The program compiled for a flush's key (backend, wiring, outputs), if it is still cached (under flush_lock)."""
  compiled = _programs.get(key)
  if compiled is not None:
    _programs.move_to_end(key)
  return compiled


def execute(compiled, backend, values: list[Value], input_values: list[Value]):
  """Run a compiled program on its inputs' buffers (under flush_lock): `values` become its outputs, concrete, and
  the run is counted in the report. Returns what the run executed where."""
  # NB: auto's programs take and make buffers of the backend they run on, which their first run chooses
  results, placement = compiled.run([v.buffer_on(compiled.target or backend) for v in input_values])
  report.record_run(placement)
  made_on = compiled.target or backend
  for value, result in zip(values, results, strict=True):
    value.buffers = {made_on: result}
    value.node = value.host = None
  return placement


def _build(nodes, wiring, inputs, outs):
  builder = Builder([v.aval for v in inputs])
  slots = {}
  for i, (node, (_, refs)) in enumerate(zip(nodes, wiring)):
    args = [slots[r] if isinstance(r, tuple) else -1 - r for r in refs]
    results = builder.inline(node.traced.jaxpr.jaxpr, node.traced.jaxpr.consts, args, node.source)
    slots.update(((i, j), atom) for j, atom in enumerate(results))
  return builder.build([slots[o] for o in outs])
