"""Expected failures: the one table of what does not match JAX, each with its reason: differences of a device (its
renderer's arithmetic) or of XLA itself (its flushing of denormals, its simplifier), never a defect of tinyjax.

Keys are (primitive or function name, dtype name or None). Tests look their parameters up here and mark them
`pytest.mark.xfail(strict=True)`, so a fix that makes one pass shows up as a failure to remove from this table.
"""
import os

import pytest

XFAIL: dict[tuple[str, str | None], str] = {
  # jax.numpy functions (tests/test_numpy_api.py): "jnp.<function>" or "jnp.<case id>" for one call
  ("denormals", "float32"): "XLA's CPU backend flushes denormal inputs and results to zero; tinygrad keeps them",
  # found by tests/test_fuzz.py (reproducers at its end; the fuzzer's generator avoids them)
  ("mul(convert(bool), x)", None): "XLA's algebraic simplifier turns a multiplication by a converted bool (not "
    "broadcast in between) into select(bool, x, 0): False * inf, False * NaN and False * -2.5 are +0.0 in JAX, while "
    "tinygrad multiplies as IEEE does (NaN, NaN, -0.0); so is a bool divided by a constant (False / 0.0 is 0.0)",
  ("denormals", "bfloat16"): "XLA's CPU backend computes bfloat16 in float32 and flushes its denormals (bfloat16's "
    "subnormals) to zero; where tinygrad renders bfloat16 (CL) it keeps them (where it emulates it, it flushes them)",
}


# Differences on one tinygrad device only (the device of TINYJAX_DEVICE): (device, name, dtype name or None) -> reason
XFAIL_ON_DEVICE: dict[tuple[str, str, str | None], str] = {
  **{(device, "a * b + c, fused", "float32"): "JAX's own two answers: XLA under jax.jit contracts a * b + c into a "
     "fused multiply-add (on 10000 random float32 triples, jit's result is the exact fma's every time), while JAX's "
     "eager calls round the product first (2366 of the 10000 differ from jit's). tinyjax fuses eager calls into one "
     "program, which clang, POCL and NVRTC contract as XLA's jit does (WGSL's compilers did not): the test compares "
     "with the eager result" for device in ("CPU", "CL", "CUDA")},
  ("WEBGPU", "atan2, glibc's steps", None): "atan2f's angles beyond pi/2, (z - pi_lo) - pi and pi - (z - pi_lo), "
    "come out an ulp from XLA's on WebGPU (2,564 of 20,100 random pairs; every angle within pi/2 is XLA's, and so "
    "are atan, asin and acos): its shader compilers do not keep the two float32 roundings of those sums, which "
    "tinygrad's own simplifier is kept from merging (floatmath._opaque)",
  ("WEBGPU", "sin and cos, glibc's in float64", None): "XLA's float32 sin and cos are glibc's sinf and cosf, "
    "computed in float64 and rounded once; WebGPU has no float64, and tinyjax computes them in float32 there (within "
    "an ulp of XLA's: 94,000 of 260,000 random float32 differ by one)",
  **{("WEBGPU", name, None): "WGSL's compilers do not contract a product and a sum into a fused multiply-add as "
     "XLA's jit, clang and POCL do (see 'a * b + c, fused')"
     for name in ("float sums of products, grouped as XLA groups them", "log1p near 0, fused as XLA fuses",
                  "tanh, fused as XLA fuses",
                  # lgamma(1e4)'s last product and sum, one ulp of 8.2e4, is igamma(1e4, 1e4)'s 0.8%
                  "igamma(a = x = 1e4)")},
  **{("WEBGPU", name, None): "WGSL lets its compilers assume no NaN or infinity: where tinygrad computes a zero at "
     "compile time (x > x), the shader compilers (Dawn's, then lavapipe's) fold 0.0 * x to 0.0 and 0.0 + x to x as "
     "tinygrad's simplifier did before tinyjax amended it" for name in ("arithmetic on a computed zero",
                                                                       "a loop's first index",
                                                                       "arithmetic on a folded zero",
                                                                       # -0.0 at its ramp's end, where JAX has 0.0
                                                                       "jnp.pad(f32,2,mode='linear_ramp')")},
}


def device_under_test() -> str:
  """The tinygrad device the tests run on, as TINYJAX_DEVICE names it ('' for the default)."""
  return os.environ.get("TINYJAX_DEVICE", "").upper().partition(":")[0]


def param(*values, name: str, dtype=None, id=None, marks=()):
  """pytest.param(*values) with `marks`, and marked xfail when (name, dtype) or (name, None) is in the table, or in
  the table of the device the tests run on."""
  dtype_name = None if dtype is None else str(getattr(dtype, "__name__", dtype))
  device = device_under_test()
  reason = (XFAIL.get((name, dtype_name)) or XFAIL.get((name, None)) or XFAIL_ON_DEVICE.get((device, name, dtype_name))
            or XFAIL_ON_DEVICE.get((device, name, None)))
  marks = [*marks, *([pytest.mark.xfail(reason=reason, strict=True)] if reason else [])]
  return pytest.param(*values, marks=marks, id=id)
