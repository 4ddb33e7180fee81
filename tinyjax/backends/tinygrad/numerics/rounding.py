"""16-bit floats as XLA's CPU computes them: each operation in float32, its result rounded to nearest even.

The backend applies `rounded` to every float16 and bfloat16 result of a rule. tinygrad alone does not round after each
operation everywhere: C promotes `__fp16` arithmetic to float and tinygrad inlines expressions (CPU), tinygrad
emulates float16 where OpenCL lacks cl_khr_fp16 and bfloat16 on WebGPU and on clang without `__bf16` as float32 up to
the store, and it drops a cast to a 16-bit float that is cast back. So the rounding is done here on the float32 bits,
which no renderer or optimizer changes; the cast to the 16-bit dtype is then exact.
"""
from tinygrad import Tensor, dtypes
from tinygrad.uop.ops import Ops

_F32, _U32 = dtypes.float32, dtypes.uint32
ROUNDED = {dtypes.float16: "float16", dtypes.bfloat16: "bfloat16"}  # their names in tinygrad's EMULATED_DTYPES


def rounded(x: Tensor, subnormals_exact: bool = False) -> Tensor:
  """x (float16 or bfloat16, possibly holding float32 precision) rounded to its dtype, nearest even: NaN stays NaN,
  overflow gives inf, and float16's subnormal range rounds to multiples of 2**-24. `subnormals_exact`: x is a multiple
  of 2**-24 wherever it is below float16's smallest normal, as a sum of float16 values is, so that range needs no
  rounding (half the operations)."""
  dtype = x.dtype
  # NB: a cast from float32 is rounded from its operand: tinygrad's emulation clamps to the dtype's range before it
  # rounds (so bfloat16's largest value times 1.001 became inf)
  wide = Tensor(x.uop.src[0]) if x.uop.op is Ops.CAST and x.uop.src[0].dtype == _F32 else x.cast(_F32)
  u = wide.bitcast(_U32)

  def const(value):
    return u.const_like(value)  # NB: masks typed as u: tinygrad folds some ops on untyped constants wrongly
  magnitude, sign = u & const(0x7FFFFFFF), u & const(0x80000000)
  if dtype == dtypes.bfloat16:  # float32's exponent range: drop 16 bits, rounding carries into the exponent
    nearest = (u + const(0x7FFF) + ((u >> 16) & const(1))) & const(0xFFFF0000)
  else:
    normal = (u + const(0xFFF) + ((u >> 13) & const(1))) & const(0xFFFFE000)
    normal = ((normal & const(0x7FFFFFFF)) >= const(0x47800000)).where(sign | const(0x7F800000), normal)  # 2**16: inf
    # below float16's smallest normal (2**-14) its values are the multiples of 2**-24: scaled, they are integers
    if subnormals_exact:
      return (magnitude > const(0x7F800000)).where(u, normal).bitcast(_F32).cast(dtype)
    # NB: only the subnormal range is scaled: tinygrad folds the int cast of a constant inf or NaN with Python's
    # int(), which raises (a float16 reduce_window whose windows lie wholly in its padding)
    tiny = magnitude < const(0x38800000)
    scaled = tiny.where(magnitude, const(0)).bitcast(_F32) * 2.0 ** 24
    whole = scaled.cast(dtypes.int32)
    fraction = scaled - whole.cast(_F32)
    up = (fraction > 0.5) | ((fraction == 0.5) & ((whole & 1) == 1))
    subnormal = ((whole + up.cast(dtypes.int32)).cast(_F32) * 2.0 ** -24).bitcast(_U32) | sign
    nearest = tiny.where(subnormal, normal)
  return (magnitude > const(0x7F800000)).where(u, nearest).bitcast(_F32).cast(dtype)
