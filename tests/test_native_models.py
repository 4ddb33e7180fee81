"""Real models run entirely on tinygrad (TINYJAX_FALLBACK=error) and match JAX: a CNN training step with max_pool
and cross-entropy, a transformer block's gradient with causal attention, LayerNorm and gelu, optax adam; PCA by eigh;
a low-rank fit by svd and pinv. Each as accurate as XLA's float32 result, measured from the float64 truth
(oracle.check_accuracy): the tolerance is the one each problem's conditioning gives XLA."""
import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import linen as nn

import tinyjax
from oracle import check_accuracy


class CNN(nn.Module):
  @nn.compact
  def __call__(self, x):
    x = nn.max_pool(nn.relu(nn.Conv(8, (3, 3))(x)), (2, 2), strides=(2, 2))
    return nn.Dense(10)(x.reshape((x.shape[0], -1)))


class Block(nn.Module):
  @nn.compact
  def __call__(self, x):
    mask = nn.make_causal_mask(jnp.ones(x.shape[:2]))
    x = x + nn.MultiHeadDotProductAttention(num_heads=2)(nn.LayerNorm()(x), mask=mask)
    return x + nn.Dense(x.shape[-1])(nn.gelu(nn.Dense(2 * x.shape[-1])(nn.LayerNorm()(x))))


def _jit(np_):
  return jax.jit if np_ is jnp else tinyjax.jit


def test_cnn_training_step_with_adam_runs_natively():
  cnn, optimizer = CNN(), optax.adam(1e-2)
  images = np.asarray(jax.random.uniform(jax.random.key(1), (4, 8, 8, 1)))
  labels = np.array([0, 3, 9, 3], np.int32)
  params = cnn.init(jax.random.key(0), images[:1])

  def train_step(params, opt_state, x, y):
    def loss(p):
      return optax.softmax_cross_entropy_with_integer_labels(cnn.apply(p, x), y).mean()
    value, grads = jax.value_and_grad(loss)(params)
    updates, opt_state = optimizer.update(grads, opt_state)
    return optax.apply_updates(params, updates), opt_state, value

  check_accuracy(lambda np_, p, x, y: _jit(np_)(train_step)(p, optimizer.init(p), np_.asarray(x), np_.asarray(y)),
                 params, images, labels)


def test_transformer_block_gradient_runs_natively():
  block = Block()
  x = np.asarray(jax.random.normal(jax.random.key(0), (2, 4, 8)))
  params = block.init(jax.random.key(1), x)
  grad = jax.grad(lambda p, x: jnp.mean(block.apply(p, x) ** 2))
  check_accuracy(lambda np_, p, x: _jit(np_)(grad)(p, np_.asarray(x)), params, x)


def test_pca_by_eigh_runs_natively():
  """PCA: the covariance's eigendecomposition, the data projected on the two leading components. Components are
  unique up to sign, so the sign-free results are compared: the explained variances and the rank-2 reconstruction."""
  rng = np.random.default_rng(0)
  data = (rng.standard_normal((64, 6)) @ rng.standard_normal((6, 6)) * [3, 2, 1, 0.5, 0.2, 0.1]).astype(np.float32)

  def pca(np_, x):
    centered = x - x.mean(0)
    variances, components = np_.linalg.eigh(centered.T @ centered / (x.shape[0] - 1))
    leading = components[:, ::-1][:, :2]
    return variances[::-1], (centered @ leading) @ leading.T + x.mean(0)
  check_accuracy(lambda np_, x: pca(np_, np_.asarray(x)), data)


def test_low_rank_fit_by_svd_runs_natively():
  """A rank-3 fit of a noisy low-rank matrix by truncated svd, and its least-squares weights through pinv."""
  rng = np.random.default_rng(1)
  low = rng.standard_normal((20, 3)) @ rng.standard_normal((3, 12))
  noisy = (low + 0.01 * rng.standard_normal(low.shape)).astype(np.float32)
  target = rng.standard_normal((20,)).astype(np.float32)

  def fit(np_, m, y):
    u, s, vt = np_.linalg.svd(m, full_matrices=False)
    return s, (u[:, :3] * s[:3]) @ vt[:3], np_.linalg.pinv(m) @ y
  check_accuracy(lambda np_, m, y: fit(np_, np_.asarray(m), np_.asarray(y)), noisy, target)
