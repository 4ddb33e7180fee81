"""Mirror modules: `tinyjax.numpy`, `tinyjax.lax`, ... are generated from JAX's modules, name by name, on first use.

A module does `__getattr__, __dir__ = mirror(globals(), jax.numpy, passthrough=...)`. A function is wrapped so that
it runs through `tracing.call`; ufuncs and index tricks (`r_`, `mgrid`) keep their methods; everything else
(dtypes, `iinfo`, constants, helpers that return no array) is JAX's own object.
"""
import functools
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


class Ufunc:
  """jnp.ufunc with its methods (reduce, accumulate, outer, at, reduceat), each lazy."""

  def __init__(self, ufunc):
    self._ufunc = ufunc
    functools.update_wrapper(self, ufunc)

  def __call__(self, *args, **kwargs):
    return tracing.call(self._ufunc, args, kwargs)

  def __getattr__(self, name):
    attr = getattr(self._ufunc, name)
    return wrap(attr) if callable(attr) else attr

  def __repr__(self):
    return f"<tinyjax {self._ufunc!r}>"


class IndexTrick:
  """`r_`, `c_`, `mgrid`, `ogrid`: objects indexed to build arrays."""

  def __init__(self, trick):
    self._trick = trick

  def __getitem__(self, key):
    return tracing.call(_index_trick, (self._trick, key))

  def __repr__(self):
    return f"<tinyjax {self._trick!r}>"


def _index_trick(trick, key):
  return trick[key]


def _mirrored(obj):
  if isinstance(obj, jnp.ufunc):
    return Ufunc(obj)
  if type(obj).__name__ in ("CClass", "RClass", "_Mgrid", "_Ogrid"):
    return IndexTrick(obj)
  if isinstance(obj, (types.ModuleType, type)) or not callable(obj) or isinstance(obj, jax.extend.core.Primitive):
    return obj
  if inspect.isfunction(obj) or inspect.isbuiltin(obj) or hasattr(obj, "__wrapped__") or "Pjit" in type(obj).__name__:
    return wrap(obj)
  return obj


def mirror(namespace: dict, jax_module, passthrough=(), overrides=None):
  """Fill `namespace` (a module's globals) lazily from `jax_module`; returns (__getattr__, __dir__)."""
  overrides = overrides or {}

  def __getattr__(name):
    if name.startswith("__"):
      raise AttributeError(name)
    if name in overrides:
      value = overrides[name]
    else:
      try:
        obj = getattr(jax_module, name)
      except AttributeError:
        raise AttributeError(f"module {namespace['__name__']!r} has no attribute {name!r}") from None
      if name in passthrough:
        value = obj
      elif isinstance(obj, types.ModuleType):  # e.g. lax.linalg, scipy.stats.norm: mirrored the same way
        value = types.ModuleType(f"{namespace['__name__']}.{name}", obj.__doc__)
        value.__getattr__, value.__dir__ = mirror(value.__dict__, obj)
      else:
        value = _mirrored(obj)
    namespace[name] = value
    return value

  def __dir__():
    return sorted(set(dir(jax_module)) | set(overrides) | set(namespace))

  return __getattr__, __dir__
