"""Mirror modules: `tinyjax.numpy`, `tinyjax.lax`, ... are generated from JAX's modules, name by name, on first use.

A module does `__getattr__, __dir__ = mirror(globals(), jax.numpy, passthrough=...)`. A function is wrapped so that
it runs through `tracing.call` (where a helper that returns no array, `lax.broadcast_shapes`, still answers with
JAX's value); ufuncs and index tricks (`r_`, `mgrid`) keep their methods; everything else (dtypes, `iinfo`,
constants, the helpers tinyjax.identity.PASSTHROUGH names) is JAX's own object. Which JAX modules are mirrored and
which are JAX's own is decided in tinyjax.identity.
"""
import functools
import importlib
import inspect
import types

import jax
import jax.numpy as jnp

from tinyjax.core import tracing


def wrap(fn, name=None):
  """`fn` (a JAX function) as a lazy tinyjax function."""
  @functools.wraps(fn)
  def wrapped(*args, **kwargs):
    return tracing.call(fn, args, kwargs)
  if name is not None:
    wrapped.__name__ = name
  return wrapped


class Ufunc(jnp.ufunc):
  """A jnp.ufunc (JAX's checks and repr, equal to JAX's) whose call and methods (reduce, accumulate, outer, at,
  reduceat) are lazy: each goes through `_call` (which patch mode's ufuncs redefine)."""

  def __init__(self, ufunc):
    super().__init__(ufunc._func, ufunc.nin, ufunc.nout, name=ufunc.__name__, nargs=ufunc.nargs,
                     identity=ufunc.identity)
    self._ufunc = ufunc

  def _call(self, fn, args, kwargs):
    return tracing.call(fn, args, kwargs)

  def __call__(self, *args, **kwargs):
    return self._call(self._ufunc, args, kwargs)

  def reduce(self, *args, **kwargs):
    return self._call(self._ufunc.reduce, args, kwargs)

  def accumulate(self, *args, **kwargs):
    return self._call(self._ufunc.accumulate, args, kwargs)

  def at(self, *args, **kwargs):
    return self._call(self._ufunc.at, args, kwargs)

  def reduceat(self, *args, **kwargs):
    return self._call(self._ufunc.reduceat, args, kwargs)

  def outer(self, *args, **kwargs):
    return self._call(self._ufunc.outer, args, kwargs)


class IndexTrick:
  """`r_`, `c_`, `mgrid`, `ogrid`: objects indexed to build arrays, lazily (through `_call`, as Ufunc)."""

  def __init__(self, trick):
    self._trick = trick

  def _call(self, fn, args, kwargs):
    return tracing.call(fn, args, kwargs)

  def __getitem__(self, key):
    return self._call(_index_trick, (self._trick, key), {})

  def __repr__(self):
    return f"<tinyjax {self._trick!r}>"


def _index_trick(trick, key):
  return trick[key]


def _wrap_factory(factory):
  """A function that makes a computing function (`jax.nn.initializers.normal(0.1)`, `jnp.frompyfunc(f, 2, 1)`):
  what it makes is lazy."""
  @functools.wraps(factory)
  def wrapped(*args, **kwargs):
    return mirrored(factory(*args, **kwargs))
  return wrapped


def mirrored(obj):
  """`obj` of a computing JAX module as tinyjax has it: a lazy function, ufunc or index trick, or `obj` itself."""
  if isinstance(obj, jnp.ufunc):
    return Ufunc(obj)
  if type(obj).__name__ in ("CClass", "RClass", "_Mgrid", "_Ogrid"):
    return IndexTrick(obj)
  if isinstance(obj, (types.ModuleType, type)) or not callable(obj) or isinstance(obj, jax.extend.core.Primitive):
    return obj
  if inspect.isfunction(obj) or inspect.isbuiltin(obj) or hasattr(obj, "__wrapped__") or "Pjit" in type(obj).__name__:
    return wrap(obj)
  return obj


def mirror(namespace: dict, jax_module, passthrough=(), overrides=None, factories=(), computing=True):
  """Fill `namespace` (a module's globals) lazily from `jax_module`; returns (__getattr__, __dir__).

  Functions are wrapped lazily (`computing=False`: every name is JAX's own object), except the names in
  `passthrough`; `factories` make functions that compute. JAX's submodules (`lax.linalg`, `scipy.stats.norm`) are
  the tinyjax modules of the same name, so `import tinyjax.lax.linalg` works too (tinyjax.identity makes them)."""
  overrides = overrides or {}
  if hasattr(jax_module, "__path__"):
    namespace.setdefault("__path__", [])  # a package: its submodules are found by tinyjax.identity's finder

  def __getattr__(name):
    if name.startswith("__"):
      raise AttributeError(f"module {namespace['__name__']!r} has no attribute {name!r}")
    if name in overrides:
      value = overrides[name]
    else:
      try:
        obj = getattr(jax_module, name)
      except AttributeError:
        raise AttributeError(f"module {namespace['__name__']!r} has no attribute {name!r}") from None
      if isinstance(obj, types.ModuleType) and obj.__name__ == f"{jax_module.__name__}.{name}":
        value = importlib.import_module(f"{namespace['__name__']}.{name}")
      elif not computing or name in passthrough:
        value = obj
      elif name in factories:
        value = _wrap_factory(obj)
      else:
        value = mirrored(obj)
    namespace[name] = value
    return value

  def __dir__():
    return sorted({n for n in dir(jax_module) if not n.startswith("__")} | set(overrides) | set(namespace))

  return __getattr__, __dir__
