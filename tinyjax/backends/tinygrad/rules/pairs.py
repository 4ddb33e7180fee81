"""Complex matrices inside the linear-algebra rules (linalg.py, eigen.py): a complex operand as a `Pair` of real
Tensors, and the arithmetic those rules are written in once for real and complex matrices alike: each helper is the
real one for a Tensor (`mul`, `conj`, `where`, `magnitude`, ...), and LAPACK's norms (`norm`, `hypot`)."""
import math
import operator

from tinygrad import Tensor
from tinygrad.dtype import _to_np_dtype

from tinyjax.backends.tinygrad.rules import complexmath
from tinyjax.backends.tinygrad.numerics import floatbits as fb
from tinyjax.backends.tinygrad.numerics import floatmath as fm
from tinyjax.backends.tinygrad.numerics.carried import is_complex
from tinyjax.backends.tinygrad.rules.indexing import pick
from tinyjax.backends.tinygrad.table import register, register_complex


class Pair:
  """A complex Tensor inside these rules, as its real and imaginary parts (float Tensors of one shape): each rule is
  written once for real and complex matrices, with the arithmetic below (`mul`, `conj`, `where`, `magnitude`, ...), which
  is the real one for a Tensor. Tensor methods that move or reduce entries (transpose, pad, sum, indexing, ...) apply
  to both parts; + - * / take a Pair on the left (a Tensor on the left refuses a Pair)."""
  __slots__ = ("re", "im")

  def __init__(self, re, im):
    self.re, self.im = re, im

  @staticmethod
  def of(z):
    """The Pair of a complex operand as the backend carries it (float[..., 2])."""
    return Pair(z[..., 0], z[..., 1])

  def carried(self):
    return complexmath.paired(self.re, self.im)

  shape = property(lambda self: self.re.shape)
  ndim = property(lambda self: self.re.ndim)
  dtype = property(lambda self: self.re.dtype)

  def __getattr__(self, name):
    method = getattr(Tensor, name)
    return lambda *args, **kwargs: Pair(method(self.re, *args, **kwargs), method(self.im, *args, **kwargs))

  def __getitem__(self, index):
    return Pair(self.re[index], self.im[index])

  def __add__(self, other):
    return Pair(self.re + other.re, self.im + other.im) if isinstance(other, Pair) else Pair(self.re + other, self.im)

  def __sub__(self, other):
    return Pair(self.re - other.re, self.im - other.im) if isinstance(other, Pair) else Pair(self.re - other, self.im)

  def __rsub__(self, other):  # NB: other - (re + im j) has the imaginary part 0 - im (+0 for im = -0 as for +0)
    return Pair(other - self.re, self.im.zeros_like() - self.im)

  def __neg__(self):
    return Pair(-self.re, -self.im)

  def __mul__(self, other):
    return mul(self, other)

  __radd__, __rmul__ = __add__, __mul__


def is_pair(*xs) -> bool:
  return any(isinstance(x, Pair) for x in xs)


def parts(x):
  """x's real and imaginary parts (0 for a real x)."""
  return (x.re, x.im) if isinstance(x, Pair) else (x, 0)


def mul(x, y, fused: bool = True):
  """x * y; not `fused`: each real product rounded before any sum (fm.rounded_product)."""
  times = operator.mul if fused else fm.rounded_product
  if not is_pair(x, y):
    return times(x, y)
  if not is_pair(y):
    return Pair(times(x.re, y), times(x.im, y))
  if not is_pair(x):
    return Pair(times(y.re, x), times(y.im, x))
  return Pair(times(x.re, y.re) - times(x.im, y.im), times(x.re, y.im) + times(x.im, y.re))


def div(x, y):
  """x / y, for a complex y by Smith's algorithm (complexmath.quotient)."""
  if is_pair(y):
    return Pair.of(complexmath.quotient(lift(x, y).carried(), y.carried()))
  return Pair(fm.div(x.re, y), fm.div(x.im, y)) if is_pair(x) else fm.div(x, y)


def lift(x, like):
  """x (a Pair, Tensor or number) as a Pair of like's shape and dtype."""
  if isinstance(x, Pair):
    return x
  re = x if isinstance(x, Tensor) else Tensor.full(like.shape, x, dtype=like.dtype, device=like.re.device)
  return Pair(re, re.zeros_like())


def matmul(x, y):
  if not is_pair(x, y):
    return x @ y
  (a, b), (c, d) = parts(lift(x, y)), parts(lift(y, x))
  return Pair(a @ c - b @ d, a @ d + b @ c)


def conj(x):
  return Pair(x.re, -x.im) if is_pair(x) else x


def adjoint(x):
  """The conjugate transpose of a matrix (batch + (m, n)), its transpose for a real one."""
  return conj(x.transpose(-1, -2))


def real(x):
  return x.re if is_pair(x) else x


def magnitude(x):
  return hypot(x.re, x.im) if is_pair(x) else fb.fabs(x)


def abs1(x):
  """|re| + |im|: the size LAPACK's pivot searches compare for complex entries (izamax)."""
  return fb.fabs(x.re) + fb.fabs(x.im) if is_pair(x) else fb.fabs(x)


def nonzero(x):
  return fb.nonzero(x.re) | fb.nonzero(x.im) if is_pair(x) else fb.nonzero(x)


def where(mask, x, y):
  if not is_pair(x, y):
    return mask.where(x, y)
  (a, b), (c, d) = parts(x), parts(y)
  return Pair(mask.where(a, c), mask.where(b, d))


def cat(xs: list, dim: int):
  if is_pair(*xs):
    xs = [x if is_pair(x) else Pair(x, x.zeros_like()) for x in xs]
    return Pair(Tensor.cat(*[x.re for x in xs], dim=dim), Tensor.cat(*[x.im for x in xs], dim=dim))
  return Tensor.cat(*xs, dim=dim)


def nan_like(like):
  """NaN as a value of like's kind (NaN + NaN j for a complex one, as XLA's)."""
  return Pair(math.nan, math.nan) if is_pair(like) else math.nan


def tensors(xs: list) -> list:
  """The Tensors of a list of Tensors and Pairs, each Pair as its two parts."""
  return [t for x in xs for t in ((x.re, x.im) if is_pair(x) else (x,))]


def zeros(shape, like, device):
  zeros = Tensor.zeros(*shape, dtype=like.dtype, device=device)
  return Pair(zeros, zeros) if is_pair(like) else zeros


def at(mask, x, axis: int):
  """The entry of x where `mask` holds along `axis` (the axis kept, with size 1), moved bit for bit (-0.0 too)."""
  if is_pair(x):
    return Pair(at(mask, x.re, axis), at(mask, x.im, axis))
  return pick(mask, x, axis, _to_np_dtype(x.dtype)).unsqueeze(axis)


def real_and_complex(*names: str, **options):
  """Decorator: `rule` implements the primitives `names` for real and complex operands alike: a complex operand
  reaches it as a Pair, and a Pair it returns leaves as its carried pairs. `options` as register's."""
  def decorate(rule):
    register(*names, **options)(rule)

    def complex_rule(ctx, *operands, **params):
      operands = [Pair.of(x) if is_complex(aval.dtype) else x for x, aval in zip(operands, ctx.in_avals)]
      out = rule(ctx, *operands, **params)
      carried = lambda x: x.carried() if isinstance(x, Pair) else x
      return [carried(x) for x in out] if isinstance(out, list) else carried(out)
    register_complex(*names)(complex_rule)
    return rule
  return decorate


def norm(x, axis: int):
  """The Euclidean norm along `axis` (kept), scaled by the largest |entry| so that, as in LAPACK's nrm2, neither huge
  entries overflow nor tiny ones underflow. An infinite entry gives inf, or NaN with a NaN among the entries (what
  the sum of |entries| gives). A complex x's norm is that of its parts."""
  if is_pair(x):
    return norm(x.re.cat(x.im, dim=axis), axis)
  size = fb.fabs(x)
  scale = size.max(axis, keepdim=True)  # NB: tinygrad's max skips NaN; the NaN still reaches the sum below
  infinite = scale == math.inf
  divisor = ((scale == 0) | infinite).where(1, scale)
  # NB: fm.div: tinygrad rewrites (x * (1 / scale))^2 into x^2 * (1 / scale)^2, which overflows again
  scaled = fm.div(x, divisor)
  return infinite.where(size.sum(axis, keepdim=True), scale * (scaled * scaled).sum(axis, keepdim=True).sqrt())


def hypot(x, y):
  """sqrt(x^2 + y^2) as LAPACK's lapy2: NaN if either is, the larger |value| when the smaller is 0 or it is inf."""
  x_size, y_size = fb.fabs(x), fb.fabs(y)
  larger, smaller = x_size.maximum(y_size), x_size.minimum(y_size)
  exact = (smaller == 0) | (larger == math.inf)
  result = exact.where(larger, larger * (1 + fm.div(smaller, exact.where(1, larger)).square()).sqrt())
  return (fb.isnan(x) | fb.isnan(y)).where(math.nan, result)
