"""Expected failures: the one table of what does not match JAX yet, each with its reason.

Keys are (primitive or function name, dtype name or None). Tests look their parameters up here and mark them
`pytest.mark.xfail(strict=True)`, so a fix that makes one pass shows up as a failure to remove from this table.
"""
import pytest

XFAIL: dict[tuple[str, str | None], str] = {
  ("reduce_sum(overflowing partial sum)", "float16"): "XLA's CPU sum rounds each float16 partial sum (60000 + "
    "60000 = inf); tinygrad's C code computes __fp16 arithmetic in float and rounds the total only",
  ("cumprod(reverse, inf meets 0)", "float32"): "XLA multiplies each suffix from its first element; tinygrad scans the "
    "flipped axis, so an overflowed inf can meet a 0 (NaN) where XLA's 0 comes first",
  ("denormals", "float32"): "XLA's CPU backend flushes denormal inputs and results to zero; tinygrad keeps them",
  ("select_and_gather_add ties, padded", None): "which of several equal maxima a padded window picks follows XLA's "
    "CPU reduce_window loop order, which changes with padding and window size; tinygrad walks windows row-major",
}


def param(*values, name: str, dtype=None, id=None):
  """pytest.param(*values), marked xfail when (name, dtype) or (name, None) is in the table."""
  dtype_name = None if dtype is None else str(getattr(dtype, "__name__", dtype))
  reason = XFAIL.get((name, dtype_name)) or XFAIL.get((name, None))
  marks = [pytest.mark.xfail(reason=reason, strict=True)] if reason else []
  return pytest.param(*values, marks=marks, id=id)
