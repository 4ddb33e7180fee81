"""The seed prototype's API: `tiny(f)` turns a JAX function into one on tinygrad Tensors.

    @tiny
    def fun(first, second):
      return jnp.sum(first + jnp.sin(second) * 3.0)

    fun(Tensor([1, 2, 3]), Tensor([4, 5, 6])).realize().numpy()

The function is traced once per input avals (and static arguments); a call interprets its jaxpr with the tinygrad
rules and returns lazy Tensors (pytrees of them), so tinygrad fuses it with whatever the caller does next.
Equations without a tinygrad rule run on XLA, as everywhere in tinyjax.
"""
import functools

import jax
import numpy as np

from tinyjax.choosing.selection import backend_for, current_backend


def _is_tensor(x) -> bool:
  from tinygrad import Tensor
  return isinstance(x, Tensor)


def _spec(t):
  from tinygrad.dtype import _to_np_dtype
  return jax.ShapeDtypeStruct(t.shape, np.dtype(_to_np_dtype(t.dtype)))


def tiny(fun):
  """Wrap a JAX function into one that takes and returns (lazy) tinygrad Tensors, or pytrees of them."""
  cache: dict = {}

  @functools.wraps(fun)
  def wrapped(*args, **kwargs):
    leaves, treedef = jax.tree_util.tree_flatten((args, kwargs))
    tensor_positions = [i for i, x in enumerate(leaves) if _is_tensor(x)]
    specs = tuple(_spec(leaves[i]) for i in tensor_positions)
    statics = tuple(x for i, x in enumerate(leaves) if i not in tensor_positions)
    key = (treedef, specs, statics)
    if key not in cache:
      def flat(*tensors):
        full = list(leaves)
        for i, t in zip(tensor_positions, tensors):
          full[i] = t
        a, k = jax.tree_util.tree_unflatten(treedef, full)
        return fun(*a, **k)
      cache[key] = jax.make_jaxpr(flat, return_shape=True)(*specs)
    closed, out_shape = cache[key]
    backend = current_backend()
    if backend.name != "tinygrad":
      raise ValueError(f"tiny() runs on the tinygrad backend, but the backend in effect is {backend.name!r}")
    # NB: on the Tensors' device, which may not be the setting's: the rules make their own tensors on it
    if device := next((leaves[i].device for i in tensor_positions if leaves[i].device is not None), None):
      backend = backend_for("tinygrad", device)
    outs = backend.run_jaxpr(closed, *(leaves[i] for i in tensor_positions))
    return jax.tree_util.tree_unflatten(jax.tree_util.tree_structure(out_shape), outs)
  return wrapped
