"""The seed prototype's notebook, cell by cell, as a script: JAX functions wrapped by `tiny` run on tinygrad Tensors.

Run: `tinyjax run examples/seed_notebook.py` (TINYJAX_SEED_BATCH sets the CNN's batch size, 512 as in the notebook).
"""
import os
import time

os.environ["JIT"] = "1"

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import tinygrad as tg  # noqa: E402
from flax import linen as nn  # noqa: E402

from tinyjax.decorator import tiny  # noqa: E402

print(tg.Device.DEFAULT, jax.devices())


# Cell 2: wrap a JAX function into a tinygrad function; a lazy graph comes back.
@tiny
def fun(first, second):
  temp = first + jnp.sin(second) * 3.0
  return jnp.sum(temp)


buf = fun(tg.Tensor([1, 2, 3]), tg.Tensor([4, 5, 6]))
print(buf)
# Cell 3: realize it.
value = buf.realize().numpy()
print(value)
np.testing.assert_allclose(value, jnp.sum(jnp.array([1, 2, 3]) + jnp.sin(jnp.array([4, 5, 6])) * 3.0), rtol=1e-4)


# Cell 4: a conv net (the notebook avoided relu because custom_jvp was not supported; it is now: see `Relu` below).
class CNN(nn.Module):
  activation: object = nn.silu
  pool: object = nn.avg_pool

  @nn.compact
  def __call__(self, x):
    x = nn.Conv(features=32, kernel_size=(3, 3))(x)
    x = self.activation(x)
    x = self.pool(x, window_shape=(2, 2), strides=(2, 2))
    x = nn.Conv(features=64, kernel_size=(3, 3))(x)
    x = self.activation(x)
    x = self.pool(x, window_shape=(2, 2), strides=(2, 2))
    x = x.reshape((x.shape[0], -1))  # flatten
    x = nn.Dense(features=256)(x)
    x = self.activation(x)
    x = nn.Dense(features=10)(x)
    return x


bs = int(os.environ.get("TINYJAX_SEED_BATCH", "512"))
rng = jax.random.key(42)
rng1, rng2 = jax.random.split(rng)
images = jax.random.uniform(rng2, (bs, 28, 28, 1))

for name, cnn in [("silu + avg_pool", CNN()), ("relu + max_pool", CNN(activation=nn.relu, pool=nn.max_pool))]:
  params = cnn.init(rng1, jnp.ones([1, 28, 28, 1]))

  def apply_model(params, images, cnn=cnn):
    """This function takes model params and input images and runs the CNN on it."""
    out = cnn.apply(params, images)
    assert isinstance(out, jax.Array)
    return out

  apply_model_jax = jax.jit(apply_model)
  apply_model_tinygrad = tiny(apply_model)

  # Cell 5: run both, compare.
  jax_out = np.array(apply_model_jax(params, images))
  tinygrad_params = jax.tree_util.tree_map(lambda p: tg.Tensor(np.array(p)), params)
  tinygrad_images = tg.Tensor(np.array(images))
  tinygrad_out = apply_model_tinygrad(tinygrad_params, tinygrad_images).numpy()
  assert np.allclose(jax_out, tinygrad_out, rtol=1e-3, atol=1e-5)

  # Cells 8 and 9: timings (medians of a few runs after warm-up).
  def median_ms(f, runs=5):
    f()
    times = []
    for _ in range(runs):
      start = time.perf_counter()
      f()
      times.append(time.perf_counter() - start)
    return 1000 * sorted(times)[runs // 2]

  tiny_ms = median_ms(lambda: apply_model_tinygrad(tinygrad_params, tinygrad_images).realize())
  jax_ms = median_ms(lambda: apply_model_jax(params, images).block_until_ready())
  print(f"CNN ({name}, batch {bs}): tiny {tiny_ms:.1f} ms, jax.jit {jax_ms:.1f} ms; outputs match")
