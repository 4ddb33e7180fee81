"""tinyjax's benchmarks, side by side in one run: medians of repeated runs after warm-up, and their ratios.

    .venv/bin/python benchmarks/run.py            # the whole table (a few minutes)
    .venv/bin/python benchmarks/run.py --quick    # fewer repetitions, smaller batches
    .venv/bin/python benchmarks/run.py --only dispatch,eager    # some rows

Each row times one workload several ways (tinyjax, jax.jit, JAX eager, NumPy, tinygrad written by hand) and prints
the ratios the targets are about, each marked met or missed. `tinyjax auto` is TINYJAX_BACKEND=auto. Targets are not
asserted anywhere: docs/performance.md records the latest table.
"""
import argparse
import collections
import contextlib
import json
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
from tinygrad.helpers import DEV

import tinyjax
import tinyjax.numpy as tnp

ROWS: list[tuple[str, dict[str, float], list[str]]] = []  # (figure, {variant: seconds}, ratios against targets)
TINYJAX = (("tinyjax.jit", "tinygrad"), ("tinyjax auto", "auto"))  # (variant, TINYJAX_BACKEND)
# tinygrad written by hand runs on tinyjax's device, whatever tinygrad's default (CL where POCL is installed)
if os.environ.get("TINYJAX_DEVICE"):
  DEV.value = os.environ["TINYJAX_DEVICE"]


@contextlib.contextmanager
def on_backend(name: str):
  previous = tinyjax.config.get("backend")
  tinyjax.config.update("backend", name)
  try:
    yield
  finally:
    tinyjax.config.update("backend", previous)


def median_time(fn, repeats, warmup=2) -> float:
  for _ in range(warmup):
    fn()
  times = []
  for _ in range(repeats):
    start = time.perf_counter()
    fn()
    times.append(time.perf_counter() - start)
  return statistics.median(times)


def timed_steps(step, params, optimizer, data, repeats) -> float:
  """The median time of `step(params, opt_state, *data) -> (params, opt_state, loss)`, training as it goes."""
  state = [params, optimizer.init(params)]

  def run():
    state[0], state[1], loss = step(state[0], state[1], *data)
    loss.block_until_ready()
  return median_time(run, repeats)


def row(figure, times, *ratios):
  """Record a figure; each ratio is (numerator, denominator, target such as "<= 1.05")."""
  judged = []
  for numerator, denominator, target in ratios:
    ratio = times[numerator] / times[denominator]
    bound = float(target.split()[1])
    met = ratio <= bound if target.startswith("<=") else ratio >= bound
    judged.append(f"{numerator}/{denominator} = {ratio:.2f} (target {target}: {'met' if met else 'missed'})")
  ROWS.append((figure, times, judged))
  print(f"  {figure}: " + ", ".join(f"{k} {v * 1e3:.2f} ms" for k, v in times.items()) + "; " + "; ".join(judged),
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
  """The same CNN written by hand in tinygrad (NCHW): (forward(x), its parameters as Tensors)."""
  p = params["params"]
  w = {k: Tensor(np.array(v["kernel"])).realize() for k, v in p.items()}
  b = {k: Tensor(np.array(v["bias"])).realize() for k, v in p.items()}
  for k in ("Conv_0", "Conv_1"):
    w[k] = w[k].permute(3, 2, 0, 1).contiguous().realize()

  def forward(x):  # x: NHWC
    x = x.permute(0, 3, 1, 2)
    x = x.conv2d(w["Conv_0"], b["Conv_0"], padding=1).silu().avg_pool2d(2)
    x = x.conv2d(w["Conv_1"], b["Conv_1"], padding=1).silu().avg_pool2d(2)
    x = x.permute(0, 2, 3, 1).flatten(1)
    x = (x @ w["Dense_0"] + b["Dense_0"]).silu()
    return x @ w["Dense_1"] + b["Dense_1"]
  return forward, [*w.values(), *b.values()]


def tinygrad_train_step(forward, weights):
  """A TinyJit Adam step on softmax cross-entropy, by hand in tinygrad."""
  from tinygrad.helpers import Context
  from tinygrad.nn.optim import Adam
  optimizer = Adam(weights, lr=1e-3)

  @TinyJit
  def step(x, y):
    with Context(TRAINING=1):
      optimizer.zero_grad()
      loss = forward(x).sparse_categorical_crossentropy(y).backward()
      optimizer.step()
      return loss.realize()
  return step


def cnn_training(batch):
  """The CNN rows' problem: the model, its parameters, `batch` images and labels, adam, and a train step."""
  cnn, optimizer = CNN(), optax.adam(1e-3)
  params = cnn.init(jax.random.key(0), jnp.ones((1, 28, 28, 1)))
  images = np.asarray(jax.random.uniform(jax.random.key(1), (batch, 28, 28, 1)))
  labels = np.arange(batch) % 10

  def train_step(params, opt_state, x, y):
    def loss(p):
      logits = cnn.apply(p, x)
      return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()
    value, grads = jax.value_and_grad(loss)(params)
    updates, opt_state = optimizer.update(grads, opt_state)
    return optax.apply_updates(params, updates), opt_state, value
  return cnn, params, images, labels, optimizer, train_step


def bench_cnn(batch, repeats):
  cnn, params, images, labels, optimizer, train_step = cnn_training(batch)
  forward, weights = tinygrad_cnn(params)
  np.testing.assert_allclose(forward(Tensor(images)).numpy(), cnn.apply(params, images), rtol=1e-3, atol=1e-4)
  hand = TinyJit(lambda x: forward(x).realize())
  t_images, tg_images = tnp.asarray(images), Tensor(images).realize()
  jax_forward = jax.jit(cnn.apply)
  times = {"jax.jit": median_time(lambda: jax_forward(params, images).block_until_ready(), repeats),
           "tinygrad": median_time(lambda: hand(tg_images), repeats)}
  for name, backend in TINYJAX:
    with on_backend(backend):
      step = tinyjax.jit(cnn.apply)
      times[name] = median_time(lambda: step(params, t_images).block_until_ready(), repeats)
  row(f"CNN forward, batch {batch}", times, ("tinyjax.jit", "tinygrad", "<= 1.05"),
      ("tinyjax auto", "jax.jit", "<= 1.1"))

  hand_step = tinygrad_train_step(*tinygrad_cnn(params))
  tg_labels = Tensor(labels).realize()
  times = {"jax.jit": timed_steps(jax.jit(train_step), params, optimizer, (images, labels), repeats),
           "tinygrad": median_time(lambda: hand_step(tg_images, tg_labels).numpy(), repeats)}
  for name, backend in TINYJAX:
    with on_backend(backend):
      times[name] = timed_steps(tinyjax.jit(train_step), params, optimizer, (t_images, tnp.asarray(labels)), repeats)
  row(f"CNN train step, batch {batch}", times, ("tinyjax.jit", "tinygrad", "<= 1.05"),
      ("tinyjax auto", "jax.jit", "<= 1.1"))


class MLP(nn.Module):
  @nn.compact
  def __call__(self, x):
    return nn.Dense(1)(nn.relu(nn.Dense(256)(nn.relu(nn.Dense(256)(x)))))


def mlp_training():
  """The MLP row's problem (512x64 -> 256 -> 256 -> 1, adam): its optimizer, data, parameters and train step."""
  model, optimizer = MLP(), optax.adam(1e-3)
  x = np.random.default_rng(0).normal(size=(512, 64)).astype(np.float32)
  y = x[:, :1] ** 2

  def train_step(params, opt_state, x, y):
    value, grads = jax.value_and_grad(lambda p: jnp.mean((model.apply(p, x) - y) ** 2))(params)
    updates, opt_state = optimizer.update(grads, opt_state)
    return optax.apply_updates(params, updates), opt_state, value
  return optimizer, x, y, model.init(jax.random.key(0), x[:1]), train_step


def bench_mlp(repeats):
  optimizer, x, y, params, train_step = mlp_training()
  times = {"jax.jit": timed_steps(jax.jit(train_step), params, optimizer, (x, y), repeats)}
  for name, backend in TINYJAX:
    with on_backend(backend):
      times[name] = timed_steps(tinyjax.jit(train_step), params, optimizer, (tnp.asarray(x), tnp.asarray(y)), repeats)
  row("MLP train step (512x64 -> 256 -> 256 -> 1)", times, ("tinyjax auto", "jax.jit", "<= 1.1"))


def bench_patched_jit(repeats):
  """A plain `@jax.jit` step under tinyjax.patch() (as `tinyjax run` runs it) against tinyjax.jit of the same step."""
  model, optimizer = nn.Dense(16), optax.sgd(1e-2)
  x = np.random.default_rng(0).normal(size=(64, 32)).astype(np.float32)
  params = model.init(jax.random.key(0), x[:1])

  def train_step(params, opt_state, x):
    value, grads = jax.value_and_grad(lambda p: jnp.mean(model.apply(p, x) ** 2))(params)
    updates, opt_state = optimizer.update(grads, opt_state)
    return optax.apply_updates(params, updates), opt_state, value

  times = {"tinyjax.jit": timed_steps(tinyjax.jit(train_step), params, optimizer, (tnp.asarray(x),), repeats)}
  with tinyjax.patch():
    times["patched jax.jit"] = timed_steps(jax.jit(train_step), params, optimizer, (jnp.asarray(x),), repeats)
  row("Dense train step (64x32 -> 16), dispatch-bound", times, ("patched jax.jit", "tinyjax.jit", "<= 1.05"))


class Block(nn.Module):
  @nn.compact
  def __call__(self, x):
    mask = nn.make_causal_mask(jnp.ones(x.shape[:2]))
    x = x + nn.MultiHeadDotProductAttention(num_heads=4)(nn.LayerNorm()(x), mask=mask)
    return x + nn.Dense(x.shape[-1])(nn.gelu(nn.Dense(4 * x.shape[-1])(nn.LayerNorm()(x))))


def tinygrad_block(params):
  """The same block written by hand in tinygrad: (forward(weights, x), the weights as a tree of Tensors)."""
  weights = jax.tree_util.tree_map(lambda a: Tensor(np.array(a)).realize(), params["params"])

  def layer_norm(x, p):
    mean = x.mean(-1, keepdim=True)
    variance = ((x - mean) ** 2).mean(-1, keepdim=True)
    return (x - mean) * (variance + 1e-6).rsqrt() * p["scale"] + p["bias"]

  def forward(w, x):
    attention, (batch, seq, features) = w["MultiHeadDotProductAttention_0"], x.shape
    h = layer_norm(x, w["LayerNorm_0"])
    q, k, v = (h.dot(attention[n]["kernel"].flatten(1)).reshape(batch, seq, 4, features // 4) + attention[n]["bias"]
               for n in ("query", "key", "value"))
    logits = q.permute(0, 2, 1, 3) @ k.permute(0, 2, 3, 1) / float(np.sqrt(features // 4))
    logits = Tensor.ones(seq, seq).tril().bool().where(logits, float(np.finfo(np.float32).min))
    attended = (logits.softmax(-1) @ v.permute(0, 2, 1, 3)).permute(0, 2, 1, 3).flatten(2)
    x = x + attended.dot(attention["out"]["kernel"].flatten(0, 1)) + attention["out"]["bias"]
    hidden = (layer_norm(x, w["LayerNorm_1"]).dot(w["Dense_1"]["kernel"]) + w["Dense_1"]["bias"]).gelu()
    return x + hidden.dot(w["Dense_0"]["kernel"]) + w["Dense_0"]["bias"]
  return forward, weights


def transformer_problem():
  """The transformer rows' problem: the block, its parameters and a batch of 8 sequences of 64 tokens of 64 features."""
  block = Block()
  x = np.asarray(jax.random.normal(jax.random.key(0), (8, 64, 64)))
  return block, block.init(jax.random.key(1), x), x


def bench_transformer(repeats):
  block, params, x = transformer_problem()
  loss = lambda p, x: jnp.mean(block.apply(p, x) ** 2)  # noqa: E731
  forward, weights = tinygrad_block(params)
  leaves = jax.tree_util.tree_leaves(weights)
  np.testing.assert_allclose(forward(weights, Tensor(x)).numpy(), block.apply(params, x), rtol=1e-3, atol=1e-4)
  hand = {"transformer block forward": TinyJit(lambda x: forward(weights, x).realize()),
          "transformer block gradient": TinyJit(lambda x: [g.realize() for g in
                                                          ((forward(weights, x) ** 2).mean().gradient(*leaves))])}
  tx, tg_x = tnp.asarray(x), Tensor(x).realize()
  wait = lambda tree: jax.tree_util.tree_map(lambda a: a.block_until_ready(), tree)  # noqa: E731
  for figure, fn in (("transformer block forward", block.apply), ("transformer block gradient", jax.grad(loss))):
    jax_fn = jax.jit(fn)
    times = {"jax.jit": median_time(lambda: wait(jax_fn(params, x)), repeats),
             "tinygrad": median_time(lambda: hand[figure](tg_x), repeats)}
    for name, backend in TINYJAX:
      with on_backend(backend):
        tiny_fn = tinyjax.jit(fn)
        times[name] = median_time(lambda: wait(tiny_fn(params, tx)), repeats)
    row(figure, times, ("tinyjax.jit", "tinygrad", "<= 1.05"), ("tinyjax auto", "jax.jit", "<= 1.1"))


def bench_eager(repeats):
  big = np.random.default_rng(0).normal(size=(2000, 2000)).astype(np.float32)

  def chain(np_, x):
    for _ in range(50):
      x = np_.sin(x) * 1.01 + 0.5 - x * 0.1
    return x
  for label, fn, data, target in (
      ("eager normalization (x - mean) / std, 2000x2000",
       lambda np_, x: (x - x.mean(1, keepdims=True)) / x.std(1, keepdims=True), big, "<= 0.7"),
      ("eager selu on 1e6 elements",
       lambda np_, x: 1.0507 * np_.where(x > 0, x, 1.6733 * (np_.exp(x) - 1)), big.ravel()[:1_000_000], "<= 0.7"),
      ("eager chain of 200 ops on 16 floats", chain, np.linspace(0, 1, 16, dtype=np.float32), "<= 1.0")):
    j = jnp.asarray(data)
    times = {"JAX eager": median_time(lambda: fn(jnp, j).block_until_ready(), repeats),
             "NumPy": median_time(lambda: fn(np, data), repeats)}
    for name, backend in (("tinyjax eager", "tinygrad"), ("tinyjax eager auto", "auto")):
      with on_backend(backend):
        t = tnp.asarray(data)
        times[name] = median_time(lambda: fn(tnp, t).block_until_ready(), repeats)
    row(label, times, ("tinyjax eager", "JAX eager", target), ("tinyjax eager auto", "JAX eager", target))


def bench_dispatch(repeats):
  f = lambda x, y: x * y + 1.0  # noqa: E731
  x, y = np.ones(8, np.float32), np.full(8, 2.0, np.float32)
  jax_f, jx, jy = jax.jit(f), jnp.asarray(x), jnp.asarray(y)
  times = {"jax.jit": median_time(lambda: jax_f(jx, jy).block_until_ready(), repeats * 20)}
  for name, backend in TINYJAX:
    with on_backend(backend):
      tiny_f, tx, ty = tinyjax.jit(f), tnp.asarray(x), tnp.asarray(y)
      times[name] = median_time(lambda: tiny_f(tx, ty).block_until_ready(), repeats * 20)
      times[name + " f(x, x)"] = median_time(lambda: tiny_f(tx, tx).block_until_ready(), repeats * 20)
  times["tinyjax.jit, replayed by run_linear"] = median_time(_replayed_by_run_linear(f, tx, ty), repeats * 20)
  row("jit dispatch, 8 floats", times, ("tinyjax.jit", "jax.jit", "<= 3"), ("tinyjax auto", "jax.jit", "<= 3"),
      ("tinyjax.jit", "tinyjax.jit, replayed by run_linear", "<= 1"))


def _replayed_by_run_linear(f, x, y):
  """A call of tinyjax.jit(f) whose captured kernels tinygrad's run_linear replays, as before tinyjax's launcher
  (replay.py): the launcher's gain, measured in the same run."""
  from tinyjax.core import pending
  jitted = tinyjax.jit(lambda x, y: f(x, y))  # a function of its own: a program of its own
  for _ in range(3):  # plain, captured, replayed
    jitted(x, y).block_until_ready()
  *_, compiled = pending._programs.values()
  compiled.runner.kernels = None
  return lambda: jitted(x, y).block_until_ready()


def bench_deep_loop():
  """An eager loop of 20,000 operations with no read in between (flushed by the buffer limit), once each way."""
  def loop(np_, x):
    for _ in range(10_000):
      x = x * 0.999 + 0.5
    return x
  data = np.linspace(-1, 1, 16, dtype=np.float32)
  times = {"JAX eager": median_time(lambda: loop(jnp, jnp.asarray(data)).block_until_ready(), 1, warmup=0)}
  with on_backend("tinygrad"):
    before = tinyjax.report().fallback_primitives
    times["tinyjax eager"] = median_time(lambda: loop(tnp, tnp.asarray(data)).block_until_ready(), 1, warmup=0)
    rescued = tinyjax.report().fallback_primitives != before
  row("eager loop of 20,000 ops, first run" + (" (rescued by XLA)" if rescued else " (all on tinygrad)"), times,
      ("tinyjax eager", "JAX eager", "<= 1.0"))


EAGER_LOOP = """
import sys, time
import numpy as np
if sys.argv[1] == "jax":
  import jax.numpy as np_
else:
  import tinyjax.numpy as np_
(np_.ones(4) * 2).block_until_ready()  # the runtime started, as any program's first line would have
y = np_.asarray(np.linspace(0, 1, 256, dtype=np.float32))
start = time.perf_counter()
for _ in range(int(sys.argv[2])):
  y = np_.sin(y) * 0.5 + y * 0.5
  y = y * 0.999 + 0.001
y.block_until_ready()
print(time.perf_counter() - start)
"""


def in_new_process(script: str, *args: str, env: dict):
  """What `script` prints last (seconds, or a JSON object of them), run with `args` in a new process with `env` added
  to the environment."""
  out = subprocess.run([sys.executable, "-c", script, *args], env={**os.environ, **env}, capture_output=True,
                       text=True, check=True)
  return json.loads(out.stdout.splitlines()[-1])


def cold_caches(cache: str) -> dict:
  """Empty caches in the directory `cache` (tinyjax's program cache, tinygrad's binaries: CACHEDB), on the tinygrad
  backend. NB: JAX eager compiles each new operation once in a new process, whatever its persistent cache."""
  return dict(CACHEDB=os.path.join(cache, "cache.db"), TINYJAX_PROGRAM_CACHE=os.path.join(cache, "programs"),
              TINYJAX_BACKEND="tinygrad")


def bench_eager_first_run():
  """An eager update loop (a sine in every step) in a new process with cold caches, 250, 1,000 and 4,000 steps: the
  cost of n steps should grow linearly in n."""
  for steps in (250, 1000, 4000):
    with tempfile.TemporaryDirectory() as cache:
      times = {name: in_new_process(EAGER_LOOP, which, str(steps), env=cold_caches(cache))
               for name, which in (("JAX eager", "jax"), ("tinyjax eager", "tinyjax"))}
    row(f"eager sin/affine loop of {steps:,} steps, new process, cold caches", times,
        ("tinyjax eager", "JAX eager", "<= 2"))


NEW_KERNELS = """
import sys, time
import numpy as np
if sys.argv[1] == "jax":
  import jax.numpy as np_
else:
  import tinyjax.numpy as np_
(np_.ones(4) * 2).block_until_ready()  # the runtime started, as any program's first line would have
steps = [lambda x: np_.sin(x) * 2 + 1, lambda x: np_.exp(x).sum(0), lambda x: np_.tanh(x) @ x.T,
         lambda x: np_.cumsum(x, 1), lambda x: np_.where(x > 0.5, x, -x).max(1), lambda x: np_.log1p(x) / (x + 3),
         lambda x: np_.sqrt(x).mean(), lambda x: np_.arctan2(x, x + 1), lambda x: (x[:, ::-1] * 3).astype(np_.int32),
         lambda x: np_.sort(x, 1)]
rng = np.random.default_rng(0)
inputs = [np_.asarray(rng.random(shape, np.float32)) for shape in ((3, 4), (5, 7))]
start = time.perf_counter()
for x in inputs:
  for step in steps:
    np.asarray(step(x))
print(time.perf_counter() - start)
"""


def bench_new_kernels():
  """Ten operations on two small shapes, each read at once, in a new process with cold caches: 20 new programs, each
  a kernel or two tinyjax lowers and compiles for the first time (JAX eager compiles each operation's executable)."""
  with tempfile.TemporaryDirectory() as cache:
    times = {name: in_new_process(NEW_KERNELS, which, env=cold_caches(cache))
             for name, which in (("JAX eager", "jax"), ("tinyjax eager", "tinyjax"))}
  row("20 new small programs, new process, cold caches", times, ("tinyjax eager", "JAX eager", "<= 2"))


def bench_chained_sines(repeats):
  """80 chained jnp.sin calls on 256 floats and one read, once their kernels are compiled (medians)."""
  def chain(np_, x):
    for _ in range(80):
      x = np_.sin(x)
    return x
  data = np.linspace(0, 1, 256, dtype=np.float32)
  j = jnp.asarray(data)
  times = {"JAX eager": median_time(lambda: chain(jnp, j).block_until_ready(), repeats)}
  with on_backend("tinygrad"):
    t = tnp.asarray(data)
    times["tinyjax eager"] = median_time(lambda: chain(tnp, t).block_until_ready(), repeats)
  row("80 chained sines on 256 floats, compiled", times, ("tinyjax eager", "JAX eager", "<= 2"))


def bench_key_splits(repeats):
  """A training loop's randomness, eagerly: 200 steps of `key, sub = split(key)` and a draw from `sub`, then one read
  (unpacking a split reads the keys: each step is a program run and a copy out and in), once compiled."""
  def loop(random, key):
    total = 0.0
    for _ in range(200):
      key, sub = random.split(key)
      total = total + random.normal(sub, (8,))
    return total
  times = {"JAX eager": median_time(lambda: loop(jax.random, jax.random.key(0)).block_until_ready(), repeats)}
  with on_backend("tinygrad"):
    import tinyjax.random
    times["tinyjax eager"] = median_time(lambda: loop(tinyjax.random, tinyjax.random.key(0)).block_until_ready(),
                                         repeats)
  row("eager loop of 200 key splits and draws, compiled", times, ("tinyjax eager", "JAX eager", "<= 2"))


def bench_while_loop(repeats):
  """A fori_loop whose bounds are known only at run time (a while loop): 1,000 iterations of a scalar body that
  reads a closed-over matrix. tinyjax reads the predicate on the host before each replayed step of SCAN_CHUNK
  iterations; the variant of one iteration per step shows what those steps save."""
  from tinyjax.backends.tinygrad.rules import control_flow
  table = np.random.default_rng(0).standard_normal((64, 64)).astype(np.float32)

  def f(lo, hi):
    t = jnp.asarray(table)
    return jax.lax.fori_loop(lo, hi, lambda k, acc: acc * 0.5 + t[k % 64, (k * 7) % 64], jnp.float32(0))
  bounds = np.int32(0), np.int32(1000)
  jax_f = jax.jit(f)
  times = {"jax.jit": median_time(lambda: jax_f(*bounds).block_until_ready(), repeats)}
  with on_backend("tinygrad"):
    tiny_f = tinyjax.jit(f)
    times["tinyjax.jit"] = median_time(lambda: tiny_f(*bounds).block_until_ready(), repeats)
    chunk, control_flow.SCAN_CHUNK = control_flow.SCAN_CHUNK, 1
    control_flow._while_jit.cache_clear()
    try:
      times["tinyjax.jit, 1 iteration per step"] = median_time(lambda: tiny_f(*bounds).block_until_ready(), repeats)
    finally:
      control_flow.SCAN_CHUNK = chunk
      control_flow._while_jit.cache_clear()
  row("while loop of 1,000 scalar iterations", times, ("tinyjax.jit", "tinyjax.jit, 1 iteration per step", "<= 0.5"))


def bench_nested_loops(repeats):
  """Loops inside loops with bounds known only at run time: jax.scipy.linalg.sqrtm's recurrence over a 24x24 upper
  triangle (three nested fori_loops, the inner two while loops; 276 steps of the middle loop). No TinyJit captures a
  body that holds a loop: the runs of equations between the loops are replayed each by a TinyJit of its own."""
  rng = np.random.default_rng(0)
  t = np.triu(rng.standard_normal((24, 24))).astype(np.float32) + 3 * np.eye(24, dtype=np.float32)

  def f(t):
    diag = jnp.sqrt(jnp.diag(t))
    def column(j, u):
      def row(l, u):
        i = j - 1 - l
        s = jax.lax.fori_loop(i + 1, j, lambda k, s: s + u[i, k] * u[k, j], jnp.float32(0))
        return u.at[i, j].set((t[i, j] - s) / (diag[i] + diag[j]))
      return jax.lax.fori_loop(0, j, row, u)
    return jax.lax.fori_loop(0, t.shape[0], column, jnp.diag(diag))
  jax_f = jax.jit(f)
  times = {"jax.jit": median_time(lambda: jax_f(t).block_until_ready(), repeats)}
  with on_backend("tinygrad"):
    tiny_f = tinyjax.jit(f)
    times["tinyjax.jit"] = median_time(lambda: tiny_f(t).block_until_ready(), repeats)
  row("nested loops, sqrtm's recurrence on 24x24", times)


def bench_factorization_calls(repeats):
  """jnp.linalg.solve of a 48x48 system (lu: 48 steps, its permutation and two triangular solves of 48 steps each) in
  new programs of one layout: each program's calls in turn, its first STEPPED_PLAIN_RUNS run plainly, then captured by
  TinyJit, then replayed (medians over `repeats` new programs after a warm-up one, which compiled the kernels and
  captured the steps' TinyJits)."""
  from tinyjax.backends.tinygrad import STEPPED_PLAIN_RUNS
  rng = np.random.default_rng(0)
  a = (rng.standard_normal((48, 48)) + 48 * np.eye(48)).astype(np.float32)
  b = rng.standard_normal((48, 4)).astype(np.float32)
  jax_f = jax.jit(jnp.linalg.solve)
  times = {"jax.jit": median_time(lambda: jax_f(a, b).block_until_ready(), repeats)}
  with on_backend("tinygrad"):
    calls = collections.defaultdict(list)
    for k in range(repeats + 1):
      f = tinyjax.jit(lambda x, y, k=k: jnp.linalg.solve(x, y) * (k + 1))  # a new program each time
      for call in range(1, STEPPED_PLAIN_RUNS + 3):
        start = time.perf_counter()
        f(a, b).block_until_ready()
        calls[call].append(time.perf_counter() - start)
    for call, durations in calls.items():
      times[f"tinyjax.jit call {call}"] = statistics.median(durations[1:])
  row("a new program's calls, solve 48x48", times)


FIRST_CALL = """
import sys, time, jax, jax.numpy as jnp, numpy as np
import tinyjax, tinyjax.numpy as tnp
from flax import linen as nn
class CNN(nn.Module):
  @nn.compact
  def __call__(self, x):
    x = nn.avg_pool(nn.silu(nn.Conv(32, (3, 3))(x)), (2, 2), strides=(2, 2))
    x = nn.avg_pool(nn.silu(nn.Conv(64, (3, 3))(x)), (2, 2), strides=(2, 2))
    return nn.Dense(10)(nn.silu(nn.Dense(256)(x.reshape((x.shape[0], -1)))))
params = CNN().init(jax.random.key(0), jnp.ones((1, 28, 28, 1)))
x = tnp.asarray(np.random.default_rng(0).random((64, 28, 28, 1), np.float32))  # not a constant tinygrad could fold
jit = jax.jit if sys.argv[1:] == ["jax"] else tinyjax.jit
x = jnp.asarray(x) if jit is jax.jit else x
start = time.perf_counter()
jit(CNN().apply)(params, x).block_until_ready()
print(time.perf_counter() - start)
"""


DATA_PARALLEL = """
import statistics, sys, time
sys.path.insert(0, sys.argv[3])
import jax
from jax.sharding import NamedSharding, PartitionSpec as P
from run import mlp_training
if sys.argv[1] == "tinyjax":
  import tinyjax
  tinyjax.patch()  # NB: as `tinyjax run` runs a plain JAX script

optimizer, x, y, params, train_step = mlp_training()
mesh = jax.make_mesh((len(jax.devices()),), ("data",))
batch = NamedSharding(mesh, P("data", None))
params, state = jax.device_put((params, optimizer.init(params)), NamedSharding(mesh, P()))
x, y = jax.device_put(x, batch), jax.device_put(y, batch)
step = jax.jit(train_step)
times = []
for i in range(int(sys.argv[2]) + 2):
  start = time.perf_counter()
  params, state, loss = step(params, state, x, y)
  loss.block_until_ready()
  times.append(time.perf_counter() - start)
print(statistics.median(times[2:]))
"""


def bench_data_parallel(repeats):
  """A plain JAX data-parallel train step (`mlp_training`'s, its batch split over a mesh of 1, 2 and 4 of
  JAX's CPU devices, the parameters replicated), jitted: as JAX runs it and under tinyjax.patch() (as `tinyjax run`
  runs it), each in a new process that asks JAX for that many devices; tinyjax split over as many instances of the
  tinygrad device, and on one (TINYJAX_SPLIT=0). NB: on a machine without a GPU the instances share its cores."""
  def step_time(which: str, devices: int, split: str = "1") -> float:
    return in_new_process(DATA_PARALLEL, which, str(repeats), os.path.dirname(os.path.abspath(__file__)),
                          env={"JAX_NUM_CPU_DEVICES": str(devices), "TINYJAX_SPLIT": split})
  for devices in (1, 2, 4):
    times = {"jax.jit": step_time("jax", devices), "patched jax.jit": step_time("tinyjax", devices)}
    if devices > 1:
      times["patched, on one device"] = step_time("tinyjax", devices, split="0")
    row(f"data-parallel MLP train step, batch over {devices} CPU device{'s' if devices > 1 else ''}", times,
        ("patched jax.jit", "jax.jit", "<= 3"))


def bench_first_call():
  """The CNN's first call in a new process, with tinyjax's lowered programs, tinygrad's binaries (CACHEDB) and auto's
  choices cold, then warm; and on tinygrad warm with the binaries alone (TINYJAX_PROGRAM_CACHE= : lowered again), and
  cold without lowering helpers (TINYJAX_LOWERING_HELPERS=0); beside jax.jit's first call in a new process (its
  persistent compilation cache off, as it is by default)."""
  with tempfile.TemporaryDirectory() as cache:
    times = {"jax.jit cold": in_new_process(FIRST_CALL, "jax", env={"JAX_COMPILATION_CACHE_DIR": ""})}
    for backend in ("tinygrad", "auto"):
      caches = dict(CACHEDB=os.path.join(cache, f"{backend}.db"), TINYJAX_BACKEND=backend,
                    TINYJAX_PROGRAM_CACHE=os.path.join(cache, f"{backend} programs"),
                    TINYJAX_AUTO_CACHE=os.path.join(cache, "auto.json"))
      for state in ("cold", "warm"):
        times[f"{backend} {state}"] = in_new_process(FIRST_CALL, env=caches)
      if backend == "tinygrad":
        times["tinygrad warm, binaries only"] = in_new_process(FIRST_CALL, env={**caches, "TINYJAX_PROGRAM_CACHE": ""})
        alone = dict(caches, CACHEDB=os.path.join(cache, "alone.db"), TINYJAX_LOWERING_HELPERS="0",
                     TINYJAX_PROGRAM_CACHE=os.path.join(cache, "alone programs"))
        times["tinygrad cold, no lowering helpers"] = in_new_process(FIRST_CALL, env=alone)
  row("CNN first call in a new process, caches cold vs warm", times, ("tinygrad cold", "jax.jit cold", "<= 5"),
      ("tinygrad cold", "tinygrad warm", ">= 3"), ("auto cold", "auto warm", ">= 3"),
      ("tinygrad cold", "tinygrad cold, no lowering helpers", "<= 1"))


def tuned_figures(batch, jit, asarray, repeats) -> dict[str, float]:
  """Issue 40's tuned programs, compiled by `jit` on data made by `asarray`: {figure: median seconds}."""
  cnn, params, images, labels, optimizer, train_step = cnn_training(batch)
  forward, x = jit(cnn.apply), asarray(images)
  times = {f"CNN forward, batch {batch}": median_time(lambda: forward(params, x).block_until_ready(), repeats),
           f"CNN train step, batch {batch}": timed_steps(jit(train_step), params, optimizer, (x, asarray(labels)),
                                                          repeats)}
  optimizer, x, y, params, train_step = mlp_training()
  times["MLP train step"] = timed_steps(jit(train_step), params, optimizer, (asarray(x), asarray(y)), repeats)
  block, params, x = transformer_problem()
  block_forward, x = jit(block.apply), asarray(x)
  times["transformer block forward"] = median_time(lambda: block_forward(params, x).block_until_ready(), repeats)
  return times


TUNED = """
import json, sys
sys.path.insert(0, sys.argv[1])
from run import tuned_figures
if sys.argv[2] == "jax":
  import jax, jax.numpy as jnp
  jit, asarray = jax.jit, jnp.asarray
else:
  import tinyjax, tinyjax.numpy as tnp
  jit, asarray = tinyjax.jit, tnp.asarray
print(json.dumps(tuned_figures(int(sys.argv[3]), jit, asarray, int(sys.argv[4]))))
"""


def bench_tuned(batch, repeats):
  """tinyjax.jit's kernels as tinygrad's heuristic chooses them and as its search (BEAM=2) chose them, beside jax.jit,
  each in a new process. The searched kernels are kept in a program cache of their own (TINYJAX_TUNED_CACHE, default
  ~/.cache/tinyjax/benchmark-tuned), as `tinyjax run --beam 2` keeps them: the first run on a machine searches (many
  minutes), a later one takes what was searched; the search's row is that run's time."""
  tuned_cache = os.environ.get("TINYJAX_TUNED_CACHE") or os.path.expanduser("~/.cache/tinyjax/benchmark-tuned")
  here = os.path.dirname(os.path.abspath(__file__))

  def figures(which, **env):
    return in_new_process(TUNED, here, which, str(batch), str(repeats), env={"TINYJAX_BACKEND": "tinygrad", **env})
  start = time.perf_counter()
  figures("tinyjax", BEAM="2", TINYJAX_PROGRAM_CACHE=tuned_cache)
  row("the search's run of the tuned programs (BEAM=2; kernels searched before are taken)",
      {"tinyjax.jit, BEAM=2": time.perf_counter() - start})
  with tempfile.TemporaryDirectory() as cache:
    untuned = figures("tinyjax", TINYJAX_PROGRAM_CACHE=cache)
  tuned, jax_times = figures("tinyjax", TINYJAX_PROGRAM_CACHE=tuned_cache), figures("jax")
  for figure, seconds in jax_times.items():
    row(f"{figure}, tuned kernels", {"jax.jit": seconds, "tinyjax.jit": untuned[figure],
                                     "tinyjax.jit, tuned": tuned[figure]}, ("tinyjax.jit, tuned", "jax.jit", "<= 3"))


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--quick", action="store_true", help="fewer repetitions and a smaller batch")
  parser.add_argument("--only", default="cnn,mlp,patched_jit,transformer,eager,dispatch,deep_loop,while_loop,nested_loops,"
                      "factorization_calls,eager_first_run,new_kernels,chained_sines,key_splits,first_call,data_parallel,tuned",
                      help="the rows to run, comma-separated (default: all)")
  args = parser.parse_args()
  repeats = 3 if args.quick else 7
  benches = {"cnn": lambda: [bench_cnn(batch, repeats) for batch in ((64,) if args.quick else (256, 512))],
             "mlp": lambda: bench_mlp(repeats), "patched_jit": lambda: bench_patched_jit(repeats), "transformer": lambda: bench_transformer(repeats),
             "eager": lambda: bench_eager(repeats), "dispatch": lambda: bench_dispatch(repeats),
             "deep_loop": bench_deep_loop, "while_loop": lambda: bench_while_loop(repeats),
             "nested_loops": lambda: bench_nested_loops(repeats),
             "factorization_calls": lambda: bench_factorization_calls(repeats), "first_call": bench_first_call,
             "eager_first_run": bench_eager_first_run, "new_kernels": bench_new_kernels,
             "chained_sines": lambda: bench_chained_sines(repeats), "key_splits": lambda: bench_key_splits(repeats),
             "data_parallel": lambda: bench_data_parallel(repeats),
             "tuned": lambda: bench_tuned(64 if args.quick else 256, repeats)}
  with tempfile.TemporaryDirectory() as choices:
    os.environ["TINYJAX_AUTO_CACHE"] = os.path.join(choices, "auto.json")  # auto measures afresh in this run
    for name in args.only.split(","):
      benches[name]()
  print("| figure | times (median) | ratios |")
  print("|---|---|---|")
  for figure, times, ratios in ROWS:
    print(f"| {figure} | " + ", ".join(f"{k} {v * 1e3:.2f} ms" for k, v in times.items()) + " | "
          + "; ".join(ratios) + " |")


if __name__ == "__main__":
  main()
