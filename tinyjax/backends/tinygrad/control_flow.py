"""Control flow: cond, while, scan, and the other primitives that run sub-jaxprs.

NB: the call primitives (jit, custom_jvp_call, custom_vjp_call, remat, closed_call) have no rule here: the
program builder inlines their jaxprs (tinyjax.core.program.CALL_PARAMS), recursively, so that each equation
inside runs where it is supported.
"""
from tinyjax.backends.tinygrad.table import register  # noqa: F401
