"""The jit fast path: a call of a jitted function whose program is compiled already runs that program at once.

A `tinyjax.jit` call (and patched `jax.jit`'s) is in general a traced call appended to the pending queue, then a flush
of the queue. When the queue holds no other pending work and every input is concrete, that flush runs one program:
the one compiled for (the call's trace, which inputs share a Value, the backend), recorded as one run. The first
such call of a function goes that general way; what it traced is remembered here by (function, tree structure,
input avals with their weak types, static values, JAX's trace context). A later call with the same key finds the
compiled program in the flush's own cache, under the same key the flush would have used, and runs it: no Node, no
collection of the queue, no wiring, no tree flattening with a callback per leaf.

The settings are read at each call (the backend, device, checking mode and fallback policy in effect now pick the
program, as at a flush); the fallback policy is applied as at a traced call. Anything else goes the general way,
which gives the same result: a pending or deleted input, other pending work (run together with the call, as
before), a tracer, an unhashable static argument, scalars a function needs static, a trace or a program no longer
cached.
"""
import jax
import numpy as np
from jax._src import config as jax_config  # NB: trace_context(), the settings JAX's own jit caches key on, is not public

from tinyjax.core import pending, tracing
from tinyjax.core.array import Array
from tinyjax.core.pending import Value
from tinyjax.core.tracing import Scalar

_SCALAR_TYPES = (int, float, complex)
_HOST_ARRAYS = (np.ndarray, np.generic)
_entries: dict = {}
_ENTRIES_KEPT = 4096
MISS = object()


class _Entry:
  """A remembered call: its trace (valid while the trace cache still holds it), its dynamic leaves and their avals,
  how each output is made, and the outputs of its program (as a flush of this call alone numbers them)."""
  __slots__ = ("traced", "trace_key", "context", "generation", "signature", "scalars_dynamic", "dynamic", "avals",
               "outputs", "program_outs", "forwards", "wiring")

  def __init__(self, traced, trace_key, context, signature, scalars_dynamic, dynamic, avals):
    self.traced, self.trace_key, self.context, self.signature = traced, trace_key, context, signature
    self.generation = tracing.trace_generation()  # the trace cache's, when the trace was last seen in it
    self.scalars_dynamic = scalars_dynamic  # valid until a call finds the function needs them static
    self.dynamic, self.avals = tuple(dynamic), tuple(avals)
    self.outputs = traced.outputs
    self.program_outs = tuple((0, index) for kind, _, index in self.outputs if kind == pending.COMPUTED)
    self.forwards = any(kind == pending.INPUT for kind, _, _ in self.outputs)
    # the flush's wiring of this call alone when its inputs are distinct Values (each its own program input)
    self.wiring = ((traced.serial, tuple(-1 - i for i in range(len(self.dynamic)))),)


def prepare(fn, args: tuple, kwargs: dict):
  """What a call's fast path needs, (leaves, key), or None when the call must go the general way."""
  if pending.anything_pending() or "device" in kwargs or tracing.inside_transformation() or tracing.jax_checks_values():
    return None
  marked = False
  for a in args:
    if type(a) in _SCALAR_TYPES:
      args, marked = tracing.scalars_marked(fn, args, kwargs), True
      break
  leaves, treedef = jax.tree_util.tree_flatten((args, kwargs))  # NB: Arrays and Scalars are leaves
  # scalars the function needs static (jit's static_argnums): each value is a trace of its own
  static_scalars = marked and tracing.scalars_static(tracing.scalars_signature(fn, treedef, leaves))
  signature = []
  for leaf in leaves:
    kind = type(leaf)
    if kind is Array:
      value = leaf._value
      if value.node is not None or type(value) is not Value:  # pending, or deleted
        return None
      signature.append(value.aval)
    elif kind is Scalar:
      signature.append(tracing.static_key(leaf.value) if static_scalars else (Scalar, type(leaf.value)))
    elif isinstance(leaf, _HOST_ARRAYS):
      signature.append((np.ndarray, leaf.shape, leaf.dtype, getattr(leaf, "weak_type", False)))
    elif isinstance(leaf, (jax.core.Tracer, Array)):  # a tracer: the general way defers to JAX
      return None
    elif isinstance(leaf, jax.Array):
      signature.append((jax.Array, jax.typeof(leaf)))
    else:
      try:
        signature.append(tracing.static_key(leaf))
      except TypeError:  # unhashable
        return None
  return leaves, (fn, treedef, tuple(signature)), jax_config.trace_context(), static_scalars


def run(prepared):
  """The outputs of the call, run at once, or MISS."""
  leaves, key, context, _ = prepared
  entry = _entries.get(key)
  # NB: JAX's trace context (46 settings) is compared, not hashed: the hash costs twice the comparison
  if entry is None or entry.context != context or entry.scalars_dynamic and tracing.scalars_static(entry.signature):
    return MISS
  traced = entry.traced
  if entry.generation != tracing.trace_generation():  # the trace cache dropped a trace since: is it this one?
    if tracing.cached_trace(entry.trace_key) is not traced:
      return MISS
    entry.generation = tracing.trace_generation()
  inputs = [tracing.input_value(leaves[i], aval) for i, aval in zip(entry.dynamic, entry.avals)]
  backend = pending.placed_backend(pending.flush_backend(), inputs)
  unique, wiring = inputs, entry.wiring
  if len(set(map(id, inputs))) < len(inputs):  # a Value passed twice is one input of the program, as in a flush
    unique, wiring = _shared(traced, inputs)
  computed = []
  if entry.program_outs:
    with pending.flush_lock:
      compiled = pending.compiled_program((backend, wiring, entry.program_outs))
      if compiled is None:
        return MISS
      traced.check_policies()
      computed = [Value(aval) for kind, aval, _ in entry.outputs if kind == pending.COMPUTED]
      pending.execute(compiled, backend, computed, unique)
  else:
    traced.check_policies()
  return jax.tree_util.tree_unflatten(traced.out_tree, _outputs(entry, leaves, inputs, computed))


def _shared(traced, inputs) -> tuple[list, tuple]:
  """The program's inputs (each Value once, at its first occurrence) and the flush's wiring of the call."""
  positions: dict[int, int] = {}  # id(value) -> its position among the program's inputs
  unique, refs = [], []
  for v in inputs:
    position = positions.get(id(v))
    if position is None:
      position = positions[id(v)] = len(unique)
      unique.append(v)
    refs.append(-1 - position)
  return unique, ((traced.serial, tuple(refs)),)


def _outputs(entry, leaves, inputs, computed) -> list:
  """The call's output Arrays, as tracing.call makes them from pending.append's Values."""
  # an output that is an input unchanged is that input's Array itself, as in JAX
  forwarded = {id(leaves[i]._value): leaves[i] for i in entry.dynamic if type(leaves[i]) is Array} \
      if entry.forwards else {}
  computed = iter(computed)
  outs = []
  for kind, aval, payload in entry.outputs:
    if kind == pending.COMPUTED:
      outs.append(Array(next(computed)))
    elif kind == pending.INPUT:
      v = inputs[payload]
      out = forwarded.get(id(v))
      outs.append(Array(v) if out is None else out)
    else:
      outs.append(Array(Value(aval, host=payload)))
  return outs


def remember(fn, prepared) -> None:
  """After the call went the general way (with an empty queue and concrete inputs): remember its trace."""
  leaves, key, context, static_scalars = prepared
  treedef = key[1]
  signature = tracing.scalars_signature(fn, treedef, leaves)
  if signature is not None and tracing.scalars_static(signature) != static_scalars:
    return  # the call found its scalars must be static: the next call's key says so
  scalars_dynamic = signature is not None and not static_scalars
  trace_key, dynamic, avals, _ = tracing.trace_key(fn, treedef, leaves, scalars_dynamic)
  if (trace_key is None or (traced := tracing.cached_trace(trace_key)) is None or traced.runs_on_jax
          or traced.maps_over_a_mesh):
    return
  if len(_entries) >= _ENTRIES_KEPT:
    _entries.pop(next(iter(_entries)))
  _entries[key] = _Entry(traced, trace_key, context, signature, scalars_dynamic, dynamic, avals)
