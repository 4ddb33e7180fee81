"""Patch mode: an ordinary `import jax` program runs its work on the tinyjax backend.

`tinyjax.patch()` (on by default in `tinyjax run`) replaces, in JAX's own modules, the names that compute:

- every function of jax.numpy, jax.lax, jax.random, jax.nn, jax.scipy, jax.image, jax.ops and their submodules
  becomes its tinyjax mirror (tinyjax.identity decides which names compute): on concrete values a buffered tinyjax
  call, on JAX tracers (inside jit, grad, vmap, scan, custom_jvp) JAX's own function, so tracing is exactly JAX's;
- `jax.jit` (also where JAX defines it, `jax._src.api.jit`, but for JAX's runtime) makes functions that run their
  jaxpr on the tinyjax backend (as tinyjax.jit), and `jax.grad`, `value_and_grad`, `vmap`, `jacfwd`, `jacrev`,
  `jacobian`, `hessian`, `checkpoint`/`remat`, `jvp`, `vjp`, `linearize` called on concrete values trace the
  transformed function once and run it on the backend;
- `jax.device_put` makes tinyjax Arrays on the device in effect;
- `jax.profiler.trace`, `start_trace` and `stop_trace` record a tinyjax profile (tinyjax/profiling.py), written where
  JAX writes its Perfetto trace;
- a primitive that JAX applies by itself to concrete values (`jax._src.lax.linalg.geqrf(x)`, `prim.bind(x)`: a JAX
  function that is not a public name, called outside any transformation) runs as a tinyjax call of that primitive.

Each replacement is a small wrapper holding JAX's original. It calls the original when the patch is off (so a
function captured while patched, e.g. a `@jax.jit` decorator applied when a module was imported, behaves exactly as
JAX's once the patch is undone) and when its caller is tinyjax's own code (tinyjax computes with JAX's originals).
Undoing the patch puts back the very objects that were there.

NB: what the patch cannot reach is JAX's: functions captured before it (`from jax.numpy import dot` in a module
imported earlier), and what JAX runs as its own jitted functions on `jax.Array`s JAX made before it (`x + 1`,
`x.sum()`; an element `x[1]` is an eager primitive, caught).
"""
import functools
import importlib
import importlib.util
import os
import pkgutil
import sys
import types

import jax
import jax.profiler
import numpy as np
from jax._src import api as jax_api
from jax._src import core as jax_core  # NB: JAX's own tests make Refs with core.new_ref, beneath jax.new_ref
from jax._src import dispatch as jax_dispatch

from tinyjax import identity, profiling, transforms
from tinyjax.core import mirror, tracing
from tinyjax.core.array import Array, CommittedArray
from tinyjax.ir.backend import Device
from tinyjax.ir.source import is_tinyjax_file
from tinyjax.transfer import device_put as tinyjax_device_put

_TRANSFORMS = ("grad", "value_and_grad", "vmap", "jacfwd", "jacrev", "jacobian", "hessian", "checkpoint", "remat")
# NB: JAX picks a reduction's primitive by the identity of the function passed (`lax.reduce_window(x, 0., lax.add,
# ...)` is reduce_window_sum, differentiable; any other function a generic reduce_window, not): these stay JAX's.
# Called by themselves on concrete values they run on XLA (tinyjax.identity).
_KEPT = {"lax": frozenset({"add", "mul", "max", "min", "bitwise_and", "bitwise_or", "bitwise_xor"})}
_TRANSFORMED_KEPT = 256  # transformed functions remembered, so that `jax.grad(f)(x)` in a loop traces once

_scopes = 0  # how many patch() are in effect
_on = False  # whether the replacements compute on tinyjax (read at every call: one global lookup)
_undo: list[tuple[types.ModuleType, str, object]] = []  # (module, name, JAX's original), in patching order


def _for_tinyjax(depth: int = 2) -> bool:
  """Whether a replacement should compute on tinyjax: the patch is on, its caller (`depth` frames up from here) is
  not tinyjax itself, and no JAX trace is current (inside jit, grad, vmap, scan, ... JAX's own function is what JAX
  stages)."""
  return (_on and not tracing.inside_transformation()
          and not is_tinyjax_file(sys._getframe(depth).f_code.co_filename))


def _dispatching(original, replacement):
  """A function that is `replacement` while patched (outside tinyjax's code) and `original` otherwise."""
  @functools.wraps(original)
  def patched(*args, **kwargs):
    if _for_tinyjax():
      return replacement(*args, **kwargs)
    return original(*args, **kwargs)
  return patched


def _dispatched(fn, args, kwargs):
  """fn's call, on tinyjax while patched. The caller judged is the one of a mirror's method (`__call__`, `reduce`,
  `__getitem__`, ...), which called `_call`, which called this."""
  if _for_tinyjax(depth=4):
    return tracing.call(fn, args, kwargs)
  return fn(*args, **kwargs)


class _Ufunc(mirror.Ufunc):
  """A jnp.ufunc (so JAX's and the user's checks still hold) whose call and methods dispatch as `_dispatching`."""

  def _call(self, fn, args, kwargs):
    return _dispatched(fn, args, kwargs)


class _IndexTrick(mirror.IndexTrick):
  """`r_`, `c_`, `mgrid`, `ogrid`, dispatching as `_dispatching` when indexed."""

  def _call(self, fn, args, kwargs):
    return _dispatched(fn, args, kwargs)

  def __repr__(self):
    return repr(self._trick)


def _factory(original):
  """A function that makes a computing function (`jax.nn.initializers.normal(0.1)`, `jnp.frompyfunc(f, 2, 1)`):
  what it makes while patched dispatches (flax makes its default initializers when it is imported, and calls them
  later)."""
  @functools.wraps(original)
  def patched(*args, **kwargs):
    made = original(*args, **kwargs)
    ours = mirror.mirrored(made) if _for_tinyjax() else made
    return made if ours is made else _replacement(made, ours)
  return patched


class _Jitted:
  """What the patched `jax.jit` makes: JAX's jitted function, run as tinyjax.jit runs it while patched."""

  def __init__(self, jitted):
    functools.update_wrapper(self, jitted)
    # NB: after update_wrapper, which copies the wrapped function's __dict__: `jax.jit(jax.grad(jax.jit(f)))`
    # wraps a function that carries the inner _Jitted's attributes, whose `_jitted` would replace ours; and
    # `__wrapped__` is the user's function, as on JAX's jitted function (update_wrapper sets JAX's object)
    self._jitted = jitted
    self.__wrapped__ = getattr(jitted, "__wrapped__", jitted)

  def __call__(self, *args, **kwargs):
    if not _for_tinyjax():
      return self._jitted(*args, **kwargs)
    return transforms.call_jitted(self._jitted, args, kwargs)

  def __get__(self, instance, owner=None):
    return self if instance is None else types.MethodType(self, instance)

  def __getattr__(self, name):  # lower, trace, eval_shape, clear_cache, ...
    return getattr(self._jitted, name)

  def __repr__(self):
    return repr(self._jitted)


# NB: JAX's runtime builds on jit where it is defined (`jax._src.api.jit`): an eager primitive is a jitted call of
# that one primitive (dispatch.xla_primitive_callable), a transfer between shardings a jitted identity. Those stay
# JAX's (tinyjax's own fallback to XLA goes through the first); every other caller of that name (pmap and eager
# shard_map, whose jitted shard_map tinyjax runs over the shards side by side: tinyjax/ir/spmd.py; a library; JAX's
# test utilities) gets the patched jit, as callers of `jax.jit` do.
_JAX_RUNTIME = frozenset(importlib.util.find_spec(name).origin
                         for name in ("jax._src.dispatch", "jax._src.pjit", "jax._src.hijax"))


def _jit(original, runtime_stays_jax: bool = False):
  @functools.wraps(original)
  def jit(*fun, **options):
    if not fun:
      return functools.partial(jit, **options)  # `jax.jit(static_argnums=1)` used as a decorator
    jitted = original(*fun, **options)
    if runtime_stays_jax and sys._getframe(1).f_code.co_filename in _JAX_RUNTIME:
      return jitted
    if not _for_tinyjax():
      return jitted
    transforms.declare_jit(jitted, fun[0], **options)
    return _Jitted(jitted)
  return jit


_JAX_DIR = os.path.dirname(os.path.abspath(jax.__file__)) + os.sep
_EAGER_KEPT = 4096  # primitives with their parameters whose eager calls are remembered


def _called_by_user(frame) -> bool:
  """Whether the first frame outside JAX's own files, from `frame` outwards, is neither tinyjax's nor missing."""
  while frame is not None and frame.f_code.co_filename.startswith(_JAX_DIR):
    frame = frame.f_back
  return frame is not None and not is_tinyjax_file(frame.f_code.co_filename)


@functools.lru_cache(maxsize=_EAGER_KEPT)
def _primitive_call(prim, params: tuple):
  """The tinyjax call of `prim` with `params` on concrete values: one function per primitive and parameters, so
  that tracing.call remembers what it traced."""
  # NB: JAX's eager paths leave NumPy integers in parameters (`x[1]` on a jax.Array binds dynamic_slice with
  # slice_sizes=(np.int64(1),)), where its tracing gives Python ints, which tinygrad's rules take
  ints = {name: jax.tree_util.tree_map(lambda v: int(v) if isinstance(v, np.integer) else v, value)
          for name, value in params}

  def bound(*args):
    return prim.bind(*args, **ints)
  return lambda *args: tracing.call(bound, args)


def _eager_primitives(original):
  """JAX's `dispatch.xla_primitive_callable`, through which JAX's runtime applies a primitive to concrete values
  (`dispatch.apply_primitive`, every primitive's default impl): while patched, the primitive runs on tinyjax when a
  user's code applied it outside any transformation. NB: what tinyjax applies itself (its fallback, its
  conversions) stays JAX's."""
  @functools.wraps(original)  # NB: with the original's cache_info and cache_clear, which JAX's test utilities read
  def primitive_callable(prim, **params):
    on_jax = original(prim, **params)  # JAX's cache of primitive callables counts this call as before
    if _on and not tracing.inside_transformation() and _called_by_user(sys._getframe(1)):
      return _primitive_call(prim, tuple(sorted(params.items())))
    return on_jax
  return primitive_callable


def _transform(original):
  """`jax.grad` and the like: the transformed function, traced once per avals and run on the backend while
  patched (JAX's own, given tracers: tinyjax's tracing defers to it)."""
  transformed_by_key: dict = {}

  @functools.wraps(original)
  def transform(fun, *options, **keywords):
    try:
      key = (fun, options, tuple(sorted(keywords.items())))
      transformed = transformed_by_key.get(key)
    except TypeError:  # an unhashable option: transformed anew
      key, transformed = None, None
    if transformed is None:
      transformed = original(fun, *options, **keywords)
      if key is not None:
        if len(transformed_by_key) >= _TRANSFORMED_KEPT:
          transformed_by_key.pop(next(iter(transformed_by_key)))
        transformed_by_key[key] = transformed
    if not _for_tinyjax():
      return transformed
    return _dispatching(transformed, mirror.wrap(transformed))
  return transform


def _device_put(x, device=None, **options):
  """jax.device_put while patched: a tinyjax Array on `device` if it is a tinyjax Device, else on the device in
  effect; with a NamedSharding (or a PartitionSpec under jax.set_mesh), an Array of that sharding. NB: JAX's devices
  and shardings name places tinyjax does not compute; `src`, `donate`, `may_alias` have no meaning for immutable
  tinyjax values."""
  if isinstance(device, jax.sharding.PartitionSpec):  # under jax.set_mesh: on that mesh
    device = jax.sharding.NamedSharding(jax.sharding.get_mesh(), device)
  if isinstance(device, jax.sharding.NamedSharding):
    return tinyjax_device_put(x, sharding=device)
  if isinstance(device, jax.Device):  # committed to that device, as JAX's array is (computed on tinyjax's)
    return jax.tree_util.tree_map(lambda a: CommittedArray(a._value, device), tinyjax_device_put(x),
                                  is_leaf=lambda a: isinstance(a, Array))
  return tinyjax_device_put(x, device if isinstance(device, Device) else None)


def _given_jax_arrays(original):
  """A JAX function that hands its arguments to JAX's C++ runtime, which takes its own arrays only: tinyjax Arrays
  are given as JAX's (their values; the function places them as JAX does), and its results are JAX's."""
  def call(*args, **kwargs):
    args, kwargs = jax.tree_util.tree_map(tracing.to_jax, (args, kwargs))
    return original(*args, **kwargs)
  return call


def _new_ref(original, init_val, **options):
  """jax.new_ref while patched: JAX's mutable reference, to a JAX copy of the value. NB: called from here, the copy
  JAX makes (an eager primitive) stays JAX's: a Ref's buffer must be JAX's, which JAX donates and replaces on each
  update of the reference in a jitted call."""
  return original(tracing.to_jax(init_val), **options)


def _computing_modules() -> list[str]:
  """The names (`numpy`, `numpy.linalg`, `scipy.stats.norm`, ...) of JAX's public modules whose functions compute."""
  names = []
  for top in identity.COMPUTING:
    package = importlib.import_module(f"jax.{top}")
    names.append(top)
    for found in pkgutil.walk_packages(getattr(package, "__path__", []), f"jax.{top}."):
      if "._" not in found.name:
        names.append(found.name.removeprefix("jax."))
  return names


def _replacement(original, mirrored, factory: bool = False):
  if isinstance(mirrored, mirror.Ufunc):
    return _Ufunc(original)
  if isinstance(mirrored, mirror.IndexTrick):
    return _IndexTrick(original)
  if factory:
    return _factory(original)
  return _dispatching(original, mirrored)


def _plan() -> list[tuple[types.ModuleType, str, object]]:
  """(JAX module, name, replacement) for every name the patch replaces. The mirrors are all made here, before any
  name is replaced, so that each wraps JAX's original."""
  plan = []
  for name in _computing_modules():
    jax_module, tinyjax_module = importlib.import_module(f"jax.{name}"), importlib.import_module(f"tinyjax.{name}")
    policy = identity.module_policy(name)
    for attr in dir(jax_module):
      if attr.startswith("_"):
        continue
      original = getattr(jax_module, attr)
      try:
        mirrored = getattr(tinyjax_module, attr)
      except AttributeError:
        continue
      if mirrored is original or isinstance(original, types.ModuleType) or attr in _KEPT.get(name, ()):
        continue  # JAX's own object in tinyjax too (dtypes, classes, helpers); submodules are planned by name
      plan.append((jax_module, attr, _replacement(original, mirrored, attr in policy["factories"])))
  for attr in _TRANSFORMS:
    plan.append((jax, attr, _transform(getattr(jax, attr))))
  for attr in ("jvp", "vjp", "linearize"):
    plan.append((jax, attr, _dispatching(getattr(jax, attr), getattr(transforms, attr))))
  plan.append((jax, "jit", _jit(jax.jit)))
  plan.append((jax_api, "jit", _jit(jax_api.jit, runtime_stays_jax=True)))
  plan.append((jax, "device_put", _dispatching(jax.device_put, _device_put)))
  for attr in ("device_put_sharded", "device_put_replicated"):  # pmap's, no longer in JAX's namespace
    plan.append((jax_api, attr, _dispatching(getattr(jax_api, attr), _given_jax_arrays(getattr(jax_api, attr)))))
  for module in (jax, jax.ref, jax_core):
    plan.append((module, "new_ref", _dispatching(module.new_ref, functools.partial(_new_ref, module.new_ref))))
  for attr in ("trace", "start_trace", "stop_trace"):
    plan.append((jax.profiler, attr, _dispatching(getattr(jax.profiler, attr), getattr(profiling, attr))))
  plan.append((jax_dispatch, "xla_primitive_callable", _eager_primitives(jax_dispatch.xla_primitive_callable)))
  return plan


def _apply() -> None:
  global _on
  for module, name, replacement in _plan():
    _undo.append((module, name, module.__dict__[name]))
    setattr(module, name, replacement)
  _on = True


def _restore() -> None:
  global _on
  _on = False
  while _undo:
    module, name, original = _undo.pop()
    setattr(module, name, original)


def is_patched() -> bool:
  """Whether JAX's functions run on tinyjax now."""
  return _on


class patch:  # noqa: N801  (used like a function: `tinyjax.patch()`)
  """Run JAX's own functions on the tinyjax backend: `tinyjax.patch()` from now on, or `with tinyjax.patch():`
  for a block (JAX exactly as it was afterwards, also when the block raises). `undo()` ends a `patch()` early.
  Patches nest: JAX is restored when the last one ends."""

  def __init__(self):
    global _scopes
    if _scopes == 0:
      _apply()
    _scopes += 1
    self._open = True

  def undo(self) -> None:
    global _scopes
    if not self._open:
      return
    self._open = False
    _scopes -= 1
    if _scopes == 0:
      _restore()

  def __enter__(self):
    return self

  def __exit__(self, *exc_info):
    self.undo()
    return False
