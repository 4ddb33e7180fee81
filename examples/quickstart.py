"""Plain JAX: run it with `tinyjax run examples/quickstart.py --report` and its work is computed by tinygrad (or
with `python examples/quickstart.py`, by XLA, for comparison)."""
import jax
import jax.numpy as jnp

x = jnp.linspace(-3.0, 3.0, 8, dtype=jnp.float32).reshape(2, 4)
w = jnp.ones((4, 3), dtype=jnp.float32) / 4

h = jnp.maximum(x @ w, 0.0)                      # matmul and relu
normalized = (x - x.mean(axis=1, keepdims=True)) / x.std(axis=1, keepdims=True)
print("x =", x)
print("relu(x @ w) =", h)
print("normalized rows =", normalized)
print("sum of squares =", float((normalized ** 2).sum()))


@jax.jit
def softmax_cross_entropy(logits, label):
  return -jax.nn.log_softmax(logits)[label]


print("cross-entropy of each row, label 0:", [float(softmax_cross_entropy(row, 0)) for row in x])
print("its gradient:", jax.grad(softmax_cross_entropy)(x[0], 0))
print("computed by:", type(normalized).__module__.split(".")[0])  # tinyjax under `tinyjax run`, jaxlib otherwise
