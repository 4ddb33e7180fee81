"""The same code as with `import jax.numpy as jnp`, computed by tinygrad.

Run it with `tinyjax run examples/quickstart.py --report` (or plain `python examples/quickstart.py`).
"""
import tinyjax
import tinyjax.numpy as jnp

x = jnp.linspace(-3.0, 3.0, 8, dtype=jnp.float32).reshape(2, 4)
w = jnp.ones((4, 3), dtype=jnp.float32) / 4

h = jnp.maximum(x @ w, 0.0)                      # matmul and relu
normalized = (x - x.mean(axis=1, keepdims=True)) / x.std(axis=1, keepdims=True)
print("x =", x)
print("relu(x @ w) =", h)
print("normalized rows =", normalized)
print("sum of squares =", float((normalized ** 2).sum()))
print("device:", normalized.device, "| backends:", tinyjax.devices(), tinyjax.devices("xla"))
