"""Plain JAX: random numbers, vmap over a batch, lax.scan for a recurrence, and a gradient through both."""
import jax
import jax.numpy as jnp

key = jax.random.key(42)
k_w, k_x, k_noise = jax.random.split(key, 3)
w = jax.random.normal(k_w, (4,)) * 0.5
xs = jax.random.uniform(k_x, (8, 5, 4))
print("w:", jnp.round(w, 4).tolist())


def recurrence(w, seq):
  def cell(h, x):
    h = jnp.tanh(0.5 * h + x @ w)
    return h, h
  final, hs = jax.lax.scan(cell, jnp.zeros(()), seq)
  return final, hs.sum()


def loss(w, batch):
  finals, sums = jax.vmap(recurrence, in_axes=(None, 0))(w, batch)
  return jnp.mean(finals ** 2) + 0.01 * jnp.mean(sums)


print("loss:", round(float(loss(w, xs)), 4))
g = jax.grad(loss)(w, xs)
print("grad:", jnp.round(g, 4).tolist())
for _ in range(5):
  w = w - 0.5 * jax.grad(loss)(w, xs)
print("loss after 5 steps:", round(float(loss(w, xs)), 4))
noise = jax.random.bernoulli(k_noise, 0.3, (10,))
print("bernoulli:", noise.astype(jnp.int32).tolist())
