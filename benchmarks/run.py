"""tinyjax's benchmarks, side by side in one run: medians of repeated runs after warm-up, and their ratios.

    .venv/bin/python benchmarks/run.py            # the whole table (a few minutes)
    .venv/bin/python benchmarks/run.py --quick    # fewer repetitions, smaller batches

Each row times one workload several ways (tinyjax, jax.jit, JAX eager, NumPy, tinygrad written by hand) and prints
the ratio the target is about. Targets are not asserted anywhere: docs/performance.md records the latest table.
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import linen as nn
from tinygrad import Tensor, TinyJit

import tinyjax
import tinyjax.numpy as tnp

ROWS: list[tuple[str, dict[str, float], str, str]] = []  # (figure, {variant: seconds}, ratio label, target)


def median_time(fn, repeats, warmup=2) -> float:
  for _ in range(warmup):
    fn()
  times = []
  for _ in range(repeats):
    start = time.perf_counter()
    fn()
    times.append(time.perf_counter() - start)
  return statistics.median(times)


def row(figure, times, numerator, denominator, target):
  ratio = times[numerator] / times[denominator]
  ROWS.append((figure, times, f"{numerator}/{denominator} = {ratio:.2f}", target))
  print(f"  {figure}: " + ", ".join(f"{k} {v * 1e3:.2f} ms" for k, v in times.items()) + f"; {ROWS[-1][2]}",
        file=sys.stderr)


# --- the seed CNN

class CNN(nn.Module):
  @nn.compact
  def __call__(self, x):
    x = nn.avg_pool(nn.silu(nn.Conv(32, (3, 3))(x)), (2, 2), strides=(2, 2))
    x = nn.avg_pool(nn.silu(nn.Conv(64, (3, 3))(x)), (2, 2), strides=(2, 2))
    x = nn.silu(nn.Dense(256)(x.reshape((x.shape[0], -1))))
    return nn.Dense(10)(x)


def tinygrad_cnn(params):
  """The same CNN written by hand in tinygrad (NCHW), from the flax parameters."""
  p = params["params"]
  w = {k: Tensor(np.asarray(v["kernel"])) for k, v in p.items()}
  b = {k: Tensor(np.asarray(v["bias"])) for k, v in p.items()}
  conv_w = {k: w[k].permute(3, 2, 0, 1).contiguous().realize() for k in ("Conv_0", "Conv_1")}

  def forward(x):  # x: NHWC
    x = x.permute(0, 3, 1, 2)
    x = x.conv2d(conv_w["Conv_0"], b["Conv_0"], padding=1).silu().avg_pool2d(2)
    x = x.conv2d(conv_w["Conv_1"], b["Conv_1"], padding=1).silu().avg_pool2d(2)
    x = x.permute(0, 2, 3, 1).flatten(1)
    x = (x @ w["Dense_0"] + b["Dense_0"]).silu()
    return x @ w["Dense_1"] + b["Dense_1"]
  return forward


def bench_cnn(batch, repeats):
  cnn = CNN()
  params = cnn.init(jax.random.key(0), jnp.ones((1, 28, 28, 1)))
  images = np.asarray(jax.random.uniform(jax.random.key(1), (batch, 28, 28, 1)))
  labels = np.arange(batch) % 10
  jax_forward = jax.jit(cnn.apply)
  tiny_forward = tinyjax.jit(cnn.apply)
  hand = TinyJit(tinygrad_cnn(params))
  t_images = tnp.asarray(images)
  tg_images = Tensor(images).realize()
  times = {
    "tinyjax.jit": median_time(lambda: tiny_forward(params, t_images).block_until_ready(), repeats),
    "jax.jit": median_time(lambda: jax_forward(params, images).block_until_ready(), repeats),
    "tinygrad": median_time(lambda: hand(tg_images).realize(), repeats),
  }
  row(f"CNN forward, batch {batch}", times, "tinyjax.jit", "tinygrad", "<= 1.05")

  optimizer = optax.adam(1e-3)

  def train_step(params, opt_state, x, y):
    def loss(p):
      logits = cnn.apply(p, x)
      return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()
    value, grads = jax.value_and_grad(loss)(params)
    updates, opt_state = optimizer.update(grads, opt_state)
    return optax.apply_updates(params, updates), opt_state, value

  state = {"jax": (params, optimizer.init(params)), "tinyjax": (params, optimizer.init(params))}
  steps = {"jax": jax.jit(train_step), "tinyjax": tinyjax.jit(train_step)}
  inputs = {"jax": (images, labels), "tinyjax": (t_images, tnp.asarray(labels))}

  def run(name):
    p, s = state[name]
    p, s, v = steps[name](p, s, *inputs[name])
    state[name] = (p, s)
    v.block_until_ready()
  times = {"tinyjax.jit": median_time(lambda: run("tinyjax"), repeats),
           "jax.jit": median_time(lambda: run("jax"), repeats)}
  row(f"CNN train step, batch {batch}", times, "tinyjax.jit", "jax.jit", "(no tinygrad baseline)")


def bench_mlp(repeats):
  class MLP(nn.Module):
    @nn.compact
    def __call__(self, x):
      return nn.Dense(1)(nn.relu(nn.Dense(256)(nn.relu(nn.Dense(256)(x)))))
  model, optimizer = MLP(), optax.adam(1e-3)
  x = np.random.default_rng(0).normal(size=(512, 64)).astype(np.float32)
  y = x[:, :1] ** 2
  params = model.init(jax.random.key(0), x[:1])

  def train_step(params, opt_state, x, y):
    value, grads = jax.value_and_grad(lambda p: jnp.mean((model.apply(p, x) - y) ** 2))(params)
    updates, opt_state = optimizer.update(grads, opt_state)
    return optax.apply_updates(params, updates), opt_state, value
  times = {}
  for name, jit, data in (("tinyjax.jit", tinyjax.jit, (tnp.asarray(x), tnp.asarray(y))), ("jax.jit", jax.jit, (x, y))):
    step, state = jit(train_step), [params, optimizer.init(params)]

    def run():
      state[0], state[1], v = step(state[0], state[1], *data)
      v.block_until_ready()
    times[name] = median_time(run, repeats)
  row("MLP train step (512x64 -> 256 -> 256 -> 1)", times, "tinyjax.jit", "jax.jit", "(no target)")


def bench_transformer(repeats):
  class Block(nn.Module):
    @nn.compact
    def __call__(self, x):
      mask = nn.make_causal_mask(jnp.ones(x.shape[:2]))
      x = x + nn.MultiHeadDotProductAttention(num_heads=4)(nn.LayerNorm()(x), mask=mask)
      return x + nn.Dense(x.shape[-1])(nn.gelu(nn.Dense(4 * x.shape[-1])(nn.LayerNorm()(x))))
  block = Block()
  x = np.asarray(jax.random.normal(jax.random.key(0), (8, 64, 64)))
  params = block.init(jax.random.key(1), x)
  loss = lambda p, x: jnp.mean(block.apply(p, x) ** 2)  # noqa: E731
  tx = tnp.asarray(x)
  for figure, fn in (("transformer block forward", block.apply), ("transformer block gradient", jax.grad(loss))):
    tiny_fn, jax_fn = tinyjax.jit(fn), jax.jit(fn)
    times = {
      "tinyjax.jit": median_time(lambda: jax.tree_util.tree_map(lambda a: a.block_until_ready(), tiny_fn(params, tx)), repeats),
      "jax.jit": median_time(lambda: jax.tree_util.tree_map(lambda a: a.block_until_ready(), jax_fn(params, x)), repeats),
    }
    row(figure, times, "tinyjax.jit", "jax.jit", "(vs hand-written tinygrad: <= 1.05)")


def bench_eager(repeats):
  big = np.random.default_rng(0).normal(size=(2000, 2000)).astype(np.float32)
  for label, fn, data, target in (
      ("eager normalization (x - mean) / std, 2000x2000", lambda np_, x: (x - x.mean(1, keepdims=True)) / x.std(1, keepdims=True), big, "<= 0.7"),
      ("eager selu on 1e6 elements", lambda np_, x: 1.0507 * np_.where(x > 0, x, 1.6733 * (np_.exp(x) - 1)), big.ravel()[:1_000_000], "<= 0.7"),
  ):
    t, j = tnp.asarray(data), jnp.asarray(data)
    times = {"tinyjax eager": median_time(lambda: fn(tnp, t).block_until_ready(), repeats),
             "JAX eager": median_time(lambda: fn(jnp, j).block_until_ready(), repeats),
             "NumPy": median_time(lambda: fn(np, data), repeats)}
    row(label, times, "tinyjax eager", "JAX eager", target)

  def chain(np_, x):
    for i in range(50):
      x = np_.sin(x) * 1.01 + 0.5 - x * 0.1
    return x
  small = np.linspace(0, 1, 16, dtype=np.float32)
  t, j = tnp.asarray(small), jnp.asarray(small)
  times = {"tinyjax eager": median_time(lambda: chain(tnp, t).block_until_ready(), repeats),
           "JAX eager": median_time(lambda: chain(jnp, j).block_until_ready(), repeats),
           "NumPy": median_time(lambda: chain(np, small), repeats)}
  row("eager chain of 200 ops on 16 floats", times, "tinyjax eager", "JAX eager", "<= 1.0")


def bench_dispatch(repeats):
  f = lambda x, y: x * y + 1.0  # noqa: E731
  x = np.ones(4, np.float32)
  tiny_f, jax_f = tinyjax.jit(f), jax.jit(f)
  t = tnp.asarray(x)
  times = {"tinyjax.jit": median_time(lambda: tiny_f(t, t).block_until_ready(), repeats * 20),
           "jax.jit": median_time(lambda: jax_f(x, x).block_until_ready(), repeats * 20)}
  row("jit dispatch, 4 floats", times, "tinyjax.jit", "jax.jit", "<= 2")


FIRST_CALL = """
import time, jax, jax.numpy as jnp, numpy as np
import tinyjax, tinyjax.numpy as tnp
from flax import linen as nn
class CNN(nn.Module):
  @nn.compact
  def __call__(self, x):
    x = nn.avg_pool(nn.silu(nn.Conv(32, (3, 3))(x)), (2, 2), strides=(2, 2))
    x = nn.avg_pool(nn.silu(nn.Conv(64, (3, 3))(x)), (2, 2), strides=(2, 2))
    return nn.Dense(10)(nn.silu(nn.Dense(256)(x.reshape((x.shape[0], -1)))))
params = CNN().init(jax.random.key(0), jnp.ones((1, 28, 28, 1)))
x = tnp.ones((64, 28, 28, 1))
start = time.perf_counter()
tinyjax.jit(CNN().apply)(params, x).block_until_ready()
print(time.perf_counter() - start)
"""


def bench_first_call():
  with tempfile.TemporaryDirectory() as cache:
    env = dict(os.environ, CACHEDB=os.path.join(cache, "cache.db"))
    cold, warm = (float(subprocess.run([sys.executable, "-c", FIRST_CALL], env=env, capture_output=True, text=True,
                                       check=True).stdout.split()[-1]) for _ in range(2))
  row("CNN first call, kernel cache cold vs warm (new process)", {"warm": warm, "cold": cold}, "cold", "warm", ">= 3")


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--quick", action="store_true", help="fewer repetitions and smaller batches")
  args = parser.parse_args()
  repeats = 3 if args.quick else 7
  for batch in ((64,) if args.quick else (256, 512)):
    bench_cnn(batch, repeats)
  bench_mlp(repeats)
  bench_transformer(repeats)
  bench_eager(repeats)
  bench_dispatch(repeats)
  bench_first_call()
  print("| figure | times (median) | ratio | target |")
  print("|---|---|---|---|")
  for figure, times, ratio, target in ROWS:
    print(f"| {figure} | " + ", ".join(f"{k} {v * 1e3:.2f} ms" for k, v in times.items()) + f" | {ratio} | {target} |")


if __name__ == "__main__":
  main()
