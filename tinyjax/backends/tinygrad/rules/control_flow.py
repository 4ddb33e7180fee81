"""Control flow: cond, while, scan, custom_linear_solve, platform_index, and the structural identities
stop_gradient, optimization_barrier and device_put.

NB: the call primitives (jit, custom_jvp_call, custom_vjp_call, remat, closed_call) have no rule here: the
program builder inlines their jaxprs (tinyjax.ir.program.CALL_PARAMS), recursively, so that each equation
inside runs where it is supported.

Sub-jaxprs (branches, bodies) run through `ctx.backend.run_jaxpr`, with the same rules, lazily. The backend runs a
control-flow primitive here only when its sub-jaxprs are wholly native (else XLA runs all of it). Carried values
(typed PRNG keys, complex numbers: carried.py) pass through as their data, so every rule here takes them.

cond evaluates every branch and selects the results, so that its program stays capturable by TinyJit (unless a
branch holds a data-dependent loop). while reads its predicate on the host before each step. Loop steps cost what
tinygrad's scheduler costs per realize (milliseconds) unless a TinyJit replays them: while loops and scans longer
than SCAN_UNROLLED replay a TinyJit of SCAN_CHUNK iterations (a while loop's past its end keep their carry; a scan's
step number is a bound Variable, so that one capture serves every step), two TinyJits in turn (Alternating).
TinyJits cannot nest, so these rules are host_sync: their program is not captured whole, but the runs of equations
between them are (plan.py), so a body that holds a loop replays its other equations at each step.
"""
import functools

from tinygrad import Tensor, TinyJit, Variable, dtypes

from tinyjax.backends.tinygrad.numerics import carried
from tinyjax.backends.tinygrad.machinery.replay import Alternating, capturing, distinct_buffers, distinct_groups
from tinyjax.backends.tinygrad.table import register, tg_dtype, uses_host_sync

SCAN_UNROLLED = 32  # scans up to this long run lazily within their program, which TinyJit can then capture
SCAN_CHUNK = 8  # steps per realize (lazy scans) or per TinyJit replay (longer scans, while loops)


def _constant(x: Tensor):
  """The value of a scalar Tensor that is a known constant (a literal, platform_index), else None."""
  from tinygrad.uop.ops import Ops
  base = x.uop.base
  return base.arg if base.op is Ops.CONST else None


def _at(x: Tensor, i) -> Tensor:
  """x[i] along the leading axis; `i` may be a bound Variable expression."""
  return x.shrink(((i, i + 1),) + tuple((0, n) for n in x.shape[1:]))


@register("cond", carried=True)
def _cond(ctx, index, *operands, branches, branches_platforms=None):
  # the index is clamped into range, as XLA does; a boolean predicate (2 branches) counts as 0 or 1. (With
  # branches_platforms, the index is platform_index's constant.)
  known = _constant(index)
  if known is None and any(uses_host_sync(branch.jaxpr.eqns) for branch in branches):
    # a branch with a data-dependent loop must not run unselected (its loop may never end): the index is read on
    # the host, which the loop does anyway (the program is not captured by TinyJit)
    known = index.item()
  if known is not None:
    return ctx.backend.run_jaxpr(branches[min(max(int(known), 0), len(branches) - 1)], *operands)
  # NB: every branch is evaluated and the results selected, so that no value is read on the host (the program
  # stays capturable by TinyJit); our rules never fault, so an unselected branch cannot crash
  index = index.cast(dtypes.int32)
  results = [ctx.backend.run_jaxpr(branch, *operands) for branch in branches]
  selected = results[-1]
  for i in range(len(branches) - 2, -1, -1):
    chosen = index <= i  # an index below 0 picks branch 0
    selected = [chosen.where(a, b) for a, b in zip(results[i], selected)]
  return selected


def _while_steps(backend, cond_jaxpr, body_jaxpr, n_cond, n_body, count, *operands):
  """`count` iterations from a carry and its predicate (the last operand): the new carry and predicate.

  Where the predicate fails the carry is kept, so that iterations past the loop's end change nothing (as in JAX's
  lowering of a vmapped loop, whose predicate is batched: the loop goes on while any element's holds). NB: those
  iterations still compute their body on the kept carry, which our rules do without faulting.
  """
  cond_consts, body_consts = operands[:n_cond], operands[n_cond:n_cond + n_body]
  *carry, go = operands[n_cond + n_body:]
  for _ in range(count):
    stepped = backend.run_jaxpr(body_jaxpr, *body_consts, *carry)
    if count == 1 and go.ndim == 0:  # a single step runs only while a scalar predicate holds: nothing to mask
      carry = stepped
    else:  # the predicate's shape leads each carry's (carried values have their data's trailing dimension)
      carry = [go.reshape(go.shape + (1,) * (new.ndim - go.ndim)).where(new, old) for new, old in zip(stepped, carry)]
    (go,) = backend.run_jaxpr(cond_jaxpr, *cond_consts, *carry)
  return distinct_buffers(backend.tg_device, [*carry, go], taken=operands)


@functools.lru_cache(maxsize=64)
def _while_jit(backend, cond_jaxpr, body_jaxpr, n_cond, n_body, in_avals, turn):
  return TinyJit(functools.partial(_while_steps, backend, cond_jaxpr, body_jaxpr, n_cond, n_body, SCAN_CHUNK))


@register("while", host_sync=True, carried=True)
def _while(ctx, *operands, cond_jaxpr, body_jaxpr, cond_nconsts, body_nconsts):
  # NB: the trip count depends on the data: the predicate is read on the host before each step (host_sync)
  consts, carry = operands[:cond_nconsts + body_nconsts], list(operands[cond_nconsts + body_nconsts:])
  # the operands are realized once: each step's graph is then the same (tinygrad's schedule cache serves it), and
  # lazy constants are not computed again every iteration. NB: with the first predicate, in one schedule
  (go,) = ctx.backend.run_jaxpr(cond_jaxpr, *consts[:cond_nconsts], *carry)
  consts, carry, (go,) = distinct_groups(ctx.device, consts, carry, [go])
  # a replayed step runs SCAN_CHUNK iterations: a step's host read and replay cost more than a small body's kernels.
  # NB: a body that is not replayed runs one iteration per step: it may hold a loop, which must not run on a carry
  # past the loop's end (its own trip count could be anything there)
  step = functools.partial(_while_steps, ctx.backend, cond_jaxpr, body_jaxpr, cond_nconsts, body_nconsts, 1)
  jitted = not capturing() and ctx.backend.capturable(cond_jaxpr) and ctx.backend.capturable(body_jaxpr)
  if jitted:
    step = Alternating(functools.partial(_while_jit, ctx.backend, cond_jaxpr, body_jaxpr, cond_nconsts, body_nconsts,
                                         ctx.in_avals))
  while go.any().item():
    *carry, go = step(*consts, *carry, go)
  # NB: TinyJit reuses its output buffers on every replay: the result is copied out of them
  return distinct_buffers(ctx.device, carry, taken=carry) if jitted else carry


def _scan_steps(backend, jaxpr, length, reverse, num_consts, num_carry, n_xs, count, position, *operands):
  """`count` steps from step number `position` (an int, or a bound Variable): the new carry; ys written in place."""
  consts, carry = operands[:num_consts], operands[num_consts:num_consts + num_carry]
  xs, ys = operands[num_consts + num_carry:][:n_xs], operands[num_consts + num_carry + n_xs:]
  for j in range(count):
    i = length - 1 - (position + j) if reverse else position + j
    outs = backend.run_jaxpr(jaxpr, *consts, *carry, *[_at(x, i).reshape(x.shape[1:]) for x in xs])
    carry = outs[:num_carry]
    for buffer, y in zip(ys, outs[num_carry:]):
      _at(buffer, i).assign(y.reshape(1, *y.shape))
  return distinct_buffers(backend.tg_device, carry, taken=operands[:num_consts + num_carry], realize_with=ys)


@functools.lru_cache(maxsize=64)
def _scan_jit(backend, jaxpr, length, reverse, num_consts, num_carry, in_avals, turn):
  n_xs = len(in_avals) - num_consts - num_carry
  return TinyJit(functools.partial(_scan_steps, backend, jaxpr, length, reverse, num_consts, num_carry, n_xs,
                                   SCAN_CHUNK))


def _long(*, length, **_) -> bool:
  return length > SCAN_UNROLLED


@register("scan", host_sync=_long, carried=True)
def _scan(ctx, *operands, jaxpr, length, reverse, num_consts, num_carry, unroll):
  consts, carry = operands[:num_consts], list(operands[num_consts:num_consts + num_carry])
  xs = operands[num_consts + num_carry:]
  ys_avals = [carried.carried_aval(a) for a in ctx.out_avals[num_carry:]]
  ys = distinct_buffers(ctx.device, [Tensor.zeros(a.shape, dtype=tg_dtype(a.dtype), device=ctx.device)
                                      for a in ys_avals])
  steps = functools.partial(_scan_steps, ctx.backend, jaxpr, length, reverse, num_consts, num_carry, len(xs))
  done = 0
  if _long(length=length) and not capturing() and ctx.backend.capturable(jaxpr):
    jitted = Alternating(functools.partial(_scan_jit, ctx.backend, jaxpr, length, reverse, num_consts, num_carry,
                                           ctx.in_avals))
    consts, xs, carry = distinct_groups(ctx.device, consts, xs, carry, taken=ys)
    position = Variable("scan_step", 0, length - SCAN_CHUNK)
    for done in range(0, length - SCAN_CHUNK + 1, SCAN_CHUNK):
      carry = jitted(position.bind(done), *consts, *carry, *xs, *ys)
    done += SCAN_CHUNK
    # NB: TinyJit reuses its output buffers on every replay: the carry is copied out of them
    carry = distinct_buffers(ctx.device, carry, taken=carry)
  for start in range(done, length, SCAN_CHUNK):  # realized every chunk, so the lazy graph stays bounded
    count = min(SCAN_CHUNK, length - start)
    carry = steps(count, _chunk_start(start, count, length), *consts, *carry, *xs, *ys)
  return [*carry, *ys]


def _chunk_start(start: int, count: int, length: int):
  """A full chunk's first step as a bound Variable, so that every full chunk runs the same kernels (compiled once,
  where step numbers baked in made new kernels for each chunk).

  NB: under a TinyJit's capture (a program's second run) a plain int: a replay binds only its inputs' variables. A
  program run again therefore compiles its scan's chunks once more for the capture."""
  if count < SCAN_CHUNK or capturing():
    return start
  return Variable("scan_step", 0, length - SCAN_CHUNK).bind(start)


# JAX's name of the platform each tinygrad device is (the rest are none of JAX's platforms)
_JAX_PLATFORMS = {"CPU": "cpu", "CUDA": "cuda", "NV": "cuda", "AMD": "rocm"}


@register("platform_index")
def _platform_index(ctx, *, platforms):
  # the branch named for the device's platform, as XLA lowers it for its platform. NB: on a device that is none of
  # JAX's platforms the default branch (None) runs, and without one the CPU branch, whose results are XLA's on CPU
  # (the results tinyjax matches)
  platform = _JAX_PLATFORMS.get(ctx.device.split(":")[0])
  named = [i for i, p in enumerate(platforms) if p is not None and platform in p]
  cpu = [i for i, p in enumerate(platforms) if p is not None and "cpu" in p]
  choice = named[0] if named else platforms.index(None) if None in platforms else cpu[0] if cpu else None
  if choice is None:  # as XLA's lowering for a platform no branch names (NB: raised when the value is computed)
    raise NotImplementedError(f"translation rule for platform_index not found for platform {platform or 'cpu'}")
  return Tensor(choice, dtype=dtypes.int32, device=ctx.device)


@register("custom_linear_solve", carried=True)
def _custom_linear_solve(ctx, *operands, const_lengths, jaxprs):
  # the forward value is the `solve` jaxpr on b; the other jaxprs serve differentiation, which JAX has done
  start = const_lengths.matvec + const_lengths.vecmat
  solve_consts = operands[start:start + const_lengths.solve]
  b = operands[start + const_lengths.solve + const_lengths.transpose_solve:]
  return ctx.backend.run_jaxpr(jaxprs.solve, *solve_consts, *b)


@register("stop_gradient", carried=True)
def _stop_gradient(ctx, x):
  return x  # JAX has already differentiated the program: the value passes through


@register("optimization_barrier", carried=True)
def _optimization_barrier(ctx, *operands):
  return list(operands)  # XLA's barrier orders scheduling; tinygrad's lazy graph has nothing to order


@register("device_put", carried=True)
def _device_put(ctx, *operands, devices, srcs, copy_semantics):
  # NB: a transfer inside a traced program (jax.device_put of a tracer): the program runs on one device
  return list(operands)
