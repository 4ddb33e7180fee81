"""An MLP trained on synthetic data with optax.adam: plain JAX, flax and optax. Run: `tinyjax run
examples/mlp_optax.py --device CL --report` (TINYJAX_EXAMPLE_STEPS sets the number of steps, 200 by default)."""
import os

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import linen as nn


class MLP(nn.Module):
  @nn.compact
  def __call__(self, x):
    x = nn.relu(nn.Dense(64)(x))
    x = nn.relu(nn.Dense(64)(x))
    return nn.Dense(1)(x)


rng = np.random.default_rng(0)
inputs = rng.normal(size=(256, 8)).astype(np.float32)
targets = (np.sin(inputs).sum(1, keepdims=True) + 0.1 * rng.normal(size=(256, 1))).astype(np.float32)

model = MLP()
params = model.init(jax.random.key(0), inputs[:1])
optimizer = optax.adam(1e-2)
opt_state = optimizer.init(params)


@jax.jit
def train_step(params, opt_state, x, y):
  def loss_fn(p):
    return jnp.mean((model.apply(p, x) - y) ** 2)
  loss, grads = jax.value_and_grad(loss_fn)(params)
  updates, opt_state = optimizer.update(grads, opt_state)
  return optax.apply_updates(params, updates), opt_state, loss


x, y = jnp.asarray(inputs), jnp.asarray(targets)
steps = int(os.environ.get("TINYJAX_EXAMPLE_STEPS", "200"))
for step in range(steps + 1):
  params, opt_state, loss = train_step(params, opt_state, x, y)
  if step % 50 == 0 or step == steps:
    print(f"step {step:3d}  loss {float(loss):.4f}")
