"""A transformer block (causal self-attention, LayerNorm, gelu MLP): forward and gradient under tinyjax.jit,
checked against jax.jit. Run: `tinyjax run examples/transformer_block.py`."""
import jax
import jax.numpy as jnp
import numpy as np
from flax import linen as nn

import tinyjax


class Block(nn.Module):
  heads: int = 4

  @nn.compact
  def __call__(self, x):
    mask = nn.make_causal_mask(jnp.ones(x.shape[:2]))
    x = x + nn.MultiHeadDotProductAttention(num_heads=self.heads)(nn.LayerNorm()(x), mask=mask)
    h = nn.Dense(4 * x.shape[-1])(nn.LayerNorm()(x))
    return x + nn.Dense(x.shape[-1])(nn.gelu(h))


block = Block()
x = jax.random.normal(jax.random.key(0), (4, 16, 32))
params = block.init(jax.random.key(1), x)


def loss(params, x):
  return jnp.mean(block.apply(params, x) ** 2)


forward = tinyjax.jit(block.apply)
gradient = tinyjax.jit(jax.grad(loss))
out = forward(params, x)
grads = gradient(params, x)
np.testing.assert_allclose(np.asarray(out), jax.jit(block.apply)(params, x), rtol=1e-4, atol=1e-4)
for g, e in zip(jax.tree_util.tree_leaves(grads), jax.tree_util.tree_leaves(jax.jit(jax.grad(loss))(params, x))):
  np.testing.assert_allclose(np.asarray(g), e, rtol=1e-3, atol=1e-5)
print("transformer block: output", out.shape, "and gradients match jax.jit")
print(tinyjax.explain(gradient)(params, x))
