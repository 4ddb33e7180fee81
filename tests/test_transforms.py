"""tinyjax's transformations against JAX's: alone, composed with each other, and mixed with JAX's own."""
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import tinyjax
import tinyjax.numpy as tnp
from oracle import assert_like_jax

X = np.linspace(-1.5, 2.0, 6, dtype=np.float32).reshape(2, 3)
V = np.linspace(0.5, 1.0, 3, dtype=np.float32)


def loss(x):
  return jnp.sum(jnp.sin(x) * x ** 2 + jnp.exp(-x))


def loss2(x, y):
  return jnp.sum(x * y + jnp.tanh(x) ** 2), jnp.mean(x)


# name -> (build(T) -> callable, args); T is the `jax` module or the `tinyjax` module
CASES = {
  "grad": (lambda T: T.grad(loss), (X,)),
  "grad_argnums_has_aux": (lambda T: T.grad(loss2, argnums=(0, 1), has_aux=True), (X, X)),
  "value_and_grad": (lambda T: T.value_and_grad(loss2, argnums=1, has_aux=True), (X, X)),
  "vmap": (lambda T: T.vmap(lambda v: jnp.outer(v, v).sum(0), in_axes=1, out_axes=1), (X,)),
  "vmap_two_args": (lambda T: T.vmap(lambda a, b: a * b, in_axes=(0, None)), (X, V)),
  "jacfwd": (lambda T: T.jacfwd(lambda v: jnp.sin(v) * v), (V,)),
  "jacrev": (lambda T: T.jacrev(lambda v: jnp.cos(v) * v.sum()), (V,)),
  "hessian": (lambda T: T.hessian(lambda v: jnp.sum(v ** 3)), (V,)),
  "hessian_is_jacfwd_jacrev": (lambda T: T.jacfwd(T.jacrev(lambda v: jnp.sum(jnp.sin(v) * v))), (V,)),
  "jit": (lambda T: T.jit(lambda x: jnp.tanh(x) @ x.T), (X,)),
  "jit_static_argnums": (lambda T: T.jit(lambda x, n: jnp.sum(x ** n), static_argnums=1), (X, 3)),
  "jit_static_argnames": (lambda T: T.jit(lambda x, axis: x.sum(axis=axis), static_argnames="axis"), (X,)),
  "grad_of_jit_of_grad": (lambda T: T.grad(lambda v: T.jit(T.grad(lambda w: jnp.sum(w ** 3)))(v).sum()), (V,)),
  "jit_of_vmap_of_grad": (lambda T: T.jit(T.vmap(T.grad(lambda v: jnp.sum(jnp.sin(v))))), (X,)),
  "checkpoint": (lambda T: T.grad(T.checkpoint(lambda v: jnp.sum(jnp.sin(jnp.sin(v))))), (V,)),
  "pytrees_in_and_out": (lambda T: T.jit(lambda p: {"s": p["a"] + p["b"][0], "t": (p["b"][1] * 2,)}),
                         ({"a": X, "b": (X, V)},)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_transformation_matches_jax(name):
  build, args = CASES[name]
  kwargs = {"axis": 1} if name == "jit_static_argnames" else {}
  expected = build(jax)(*args, **kwargs)
  actual = build(tinyjax)(*[jax.tree_util.tree_map(tnp.asarray, a) if not isinstance(a, int) else a for a in args],
                          **kwargs)
  assert_like_jax(actual, expected, rtol=1e-5, atol=1e-6)


def test_jvp_vjp_linearize():
  f = lambda v: jnp.sin(v) * v  # noqa: E731
  t = np.ones(3, np.float32)
  assert_like_jax(tinyjax.jvp(f, (tnp.asarray(V),), (tnp.asarray(t),)), jax.jvp(f, (V,), (t,)), rtol=1e-6)
  out, f_vjp = tinyjax.vjp(f, tnp.asarray(V))
  expected_out, expected_vjp = jax.vjp(f, V)
  assert_like_jax((out, f_vjp(tnp.asarray(t))), (expected_out, expected_vjp(t)), rtol=1e-6)
  out, f_jvp = tinyjax.linearize(f, tnp.asarray(V))
  expected_out, expected_jvp = jax.linearize(f, V)
  assert_like_jax((out, f_jvp(tnp.asarray(t))), (expected_out, expected_jvp(t)), rtol=1e-6)


def _node_types(tree):
  """The pytree's node types, outermost first, and its count of leaves: its structure without the node data that holds
  each function (JAX's own differ between two calls)."""
  treedef = jax.tree_util.tree_structure(tree)
  types, todo = [], [treedef]
  while todo:
    node = todo.pop(0)
    types.append(node.node_data()[0] if node.node_data() else None)
    todo.extend(node.children())
  return types, treedef.num_leaves


@pytest.mark.parametrize("transform", ["vjp", "linearize"])
def test_returned_functions_are_jaxs_pytrees(transform):
  """JAX's rematerialization pages pass jax.vjp's function to jit and make_jaxpr: it is JAX's `VJP` (linearize's a
  `Partial`), a pytree of its residuals, with JAX's node types, its backward jaxpr readable, and it passes through
  JAX's and tinyjax's jit."""
  f = lambda v: jnp.sin(v) * v  # noqa: E731
  t = np.ones(3, np.float32)
  _, expected = getattr(jax, transform)(f, V)
  _, actual = getattr(tinyjax, transform)(f, tnp.asarray(V))
  assert type(actual) is type(expected)
  assert _node_types(actual) == _node_types(expected)
  assert all(isinstance(leaf, tinyjax.Array) for leaf in jax.tree_util.tree_leaves(actual))
  if transform == "vjp":
    assert str(actual.jaxpr) == str(expected.jaxpr)
  applied = lambda fn, ct: fn(ct)  # noqa: E731
  for result in (actual(tnp.asarray(t)), tinyjax.jit(applied)(actual, tnp.asarray(t))):
    assert_like_jax(result, expected(t), rtol=1e-6)
  # JAX's own jit takes it too (its result is JAX's: outside patch mode, jax.jit is not tinyjax's)
  jax.tree_util.tree_map(functools.partial(np.testing.assert_allclose, rtol=1e-6), jax.jit(applied)(actual, t),
                         jax.jit(applied)(expected, t))
  assert str(jax.make_jaxpr(applied)(actual, t)) == str(jax.make_jaxpr(applied)(expected, t))


def _custom_jvp(T):
  @T.custom_jvp
  def clipped_sin(x):
    return jnp.sin(x)

  @clipped_sin.defjvp
  def _(primals, tangents):
    (x,), (tx,) = primals, tangents
    return clipped_sin(x), jnp.clip(jnp.cos(x), 0.0, 0.5) * tx
  return clipped_sin


def _custom_vjp(T):
  @T.custom_vjp
  def scaled(x):
    return x * 3.0

  scaled.defvjp(lambda x: (x * 3.0, x), lambda residual, g: (g * residual,))
  return scaled


@pytest.mark.parametrize("make", [_custom_jvp, _custom_vjp], ids=["custom_jvp", "custom_vjp"])
def test_custom_derivatives(make):
  expected_f, actual_f = make(jax), make(tinyjax)
  assert_like_jax(actual_f(tnp.asarray(V)), expected_f(jnp.asarray(V)), rtol=1e-6)
  grad = lambda T, f: T.grad(lambda v: f(v).sum())  # noqa: E731
  assert_like_jax(grad(tinyjax, actual_f)(tnp.asarray(V)), grad(jax, expected_f)(V), rtol=1e-6)


class _Converting:
  """A pytree whose unflatten converts its child with jnp.asarray (JAX's custom pytrees page): JAX's transformations
  unflatten it with tracers or arrays only, never with a ShapeDtypeStruct."""
  def __init__(self, a):
    self.a = jnp.asarray(a)


jax.tree_util.register_pytree_node(_Converting, lambda tree: ((tree.a,), None), lambda _, children: _Converting(*children))


@pytest.mark.parametrize("transform", ["vmap", "jit", "grad_has_aux"])
def test_a_pytree_that_converts_its_leaves_comes_back(transform):
  build = {"vmap": lambda T: T.vmap(lambda tree: _Converting(tree.a * 2)),
           "jit": lambda T: T.jit(lambda tree: _Converting(jnp.sin(tree.a))),
           "grad_has_aux": lambda T: T.grad(lambda v: (jnp.sum(v ** 2), _Converting(v)), has_aux=True)}[transform]
  args = (V,) if transform == "grad_has_aux" else (_Converting(V),)
  expected, actual = build(jax)(*args), build(tinyjax)(*args)
  assert jax.tree.structure(actual) == jax.tree.structure(expected)
  # NB: the unflatten's jnp.asarray is JAX's own (the explicit API patches nothing): a JAX array comes back
  for got, want in zip(jax.tree.leaves(actual), jax.tree.leaves(expected)):
    assert_like_jax(tnp.asarray(got), want, rtol=1e-6)


def _zeros_of_length(traces):
  def f(x, n):
    traces.append(n)
    return jnp.zeros(n) + x
  return f


def test_jit_traces_python_scalars_as_jax_does():
  """JAX's jit traces a Python scalar that is not static: a function that needs its value raises, after one trace."""
  outcomes = []
  for T in (jax, tinyjax):
    traces = []
    with pytest.raises(Exception) as info:
      T.jit(_zeros_of_length(traces))(1.0, 3)
    outcomes.append((type(info.value), len(traces)))
  assert outcomes[1] == outcomes[0]


@pytest.mark.parametrize("static", [{"static_argnums": 1}, {"static_argnums": -1}, {"static_argnames": "n"}],
                         ids=["argnums", "negative_argnums", "argnames"])
def test_jit_keeps_static_python_scalars_static(static):
  traces = []
  f = tinyjax.jit(_zeros_of_length(traces), **static)
  for n in (3, 4, 3):
    assert_like_jax(f(1.5, n), jax.jit(_zeros_of_length([]), **static)(1.5, n))
  assert traces == [3, 4]  # one trace per static value, none that failed


def test_a_function_without_weak_references_is_called_once_a_jit_exists():
  """The jitted functions' registry is keyed weakly; a function that cannot be weakly referenced (NumPy's ufunc) is no
  jitted function."""
  from tinyjax.core import tracing
  jitted = tinyjax.jit(lambda x: x)  # held: the registry forgets a jitted function no one holds
  assert float(tracing.call(np.add, (1.0, 2.5))) == 3.5
  assert jitted(1.0) == 1.0


def test_make_jaxpr_and_eval_shape_accept_tinyjax_arrays():
  x = tnp.asarray(X)
  assert str(tinyjax.make_jaxpr(loss)(x)) == str(jax.make_jaxpr(loss)(X))
  assert tinyjax.eval_shape(loss2, x, x) == jax.eval_shape(loss2, X, X)


def test_mixed_with_jax_own_transformations():
  x = tnp.asarray(V)
  # tinyjax inside JAX: tinyjax.numpy and tinyjax.jit defer to JAX on tracers
  expected = jax.grad(lambda v: jnp.sum(jnp.sin(v) ** 2))(V)
  assert_like_jax(tnp.asarray(jax.grad(lambda v: tnp.sum(tinyjax.jit(tnp.sin)(v) ** 2))(V)), expected, rtol=1e-6)
  # JAX's transformations accept tinyjax Arrays
  np.testing.assert_allclose(jax.jit(lambda v: v * 2)(x), V * 2)
  np.testing.assert_allclose(jax.grad(lambda v: (v * v).sum())(x), 2 * V)
  # tinyjax transformations of JAX-jitted functions
  assert_like_jax(tinyjax.grad(jax.jit(lambda v: jnp.sum(v ** 3)))(x), jax.grad(lambda v: jnp.sum(v ** 3))(V),
                  rtol=1e-6)


def test_jit_compiles_once_per_avals_and_statics(capsys, monkeypatch):
  monkeypatch.setenv("TINYJAX_LOG_COMPILES", "1")
  f = tinyjax.jit(lambda x, n: x * n + 1, static_argnums=1)
  x = tnp.ones(3)
  for _ in range(3):
    f(x, 2)
  f(x, 3)
  f(tnp.ones(4), 3)
  lines = [line for line in capsys.readouterr().err.splitlines() if "tracing <lambda>" in line]
  assert len(lines) == 3, lines
  assert "first call" in lines[0] and "changed static arguments" in lines[1] and "input shapes" in lines[2]


def test_jit_steady_state_replays_without_recompiling():
  step = tinyjax.jit(lambda p, g: p - 0.1 * jnp.tanh(g))
  p = tnp.ones((64,))
  expected = np.ones((64,), np.float32)
  for _ in range(3):
    p = step(p, p)
    expected = np.asarray(jax.jit(lambda p, g: p - 0.1 * jnp.tanh(g))(expected, expected))
  compiles = tinyjax.report().compiles
  for _ in range(20):
    p = step(p, p)
    expected = np.asarray(jax.jit(lambda p, g: p - 0.1 * jnp.tanh(g))(expected, expected))
  assert tinyjax.report().compiles == compiles
  np.testing.assert_allclose(np.asarray(p), expected, rtol=1e-5)


def test_tinyjax_jit_is_usable_as_decorator_factory():
  @functools.partial(tinyjax.jit, static_argnames="power")
  def f(x, power):
    return x ** power
  assert_like_jax(f(tnp.asarray(V), power=2), jax.jit(lambda x: x ** 2)(V))


# --- replays: a wholly native jit program runs plainly, is captured, then replayed on the inputs' buffers

REPLAYED = {
  "f(x, x)": (lambda x, y: x * y + 1.0, lambda a, b: (a, a)),
  "one input twice, computed and passed through": (lambda x, y: (x, y * 2, x - y), lambda a, b: (a, a)),
  "outputs that are inputs, a view of one, a constant": (
    lambda x, y: (y, x.reshape(-1, 1), jnp.ones(2), x + y, x.T), lambda a, b: (a, b)),
  "zero-size outputs beside computed ones": (lambda x, y: (x[:0] * 2, jnp.sum(x * y, axis=0), y[:, :0]),
                                             lambda a, b: (a, b)),
  "one input a reshape of another's buffer": (lambda x, y: x + y.reshape(x.shape), lambda a, b: (a, a.reshape(6).block_until_ready())),
}


@pytest.mark.parametrize("name", REPLAYED)
def test_replays_match_jax_and_return_fresh_buffers(name):
  fn, args = REPLAYED[name]
  f = tinyjax.jit(fn)
  results, expected = [], []
  for i in range(5):  # runs plainly, is captured, then replays
    a, b = X[::-1] + i, X * (i + 2)  # NB: new values each call
    results.append(f(*args(tnp.asarray(a), tnp.asarray(b))))
    expected.append(jax.jit(fn)(*args(jnp.asarray(a), jnp.asarray(b))))
  assert_like_jax(results, expected)  # earlier results unchanged by later replays: each got buffers of its own


def test_array_creation_inside_jit_is_jaxs():
  """zeros, ones, full and arange inside tinyjax.jit are traced as in jax.jit (arange is iota, nothing is a
  concrete array that JAX's trace cannot read), with JAX's values."""
  def build(np_):
    return lambda x: (np_.zeros(3), np_.ones(x.shape) + x, np_.arange(5), np_.full((2,), 7.5) * x.sum(),
                      np_.linspace(0.0, 1.0, 4), np_.eye(2, dtype=np.int8))
  assert_like_jax(tinyjax.jit(build(tnp))(V), jax.jit(build(jnp))(V))
  ours, theirs = str(tinyjax.make_jaxpr(build(tnp))(V)), str(jax.make_jaxpr(build(jnp))(V))
  assert "iota" in ours and ours.count("iota") == theirs.count("iota")
