"""device_put / device_get, as in JAX."""
import jax
import numpy as np

from tinyjax.choosing.selection import backend_for, backend_over, current_backend
from tinyjax.core.array import Array, ShardedArray
from tinyjax.core.pending import Value
from tinyjax.core.tracing import host_aval, input_value, inside_transformation, partial_over_a_mesh, to_jax
from tinyjax.ir.backend import Device


def _is_array_like(x) -> bool:
  return isinstance(x, (Array, np.ndarray, np.generic, jax.Array, int, float, complex, bool))


def device_put(x, device=None, sharding=None):
  """Put `x` (a pytree of arrays) on `device` (a tinyjax Device or a device string; the default device if None);
  with a NamedSharding (`sharding`, or in `device`'s place as JAX takes it), Arrays of that sharding (their types
  name its explicit axes, as JAX's do), split over as many instances of the device as the mesh has devices where
  the device has them (TINYJAX_SPLIT).

  NB: computations still run on the backend in effect when they flush (on its instances where an input is split
  over them); the data is moved there if needed. Inside a
  JAX transformation it is JAX's device_put (an identity there), with no device: tinyjax's are not JAX's. A sharding
  reduced or unreduced over mesh axes gives JAX's own arrays (its shards are parts of a sum, which JAX places).
  """
  if isinstance(device, jax.sharding.NamedSharding):  # `jax.device_put(x, NamedSharding(mesh, P("d")))`, as JAX's
    device, sharding = None, device
  if inside_transformation():
    return jax.device_put(x)
  if partial_over_a_mesh(sharding):
    return jax.device_put(jax.tree_util.tree_map(to_jax, x, is_leaf=_is_array_like), sharding)
  if device is None:
    backend = current_backend()
  elif isinstance(device, Device):
    backend = backend_for(device.platform, device.name)
  else:
    backend = backend_for(current_backend().name, str(device))

  over_mesh = backend_over(backend, sharding.mesh) if isinstance(sharding, jax.sharding.NamedSharding) and \
      isinstance(sharding.mesh, jax.sharding.Mesh) else backend

  def put(leaf):
    if isinstance(leaf, Array):
      value = leaf._value
    elif isinstance(leaf, jax.Array):  # JAX's (a typed key's data too)
      value = input_value(leaf, host_aval(leaf))
    else:
      host = np.asarray(leaf)
      aval = host_aval(host)
      weak = type(leaf) in (int, float, complex)
      value = Value(aval.update(weak_type=weak), host=host.astype(aval.dtype))
    if sharding is None:
      return Array(value.placed_on(backend))
    typed = jax.typeof(jax.ShapeDtypeStruct(value.aval.shape, value.aval.dtype, weak_type=value.aval.weak_type,
                                            sharding=sharding))
    return ShardedArray(value.placed_on(over_mesh, typed, sharding), sharding)
  return jax.tree_util.tree_map(put, x, is_leaf=_is_array_like)


def device_get(x):
  """The host (NumPy) values of a pytree of Arrays."""
  return jax.tree_util.tree_map(lambda a: np.asarray(a) if isinstance(a, Array) else a, x,
                                is_leaf=lambda a: isinstance(a, Array))
