"""`tinyjax.Array`: jax.Array's surface over a lazy Value.

Shape, dtype and weak type are known at once (from the traced aval); reading the data (`__array__`, repr,
`item`, `__bool__`, `block_until_ready`) flushes the pending queue. Operators and methods go through the
tinyjax.numpy mirror, i.e. through JAX's own implementations, so promotion and errors are JAX's.
"""

import jax
import jax.numpy as jnp
import numpy as np
from jax._src import core as jax_core  # NB: eval_context is not public

from tinyjax.core import pending, tracing
from tinyjax.core.pending import DeletedValue, Value
from tinyjax.ir import keys
from tinyjax.ir.backend import Device


def _apply_method(name, x, *args, **kwargs):
  return getattr(x, name)(*args, **kwargs)


def _getitem(x, index):
  return x[index]


def _static_indices() -> bool:
  """Whether an integer index is given to JAX as the number itself: under jax_check_static_indices JAX checks it
  against the shape; otherwise it is traced (one trace for x[0], x[1], ...), clamped as JAX clamps."""
  return jax.config.jax_check_static_indices


def _operator(name):
  method = f"__{name}__"
  # NB: an integer exponent stays static, so that x ** 2 is integer_pow as in JAX, not a traced pow loop
  static_scalars = name in ("pow", "rpow")
  symbol, refused = _REFUSED.get(name, (None, ()))

  def op(self, other):
    if type(other) in _COMMON_OPERANDS and not static_scalars:  # NB: the common case, tested first
      return tracing.call(_apply_method, (method, self, other))
    if not isinstance(other, _OPERANDS) and hasattr(other, "__jax_array__"):  # NB: ours stay lazy
      other = other.__jax_array__()
    if isinstance(other, _OPERANDS):
      if name == "pow":  # a concrete integer exponent (np.int8(-1), a 0-d array) is JAX's integer_pow too
        other = tracing.concrete_integer(other)
      elif name == "rpow" and type(exponent := tracing.concrete_integer(self)) is int:  # and so is self, a 0-d
        return tracing.call(tracing.integer_power, (other,), {"exponent": exponent})  # integer: the base's dtype stays
      return tracing.call(_apply_method, (method, self, other), static_scalars=static_scalars)
    if type(other) in refused:  # NB: not isinstance, so that a NamedTuple may answer the operator itself, as in JAX
      first, second = (other, self) if name in _REFLECTED else (self, other)
      raise TypeError(f"unsupported operand type(s) for {symbol}: {type(first).__name__!r} and "
                      f"{type(second).__name__!r}")
    return NotImplemented
  op.__name__ = method
  return op


# JAX's rules for an operand of another type (jax/_src/numpy/array_methods.py): these compute; + and * refuse lists
# and tuples (which would concatenate or repeat) and == and != refuse dicts, lists, sets and tuples (which Python
# would compare by identity), with JAX's message (NB: JAX's != says "==" too); any other type gets NotImplemented,
# so that the other operand may answer
_OPERANDS = (int, float, complex, np.ndarray, np.generic, jax.Array)
_SEQUENCES, _CONTAINERS = (list, tuple), (dict, list, set, tuple)
_REFUSED = {"add": ("+", _SEQUENCES), "radd": ("+", _SEQUENCES), "mul": ("*", _SEQUENCES),
            "rmul": ("*", _SEQUENCES), "eq": ("==", _CONTAINERS), "ne": ("==", _CONTAINERS)}


_BINARY = ["add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "matmul", "divmod", "lshift", "rshift",
           "and", "or", "xor", "lt", "le", "gt", "ge", "eq", "ne"]
_REFLECTED = ["radd", "rsub", "rmul", "rtruediv", "rfloordiv", "rmod", "rpow", "rmatmul", "rdivmod", "rlshift",
              "rrshift", "rand", "ror", "rxor"]
_UNARY = ["neg", "pos", "abs", "invert", "round"]
_METHODS = ["all", "any", "argmax", "argmin", "argpartition", "argsort", "astype", "byteswap", "choose", "clip",
            "compress", "conj", "conjugate", "cumprod", "cumsum", "diagonal", "dot", "flatten", "max", "mean", "min",
            "nonzero", "prod", "ptp", "ravel", "repeat", "reshape", "round", "searchsorted", "sort", "squeeze", "std",
            "sum", "swapaxes", "take", "trace", "transpose", "var", "view"]
_PROPERTIES = ["T", "mT", "real", "imag"]


class Array(jax.Array):
  """A lazy array on a tinyjax backend (tinygrad by default): a jax.Array (tinyjax.identity tells JAX how to read
  it), computed by tinyjax when tinyjax's functions are applied to it."""
  __slots__ = ("_value", "_jax", "__weakref__")
  __array_priority__ = 100  # NumPy defers binary operators to us

  def __new__(cls, value, *_):  # (a subclass also takes its placement)
    # NB: a key's dtype is no NumPy dtype: tested first, so that the common case costs one isinstance
    if not isinstance(value.aval.dtype, np.dtype) and keys.is_key(value.aval.dtype):
      cls = _KEY_CLASSES.get(cls, cls)
    return super().__new__(cls)

  def __init__(self, value):
    self._value = value
    self._jax = None  # the value as JAX's own array, made when JAX's code first reads it

  def _as_jax(self):
    """This Array as a concrete JAX array, made once: the value is immutable, so JAX's functions applied to it again
    (jax.numpy, jax.jit-compiled code) find it on JAX's device without another trip through the host."""
    if self._jax is None:
      with jax_core.eval_context():  # NB: JAX asks for it while tracing; made there, it would be that trace's tracer
        self._jax = self._make_jax()
    return self._jax

  def _make_jax(self):
    host = self._value.to_host()
    if self.weak_type and self.ndim == 0:
      return jnp.asarray(host.item())  # NB: the way to make a weak-typed jax.Array from the outside
    data = keys.wrap(host, self.aval) if keys.is_key(self.dtype) else host
    # NB: tinyjax's own move of a value it holds to JAX, which JAX's transfer guard (about the transfers a program
    # asks JAX for: `jax.transfer_guard("disallow")`) does not see, as it does not see tinyjax's device's own
    with jax.transfer_guard_host_to_device("allow"):
      return jax.device_put(data, self.sharding if self.committed else None)  # where JAX's would be

  # --- what is known without running anything
  @property
  def aval(self):
    return self._value.aval

  shape = property(lambda self: self.aval.shape)
  dtype = property(lambda self: self.aval.dtype)
  ndim = property(lambda self: len(self.aval.shape))
  size = property(lambda self: int(np.prod(self.aval.shape, dtype=np.int64)))
  weak_type = property(lambda self: self.aval.weak_type)
  itemsize = property(lambda self: self.dtype.itemsize)
  nbytes = property(lambda self: self.size * self.dtype.itemsize)

  @property
  def device(self):
    from tinyjax.choosing.selection import current_backend
    backend = next(iter(self._value.buffers), None) or current_backend()
    return backend.device

  @property
  def sharding(self):
    # NB: computed on one device: the sharding its type names (a result of values placed on a mesh), else one device
    return _named_sharding(self.aval) or jax.sharding.SingleDeviceSharding(jax.devices("cpu")[0])

  # --- reading the data
  def block_until_ready(self):
    value = self._value
    if value.node is not None or type(value) is not Value:  # NB: the common case, a concrete Value, tested at once
      if isinstance(value, DeletedValue):
        value.to_host()  # raises
      if value.node is not None:
        pending.flush((value,))
    for backend, buffer in value.buffers.items():
      backend.wait(buffer)
    return self

  def __array__(self, dtype=None, copy=None):
    view = self._value.to_host().view()
    view.flags.writeable = False  # NB: as JAX's; writing into it would change the Array's cached value
    return np.asarray(view, dtype=dtype, **({} if copy is None else {"copy": copy}))

  def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
    host = np.asarray(self)
    if max_version is None or max_version < (1, 0):
      host = host.copy()  # NB: DLPack before 1.0 cannot mark data read-only: such consumers get a copy
    kwargs = {"max_version": max_version, "dl_device": dl_device, "copy": copy}
    return host.__dlpack__(stream=stream, **{k: v for k, v in kwargs.items() if v is not None})

  def __dlpack_device__(self):
    return (1, 0)  # NB: exported through the host (kDLCPU), whatever device computed it

  def __array_namespace__(self, api_version=None):
    import tinyjax.numpy
    return tinyjax.numpy

  def __jax_array__(self):
    return tracing.to_jax(self)

  def item(self, *args):
    return np.asarray(self).item(*args)

  def tolist(self):
    return np.asarray(self).tolist()

  # NB: the checks (and their messages) are jax.Array's, which are stricter than NumPy's: float() of a
  # 1-element 1-d array raises
  def __float__(self):
    return float(self._scalar())

  def __int__(self):
    return int(self._scalar())

  def __complex__(self):
    return complex(self._scalar())

  def __index__(self):
    if self.shape != () or not jnp.issubdtype(self.dtype, jnp.integer):
      raise TypeError("Only integer scalar arrays can be converted to a scalar index.")
    return int(np.asarray(self))

  def __bool__(self):
    if self.size == 0:
      raise ValueError("The truth value of an empty array is ambiguous. Use `array.size > 0` to check that an "
                       "array is not empty.")
    if self.size > 1:
      raise ValueError("The truth value of an array with more than one element is ambiguous. Use a.any() or a.all()")
    return bool(np.asarray(self))

  def _scalar(self):
    if self.ndim > 0:
      raise TypeError(f"Only scalar arrays can be converted to Python scalars; got arr.ndim={self.ndim}")
    return np.asarray(self)[()]

  def __len__(self):
    if self.ndim == 0:
      raise TypeError("len() of unsized object")
    return self.shape[0]

  def __iter__(self):
    if self.ndim == 0:
      raise TypeError("iteration over a 0-d array")
    # NB: the rows come from the host value: on tinygrad, n lazy slices would compile n kernels (one per offset)
    # NB: as JAX's rows: those of an array split over a mesh are values of their own (JAX brings them through the
    # host), on no mesh; those of a replicated array keep its mesh
    host, aval = self._value.to_host(), self.aval
    if any(axis is not None for axis in aval.sharding.spec):
      aval = jax.core.ShapedArray(aval.shape, aval.dtype, weak_type=aval.weak_type)
    aval = aval.update(shape=self.shape[1:])
    return (Array(_host_value(aval, np.asarray(row))) for row in host)

  # jax.Array's private methods that JAX's own code calls (jacfwd/jacrev, pmap): their arguments are static
  def _split(self, indices, axis):
    static = int(indices) if np.ndim(indices) == 0 else tuple(int(i) for i in np.ravel(indices))
    return tracing.call(_apply_method, ("_split", self, static, axis), static_scalars=True)

  def _multi_slice(self, start_indices, limit_indices, removed_dims):
    return tracing.call(_apply_method, ("_multi_slice", self, start_indices, limit_indices, removed_dims))

  def __contains__(self, other):
    return tracing.call(_apply_method, ("__contains__", self, other))

  def __hash__(self):
    raise TypeError(f"unhashable type: '{type(self).__name__}'")

  def __repr__(self):
    if keys.is_key(self.dtype):
      return repr(tracing.to_jax(self))
    prefix = "Array("
    dtype_str = f"dtype={self.dtype.name}" + (", weak_type=True)" if self.weak_type else ")")
    if self.size == 0:
      body = f"[], shape={self.shape}"
    else:
      body = np.array2string(np.asarray(self), prefix=prefix, suffix=",", separator=", ",
                             max_line_width=np.get_printoptions()["linewidth"])
    last_line = len(body) - body.rfind("\n") + 1
    # NB: as JAX: when the dtype does not fit on the last line it is indented by the prefix, on that line
    sep = " " * len(prefix) if last_line + len(dtype_str) + 1 > np.get_printoptions()["linewidth"] else " "
    return f"{prefix}{body},{sep}{dtype_str}"

  def __str__(self):
    if keys.is_key(self.dtype):
      return str(tracing.to_jax(self))
    return str(np.asarray(self))

  def __format__(self, spec):
    host = np.asarray(self)
    return format(host if self.ndim else host[()], spec)

  def __reduce__(self):
    return (_from_host, (np.array(self), self.weak_type))

  def tobytes(self, order="C"):
    return np.asarray(self).tobytes(order)

  def copy_to_host_async(self):
    self._value.to_host()

  def is_ready(self) -> bool:
    return not self._value.pending

  def to_device(self, device, *, stream=None):
    if isinstance(device, Device):  # one of tinyjax's devices (JAX's own go to JAX's to_device)
      return tracing.placed(self, device)
    return tracing.call(_apply_method, ("to_device", self, device), {"stream": stream})

  def delete(self):
    """Free this Array's buffers now; reading it afterwards raises, as in JAX."""
    self._value, self._jax = DeletedValue(self.aval), None

  def is_deleted(self) -> bool:
    return isinstance(self._value, DeletedValue)

  def unsafe_buffer_pointer(self) -> int:
    """The address of this Array's buffer on its device (computed, and put there, first)."""
    from tinyjax.choosing.selection import current_backend
    self.block_until_ready()
    backend = next(iter(self._value.buffers), None) or current_backend()
    return backend.address(self._value.buffer_on(backend))

  def devices(self) -> set:
    return {self.device}

  def platform(self) -> str:
    return self.device.platform

  def addressable_data(self, index: int):
    # NB: computed on one device: an Array placed on several is its shards in JAX's placement (JAX's own arrays)
    return self if self.is_fully_replicated else self.addressable_shards[index].data

  def on_device_size_in_bytes(self) -> int:
    return self.nbytes

  # NB: JAX's shards of the same data (its array, made once): where each block of a placed Array would live
  addressable_shards = property(lambda self: self._as_jax().addressable_shards)
  global_shards = addressable_shards
  is_fully_addressable = property(lambda self: True)
  # a result whose type names a mesh is committed to that mesh's devices, as JAX's results on a mesh are; any other
  # NB: is not, a computation runs on the device in effect at its flush
  is_fully_replicated = property(lambda self: (sharding := _named_sharding(self.aval)) is None
                                 or sharding.is_fully_replicated)
  committed = property(lambda self: _named_sharding(self.aval) is not None)
  _committed = committed

  @property
  def flat(self):
    raise NotImplementedError("JAX Arrays do not implement the arr.flat property: consider arr.flatten() instead.")

  def copy(self):
    return self

  def __copy__(self):
    return self

  def __deepcopy__(self, memo):
    return self

  # --- indexing
  def __getitem__(self, index):
    return tracing.call(_getitem, (self, index), static_scalars=_static_indices())

  def __setitem__(self, index, value):
    raise TypeError("JAX arrays are immutable and do not support in-place item assignment. Instead of x[idx] = y, "
                    "use x = x.at[idx].set(y) or another .at[] method: "
                    "https://docs.jax.dev/en/latest/_autosummary/jax.numpy.ndarray.at.html")

  @property
  def at(self):
    return _IndexUpdateHelper(self)


def _host_value(aval, host):
  return Value(aval, host=host)


def _from_host(host, weak_type):
  return Array(_host_value(jax.core.ShapedArray(host.shape, host.dtype, weak_type=weak_type), host))


def _keys_from_host(host, aval):
  return Array(_host_value(aval, host))


# NB: Python's own operator errors name a class by its __name__; JAX's arrays are jaxlib's ArrayImpl, so that
# "'<' not supported between instances of 'ArrayImpl' and 'dict'" reads as JAX's (the class stays tinyjax.Array)
Array.__name__ = "ArrayImpl"
_COMMON_OPERANDS = frozenset({Array, float, int})  # NB: exactly these types; a subclass goes the general way
for _name in _BINARY + _REFLECTED:
  setattr(Array, f"__{_name}__", _operator(_name))
for _name in _UNARY:
  setattr(Array, f"__{_name}__", lambda self, *a, _m=f"__{_name}__": tracing.call(_apply_method, (_m, self, *a)))
for _name in _METHODS:
  setattr(Array, _name, lambda self, *a, _m=_name, **k: tracing.call(_apply_method, (_m, self, *a), k))
for _name in _PROPERTIES:
  setattr(Array, _name, property(lambda self, _m=_name: tracing.call(getattr, (self, _m))))


def _update(x, index, method, values, kwargs):
  ref = x.at[index]
  return getattr(ref, method)(*values, **kwargs)


class KeyArray(Array):
  """An Array of typed PRNG keys (`jax.random.key`'s, dtype `key<fry>`), made whenever an Array's dtype is one. JAX's
  own are `PRNGKeyArray`s, which JAX's dispatch reads as a pytree over their raw data (`jax.device_get`, jit's
  arguments): tinyjax.identity registers this class the same way."""
  __slots__ = ()

  def __iter__(self):
    if self.ndim == 0:
      raise TypeError("iteration over a 0-d key array")  # JAX's key arrays' message
    return super().__iter__()

  def __reduce__(self):
    return (_keys_from_host, (self._value.to_host(), self.aval))


class CommittedArray(Array):
  """An Array made for one of JAX's devices (`jnp.fft.fftfreq(8, device=jax.devices()[0])`, under patch mode too):
  computed by tinyjax as any other, it names that device as its own (`devices()`, `device`, `sharding`), committed, as
  JAX's array would. NB: what is computed from it is a plain Array: tinyjax runs each flush on the device in effect."""
  __slots__ = ("_jax_device",)

  def __init__(self, value, jax_device):
    super().__init__(value)
    self._jax_device = jax_device

  device = property(lambda self: self._jax_device)
  sharding = property(lambda self: jax.sharding.SingleDeviceSharding(self._jax_device))
  committed = property(lambda self: True)
  _committed = committed


class ShardedArray(Array):
  """An Array placed with a NamedSharding (`jax.device_put(x, NamedSharding(mesh, P("d")))`, under patch mode too): its
  type holds the sharding's explicit axes as JAX's does, which shard_map and jit read. NB: computed by tinyjax on one
  device, as any other; it names the sharding as its own, and so do the results whose types name its mesh."""
  __slots__ = ("_sharding",)

  def __init__(self, value, sharding):
    super().__init__(value)
    self._sharding = sharding
    _MESHES[sharding.mesh.abstract_mesh] = sharding.mesh

  sharding = property(lambda self: self._sharding)
  is_fully_replicated = property(lambda self: self._sharding.is_fully_replicated)
  committed = property(lambda self: True)
  _committed = committed

  def devices(self) -> set:
    return set(self._sharding.device_set)


_MESHES: dict = {}  # AbstractMesh -> Mesh: the meshes Arrays were placed on, whose devices the results' types name


def _named_sharding(aval):
  """The NamedSharding an aval's type names, on the devices of the mesh of that name (one an Array was placed on, or
  the one `jax.set_mesh` set: JAX's results made under it, `jnp.arange(8.)` too, are on its devices), or None."""
  typed = getattr(aval, "sharding", None)
  if typed is None or typed.mesh.empty:
    return None
  mesh = _MESHES.get(typed.mesh)
  if mesh is None and (current := jax.sharding.get_mesh()).abstract_mesh == typed.mesh:
    mesh = _MESHES[typed.mesh] = current
  return None if mesh is None else jax.sharding.NamedSharding(mesh, typed.spec)


class CommittedKeyArray(CommittedArray, KeyArray):
  __slots__ = ()


class ShardedKeyArray(ShardedArray, KeyArray):
  __slots__ = ()


CommittedArray.__name__ = ShardedArray.__name__ = "ArrayImpl"  # as Array's, for Python's operator errors
KEY_CLASSES = (KeyArray, CommittedKeyArray, ShardedKeyArray)
_KEY_CLASSES = dict(zip((Array, CommittedArray, ShardedArray), KEY_CLASSES))  # the class of an Array of keys
for _key_class in KEY_CLASSES:
  _key_class.__name__ = "PRNGKeyArray"  # as JAX's key arrays
tracing.set_array_types(Array, KeyArray, CommittedArray, ShardedArray)


class _IndexUpdateRef:
  __slots__ = ("array", "index")

  def __init__(self, array, index):
    self.array, self.index = array, index

  def _apply(self, method, *values, **kwargs):
    return tracing.call(_update, (self.array, self.index, method, values, kwargs), static_scalars=_static_indices())

  def get(self, **kwargs):
    return self._apply("get", **kwargs)

  def set(self, values, **kwargs):
    return self._apply("set", values, **kwargs)

  def add(self, values, **kwargs):
    return self._apply("add", values, **kwargs)

  def subtract(self, values, **kwargs):
    return self._apply("subtract", values, **kwargs)

  def multiply(self, values, **kwargs):
    return self._apply("multiply", values, **kwargs)

  mul = multiply

  def divide(self, values, **kwargs):
    return self._apply("divide", values, **kwargs)

  def power(self, values, **kwargs):
    return self._apply("power", values, **kwargs)

  def min(self, values, **kwargs):
    return self._apply("min", values, **kwargs)

  def max(self, values, **kwargs):
    return self._apply("max", values, **kwargs)

  def apply(self, func, **kwargs):
    return self._apply("apply", func, **kwargs)


class _IndexUpdateHelper:
  __slots__ = ("array",)

  def __init__(self, array):
    self.array = array

  def __getitem__(self, index):
    return _IndexUpdateRef(self.array, index)
