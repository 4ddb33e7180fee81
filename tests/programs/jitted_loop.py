"""Plain JAX: linear regression by gradient descent, one jitted step per iteration."""
import jax
import jax.numpy as jnp
import numpy as np

rng = np.random.default_rng(0)
x = jnp.asarray(rng.normal(size=(64, 3)), dtype=jnp.float32)
true_w = jnp.array([1.5, -2.0, 0.5])
y = x @ true_w + 0.3


def loss(params, x, y):
  w, b = params
  return jnp.mean((x @ w + b - y) ** 2)


@jax.jit
def step(params, x, y):
  grads = jax.grad(loss)(params, x, y)
  return jax.tree_util.tree_map(lambda p, g: p - 0.1 * g, params, grads)


params = (jnp.zeros(3), jnp.zeros(()))
for i in range(60):
  params = step(params, x, y)
  if i % 20 == 0:
    print(f"step {i}: loss {float(loss(params, x, y)):.4f}")
w, b = params
print("w:", np.round(np.asarray(w), 3), "b:", round(float(b), 3))
