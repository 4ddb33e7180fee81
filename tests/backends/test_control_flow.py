"""cond, while and scan on tinygrad (and what JAX builds from them: switch, fori_loop, an RNN and its gradient,
jnp.diagonal's platform_index), custom_linear_solve, stop_gradient and optimization_barrier, against JAX."""
import functools

import jax
import jax.numpy as jnp
import jax.scipy.linalg
import numpy as np
import pytest
from jax import lax

import tinyjax
import tinyjax.lax
import tinyjax.numpy
import oracle
from oracle import check, native
from tinyjax.backends.tinygrad.rules import control_flow
from tinyjax.core.mirror import wrap


check_traced = functools.partial(oracle.check_traced, jax_jit=True)  # JAX's side traced whole too (jax.jit)


def lax_of(np_):
  return tinyjax.lax if np_ is not jnp else lax


X = np.array([[0.5, -1.5, 2.0], [3.0, -0.0, 1.25]], np.float32)
I = np.array([[3, -7, 0], [2**31 - 1, -2**31, 5]], np.int32)


# --- cond and switch

@pytest.mark.parametrize("x", [X, -X, I, -I], ids=["f32", "f32_neg", "i32", "i32_neg"])
def test_cond(x):
  check(lambda np_, x: lax_of(np_).cond(x.sum() > 0, lambda x: (x * 2, x.max()), lambda x: (-x, x.min()), x), x)


@pytest.mark.parametrize("index", [-5, -1, 0, 1, 2, 3, 100])
def test_switch_clamps_the_index(index):
  check_traced(lambda i, x: lax.switch(i, [lambda x: x + 1, lambda x: x * x, jnp.sin], x), np.int32(index), X)


@pytest.mark.parametrize("divisor", [0, 3, -1])
def test_unselected_branch_cannot_crash(divisor):
  # integer division by zero and INT_MIN // -1 in the branch not taken, an out-of-bounds index in the other
  def fn(x, d, i):
    safe = (d != 0) & ~((x.min() == -2**31) & (d == -1))
    return lax.cond(safe, lambda: x // d + x % d, lambda: x + x[i])
  check_traced(fn, I, np.int32(divisor), np.int32(7))


@pytest.mark.parametrize("n", [-3, 4])
def test_cond_with_a_loop_runs_only_the_selected_branch(n):
  # the loop of the branch not taken would never end
  countdown = lambda n: lax.while_loop(lambda c: c[0] != 0, lambda c: (c[0] - 1, c[1] * 2), (n, jnp.int32(1)))[1]
  check_traced(lambda n: lax.cond(n >= 0, countdown, lambda n: n, n), np.int32(n))


def test_cond_constant_index():
  # a literal predicate runs only its branch
  check_traced(lambda x: lax.cond(True, jnp.sin, jnp.cos, x) + lax.switch(1, [jnp.sin, jnp.cos, jnp.exp], x), X)


def test_cond_inside_vmap_selects():
  check_traced(jax.vmap(lambda p, x: lax.cond(p, lambda x: x * 3, lambda x: -x, x)), np.array([True, False]), X)


# --- while

@pytest.mark.parametrize("a", [2.0, 0.01, 1e6, 7.0])
def test_while_newton_sqrt(a):
  def newton(a):
    body = lambda s: ((s[0] + a / s[0]) / 2, s[1] + 1)
    return lax.while_loop(lambda s: (jnp.abs(s[0] * s[0] - a) > 1e-6 * a) & (s[1] < 100), body, (a, 0))
  check_traced(newton, np.float32(a))


def test_while_zero_trips():
  check_traced(lambda x: lax.while_loop(lambda x: x.sum() < 0, lambda x: x * 2, x), X)


@pytest.mark.parametrize("n", [1, 6, 27])
def test_while_collatz_data_dependent_trips(n):
  def steps(n):
    body = lambda s: (jnp.where(s[0] % 2 == 0, s[0] // 2, 3 * s[0] + 1), s[1] + 1)
    return lax.while_loop(lambda s: s[0] != 1, body, (n, jnp.int32(0)))
  check_traced(steps, np.int32(n))


def test_while_inside_vmap_with_a_batched_predicate():
  # vmap keeps the predicate batched (one per element): the loop goes on while any holds, and the elements whose
  # predicate fails keep their carry (typed keys too: random_gamma's rejection loop is such a loop)
  def steps(n, seed):
    body = lambda s: (jnp.where(s[0] % 2 == 0, s[0] // 2, 3 * s[0] + 1), s[1] + 1, jax.random.split(s[2])[0])
    n, count, key = lax.while_loop(lambda s: s[0] != 1, body, (n, jnp.int32(0), jax.random.key(seed)))
    return count, jax.random.key_data(key)
  check_traced(jax.vmap(steps), np.array([1, 6, 27, 2], np.int32), np.arange(4, dtype=np.int32))


@pytest.mark.parametrize("bounds", ["static", "dynamic"])
def test_fori_loop(bounds):
  body = lambda i, c: (c[0] * 0.5 + i, c[1] + c[0].sum())
  if bounds == "static":  # a scan
    check_traced(lambda x: lax.fori_loop(2, 9, body, (x, jnp.float32(0))), X)
  else:  # a while loop
    check_traced(lambda x, lo, hi: lax.fori_loop(lo, hi, body, (x, jnp.float32(0))), X, np.int32(2), np.int32(9))


TABLE = np.arange(1, 10, dtype=np.float32)  # closed over


def count_down(n, x):
  """n iterations (n - i >= 1 in each). NB: a replayed step runs SCAN_CHUNK iterations, those past the end on the
  kept carry; there this body divides an integer by zero, reads past TABLE's end and takes the log of a negative
  number, none of which may reach the result."""
  def body(c):
    i, acc, y = c
    return i + 1, acc + 100 // (n - i) + jnp.asarray(TABLE)[i].astype(jnp.int32), y * 1.5 + jnp.log(n - i - 0.5)
  return lax.while_loop(lambda c: c[0] < n, body, (jnp.int32(0), jnp.int32(0), x))


@pytest.mark.parametrize("trips", [0, 1, 7, 8, 9, 17, 40])
def test_while_iterations_past_the_end_change_nothing(trips):
  check_traced(count_down, np.int32(trips), X)


def test_while_iterations_past_the_end_change_nothing_inside_vmap():
  check_traced(jax.vmap(count_down), np.array([0, 3, 9, 17], np.int32), np.stack([X] * 4))


# --- scan

def cumulative(c, x):
  return c + x, (c * x, c.sum())


SCANS = {  # id: (fn of xs, xs)
  "basic": (lambda xs: lax.scan(cumulative, jnp.full(3, 0.5, jnp.float32), xs), X),
  "reverse": (lambda xs: lax.scan(cumulative, jnp.ones(3, jnp.float32), xs, reverse=True), X),
  "consts": (lambda xs: lax.scan(lambda c, x: (c * xs[0] + x, c - xs[1]), xs[1], xs), X),
  "carries_and_ys": (lambda xs: lax.scan(lambda c, x: ((c[0] + x, c[1] * 2, c[2] | (x > 1)), (x, c[1], c[0])),
                                          (jnp.float32(0), jnp.int32(1), False), xs), X[:, 0]),
  "no_ys": (lambda xs: lax.scan(lambda c, x: (c + x, None), jnp.int32(0), xs)[0], I[0]),
  "no_xs": (lambda x: lax.scan(lambda c, _: (c * 2, c), x, None, length=4), X[0]),
  "length_0": (lambda xs: lax.scan(cumulative, jnp.ones(3, jnp.float32), xs), np.zeros((0, 3), np.float32)),
  "unchanged_carry": (lambda xs: lax.scan(lambda c, x: (c, c + x), xs[0], xs), X),
  "two_xs": (lambda xs: lax.scan(lambda c, x: (c + x[0] * x[1], x[1]), 0.0, (xs, xs[::-1])), X[:, 1]),
}


@pytest.mark.parametrize("case", SCANS)
def test_scan(case):
  fn, xs = SCANS[case]
  check_traced(fn, xs)


def rnn(w, h, xs):
  step = lambda h, x: (jnp.tanh(h @ w + x), h.sum())
  return lax.scan(step, h, xs)


RNG = np.random.default_rng(0)
W = (RNG.standard_normal((4, 4)) * 0.4).astype(np.float32)
H = RNG.standard_normal(4).astype(np.float32)


@pytest.mark.parametrize("length", [7, control_flow.SCAN_UNROLLED + 5])
def test_rnn_and_its_gradient(length):
  xs = RNG.standard_normal((length, 4)).astype(np.float32)
  loss = lambda w, h, xs: (rnn(w, h, xs)[0] ** 2).sum() + rnn(w, h, xs)[1].sum()
  check_traced(rnn, W, H, xs, rtol=1e-5, atol=1e-6)
  check(lambda np_, w, h, xs: (jax.grad if np_ is jnp else tinyjax.grad)(loss, argnums=(0, 1))(w, h, xs),
        W, H, xs, rtol=1e-4, atol=1e-5)


def test_long_scan():
  # replays a TinyJit of a chunk of steps: ~1000 steps take well under a second once captured
  xs = RNG.standard_normal((1000, 4)).astype(np.float32) * 0.1
  check_traced(rnn, W, H, xs, rtol=1e-4, atol=1e-5)
  check_traced(lambda xs: lax.scan(cumulative, jnp.zeros(4, jnp.float32), xs, reverse=True), xs, rtol=1e-5, atol=1e-5)


def test_a_scans_chunks_share_their_kernels(monkeypatch):
  """A lazy scan's third chunk compiles no kernel of its own: the step number is a bound Variable, not a constant
  baked into each chunk's kernels. (The first chunk's differ: its carry is still the initial constant.)"""
  from tinygrad.codegen.opt import heuristic
  compiled = []
  optimize = heuristic.hand_coded_optimizations
  monkeypatch.setattr(heuristic, "hand_coded_optimizations", lambda kernel: compiled.append(kernel) or optimize(kernel))
  counts = []
  for chunks, size in ((2, 5), (3, 6)):  # NB: sizes no other test uses, so that every kernel is compiled here
    compiled.clear()
    xs = RNG.standard_normal((chunks * control_flow.SCAN_CHUNK, size)).astype(np.float32)
    check_traced(lambda xs: lax.scan(cumulative, jnp.full(size, 0.5, jnp.float32), xs), xs, rtol=1e-5)
    counts.append(len(compiled))
  assert 0 < counts[1] <= counts[0], counts  # NB: not equal: the sizes differ, and tinygrad shapes kernels by size


def test_a_replayed_loops_step_is_traced_once_per_tinyjit(monkeypatch):
  """A while loop replayed by its two TinyJits traces (and schedules) its step twice, once for each TinyJit's capture,
  however many steps it takes: a TinyJit captures at its first call (a plain run before each capture traced it four
  times)."""
  traced = []
  steps = control_flow._while_steps
  monkeypatch.setattr(control_flow, "_while_steps", lambda *args: traced.append(args[5]) or steps(*args))
  x = np.linspace(0.25, 2.0, 9, dtype=np.float32)  # NB: a shape no other test uses: the loop's TinyJits are new
  body = lambda c: (c[0] + 1, jnp.sin(c[1]) * 0.5 + c[1] * 0.5)
  check_traced(lambda x: lax.while_loop(lambda c: c[0] < 60, body, (0, x))[1], x, rtol=1e-6)
  assert traced.count(control_flow.SCAN_CHUNK) == 2, traced


@pytest.mark.parametrize("length", [5, control_flow.SCAN_UNROLLED + 3])
def test_scan_replayed_with_new_inputs(length):
  # the program (short scans: a TinyJit of the whole program) or the scan's own TinyJit is captured, then replayed
  xs = RNG.standard_normal((3, length, 4)).astype(np.float32)
  traced = wrap(rnn)
  for i in range(3):
    check(lambda np_, w, h, x: rnn(w, h, x) if np_ is jnp else traced(w, h, x), W, H + i, xs[i], rtol=1e-5, atol=1e-6)


def test_nested_loops():
  def fn(xs):
    inner = lambda c: lax.while_loop(lambda c: c[1] < 2, lambda c: (c[0] * 1.5, c[1] + 1), (c, 0))[0]
    step = lambda c, x: (inner(c) * 0.1 + x, lax.scan(lambda a, b: (a + b, a), c.sum(), x)[1])
    return lax.scan(step, jnp.ones(3, jnp.float32), xs)
  check_traced(fn, X)


def test_a_long_lax_map_inside_a_short_one():
  """pmap_test's testPmapMapVmapCombinations: each step of a short (lazy) outer map runs a long inner map, replayed
  by TinyJits that the first outer step captured; the outer step's row of `ys` (row 0: a view of `ys`' buffer) is an
  input of theirs, which the later outer steps' replays must read (they gave zeros)."""
  xs = RNG.standard_normal((control_flow.SCAN_UNROLLED + 8, 5)).astype(np.float32)
  ys = RNG.standard_normal((5, 5)).astype(np.float32)
  check_traced(lambda xs, ys: lax.map(lambda b: lax.map(lambda row: jnp.dot(row, b), xs), ys), xs, ys, rtol=1e-5,
               atol=1e-6)


def test_an_empty_input_of_a_replayed_segment():
  """linalg_test's testLstsq with a (3, 1) matrix and a (3, 0) right-hand side, jitted and called until its segments
  (between the SVD's host-read loops) are captured and replayed: an empty value among a segment's inputs has no
  buffer, and none is made for it (its copy, made as for a view, had none either: the replay looked it up and
  raised KeyError)."""
  rng = np.random.default_rng(3)
  for rcond in (-1, None):
    ours = tinyjax.jit(lambda a, b: tinyjax.numpy.linalg.lstsq(a, b, rcond=rcond))
    theirs = jax.jit(lambda a, b: jnp.linalg.lstsq(a, b, rcond=rcond))
    for _ in range(6):
      a, b = rng.standard_normal((3, 1)).astype(np.float32), np.zeros((3, 0), np.float32)
      with oracle.on_tinygrad():
        actual = ours(a, b)
      oracle.assert_like_jax(actual, theirs(a, b), rtol=1e-5, atol=1e-6)


def triangular_recurrence(n, a):
  """sqrtm's recurrence (jax.scipy.linalg's _sqrtm_triu) over n columns of `a`, the constant TABLE closed over: three
  nested loops, the inner two with bounds known only at run time; a value carried twice (the same buffer) and one
  carried through unchanged."""
  table, a = jnp.asarray(TABLE), jnp.asarray(a)
  def column(j, u):
    def row(l, u):
      i = j - 1 - l
      s = lax.fori_loop(i + 1, j, lambda k, s: s + u[i, k] * u[k, j], jnp.float32(0))
      return u.at[i, j].set((a[i, j] - s) / (u[i, i] + u[j, j]) + table[i])
    return lax.fori_loop(0, j, row, u)
  u = jnp.diag(jnp.sqrt(jnp.abs(jnp.diag(a)) + 1))
  u, same, again = lax.fori_loop(0, n, lambda j, c: (column(j, c[0]), c[1], c[1] * 1), (u, a, a))
  return u, same + again


def test_nested_loops_with_bounds_known_at_run_time_replayed():
  # each loop's body holds a loop, so none is captured whole: the runs of equations between the loops are replayed
  # by TinyJits of their own from a body's third step; called again, with other data, the replays go on
  traced = wrap(triangular_recurrence)
  for k, n in enumerate([6, 0, 4, 6]):
    a = RNG.standard_normal((6, 6)).astype(np.float32) + 3 * np.eye(6, dtype=np.float32)
    check(lambda np_, n, a: triangular_recurrence(n, a) if np_ is jnp else traced(n, a), np.int32(n), a,
          rtol=1e-5, atol=1e-6)


def test_nested_loops_with_bounds_known_at_run_time_inside_vmap():
  a = RNG.standard_normal((3, 6, 6)).astype(np.float32) + 3 * np.eye(6, dtype=np.float32)
  check_traced(jax.vmap(triangular_recurrence), np.array([6, 2, 0], np.int32), a, rtol=1e-5, atol=1e-6)


def test_long_scan_with_a_while_loop_inside():
  # its body reads values on the host, so no TinyJit can capture it: the scan runs step by step
  step = lambda c, x: (lax.while_loop(lambda c: c.sum() < x, lambda c: c + 1, c), c.sum())
  check_traced(lambda xs: lax.scan(step, jnp.zeros(2, jnp.int32), xs), np.arange(control_flow.SCAN_UNROLLED + 1))


def test_body_without_a_rule_runs_the_whole_loop_on_xla():
  schur_diagonal = lambda x: jnp.diagonal(jax.scipy.linalg.schur(x)[0])  # schur: XLA only
  fn = lambda x: lax.fori_loop(0, 2, lambda i, x: schur_diagonal(x @ x.T) + x, x)
  with pytest.raises(tinyjax.FallbackError), native():
    wrap(fn)(X[:, :2])
  check_traced(fn, X[:, :2], native_only=False, rtol=1e-5)


# --- the rest

def test_diagonal_platform_index():
  check(lambda np_, x: np_.diagonal(x), np.arange(9.0, dtype=np.float32).reshape(3, 3))


def test_custom_linear_solve():
  diagonal = np.array([2.0, -4.0, 0.5], np.float32)

  def solve(b):
    matvec = lambda x: diagonal * x
    return lax.custom_linear_solve(matvec, b, lambda mv, b: b / diagonal, symmetric=True)
  check_traced(solve, np.array([1.0, 2.0, 3.0], np.float32))


def test_stop_gradient_and_optimization_barrier():
  check_traced(lambda x: (lax.stop_gradient(x) * 2, *lax.optimization_barrier((x, x + 1))), X)
