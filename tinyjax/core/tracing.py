"""Calls of JAX functions on tinyjax inputs: trace once on abstract values, append to the pending queue, return lazy
Arrays.

`call(fn, args, kwargs)` is the single entry point every mirrored function goes through:
- inside a JAX transformation (a trace is current, or an input is a tracer), defer to `fn` itself, so that the call
  is staged in that trace exactly as JAX stages it (`jnp.zeros(3)` inside `jit` is part of the jitted program);
- otherwise the call is traced with `jax.make_jaxpr` on the inputs' avals (cached by function, avals and static
  arguments) and its equations appended to the pending buffer;
- top-level Python scalars are traced as weak-typed inputs, so that `x * 2.0` and `x * 3.0` share one jaxpr;
  when the function needs the scalar's value (an axis, a shape) it is retried with the scalars static (not a jitted
  function's: JAX's jit traces them, and its error is JAX's);
- a call whose result holds no array (`lax.broadcast_shapes`, `lax.conv_dimension_numbers`, `lax.dtype`) returns
  JAX's value, not Arrays made of it;
- functions that need concrete values (`jnp.unique`, `x[x > 0]`, ...) run eagerly on JAX's own arrays, and so do
  calls that draw random bits with jax_threefry_partitionable off, calls that factorize 16-bit floats, which JAX
  refuses, calls that hold a value only JAX's runtime holds (a Ref, a custom element type) (see Traced.runs_on_jax),
  calls on an array with shards in other processes (jax.distributed), and every call while jax_debug_nans or
  jax_debug_infs is on.
"""
import collections
import dataclasses
import functools
import itertools
import operator
import sys
import weakref
from typing import Any, Callable

import jax
import numpy as np
from jax._src import config as jax_config  # NB: trace_context(), the settings JAX's own jit caches key on, is not public
from jax._src import core as jax_core  # NB: the current trace (are we inside a transformation?) is not public
from jax.extend.core import ClosedJaxpr, Literal, jaxpr_as_fun, jaxprs_in_params

from tinyjax import config
from tinyjax.ir.float64 import uses_float64
from tinyjax.choosing.selection import backend_for, backend_over, check_fallback, current_backend
from tinyjax.core import pending
from tinyjax.core.pending import DeletedValue, Value
from tinyjax.core.report import record_eager
from tinyjax.ir import keys
from tinyjax.ir.backend import Device
from tinyjax.ir.program import program_of
from tinyjax.ir.source import user_source
from tinyjax.ir.spmd import shard_map_shardings

_VALUE_DEPENDENT = (jax.errors.ConcretizationTypeError, jax.errors.NonConcreteBooleanIndexError,
                    jax.errors.TracerArrayConversionError, jax.errors.TracerIntegerConversionError)
_serials = itertools.count()
_traces: dict = {}
_static_scalar_calls: set = set()  # call signatures that need their Python scalars as static values
# JAX's jitted functions (tinyjax.jit's) -> the positions of their static arguments. JAX's jit traces every other
# argument: their Python scalars are traced, and an error of the trace is JAX's own (never retried with them static)
_jitted_statics: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
_TRACE_CACHE_SIZE = 4096
# NB: how these hash the key's counters depends on jax_threefry_partitionable, read when JAX lowers them; tinyjax's
# rules (backends/tinygrad/random.py) hash as the partitionable scheme (the default) does
_RANDOM_BY_SCHEME = frozenset({"random_bits", "random_split"})
# NB: LAPACK's factorizations (and cuSOLVER's) have no 16-bit floats: JAX's lowerings of these raise
# NotImplementedError ("Unsupported dtype float16") on every platform, where tinygrad's rules would compute them
_FACTORIZATIONS = frozenset({"cholesky", "eig", "eigh", "geqp3", "geqrf", "hessenberg", "householder_product", "lu",
                             "qr", "schur", "svd", "tridiagonal", "tridiagonal_solve"})
_HALF_FLOATS = frozenset({np.dtype(np.float16), np.dtype(jax.numpy.bfloat16)})
# what a traced function's result holds as an array (the rest of it, Python numbers, dtypes, strings, is static)
_ARRAY_RESULTS = (jax.core.Tracer, jax.Array, np.ndarray)


@dataclasses.dataclass(frozen=True, eq=False)
class Traced:
  jaxpr: ClosedJaxpr
  out_tree: Any
  serial: int
  # its calls run as JAX's own eager calls, at the call, under the settings in effect: it draws random bits with
  # jax_threefry_partitionable off, which a flush (later, on other rules) would not honour, or it factorizes a
  # 16-bit float matrix, which JAX refuses (its error, raised at the call)
  runs_on_jax: bool = False
  # what the function returned when no part of it is an array (`lax.broadcast_shapes`, `lax.conv_dimension_numbers`,
  # `lax.dtype`: helpers that compute on shapes, dtypes and static values): (its tree, its leaves), which every call
  # with this trace's key returns as JAX does, not as Arrays (the jaxpr then has no outputs)
  static_result: tuple | None = None

  @functools.cached_property
  def program(self):
    """The jaxpr flattened (calls inlined), to check which equations the backend runs natively."""
    return program_of(self.jaxpr)

  @functools.cached_property
  def text(self) -> str:
    """The jaxpr as JAX prints it: equal for two traces of one program (what XLA's propagation of shardings reads)."""
    return str(self.jaxpr)

  @functools.cached_property
  def outputs(self) -> tuple:
    """How each output is made (pending.outputs_of)."""
    return pending.outputs_of(self.jaxpr)

  @functools.cached_property
  def alone_key(self) -> tuple:
    """The key of the program of a flush of this call alone (pending.alone_key)."""
    return pending.alone_key(self)

  @functools.cached_property
  def n_eqns(self) -> int:
    return len(self.jaxpr.jaxpr.eqns)

  @functools.cached_property
  def maps_over_a_mesh(self) -> bool:
    """Whether it holds a shard_map over a mesh of devices (pmap is jit of one) or a jit whose out_shardings name
    one: its results are placed on the mesh (_placed_as_jax_propagates), so its calls are not remembered for a fast
    path that would not place them."""
    return _places_on_a_mesh(self.jaxpr.jaxpr)

  @functools.cached_property
  def mesh_shardings(self) -> list:
    """For each input, the NamedSharding by which a shard_map over a mesh (pmap's) splits it, or None."""
    return shard_map_shardings(self.jaxpr.jaxpr)

  @functools.cached_property
  def cost(self) -> int:
    """What its equations add to a flushed program's cost (pending.CHUNK_COST)."""
    return sum(map(pending.equation_cost, self.program.eqns))

  @functools.cached_property
  def uses_float64(self) -> bool:
    """Whether an equation computes in float64 (which TINYJAX_F64 may forbid on the device)."""
    return any(map(uses_float64, self.program.eqns))

  def check_policies(self, source: str | None = None) -> None:
    """TINYJAX_FALLBACK and TINYJAX_F64 applied at the user's call (`source`, found here if not given): raise or
    warn there.

    NB: asked at every call; under the defaults (fallback xla) only a call with float64 can be refused."""
    if self.uses_float64 or _fallback() != "xla":
      check_fallback(current_backend(), self.program.eqns, source or user_source())


_fallback = config.reader("fallback")


class Scalar:
  """A top-level Python scalar argument, kept a pytree leaf so it can be traced as a weak-typed input."""
  __slots__ = ("value",)

  def __init__(self, value):
    self.value = value


class _ArrayType:
  """Placeholder for the class of tinyjax Arrays until tinyjax.core.array (which calls this module) defines it."""


Array: type = _ArrayType
CommittedArray: type = _ArrayType
ShardedArray: type = _ArrayType
_LAZY_TYPES: frozenset = frozenset()  # the Arrays a call site takes as inputs: Array and its keys' class


def set_array_types(array_type: type, key_type: type, committed_type: type, sharded_type: type) -> None:
  """Called once by tinyjax.core.array: the classes `call` wraps its results in (layers go one way: array uses us)."""
  global Array, CommittedArray, ShardedArray, _LAZY_TYPES
  Array, CommittedArray, ShardedArray = array_type, committed_type, sharded_type
  _LAZY_TYPES = frozenset({array_type, key_type})


def is_array(x) -> bool:
  return isinstance(x, Array)


def _is_leaf(x) -> bool:
  return is_array(x) or isinstance(x, Scalar)


def host_aval(x):
  if keys.is_key(x.dtype) or isinstance(x, jax.Array) and _typed_sharding(jax.typeof(x)) is not None:
    return jax.typeof(x)  # keys' types; a JAX array's placement on a mesh, which its type holds
  dtype = jax.dtypes.canonicalize_dtype(x.dtype)
  # a weak-typed JAX array (`jax.device_put(1.0)`), or JAX's own weak-typed host literal (lax's TypedNdArray)
  return jax.core.ShapedArray(np.shape(x), dtype, weak_type=bool(getattr(x, "weak_type", False)))


@functools.cache
def _scalar_aval(kind: type, x64: bool):
  """The weak-typed aval of a Python scalar traced as an input (`x64`: part of the cache key)."""
  dtype = jax.dtypes.canonicalize_dtype({int: np.int64, float: np.float64, complex: np.complex128}[kind])
  return jax.core.ShapedArray((), dtype, weak_type=True)


def static_key(x):
  if isinstance(x, float):
    return (float, x.hex())  # NB: -0.0 == 0.0 and NaN != NaN; the bits are the key
  if isinstance(x, complex):
    return (complex, x.real.hex(), x.imag.hex())
  if isinstance(x, slice):
    return (slice, static_key(x.start), static_key(x.stop), static_key(x.step))
  hash(x)  # unhashable statics raise TypeError here: such calls are traced without caching
  return (type(x), x)


def input_value(leaf, aval) -> Value:
  if is_array(leaf):
    if isinstance(leaf._value, DeletedValue):
      leaf._value.to_host()  # raises JAX's error at the call
    return leaf._value
  if isinstance(leaf, Scalar):
    return _scalar_value(leaf.value, aval)
  if isinstance(leaf, jax.Array):
    return _jax_array_value(leaf, aval)
  # NB: a copy, as JAX makes at the call: the caller may write into its NumPy array before the flush reads it
  return Value(aval, host=np.array(leaf, aval.dtype))


_jax_array_values: dict[int, tuple[weakref.ref, Value]] = {}


def _jax_array_value(array: jax.Array, aval) -> Value:
  """One Value per live jax.Array (they are immutable): flax parameters passed to every call of a tinyjax.jit
  function cross to the device once, not at every call."""
  entry = _jax_array_values.get(id(array))
  if entry is not None and entry[0]() is array and entry[1].aval == aval:
    return entry[1]
  host = keys.key_data(array) if keys.is_key(aval.dtype) else array
  value = Value(aval, host=np.asarray(host))
  key = id(array)
  # NB: the callback holds the dict itself: at interpreter exit the module's globals may already be gone
  _jax_array_values[key] = (weakref.ref(array, lambda _, cache=_jax_array_values: cache.pop(key, None)), value)
  return value


_scalar_values: collections.OrderedDict = collections.OrderedDict()
_SCALAR_VALUES_KEPT = 256


def _scalar_value(value, aval) -> Value:
  """One Value per recent (Python scalar, aval): its device buffer is made once, not at every call that passes it
  (an eager loop's `x * 1.01` would otherwise copy 1.01 to the device at each flush)."""
  # NB: a number is its own key but for the ones that equal another (-0.0 == 0.0) or not themselves (NaN)
  key = (value, aval) if value and value == value else (static_key(value), aval)
  if (cached := _scalar_values.get(key)) is not None:
    _scalar_values.move_to_end(key)
    return cached
  cached = _scalar_values[key] = Value(aval, host=np.asarray(value, aval.dtype))
  if len(_scalar_values) > _SCALAR_VALUES_KEPT:
    _scalar_values.popitem(last=False)
  return cached


def trace_key(fn, treedef, leaves, scalars_dynamic: bool):
  """The key of a call's trace in the cache (None when a static argument is unhashable), the positions of its
  dynamic leaves, their avals, and the static values."""
  dynamic, avals, statics = [], [], []
  for i, leaf in enumerate(leaves):
    if is_array(leaf):
      aval = leaf.aval
    elif isinstance(leaf, (np.ndarray, np.generic, jax.Array)):
      aval = host_aval(leaf)
    elif isinstance(leaf, Scalar) and scalars_dynamic:
      aval = _scalar_aval(type(leaf.value), jax.config.jax_enable_x64)
    else:
      statics.append(leaf.value if isinstance(leaf, Scalar) else leaf)
      continue
    dynamic.append(i)
    avals.append(aval)
  try:
    key = (fn, treedef, tuple(avals), tuple(map(static_key, statics)), tuple(dynamic), jax_config.trace_context())
  except TypeError:
    key = None
  return key, dynamic, avals, statics


def _typed_sharding(aval):
  """The sharding an aval's type holds (a value placed on a mesh of explicit axes), or None."""
  sharding = getattr(aval, "sharding", None)
  return None if sharding is None or sharding.mesh.empty else sharding


def _trace(fn, treedef, leaves, scalars_dynamic: bool):
  """The Traced call and the positions of its dynamic leaves."""
  key, dynamic, avals, statics = trace_key(fn, treedef, leaves, scalars_dynamic)
  if key is not None and (traced := _traces.get(key)) is not None:
    return traced, dynamic, avals

  def flat_fn(*dynamic_leaves):
    full = list(leaves)
    for i, x in zip(dynamic, dynamic_leaves):
      full[i] = x
    full = [x.value if isinstance(x, Scalar) else x for x in full]
    args, kwargs = jax.tree_util.tree_unflatten(treedef, full)
    out = fn(*args, **kwargs)
    out_leaves, out_tree = jax.tree_util.tree_flatten(out)
    # a result of no leaves (None: a function run for its effect, as a jitted one) is appended as any call is
    if not out_leaves or any(isinstance(x, _ARRAY_RESULTS) for x in out_leaves):
      out_trees.append(out_tree)
      return out_leaves
    # a value that holds no array depends on the static arguments and the inputs' avals only, all in the key: it is
    # JAX's answer to every call with this key (make_jaxpr would make its numbers Arrays and refuse a dtype)
    static_result.append((out_tree, tuple(out_leaves)))
    out_trees.append(jax.tree_util.tree_structure(()))
    return []

  # NB: the leaves, not the tree, go back to make_jaxpr: its return_shape would unflatten the user's pytree class
  # with ShapeDtypeStructs, which its unflatten may refuse (JAX's vmap never does that)
  static_result, out_trees = [], []
  specs = [jax.ShapeDtypeStruct(a.shape, a.dtype, weak_type=a.weak_type, sharding=_typed_sharding(a)) for a in avals]
  closed = jax.make_jaxpr(flat_fn)(*specs)
  if config.get("log_compiles") == "1":
    _log_miss(fn, key, avals, statics)
  _raise_jaxs_errors(closed.jaxpr)
  traced = Traced(closed, out_trees[0], next(_serials),
                  # an effect with no array result (a print) happens at the call, as JAX's own call makes it happen
                  runs_on_jax=(_runs_on_jax(closed.jaxpr, jax.config.jax_threefry_partitionable)
                               or bool(closed.effects and (static_result or not closed.jaxpr.outvars))),
                  static_result=static_result[0] if static_result else None)
  if key is not None:
    if len(_traces) >= _TRACE_CACHE_SIZE:
      global _trace_generation
      _trace_generation += 1  # NB: remembered calls of the trace dropped no longer hold
      _traces.pop(next(iter(_traces)))
    _traces[key] = traced
  return traced, dynamic, avals


def _raise_jaxs_errors(jaxpr) -> None:
  """Raise, at the call, the error JAX raises when it runs an equation the trace holds: the tangent of a custom_vjp
  function (custom_lin, whose impl is JAX's TypeError); a generic reduction over an axis named twice, which JAX's
  lowering refuses (tinyjax traces a Python init value as an input, where JAX's eager call, given a constant, took
  the monoid's primitive, whose shape rule raises this ValueError). NB: a flush would raise only when a result is
  read."""
  for eqn in jaxpr.eqns:
    if eqn.primitive.name == "custom_lin":
      eqn.primitive.impl()
    if eqn.primitive.name == "reduce" and len(set(eqn.params["dimensions"])) < len(eqn.params["dimensions"]):
      raise ValueError(f"duplicate value in 'axes' of reduction: {eqn.params['dimensions']}")
    for sub in jaxprs_in_params(eqn.params):
      _raise_jaxs_errors(sub)


def _runs_on_jax(jaxpr, partitionable: bool, in_a_shard_map: bool = False) -> bool:
  """Whether the jaxpr (or one inside it) has an equation whose calls must be JAX's own (Traced.runs_on_jax): one
  that draws random bits or splits keys under the legacy scheme, a factorization of 16-bit floats, a value JAX
  holds (_held_by_jax), or a pure_callback in a shard_map's body that says nothing of its batching (its result
  claims no dependence on the device, so JAX's out_specs may call it replicated, while each device's callback returns
  its own: JAX keeps each device's, a tinyjax Array would keep one)."""
  if any(map(_held_by_jax, jaxpr.invars + jaxpr.outvars + jaxpr.constvars)):
    return True
  for eqn in jaxpr.eqns:
    name = eqn.primitive.name
    inside = in_a_shard_map or name == "shard_map"
    if (name in _RANDOM_BY_SCHEME and not partitionable
            or name in _FACTORIZATIONS and any(v.aval.dtype in _HALF_FLOATS for v in eqn.invars)
            or name == "pure_callback" and in_a_shard_map and eqn.params["vmap_method"] is None
            or any(map(_held_by_jax, eqn.invars + eqn.outvars))
            or any(_runs_on_jax(sub, partitionable, inside) for sub in jaxprs_in_params(eqn.params))):
      return True
  return False


def _held_by_jax(atom) -> bool:
  """A mutable array reference (jax.ref: JAX's runtime holds its buffer), a value of one of JAX's custom element
  types (an extended dtype other than a PRNG key's: only JAX's lowering knows its physical form), or a value whose
  type is reduced or unreduced over mesh axes (`_partial_over_a_mesh`)."""
  if isinstance(atom.aval, jax.ref.AbstractRef):
    return True
  dtype = getattr(atom.aval, "dtype", None)
  return (dtype is not None and jax.dtypes.issubdtype(dtype, jax.dtypes.extended) and not keys.is_key(dtype)
          or partial_over_a_mesh(_typed_sharding(atom.aval)))


def partial_over_a_mesh(sharding) -> bool:
  """Whether values of this sharding are unreduced over a mesh axis (each device holds a part of a sum: JAX's SPMD
  partitioner decides which) or reduced (each holds the whole, an invariant JAX's collectives rely on): their shards
  are not pieces of one value, which is all a tinyjax Array holds, so the calls that make or read one are JAX's."""
  spec = getattr(sharding, "spec", None)
  return spec is not None and bool(spec.unreduced or spec.reduced)


_last_keys: dict = {}


def _log_miss(fn, key, avals, statics):
  """TINYJAX_LOG_COMPILES=1: say what is traced, and why the cache missed."""
  name = getattr(fn, "__name__", repr(fn))
  previous = _last_keys.get(fn)
  if previous is None:
    reason = "first call"
  elif key is None:
    reason = "an unhashable static argument"
  else:
    changed = [what for what, i in (("structure of the arguments", 1), ("input shapes/dtypes", 2),
                                     ("static arguments", 3), ("which arguments are traced", 4), ("x64 mode", 5))
               if previous[i] != key[i]]
    reason = "changed " + ", ".join(changed)
  if key is not None:
    _last_keys[fn] = key
  shapes = ", ".join(a.str_short() for a in avals)
  print(f"tinyjax: tracing {name}({shapes}){' with statics ' + repr(statics) if statics else ''}: {reason}",
        file=sys.stderr)


def _integer_ranges(args: tuple, kwargs: dict) -> list:
  """The ranges of the integer dtypes a call's Python ints meet: its array arguments' and the dtypes it names."""
  dtypes = [a.dtype for a in args if isinstance(a, (Array, np.ndarray, np.generic, jax.Array))]
  for named in (*(a for a in args if isinstance(a, (type, np.dtype, str))), kwargs.get("dtype")):
    try:
      dtypes.append(np.dtype(named))
    except TypeError:  # no dtype (None, a string or class that names none)
      pass
  return [jax.numpy.iinfo(d) for d in dtypes if jax.numpy.issubdtype(d, jax.numpy.integer)]  # NB: key<fry>, int4


def _fits(value: int, ranges) -> bool:
  """Whether a Python int can be a traced weak-typed input: it fits int32 and every integer dtype of the call.

  NB: otherwise it stays static, so that JAX sees its value: jnp.array(300, jnp.uint8) raises OverflowError, and
  jnp.power(uint8 array, 300) is integer_pow with the exponent 300 (traced, 300 would wrap to uint8 first)."""
  return -2 ** 31 <= value < 2 ** 31 and all(r.min <= value <= r.max for r in ranges)


def integer_power(base, *, exponent: int):
  """jnp.power with a concrete integer exponent (static: JAX's integer_pow is one primitive per exponent)."""
  return jax.numpy.power(base, exponent)


def concrete_integer(x):
  """`x` as a Python int where JAX reads a concrete integer scalar (a Python int or bool, a NumPy integer scalar, a
  0-d integer array: `operator.index` takes it), else `x` itself.

  NB: a 0-d tinyjax Array is read (what is pending flushed), as JAX reads a concrete jax.Array's value."""
  if isinstance(x, jax.core.Tracer):
    return x
  try:
    return operator.index(x)
  except TypeError:
    return x


_SCALAR_TYPES = (int, float, complex)


def inside_transformation() -> bool:
  """Whether a JAX trace is current (jit, grad, vmap, scan, make_jaxpr, ...): what is called now is staged in it."""
  return jax_core.trace_ctx.trace is not jax_core.eval_trace


# NB: not public; read at every call (a State's value costs a quarter of jax.config's attribute)
_DEBUG_NANS, _DEBUG_INFS = jax_config.debug_nans, jax_config.debug_infs


def jax_checks_values() -> bool:
  """Whether jax_debug_nans or jax_debug_infs is on: JAX checks each operation's result then and raises
  FloatingPointError naming the operation, so a call is JAX's own eager call (they are not part of the trace context)."""
  return _DEBUG_NANS.value or _DEBUG_INFS.value


def declare_jitted(jitted, static_positions) -> None:
  """`jitted` is JAX's jit of a function whose arguments at `static_positions` (negative ones too) are static."""
  _jitted_statics[jitted] = frozenset(static_positions)


def _jit_statics(fn) -> frozenset | None:
  """The static positions of JAX's jitted `fn` (declare_jitted), or None for any other function."""
  try:
    return _jitted_statics.get(fn)
  except TypeError:  # not weakly referenceable (a NumPy ufunc, an itemgetter): no jitted function
    return None


def scalars_marked(fn, args: tuple, kwargs: dict) -> tuple:
  """The call's top-level Python scalars that are traced as weak-typed inputs, wrapped in Scalar (all of them but a
  jitted function's static arguments)."""
  statics = _jit_statics(fn) or ()
  int_ranges = _integer_ranges(args, kwargs) if any(type(a) is int for a in args) else []
  return tuple(a if i in statics or i - len(args) in statics
               else Scalar(a) if type(a) in (float, complex) or type(a) is int and _fits(a, int_ranges) else a
               for i, a in enumerate(args))


def scalars_signature(fn, treedef, leaves):
  """What decides whether a call's scalars are traced (None without scalars): once a trace with them dynamic failed
  (the function needs a scalar's value), calls with this signature keep them static."""
  if not any(isinstance(x, Scalar) for x in leaves):
    return None
  # the call's identity apart from its arrays and scalars (e.g. which method `_apply_method` applies)
  return fn, treedef, tuple(x for x in leaves if isinstance(x, str))


# --- call sites: a later call of the same function on the same kinds of inputs appends (or runs) the same trace

_MISS = object()
_FLOAT, _COMPLEX, _INT = object(), object(), object()  # a top-level Python scalar, in an eager call's key
_SIMPLE = (str, bool, type(None))
_HOST_ARRAYS = (np.ndarray, np.generic)
_sites: dict = {}
_SITES_KEPT = 4096
_trace_generation = 0  # counts the traces the trace cache dropped: a call site keeps its trace's number


class CallSite:
  """The record of a call that went the general way (trace, append, flush, compile), kept under the call's key for
  the calls after it: its trace (under JAX's trace context then), where its dynamic inputs are with their avals, and,
  for an eager call's Python ints, the integer ranges they must fit to stay traced.

  An eager call is keyed by its arguments themselves (`_call_key`: no flattening), its inputs found by an argument's
  index or a keyword; a jitted call by its flattened leaves (`_leaves_key`, as JAX's jit keys its calls: parameters
  come as pytrees), its inputs found by a leaf's index. A later call with the same key is appended to the queue as the
  general way appends it; a jitted one with concrete inputs and nothing else pending runs at once the program
  that a flush of it alone compiled (pending.run_alone): no trace, no Node, no wiring of the queue."""
  __slots__ = ("traced", "context", "generation", "signature", "scalars_dynamic", "sources", "avals", "ints",
               "int_ranges", "forwards", "single")

  def __init__(self, traced, signature, scalars_dynamic, sources, avals, ints=(), int_ranges=()):
    self.traced, self.context, self.generation = traced, jax_config.trace_context(), _trace_generation
    self.signature, self.scalars_dynamic = signature, scalars_dynamic
    self.sources, self.avals, self.ints, self.int_ranges = sources, avals, ints, int_ranges
    self.forwards = any(kind == pending.INPUT for kind, _, _ in traced.outputs)
    self.single = traced.out_tree.num_leaves == 1 and traced.out_tree.num_nodes == 1

  def recall(self, args: tuple, kwargs: dict, leaves: list | None, at_once: bool):
    """The call's outputs as the general way makes them (`leaves`: a jitted call's), or _MISS when the site's
    decisions may no longer hold."""
    # NB: JAX's settings that change what a function traces to (rank promotion, PRNG implementation, ...) form its
    # trace context: compared, not hashed into the key (the hash of its 46 settings costs twice the comparison)
    if (self.generation != _trace_generation or self.context != jax_config.trace_context()
            or self.scalars_dynamic and self.signature in _static_scalar_calls
            or jax_core.trace_ctx.trace is not jax_core.eval_trace  # inside_transformation(), inlined
            or _DEBUG_NANS.value or _DEBUG_INFS.value):  # jax_checks_values(), inlined
      return _MISS
    for i in self.ints:
      if not _fits(args[i], self.int_ranges):
        return _MISS
    inputs, arrays = [], []
    if leaves is None:  # an eager call: its Arrays and Python scalars
      for source, aval in zip(self.sources, self.avals):
        leaf = kwargs[source] if type(source) is str else args[source]
        if type(leaf) in _LAZY_TYPES:
          value = leaf._value
          if type(value) is DeletedValue:
            value.to_host()  # raises JAX's error at the call
          inputs.append(value)
          arrays.append(leaf)
        else:
          inputs.append(_scalar_value(leaf, aval))
    else:  # a jitted call: its leaves, Arrays, Scalars, NumPy and JAX arrays
      concrete = True
      for source, aval in zip(self.sources, self.avals):
        inputs.append(value := input_value(leaf := leaves[source], aval))
        if type(leaf) in _LAZY_TYPES:
          arrays.append(leaf)
          concrete = concrete and value.node is None
    traced = self.traced
    traced.check_policies()
    arrays = arrays if self.forwards else ()
    if at_once and concrete and not pending.anything_pending():
      values = pending.run_alone(traced, inputs)
      if values is not None:
        outs = _arrays(values, arrays) if arrays else list(map(Array, values))
        return outs[0] if self.single else jax.tree_util.tree_unflatten(traced.out_tree, outs)
    return _appended(traced, inputs, arrays, self.single, user_source(own=2))  # own: this and call()


def _call_key(fn, args: tuple, kwargs: dict, static_scalars: bool):
  """An eager call's key among the call sites (None: it goes the general way): the function, and each argument's
  aval (an Array's), kind (a Python scalar traced) or value (a string, a bool, None, a keyword's scalar)."""
  key = [fn, static_scalars]
  for a in args:
    kind = type(a)
    if kind in _LAZY_TYPES:
      key.append(a._value.aval)
    elif kind is float and not static_scalars:
      key.append(_FLOAT)
    elif kind is int and not static_scalars:
      key.append(_INT)
    elif kind is complex and not static_scalars:
      key.append(_COMPLEX)
    elif kind is str:
      key.append(a)  # NB: a string equals nothing else a key holds
    elif kind in _SIMPLE or kind in _SCALAR_TYPES:
      key.append(static_key(a))
    else:
      return None
  for name, a in kwargs.items():
    kind = type(a)
    if kind in _LAZY_TYPES:
      key.append((name, a._value.aval))
    elif kind in _SIMPLE or kind in _SCALAR_TYPES:
      key.append((name, static_key(a)))
    else:
      return None
  return tuple(key)


def _leaves_key(fn, treedef, leaves: list, kwargs: dict):
  """A jitted call's key among the call sites (None: it goes the general way): the function, the tree of its
  arguments, and each leaf's aval (an Array's, a NumPy or JAX array's), kind (a Python scalar traced) or value."""
  if "device" in kwargs:
    return None
  key = [fn, treedef]
  for leaf in leaves:
    kind = type(leaf)
    if kind in _LAZY_TYPES:
      key.append(leaf._value.aval)
    elif kind is Scalar:
      key.append((Scalar, type(leaf.value)))  # NB: a jitted function's scalars are never retried static
    elif isinstance(leaf, _HOST_ARRAYS):
      key.append((np.ndarray, leaf.shape, leaf.dtype, getattr(leaf, "weak_type", False)))
    elif isinstance(leaf, (jax.core.Tracer, Array)):  # a tracer (JAX's own call), an Array placed on devices
      return None
    elif isinstance(leaf, jax.Array):
      key.append((jax.Array, jax.typeof(leaf)))
    else:
      try:
        key.append(static_key(leaf))
      except TypeError:  # unhashable
        return None
  return tuple(key)


def _appended(traced, inputs, arrays, single: bool, source: str):
  """The call's outputs: its traced equations appended to the pending queue (the fallback policy applied before)."""
  values = pending.append(traced, inputs, source)
  outs = _arrays(values, arrays) if arrays else list(map(Array, values))
  pending.track(outs)
  if traced.jaxpr.effects:  # a print or a callback happens at the call, as JAX's call makes it happen, read or not
    pending.flush(values)
  return outs[0] if single else jax.tree_util.tree_unflatten(traced.out_tree, outs)


def _arrays(values, arrays) -> list:
  """Arrays of the call's output Values, where an output is an input unchanged (one of `arrays`' Values): that
  input's Array itself, as in JAX (`y is cond(p, f, g, x, y)[1]`). NB: without such inputs, list(map(Array, values)),
  which its callers write themselves (one call less on every eager operation)."""
  forwarded = {id(a._value): a for a in arrays}
  return [Array(v) if (out := forwarded.get(id(v))) is None else out for v in values]


def _remember(key, fn, args, kwargs, leaves, treedef, traced, dynamic, avals, signature, scalars_dynamic,
              at_once) -> None:
  """Keep the site of a call the general way traced and appended: a jitted call's inputs are its leaves; an eager
  call's are remembered when they are its arguments themselves."""
  if at_once:
    site = CallSite(traced, signature, scalars_dynamic, tuple(dynamic), tuple(avals))
  else:
    sources = []
    named = sorted(kwargs)  # NB: a dict's leaves come in the order of its sorted keys
    flat = [*((i, a) for i, a in enumerate(args) if a is not None),
            *((k, kwargs[k]) for k in named if kwargs[k] is not None)]
    if len(flat) != len(leaves):
      return
    for i in dynamic:
      source, a = flat[i]
      leaf = leaves[i]
      if not (leaf is a or isinstance(leaf, Scalar) and leaf.value is a):
        return
      sources.append(source)
    if any(type(a) in _SCALAR_TYPES and i not in sources for i, a in enumerate(args)):
      return  # a Python scalar kept static (an int too large to trace): its key would not say which value
    ints = tuple(s for s in sources if type(s) is int and type(args[s]) is int)
    site = CallSite(traced, signature, scalars_dynamic, tuple(sources), tuple(avals), ints,
                    _integer_ranges(args, kwargs) if ints else ())
  if len(_sites) >= _SITES_KEPT:
    _sites.pop(next(iter(_sites)))
  _sites[key] = site


def _flattened(fn, args: tuple, kwargs: dict, static_scalars: bool):
  """The call's arguments with their Python scalars marked as traced (scalars_marked), and their leaves and tree."""
  if not static_scalars:
    for a in args:  # NB: a loop, not any() of a generator: a jitted call's dispatch asks it
      if type(a) in _SCALAR_TYPES:
        args = scalars_marked(fn, args, kwargs)
        break
  return args, *jax.tree_util.tree_flatten((args, kwargs))  # NB: Arrays and Scalars are leaves


def call(fn: Callable, args: tuple, kwargs: dict | None = None, static_scalars: bool = False, at_once: bool = False):
  """Apply the JAX function `fn` to tinyjax/NumPy/JAX/Python inputs, lazily; `at_once`: a jitted call, which runs
  at once when its program is compiled, its inputs concrete and nothing else pending (the caller flushes otherwise,
  as JAX dispatches a jitted call)."""
  kwargs = kwargs or {}
  leaves = None
  if at_once:
    marked, leaves, treedef = _flattened(fn, args, kwargs, static_scalars)
    key = _leaves_key(fn, treedef, leaves, kwargs)
  else:
    key = _call_key(fn, args, kwargs, static_scalars)
  if key is not None and (site := _sites.get(key)) is not None and (
          out := site.recall(args, kwargs, leaves, at_once)) is not _MISS:
    return out
  if isinstance(device := kwargs.get("device"), Device):  # a tinyjax device: JAX computes, tinyjax places
    return placed(call(fn, args, {**kwargs, "device": None}, static_scalars), device)
  if isinstance(device, jax.Device):  # one of JAX's: tinyjax computes, and the Arrays name that device
    return jax.tree_util.tree_map(lambda x: CommittedArray(x._value, device) if is_array(x) else x,
                                  call(fn, args, {**kwargs, "device": None}, static_scalars), is_leaf=is_array)
  original_args = args
  if leaves is None:
    marked, leaves, treedef = _flattened(fn, args, kwargs, static_scalars)
  args = marked
  if inside_transformation() or any(isinstance(x, jax.core.Tracer) for x in leaves):
    return _defer(fn, treedef, leaves)  # inside a JAX transformation: JAX's own call, staged in its trace
  if any(isinstance(x, jax.Array) and not is_array(x) and _only_jax_holds(x) for x in leaves):
    return _eager(fn, treedef, leaves)
  signature = scalars_signature(fn, treedef, leaves)
  scalars_dynamic = signature is not None and signature not in _static_scalar_calls
  try:
    traced, dynamic, avals = _trace(fn, treedef, leaves, scalars_dynamic)
  except Exception as error:
    # NB: JAX hands NumPy inputs to NumPy in places (jnp.reshape calls ndarray.reshape): the error of the call as
    # made is what JAX's own eager call raises
    if _jit_statics(fn) is not None or not (scalars_dynamic or isinstance(error, _VALUE_DEPENDENT)
                                            or any(isinstance(x, (np.ndarray, np.generic)) for x in leaves)):
      raise
    traced = None
  # outside the except block, so that a later error is not chained to it
  if traced is not None and traced.static_result is not None and not traced.runs_on_jax:
    if scalars_dynamic:  # JAX answers on the Python scalars themselves (`lax.dtype(1.0)`), not on weak-typed avals
      _static_scalar_calls.add(signature)
      return call(fn, tuple(a.value if isinstance(a, Scalar) else a for a in args), kwargs)
    return jax.tree_util.tree_unflatten(*traced.static_result)  # its containers made anew: the caller may change them
  if traced is None or traced.runs_on_jax or jax_checks_values():
    if scalars_dynamic and traced is None:
      _static_scalar_calls.add(signature)
      return call(fn, tuple(a.value if isinstance(a, Scalar) else a for a in args), kwargs)
    return _eager(fn, treedef, leaves, traced)
  inputs = [input_value(leaves[i], aval) for i, aval in zip(dynamic, avals)]
  if traced.maps_over_a_mesh:
    inputs = _split_over_the_mesh(traced, inputs)
  arrays = [leaves[i] for i in dynamic if is_array(leaves[i])]
  source = user_source(own=1)
  traced.check_policies(source)
  out = _appended(traced, inputs, arrays, single=False, source=source)
  if traced.maps_over_a_mesh or any(map(_on_an_auto_mesh, arrays)):
    return _placed_as_jax_propagates(traced, out, [leaves[i] for i in dynamic], avals)
  if key is not None and (signature is None or scalars_dynamic):
    _remember(key, fn, original_args, kwargs, leaves, treedef, traced, dynamic, avals, signature, scalars_dynamic,
              at_once)
  return out


def _split_over_the_mesh(traced, inputs: list) -> list:
  """The inputs of pmap or of a shard_map over a mesh of devices, each not split yet placed split over the mesh's
  devices as the shard_map splits it (where the device kind has those instances; a pending one computed first, as
  JAX computes a jitted call's inputs before it), so that the program runs split over them (pending.placed_backend),
  and so do the programs on its results."""
  backend = pending.flush_backend()
  # the backend over each input's mesh, where the input is to be split over it
  overs = [over if sharding is not None and type(value) is Value
           and (over := backend_over(backend, sharding.mesh)).spans_devices else None
           for value, sharding in zip(inputs, traced.mesh_shardings, strict=True)]
  if waiting := [value for value, over in zip(inputs, overs) if over is not None and value.pending]:
    pending.flush(waiting)
  return [value.placed_on(over, None, sharding)
          if over is not None and not any(b.spans_devices for b in value.buffers) else value
          for value, over, sharding in zip(inputs, overs, traced.mesh_shardings)]


def _places_on_a_mesh(jaxpr) -> bool:
  return any(eqn.primitive.name == "shard_map" and isinstance(eqn.params["mesh"], jax.sharding.Mesh)
             or eqn.primitive.name == "jit" and any(map(_on_a_mesh, eqn.params["out_shardings"]))
             or any(map(_places_on_a_mesh, jaxprs_in_params(eqn.params))) for eqn in jaxpr.eqns)


def _on_a_mesh(sharding) -> bool:
  return isinstance(sharding, jax.sharding.NamedSharding) and isinstance(sharding.mesh, jax.sharding.Mesh)


def _on_an_auto_mesh(x) -> bool:
  return isinstance(x, ShardedArray) and jax.sharding.AxisType.Auto in x.sharding.mesh.axis_types


# (the program as printed, the inputs' shardings) -> the outputs' shardings. NB: by the program, not by the trace: a
# jax.vjp's backward is traced anew for each vjp, and JAX, whose caches see one program, lowers nothing the second time
_propagations: dict = {}
_PROPAGATIONS_KEPT = 256


def _placed_as_jax_propagates(traced, out, dynamic_leaves, avals):
  """The results of a call on arrays placed on a mesh of Auto axes, or of a shard_map (a pmap), placed where JAX's jit
  places them: on such a mesh the shardings are not in the types, and XLA's propagation decides them (JAX's compile
  of the trace, asked once per trace and input shardings). NB: tinyjax computes the values on one device, as for
  every placed Array; such a call is not remembered (the remembered ways would not place its results)."""
  shardings = tuple(x.sharding if isinstance(x, ShardedArray) else None for x in dynamic_leaves)
  key = (traced.text, shardings)
  if (placed := _propagations.get(key)) is None:
    specs = [jax.ShapeDtypeStruct(a.shape, a.dtype, weak_type=a.weak_type, sharding=s) for a, s in zip(avals, shardings)]
    placed = tuple(jax.jit(jaxpr_as_fun(traced.jaxpr)).lower(*specs).compile().output_shardings)
    placed = _propagations[key] = tuple(map(_named_placements(traced.jaxpr.jaxpr).get, range(len(placed)),
                                            placed))
    if len(_propagations) > _PROPAGATIONS_KEPT:
      _propagations.pop(next(iter(_propagations)))
  leaves, tree = jax.tree_util.tree_flatten(out, is_leaf=is_array)
  leaves = [ShardedArray(x._value, s) if type(x) in _LAZY_TYPES and isinstance(s, jax.sharding.NamedSharding) else x
            for x, s in zip(leaves, placed)]
  pending.track(leaves)  # NB: the Arrays the queue tracked are replaced: a flush finds these
  return jax.tree_util.tree_unflatten(tree, leaves)


def _named_placements(jaxpr) -> dict:
  """The outputs whose placement the program names: those of a shard_map called outside jit (its out_specs) and of a
  jit given out_shardings, which JAX's results keep as named (XLA's propagation drops a mesh axis of size 1 from a
  spec): output index -> sharding."""
  named = {}
  for eqn in jaxpr.eqns:
    if eqn.primitive.name == "shard_map" and isinstance(mesh := eqn.params["mesh"], jax.sharding.Mesh):
      named.update((var, jax.sharding.NamedSharding(mesh, spec))
                   for var, spec in zip(eqn.outvars, eqn.params["out_specs"]))
    elif eqn.primitive.name == "jit":
      named.update((var, sharding) for var, sharding in zip(eqn.outvars, eqn.params["out_shardings"])
                   if _on_a_mesh(sharding))
  return {i: named[var] for i, var in enumerate(jaxpr.outvars) if not isinstance(var, Literal) and var in named}


def placed(tree, device: Device):
  """The Arrays of `tree` as Arrays on `device`."""
  backend = backend_for(device.platform, device.name)
  return jax.tree_util.tree_map(lambda x: Array(x._value.placed_on(backend)) if is_array(x) else x, tree,
                                is_leaf=is_array)


def to_jax(x):
  """A tinyjax Array (or anything else) as JAX sees it: Arrays become concrete jax.Arrays (made once per Array)."""
  if not is_array(x):
    return x.value if isinstance(x, Scalar) else x
  return x._as_jax()


def _defer(fn, treedef, leaves):
  args, kwargs = jax.tree_util.tree_unflatten(treedef, [to_jax(x) for x in leaves])
  return fn(*args, **kwargs)


def eager(fn: Callable, args: tuple, kwargs: dict | None = None):
  """Apply the JAX function `fn` now, on concrete JAX values (what it reads is no abstract value: a DLPack
  producer), its results made tinyjax Arrays."""
  leaves, treedef = jax.tree_util.tree_flatten((args, kwargs or {}), is_leaf=_is_leaf)
  return _eager(fn, treedef, leaves)


def _eager(fn, treedef, leaves, traced: Traced | None = None):
  """Run `fn` on concrete JAX arrays (it needs values, not shapes) and bring the results back, as tinyjax Arrays
  unless only JAX can hold them (`_only_jax_holds`). The report counts the equations of its trace as run on XLA,
  or, untraced (its inputs only JAX holds; its avals depend on values), the call as one."""
  name = getattr(fn, "__name__", repr(fn))
  record_eager(name, [eqn.primitive.name for eqn in traced.jaxpr.jaxpr.eqns] if traced else [f"{name} (JAX's call)"])
  result = _defer(fn, treedef, leaves)

  def wrap(x):
    if not isinstance(x, jax.Array) or _only_jax_holds(x):
      return x
    return Array(Value(jax.typeof(x), host=np.asarray(keys.key_data(x))))
  return jax.tree_util.tree_map(wrap, result)


def _only_jax_holds(x: jax.Array) -> bool:
  """Whether a JAX array is more than the one value a tinyjax Array holds: shards in other processes
  (jax.distributed), parts of a sum (unreduced), or copies of one block that differ (JAX does not check that the
  devices agree where it calls a value replicated: a pure_callback's in a shard_map's body, check_vma off)."""
  if not x.is_fully_addressable or partial_over_a_mesh(x.sharding):
    return True
  if len(x.sharding.device_set) == 1:
    return False
  entry = _copies_differ.get(id(x))
  if entry is None or entry[0]() is not x:  # NB: read once per array (immutable): every call given it asks
    key = id(x)
    entry = _copies_differ[key] = (weakref.ref(x, lambda _, cache=_copies_differ: cache.pop(key, None)),
                                   _differing_copies(x))
  return entry[1]


_copies_differ: dict = {}  # id(JAX array on several devices) -> (a weak reference to it, whether its copies differ)


def _differing_copies(x: jax.Array) -> bool:
  blocks: dict = {}
  for shard in x.addressable_shards:
    data = np.asarray(keys.key_data(shard.data))
    first = blocks.setdefault(tuple((s.start, s.stop, s.step) for s in shard.index), data)
    if first is not data and not np.array_equal(first, data, equal_nan=data.dtype.kind in "fc"):
      return True
  return False

