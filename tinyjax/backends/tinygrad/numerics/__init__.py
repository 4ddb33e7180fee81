"""The numerics the rule families share: float bits and XLA's total order (floatbits), functions to XLA's accuracy
(floatmath, xla_formulas), 16-bit rounding as XLA's CPU rounds (rounding), and the layouts of values tinygrad has no
dtype for (carried). Nothing here knows a primitive: they compute on tinygrad Tensors."""
