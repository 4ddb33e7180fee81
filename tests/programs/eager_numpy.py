"""Plain JAX without jit: eager jax.numpy calls on arrays."""
import jax.numpy as jnp

x = jnp.linspace(-2.0, 2.0, 12).reshape(3, 4)
w = jnp.ones((4, 2)) / 4
h = jnp.maximum(x @ w, 0.0)
z = (x - x.mean(axis=1, keepdims=True)) / x.std(axis=1, keepdims=True)
print("relu(x @ w):", jnp.round(h, 4).tolist())
print("normalized:", jnp.round(z, 4).tolist())
print("softmax-ish:", jnp.round(jnp.exp(x[0]) / jnp.exp(x[0]).sum(), 4).tolist())
print("cumsum:", jnp.cumsum(jnp.arange(6)).tolist())
print("where:", round(jnp.where(x > 0, x, -1.0).sum().item(), 4))
print("sorted:", jnp.sort(jnp.array([3.0, -1.0, 2.0, 0.5])).tolist())
print("argmax per row:", jnp.argmax(x, axis=1).tolist())
v = jnp.zeros(5).at[2].set(7.0).at[4].add(1.5)
print("updated:", v.tolist(), v.dtype)
print("norm:", round(float(jnp.linalg.norm(x)), 4))
