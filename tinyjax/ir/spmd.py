"""shard_map (and pmap, which is jit of shard_map) as one program over all its shards at once.

A shard_map equation runs its body once per device of a mesh, each on its own block of the inputs, and the body's
collectives (psum, all_gather, ppermute, ...) exchange values between devices. Here the shards sit side by side: each
value of the body gets one leading axis per manual mesh axis (in the mesh's order), every ordinary primitive is
vmapped over those axes, and each collective is an ordinary array operation over them (a psum is a sum over its
axes, a ppermute a gather). The result is a plain jaxpr that `program.Builder` inlines like a jit's, so the body's
equations run where every other equation runs, and are counted as every other equation is.

Not stacked (`stacked` returns None, and the shard_map equation stays whole, for XLA to run): collectives over index
groups, collectives inside loops and conditionals of the body, and the collectives of reduced and unreduced types.
"""
import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.core import ShapedArray
from jax.extend.core import ClosedJaxpr, Literal, jaxprs_in_params


class NotStacked(Exception):
  """The body holds something the stacked program does not express (the module's docstring lists what)."""


@functools.lru_cache(maxsize=256)
def stacked(eqn_params: tuple, called_jaxpr) -> ClosedJaxpr | None:
  """The shard_map equation of parameters `eqn_params` (sorted items) as a jaxpr over the global (unsharded) values;
  None where its body cannot be stacked. `called_jaxpr(eqn)`: the jaxpr a call equation of the body runs in place."""
  params = dict(eqn_params)
  body, mesh = params["jaxpr"], params["mesh"]
  manual = tuple(name for name in mesh.axis_names if name in params["newly_manual_axes"])
  sizes = {name: mesh.shape[name] for name in manual}
  specs = (*params["in_specs"], *params["out_specs"])
  if (body.constvars or any(spec.unreduced or spec.reduced for spec in specs)
          or any(name not in manual for spec in specs for entry in spec for name in _names(entry))):
    return None
  in_avals = [_global_aval(v.aval, spec, sizes) for v, spec in zip(body.invars, params["in_specs"], strict=True)]

  def run(*args):
    shards = [_split(x, spec, manual, sizes) for x, spec in zip(args, params["in_specs"])]
    outs = _evaluate(body, [], [(s, True) for s in shards], manual, sizes, called_jaxpr)
    return [_join(_broadcast(value, is_stacked, manual, sizes), spec, manual, sizes)
            for (value, is_stacked), spec in zip(outs, params["out_specs"], strict=True)]

  try:
    return jax.make_jaxpr(run)(*in_avals)
  except NotStacked:
    return None


def _names(entry) -> tuple:
  return () if entry is None else tuple(entry) if isinstance(entry, tuple) else (entry,)


def _global_aval(aval, spec, sizes):
  shape = list(aval.shape)
  for dim, entry in enumerate(spec):
    shape[dim] *= math.prod(sizes[name] for name in _names(entry))
  return jax.ShapeDtypeStruct(tuple(shape), aval.dtype, weak_type=aval.weak_type)


def _split(x, spec, manual, sizes):
  """A global value as its shards side by side: (mesh sizes..., shard's shape), a replicated axis broadcast."""
  shape, position = [], {}
  for dim, size in enumerate(x.shape):
    entry = spec[dim] if dim < len(spec) else None
    names = _names(entry)
    for name in names:
      position[name] = len(shape)
      shape.append(sizes[name])
    shape.append(size // math.prod(sizes[name] for name in names))
  x = x.reshape(shape)
  for name in reversed(manual):  # a new leading axis for each manual axis the spec does not split along
    if name not in position:
      x = x[None]
      position = {n: p + 1 for n, p in position.items()}
      position[name] = 0
  leading = [position[name] for name in manual]
  rest = [d for d in range(x.ndim) if d not in leading]
  x = x.transpose(leading + rest)
  return jnp.broadcast_to(x, tuple(sizes[name] for name in manual) + x.shape[len(manual):])


def _join(x, spec, manual, sizes):
  """The shards side by side as the global value: an axis the spec names is concatenated into its dimension, an
  axis it does not name holds equal shards, of which the first is taken."""
  k = len(manual)
  local_ndim = x.ndim - k
  named = {name for entry in spec for name in _names(entry)}
  index = tuple(slice(None) if name in named else 0 for name in manual)
  x = x[index]
  kept = [name for name in manual if name in named]
  order, shape = [], []
  for dim in range(local_ndim):
    names = _names(spec[dim] if dim < len(spec) else None)
    order += [kept.index(name) for name in names] + [len(kept) + dim]
    shape.append(x.shape[len(kept) + dim] * math.prod(sizes[name] for name in names))
  return x.transpose(order).reshape(shape)


def _broadcast(value, is_stacked, manual, sizes):
  if is_stacked:
    return value
  return jnp.broadcast_to(value, tuple(sizes[name] for name in manual) + jnp.shape(value))


def _evaluate(jaxpr, consts, args, manual, sizes, called_jaxpr):
  """The body's equations on stacked values: each value a pair (array, whether it has the leading mesh axes)."""
  env = {}

  def read(atom):
    return (_literal(atom), False) if isinstance(atom, Literal) else env[atom]

  for var, value in zip(jaxpr.constvars, consts, strict=True):
    env[var] = (value, False)
  for var, value in zip(jaxpr.invars, args, strict=True):
    env[var] = value
  for eqn in jaxpr.eqns:
    ins = [read(v) for v in eqn.invars]
    if eqn.primitive.name in COLLECTIVES:
      outs = COLLECTIVES[eqn.primitive.name](manual, sizes, *[_broadcast(v, s, manual, sizes) for v, s in ins],
                                             **eqn.params)
      outs = [(out, True) for out in (outs if eqn.primitive.multiple_results else [outs])]
    elif (called := called_jaxpr(eqn)) is not None:
      outs = _evaluate(*called, ins, manual, sizes, called_jaxpr)
    elif eqn.primitive.name in PLACEMENTS:
      # NB: where the value lives on the mesh's auto axes, which the stacked program (on one device) has not; JAX's
      # lowering refuses a constraint that names a manual axis, which this does not check
      outs = ins
    else:
      outs = _vmapped(eqn, ins, len(manual), called_jaxpr)
    for var, out in zip(eqn.outvars, outs, strict=True):
      env[var] = out
  return [read(v) for v in jaxpr.outvars]


PLACEMENTS = {"sharding_constraint", "reshard"}  # equations of a body that place a value and leave it as it is


def _literal(atom):
  # NB: a literal of the body holds the body's type (its mesh's axes manual), which the stacked program, traced
  # outside any mesh, refuses: its value alone, a Python scalar where the literal is weakly typed
  value = np.asarray(atom.val)
  return value.item() if atom.aval.weak_type and value.ndim == 0 else value


def _vmapped(eqn, ins, k, called_jaxpr):
  """An ordinary equation on stacked values: its primitive vmapped over the k leading axes of those that have them."""
  if any(_holds_collectives(sub) for sub in jaxprs_in_params(eqn.params)):
    raise NotStacked(f"{eqn.primitive.name} holds collectives")
  params = {name: _retyped(value, called_jaxpr) for name, value in eqn.params.items()}
  fn = functools.partial(eqn.primitive.bind, **params)
  stacked_ins = [is_stacked for _, is_stacked in ins]
  for _ in range(k if any(stacked_ins) else 0):
    fn = jax.vmap(fn, in_axes=[0 if is_stacked else None for is_stacked in stacked_ins])
  try:
    outs = fn(*[value for value, _ in ins])
  except NotImplementedError as error:  # no batching rule (custom_partitioning; a pure_callback with no vmap_method)
    raise NotStacked(f"{eqn.primitive.name} has no batching rule: {error}") from error
  return [(out, any(stacked_ins)) for out in (outs if eqn.primitive.multiple_results else [outs])]


def _retyped(value, called_jaxpr):
  """A parameter of a body's equation outside the mesh, for the body's types name its mesh's axes manual: a jaxpr (a
  loop's body, a branch) traced again from values of plain types; a sharding (a result's, on the mesh) none."""
  if isinstance(value, tuple) and any(isinstance(v, ClosedJaxpr) for v in value):
    retyped = [_retyped(v, called_jaxpr) for v in value]
    # NB: custom_linear_solve's jaxprs are a named tuple (some of them None), read by name
    return type(value)(*retyped) if hasattr(value, "_fields") else tuple(retyped)
  if isinstance(value, jax.sharding.NamedSharding):
    return None
  if not isinstance(value, ClosedJaxpr):
    return value
  avals = [ShapedArray(v.aval.shape, v.aval.dtype, weak_type=v.aval.weak_type) for v in value.jaxpr.invars]

  def run(*args):
    outs = _evaluate(value.jaxpr, value.consts, [(a, False) for a in args], (), {}, called_jaxpr)
    return [out for out, _ in outs]
  return jax.make_jaxpr(run)(*avals)


def _holds_collectives(jaxpr) -> bool:
  return any(eqn.primitive.name in COLLECTIVES or eqn.primitive.name in UNSTACKED
             or any(_holds_collectives(sub) for sub in jaxprs_in_params(eqn.params)) for eqn in jaxpr.eqns)


# --- the collectives, on values with the leading mesh axes (manual, in order; `sizes` their sizes)

def _positions(manual, axis_name) -> list[int]:
  return [manual.index(name) for name in _names(axis_name)]


def _no_groups(axis_index_groups):
  if axis_index_groups is not None:
    raise NotStacked("collectives over axis index groups")


def _reduction(reduce):
  def collective(manual, sizes, x, *, axes, axis_index_groups=None):
    _no_groups(axis_index_groups)
    named = tuple(a for a in axes if not isinstance(a, int))
    local = tuple(len(manual) + a for a in axes if isinstance(a, int))
    if local:
      x = reduce(x, axis=local)
    if named:
      flat, _, back = _flat_device_axis(manual, sizes, x, tuple(sorted(named, key=manual.index)))
      x = back(jnp.broadcast_to(reduce(flat, axis=0, keepdims=True), flat.shape))
    return x
  return collective


def _extreme(larger: bool):
  """The reduction of pmax (larger) or pmin over shards in device order."""
  def reduce(x, axis, keepdims=False):
    if not jnp.issubdtype(x.dtype, jnp.floating) or axis != 0:
      return (jnp.max if larger else jnp.min)(x, axis=axis, keepdims=keepdims)
    # NB: as XLA's CPU all-reduce: a NaN shard is skipped (all NaN: -inf for pmax, +inf for pmin), and of equal
    # values (-0.0 and 0.0) the first shard's is kept, where lax.reduce_max propagates NaN
    clean = jnp.where(jnp.isnan(x), -jnp.inf if larger else jnp.inf, x)
    best = (jnp.max if larger else jnp.min)(clean, axis=0, keepdims=True)
    first = jnp.argmax(clean == best, axis=0, keepdims=True)
    return jnp.take_along_axis(clean, first, axis=0)
  return _reduction(reduce)


def _gathered(manual, sizes, x, axis_name, dimension, tiled):
  """Each shard given every shard's value of `axis_name` (in that axis's order) along its `dimension`."""
  positions = _positions(manual, axis_name)
  k = len(manual)
  others = [p for p in range(k) if p not in positions]
  local = list(range(k, x.ndim))
  # the gathered axes move into the local value at `dimension`
  order = others + local[:dimension] + positions + local[dimension:]
  y = jnp.transpose(x, order)
  n = math.prod(sizes[manual[p]] for p in positions)
  at = len(others) + dimension
  y = y.reshape(y.shape[:at] + (n,) + y.shape[at + len(positions):])
  if tiled:
    y = y.reshape(y.shape[:at] + (n * y.shape[at + 1],) + y.shape[at + 2:])
  for p in sorted(positions):  # every shard along the gathered axes holds the same result
    y = jnp.expand_dims(y, p)
  return jnp.broadcast_to(y, tuple(sizes[name] for name in manual) + y.shape[k:])


def _all_gather(manual, sizes, x, *, all_gather_dimension, axis_name, axis_size, tiled, axis_index_groups=None, **_):
  _no_groups(axis_index_groups)
  return _gathered(manual, sizes, x, axis_name, all_gather_dimension, tiled)


def _flat_device_axis(manual, sizes, x, axis_name):
  """x with the mesh axes of `axis_name` (in its order) as one leading axis, and the function that puts them back
  (on a value whose local dimensions may differ)."""
  positions = _positions(manual, axis_name)
  k = len(manual)
  mesh_order = positions + [p for p in range(k) if p not in positions]
  moved = jnp.transpose(x, mesh_order + list(range(k, x.ndim)))
  n = math.prod(sizes[manual[p]] for p in positions)
  flat = moved.reshape((n,) + moved.shape[len(positions):])

  def back(y):
    y = y.reshape(moved.shape[:len(positions)] + y.shape[1:])
    return jnp.transpose(y, [mesh_order.index(p) for p in range(k)] + list(range(k, y.ndim)))
  return flat, n, back


def _ppermute(manual, sizes, x, *, axis_name, perm):
  flat, n, back = _flat_device_axis(manual, sizes, x, axis_name)
  source = [0] * n
  received = [False] * n
  for src, dst in perm:
    source[dst], received[dst] = src, True
  moved = jnp.take(flat, jnp.array(source), axis=0)
  mask = jnp.array(received).reshape((n,) + (1,) * (flat.ndim - 1))
  return back(jnp.where(mask, moved, jnp.zeros_like(moved)))


def _pbroadcast(manual, sizes, x, *, axis_name, source):
  flat, n, back = _flat_device_axis(manual, sizes, x, axis_name)
  return back(jnp.broadcast_to(flat[source][None], flat.shape))


def _axis_index(manual, sizes, *, axis_name):
  index = lax.broadcasted_iota(jnp.int32, tuple(sizes[name] for name in manual), manual.index(axis_name))
  return index


def _reduce_scatter(manual, sizes, x, *, scatter_dimension, axis_name, axis_index_groups, axis_size, tiled, **_):
  """The sum over the axes of `axis_name`, of which shard i keeps block i of its `scatter_dimension` (untiled: the
  dimension's element i)."""
  _no_groups(axis_index_groups)
  flat, n, back = _flat_device_axis(manual, sizes, x, axis_name)
  total = jnp.sum(flat, axis=0)
  dim = flat.ndim - 1 - (x.ndim - len(manual)) + scatter_dimension
  if tiled:
    total = total.reshape(total.shape[:dim] + (n, total.shape[dim] // n) + total.shape[dim + 1:])
  return back(jnp.moveaxis(total, dim, 0))


def _all_to_all(manual, sizes, x, *, axis_name, split_axis, concat_axis, axis_index_groups, tiled):
  """Chunk j of shard i's `split_axis` goes to shard j, where it is chunk i of `concat_axis`."""
  _no_groups(axis_index_groups)
  flat, n, back = _flat_device_axis(manual, sizes, x, axis_name)
  first_local = flat.ndim - (x.ndim - len(manual))
  split, concat = first_local + split_axis, first_local + concat_axis
  chunks = flat.reshape(flat.shape[:split] + (n, flat.shape[split] // n) + flat.shape[split + 1:])
  chunks = jnp.swapaxes(chunks, 0, split)  # axis 0: the receiving shard j; at `split`: the sending shard i
  y = jnp.moveaxis(chunks, split, concat)  # the sending shard just before the concat dimension, then merged into it
  return back(y.reshape(y.shape[:concat] + (n * y.shape[concat + 1],) + y.shape[concat + 2:]))


def _pvary(manual, sizes, x, **_):
  return x


COLLECTIVES = {
  "psum": _reduction(jnp.sum), "pmax": _extreme(larger=True), "pmin": _extreme(larger=False),
  "psum_invariant": _reduction(jnp.sum),
  "pvary": _pvary,
  "all_gather": _all_gather, "all_gather_invariant": _all_gather,
  "ppermute": _ppermute, "pbroadcast": _pbroadcast,
  "axis_index": _axis_index,
  "reduce_scatter": _reduce_scatter,
  "all_to_all": _all_to_all,
}
# the collectives of reduced and unreduced types, ragged ones and point-to-point sends: the equation stays whole
UNSTACKED = {"ragged_all_to_all", "psend", "precv", "all_gather_reduced", "unreduced_reduce_scatter",
             "unreduced_psum", "preduced", "vary_unreduced_cast_p", "pgather"}


def split_axis(sharding, n_devices: int) -> int | None:
  """The axis along which an array placed with `sharding` (a NamedSharding) is split into equal blocks over
  all `n_devices` devices of its mesh; None where it is not split so (no sharding, replicated, or not_split_because
  says why): tinygrad's multi-device Tensors split along one axis, over all their devices. NB: the blocks go to the
  devices in the order of the device set, which need not be the order in which JAX places them (a spec naming two
  mesh axes in reverse): the values are the same."""
  split = _split_dimensions(sharding)
  return split[0][0] if len(split) == 1 and split[0][1] == n_devices else None


def not_split_because(sharding, n_devices: int) -> str | None:
  """Why an array that `sharding` partitions is not split over the `n_devices` devices of its mesh (so a
  copy of it is on each: tinygrad splits one axis into equal blocks over all the devices); None where it is split,
  or where the sharding partitions nothing (a copy on each device is what JAX places too)."""
  split = _split_dimensions(sharding)
  if len(split) > 1:
    return f"{sharding.spec} splits {len(split)} dimensions"
  if split and split[0][1] != n_devices:
    return f"{sharding.spec} splits over {split[0][1]} of the mesh's {n_devices} devices"
  return None  # NB: JAX refuses a sharding whose blocks do not divide the shape before anything is placed


def _split_dimensions(sharding) -> list:
  """(dimension, number of blocks) for each dimension that a NamedSharding splits."""
  if sharding is None:
    return []
  mesh = sharding.mesh
  return [(axis, math.prod(mesh.shape[name] for name in _names(entry)))
          for axis, entry in enumerate(sharding.spec) if _names(entry)]


def shard_map_shardings(jaxpr) -> list:
  """For each input of a jaxpr, the NamedSharding by which a shard_map over a mesh of devices (pmap's) splits it,
  where the input goes to one directly (or through jit calls); None for the others."""
  found: dict = {}

  def walk(inner, names):  # names: the inner jaxpr's variable -> the outer input's position
    for eqn in inner.eqns:
      if eqn.primitive.name == "shard_map" and isinstance(mesh := eqn.params["mesh"], jax.sharding.Mesh):
        for var, spec in zip(eqn.invars, eqn.params["in_specs"]):
          if not isinstance(var, Literal) and var in names:
            found.setdefault(names[var], jax.sharding.NamedSharding(mesh, spec))
      elif eqn.primitive.name == "jit":
        called = eqn.params["jaxpr"].jaxpr
        walk(called, {inner_var: names[var] for var, inner_var in zip(eqn.invars, called.invars)
                      if not isinstance(var, Literal) and var in names})

  walk(jaxpr, {var: i for i, var in enumerate(jaxpr.invars)})
  return [found.get(i) for i in range(len(jaxpr.invars))]
