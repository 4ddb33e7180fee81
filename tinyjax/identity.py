"""How tinyjax is JAX to everything that touches it: its Arrays are jax.Arrays, its modules are JAX's modules.

Read this module to know what tinyjax pretends and how. Three parts:

1. **A tinyjax Array is a jax.Array.** `tinyjax.core.array.Array` subclasses `jax.Array`, so `isinstance(x,
   jax.Array)` holds and JAX's own checks (`check_arraylike`, type annotations) accept it. JAX's dispatch finds
   types in registries; `register_array_with_jax` puts the Array in each: its aval (what JAX sees when it traces:
   jax.jit, grad, vmap, make_jaxpr, eval_shape, typeof), and its data as a JAX array where JAX runs it.
   Where JAX's own functions run on tinyjax Arrays: **on XLA**. `jnp.sin(x)` or `jax.jit(f)(x)` given a tinyjax
   Array computes it (flushes what is pending), copies it to JAX's device once and keeps that copy on the Array
   (`Array._as_jax`: values are immutable, so the next JAX call on the same Array costs no transfer); the results
   are JAX's own arrays. tinyjax's own functions (tinyjax.numpy, tinyjax.jit, ...) run on the tinyjax backend.
   `jax.device_put(x)` gives JAX's array; `jax.device_get(x)` / `np.asarray(x)` read the tinyjax value.
   An Array of PRNG keys is a `KeyArray`, which reads as JAX's `PRNGKeyArray` does (`register_key_array_with_jax`).

2. **Every public name of JAX.** `import tinyjax` offers each name `import jax` offers, and `tinyjax.X` each
   name of `jax.X` for every JAX module (`tinyjax.numpy.linalg`, `tinyjax.scipy.stats.norm`, `tinyjax.tree_util`,
   ...). `MODULES` says how each JAX module is mirrored: in the modules that compute (`COMPUTING`), functions are
   lazy tinyjax functions (tinyjax.core.mirror) except the helpers in `PASSTHROUGH` and the functions that read an
   argument's value (tinyjax.overrides: tinyjax's own versions); in every other module, and
   for every non-function, the name is JAX's own object. The modules are generated on first import by
   `MirrorFinder`, from this table alone; `tinyjax/__init__.py` adds tinyjax's own names (jit, grad, devices, ...)
   over JAX's. The deliberate differences are listed, with reasons, in tests/test_identity.py.

3. **JAX's errors.** tinyjax functions trace JAX's own code, so a wrong call raises JAX's exception with JAX's
   message.

For issue 13's patch mode (tinyjax behind `import jax`): `MODULES` is the list of JAX modules and how each is
mirrored, `mirror_module(name)` makes the tinyjax module of any JAX module name, `register_array_with_jax` is
the whole of what JAX needs to accept tinyjax Arrays.
"""
import importlib
import importlib.abc
import importlib.machinery
import inspect
import sys

import jax
import numpy as np
# NB: jax.extend offers none of the registries JAX's dispatch consults; they are jax._src's (jax 0.10)
from jax._src import core as jax_core
from jax._src import dtypes as jax_dtypes
from jax._src import tree_util as jax_tree_util
from jax._src.interpreters import pxla as jax_pxla
from jax._src.random import prng as jax_prng

from tinyjax.core import tracing
from tinyjax.core.array import KEY_CLASSES, Array, CommittedArray, KeyArray
from tinyjax.core.mirror import mirror
from tinyjax.overrides import OVERRIDES

# --- 1. A tinyjax Array is a jax.Array


def _as_jax_arrays(xs, shardings, layouts, copy_semantics):
  return jax_pxla.shard_args(shardings, layouts, copy_semantics, [x._as_jax() for x in xs])


def register_array_with_jax(array_type: type = Array) -> None:
  """Make JAX's dispatch accept `array_type` (a jax.Array subclass with `aval` and `_as_jax()`)."""
  # tracing (jit, grad, vmap, make_jaxpr, typeof, shape checks) reads the aval: no data is needed
  jax_core.pytype_aval_mappings[array_type] = lambda x: x.aval  # NB: jax._src
  # running on XLA (eager jax.numpy, a jit-compiled call, device_put) takes the data, as JAX's array, made once
  jax_dtypes.register_canonicalize_value_handler(array_type, lambda x: x._as_jax())  # NB: jax._src
  jax_pxla.shard_arg_handlers[array_type] = _as_jax_arrays  # NB: jax._src (arguments not canonicalized first)


def _key_data(key: KeyArray) -> tuple:
  return (tracing.call(jax.random.key_data, (key,)),), key.dtype._impl  # NB: the PRNGImpl itself, as JAX flattens


def _key_array(impl, children) -> jax.Array:
  """A key array over `children`' one raw data array: a tinyjax key over a tinyjax Array, else JAX's own (as
  `jax.device_get` makes it, over a NumPy array)."""
  data, = children
  if isinstance(data, Array):
    return tracing.call(jax.random.wrap_key_data, (data,), {"impl": impl})
  return jax_prng.PRNGKeyArray(impl, data)


def register_key_array_with_jax(key_class: type) -> None:
  """Make JAX's dispatch read tinyjax's key arrays as it reads its own: an Array, and a pytree over their raw data to
  JAX's dispatch registry (`jax.device_get` flattens a key array there, and recurses without it)."""
  register_array_with_jax(key_class)
  jax_tree_util.dispatch_registry.register_node(key_class, _key_data, _key_array)  # NB: jax._src


def _key_arrays_as_jaxs() -> None:
  """What a key array has and lacks as JAX's PRNGKeyArray does (the classes of placed keys inherit KeyArray's)."""
  # what JAX's key arrays are not: NumPy arrays, bools (JAX's TypeErrors) or numbers to format (Python's format of
  # any object), or arrays with the methods PRNGKeyArray does not forward (`sum`, `astype`, `item`, ...: jax.Array's
  # abstract ones, NotImplementedError)
  for name in ("__array__", "__bool__", "__format__"):
    setattr(KeyArray, name, getattr(jax_prng.PRNGKeyArray, name))
  for name in vars(jax.Array):
    if not name.startswith("_") and name in vars(Array) and name not in vars(jax_prng.PRNGKeyArray):
      setattr(KeyArray, name, vars(jax.Array)[name])


def _array_namespace(self, api_version=None):
  """The array API namespace of a tinyjax Array: tinyjax.numpy (as jax.numpy is jax.Array's)."""
  return importlib.import_module("tinyjax.numpy")


Array.__array_namespace__ = _array_namespace  # set here: tinyjax.numpy is above core.array in the layers

# --- 2. Every public name of JAX

# The JAX modules whose functions compute on arrays: their functions become lazy tinyjax functions. Submodules
# (numpy.linalg, scipy.stats.norm, nn.initializers) follow their parent.
COMPUTING = ("numpy", "lax", "random", "nn", "scipy", "image", "ops")

# Functions of the computing modules that take or make no arrays (or read only shapes and dtypes): JAX's own objects,
# untraced (files are read and written, options set, at the call). A function left out whose result holds no array
# still answers with JAX's value (core/tracing.py: `lax.broadcast_shapes`, `lax.dtype`).
PASSTHROUGH = {
  "numpy": frozenset({
    "shape", "ndim", "size", "result_type", "promote_types", "issubdtype", "isdtype", "can_cast", "iscomplexobj",
    "isrealobj", "isscalar", "iterable", "load", "save", "savez", "get_printoptions", "printoptions",
    "set_printoptions", "array_repr", "array_str", "broadcast_shapes", "dtype", "finfo", "iinfo", "s_", "index_exp",
    "ndarray", "einsum_path"}),
  "random": frozenset({"key_impl", "default_prng_impl"}),
  "nn.initializers": frozenset({"Initializer"}),
}

# Module attributes JAX defines with dunder names that are part of an API (the array API standard's).
DUNDERS = ("__array_api_version__", "__array_namespace_info__", "__version_info__")


def _factories(jax_module) -> frozenset:
  """The functions that make a computing function: `jnp.vectorize(f)`, `jnp.frompyfunc(f, 2, 1)` (a ufunc), and in
  jax.nn.initializers those that make an initializer (`normal(0.1)`), not ones that are one (`zeros(key, shape)`):
  what they make is mirrored too, so it computes on the tinyjax backend."""
  if jax_module.__name__ == "jax.numpy":
    return frozenset({"vectorize", "frompyfunc"})
  if jax_module.__name__ != "jax.nn.initializers":
    return frozenset()
  return frozenset(name for name in dir(jax_module) if inspect.isfunction(fn := getattr(jax_module, name))
                   and next(iter(inspect.signature(fn).parameters), None) != "key")


def module_policy(name: str) -> dict:
  """How the JAX module `jax.<name>` is mirrored as `tinyjax.<name>` (the arguments of core.mirror.mirror)."""
  jax_module = importlib.import_module(f"jax.{name}")
  return {"jax_module": jax_module, "computing": name.split(".")[0] in COMPUTING,
          "passthrough": PASSTHROUGH.get(name, frozenset()), "factories": _factories(jax_module),
          "overrides": OVERRIDES.get(name, {})}


def mirror_module(name: str, module) -> None:
  """Fill `module` (tinyjax.<name>) as the mirror of jax.<name>."""
  policy = module_policy(name)
  module.__doc__ = (f"`tinyjax.{name}`: every public name of `jax.{name}`"
                    + (", its functions computed lazily on the tinyjax backend." if policy["computing"] else
                       " (JAX's own objects; they accept tinyjax Arrays)."))
  for dunder in DUNDERS:
    if hasattr(policy["jax_module"], dunder):
      setattr(module, dunder, getattr(policy["jax_module"], dunder))
  module.__getattr__, module.__dir__ = mirror(vars(module), **policy)


class MirrorFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
  """Finds `tinyjax.<name>` for every JAX module `jax.<name>` that has no file in tinyjax, and makes it."""

  def find_spec(self, fullname, path=None, target=None):
    if not fullname.startswith("tinyjax."):
      return None
    # NB: a name tinyjax defines itself (tinyjax.export, a function) is no module: importing one (`import
    # tinyjax.export`) would put the module made of JAX's in its place
    if fullname.split(".")[1] in getattr(sys.modules.get("tinyjax"), "OWN", ()):
      return None
    try:
      found = importlib.util.find_spec("jax." + fullname.removeprefix("tinyjax."))
    except ImportError:
      return None
    if found is None:
      return None
    return importlib.machinery.ModuleSpec(fullname, self, is_package=found.submodule_search_locations is not None)

  def create_module(self, spec):
    return None  # the default module

  def exec_module(self, module):
    mirror_module(module.__name__.removeprefix("tinyjax."), module)


if not any(isinstance(finder, MirrorFinder) for finder in sys.meta_path):
  # right after the finder of files: tinyjax's own files come first, and an editable install of another checkout
  # (a finder further down) cannot serve its stale copy of a module made here
  sys.meta_path.insert(sys.meta_path.index(importlib.machinery.PathFinder) + 1, MirrorFinder())

register_array_with_jax()
register_array_with_jax(CommittedArray)
for _key_class in KEY_CLASSES:
  register_key_array_with_jax(_key_class)
_key_arrays_as_jaxs()
