"""A transformer block (causal self-attention, LayerNorm, gelu MLP) in plain JAX and flax: forward and gradient
under jax.jit. Run: `tinyjax run examples/transformer_block.py --report` (or `python ...` to compare with XLA)."""
import jax
import jax.numpy as jnp
from flax import linen as nn


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


forward = jax.jit(block.apply)
gradient = jax.jit(jax.grad(loss))
out = forward(params, x)
grads = gradient(params, x)
print("transformer block: output", out.shape, f"mean square {float(jnp.mean(out ** 2)):.4f}")
norms = {"/".join(str(getattr(k, "key", k)) for k in path): float(jnp.linalg.norm(g))
         for path, g in jax.tree_util.tree_leaves_with_path(grads)}
print(f"{len(norms)} gradients, largest norm {max(norms.values()):.4f} ({max(norms, key=norms.get)})")
