"""JAX's transformations, run on the tinyjax backend: JAX transforms the function, tinyjax runs the result.

Each transformed function is traced once per input avals (like every tinyjax call) and its jaxpr goes through the
pending buffer, so `grad(jit(f))`, `jit(vmap(grad(f)))` and the like compose in any order, with each other and with
JAX's own transformations (inside which tinyjax.numpy defers to jax.numpy).
"""
import dataclasses
import functools
import inspect

import jax

from tinyjax.core import pending, mirror, report, tracing
from tinyjax.core.array import Array


def _lazy_transform(jax_transform):
  """tinyjax's version of a JAX transformation of the form transform(fun, ...) -> function."""
  @functools.wraps(jax_transform)
  def transform(fun, *transform_args, **transform_kwargs):
    return mirror.wrap(jax_transform(fun, *transform_args, **transform_kwargs))
  return transform


grad = _lazy_transform(jax.grad)
value_and_grad = _lazy_transform(jax.value_and_grad)
vmap = _lazy_transform(jax.vmap)
jacfwd = _lazy_transform(jax.jacfwd)
jacrev = _lazy_transform(jax.jacrev)
jacobian = _lazy_transform(jax.jacobian)
hessian = _lazy_transform(jax.hessian)
checkpoint = remat = _lazy_transform(jax.checkpoint)


def jit(fun=None, *, static_argnums=None, static_argnames=None, donate_argnums=None, donate_argnames=None, **kwargs):
  """jax.jit, run on the tinyjax backend: compiled once per input avals and statics, then replayed.

  NB: donation is accepted and ignored (tinyjax Arrays are immutable values; buffers are freed when unreferenced).
  Each call is dispatched at once (flushed), as JAX dispatches a jitted call, so a loop of calls replays one
  captured program instead of growing the pending queue.
  """
  if fun is None:
    return functools.partial(jit, static_argnums=static_argnums, static_argnames=static_argnames, **kwargs)
  jitted = jax.jit(fun, static_argnums=static_argnums, static_argnames=static_argnames, **kwargs)
  declare_jit(jitted, fun, static_argnums=static_argnums, static_argnames=static_argnames)

  @functools.wraps(fun)
  def run(*args, **call_kwargs):
    return call_jitted(jitted, args, call_kwargs)
  run.lower = jitted.lower
  run.trace = jitted.trace
  return run


def declare_jit(jitted, fun, static_argnums=None, static_argnames=None, **options) -> None:
  """Tells the front end that `jitted` is jax.jit(fun, ...): which of its arguments are static (static_argnums and
  the positional parameters static_argnames names: JAX makes each static either way)."""
  positions = {static_argnums} if isinstance(static_argnums, int) else set(static_argnums or ())
  names = {static_argnames} if isinstance(static_argnames, str) else set(static_argnames or ())
  try:
    parameters = list(inspect.signature(fun).parameters.values())
  except (TypeError, ValueError):  # a callable without a signature: its static names are keywords only
    parameters = []
  positional = [p.name for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
  tracing.declare_jitted(jitted, positions | {i for i, name in enumerate(positional) if name in names})


def call_jitted(jitted, args, kwargs):
  """A call of JAX's jitted function on the backend, dispatched at once (flushed) as JAX dispatches a jitted call,
  so that a loop of calls replays one captured program instead of growing the pending queue. A call whose program is
  compiled already, with concrete inputs and nothing else pending, runs it at once (tracing.CallSite)."""
  out = tracing.call(jitted, args, kwargs, at_once=True)
  if pending.anything_pending():
    pending.flush()
  return out


def _jvp(fun, primals, tangents, has_aux):
  return jax.jvp(fun, primals, tangents, has_aux=has_aux)


def jvp(fun, primals, tangents, has_aux=False):
  return tracing.call(_jvp, (fun, tuple(primals), tuple(tangents), has_aux))


class _BackwardOnTheQueue(functools.partial):
  """The `fun` of JAX's `VJP` (a partial of JAX's backward function; `VJP.jaxpr` reads its arguments), applied through
  the pending queue: `VJP` calls it with its trees and residuals, then calls what it returns with the cotangents."""

  def __call__(self, in_tree, out_tree, args_res, opaque_residuals, *ct_refs):
    jax_vjp = self.jax_vjp_type(functools.partial(self.func, *self.args, **self.keywords), in_tree, out_tree,
                                args_res, opaque_residuals)
    return lambda *cts: tracing.call(_backward, (jax_vjp, ct_refs, *cts))


def _backward(jax_vjp, ct_refs, *cts):
  return jax_vjp.with_refs(*ct_refs)(*cts) if ct_refs else jax_vjp(*cts)


def _vjp(fun, *primals, has_aux):
  return jax.vjp(fun, *primals, has_aux=has_aux)


def vjp(fun, *primals, has_aux=False):
  out = tracing.call(_vjp, (fun, *primals), {"has_aux": has_aux})
  return (out[0], _queued_vjp(out[1]), *out[2:])


def _queued_vjp(jax_vjp):
  """JAX's own `VJP` (a pytree of its residuals, tinyjax Arrays here), its backward pass run by tinyjax."""
  backward = _BackwardOnTheQueue(jax_vjp.fun.func, *jax_vjp.fun.args, **jax_vjp.fun.keywords)
  backward.jax_vjp_type = type(jax_vjp)
  return dataclasses.replace(jax_vjp, fun=backward)


def _linearize(fun, *primals):
  return jax.linearize(fun, *primals)


def linearize(fun, *primals):
  out, f_jvp = tracing.call(_linearize, (fun, *primals))
  # JAX's own Partial over the linearized residuals (tinyjax Arrays here), its function run by tinyjax
  return out, jax.tree_util.Partial(functools.partial(_apply_on_the_queue, f_jvp.func), *f_jvp.args, **f_jvp.keywords)


def _apply_on_the_queue(fn, *args):
  return tracing.call(fn, args)


def _spec(x):
  return jax.ShapeDtypeStruct(x.shape, x.dtype, weak_type=x.weak_type) if isinstance(x, Array) else x


def make_jaxpr(fun, *args, **kwargs):
  """jax.make_jaxpr, accepting tinyjax Arrays (by their avals)."""
  traced = jax.make_jaxpr(fun, *args, **kwargs)
  return lambda *a, **k: traced(*jax.tree_util.tree_map(_spec, (a, k), is_leaf=tracing.is_array)[0],
                                **jax.tree_util.tree_map(_spec, k, is_leaf=tracing.is_array))


def eval_shape(fun, *args, **kwargs):
  args, kwargs = jax.tree_util.tree_map(_spec, (args, kwargs), is_leaf=tracing.is_array)
  return jax.eval_shape(fun, *args, **kwargs)


def _call_as(cls, f, *args, **kwargs):
  return cls.__call__(f, *args, **kwargs)


class custom_jvp(jax.custom_jvp):  # noqa: N801  (JAX's name)
  """jax.custom_jvp whose calls on tinyjax Arrays go through the pending queue."""

  def __call__(self, *args, **kwargs):
    return tracing.call(_call_as, (jax.custom_jvp, self, *args), kwargs)


class custom_vjp(jax.custom_vjp):  # noqa: N801  (JAX's name)
  """jax.custom_vjp whose calls on tinyjax Arrays go through the pending queue."""

  def __call__(self, *args, **kwargs):
    return tracing.call(_call_as, (jax.custom_vjp, self, *args), kwargs)


def explain(fn):
  """`explain(f)(*args)` runs f, waits for its results and returns the Report of what that call ran where."""
  @functools.wraps(fn)
  def explained(*args, **kwargs):
    with report.collecting() as scope:
      out = fn(*args, **kwargs)
      pending.flush()
      jax.tree_util.tree_map(lambda x: x.block_until_ready() if hasattr(x, "block_until_ready") else x, out)
    return scope
  return explained
