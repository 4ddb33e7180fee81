"""The seed notebook's CNN (examples/seed_notebook.py), ready for `tinyjax export`: its parameters are inputs.

  tinyjax export examples/export_cnn.py:apply_model --to c -o build/cnn        # apply_model.c, apply_model.h
  tinyjax export examples/export_cnn.py:apply_model --to webgpu -o build/web   # apply_model.js, index.html

`example_args()` fixes the shapes and dtypes: the parameters, then one 28x28 image. Walk-through: docs/export.md.
"""
import jax
import jax.numpy as jnp
from flax import linen as nn


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


# NB: WebGPU has no float64, and tinyjax computes float32 logistic (in silu) in float64 for now: the WebGPU export
# takes the notebook's other variant, relu + max_pool
cnn = CNN()
webgpu_cnn = CNN(activation=nn.relu, pool=nn.max_pool)


def apply_model(params, images):
  return cnn.apply(params, images)


def apply_model_webgpu(params, images):
  return webgpu_cnn.apply(params, images)


def example_args():
  rng1, rng2 = jax.random.split(jax.random.key(42))
  params = cnn.init(rng1, jnp.ones([1, 28, 28, 1]))
  images = jax.random.uniform(rng2, (1, 28, 28, 1))
  return params, images
