"""Which primitives run natively on tinygrad, which the program builder inlines, and which fall back to XLA.

The table is made from the rule tables themselves; `tinyjax coverage` prints it and docs/primitives.md is this
module's markdown output.
"""
import dataclasses

import jax.extend.core.primitives as jax_primitives

from tinyjax.backends.tinygrad.not_native import NOT_YET_NATIVE
from tinyjax.backends.tinygrad.machinery.plan import missing_rule
from tinyjax.backends.tinygrad.table import RULES, takes_complex
from tinyjax.ir.program import CALL_PARAMS
from tinyjax.ir.spmd import COLLECTIVES


@dataclasses.dataclass(frozen=True)
class Row:
  primitive: str
  status: str  # "native", "inlined" (call primitives: their bodies are run), "collective" (run inside shard_map: operations
  # over the shards side by side), "fallback" (runs on XLA)
  note: str
  complex: bool = False  # whether complex operands run natively too


def jax_primitive_names() -> set[str]:
  return {getattr(jax_primitives, n).name for n in dir(jax_primitives) if n.endswith("_p")}


def rows() -> list[Row]:
  import tinyjax.backends.tinygrad  # noqa: F401  (fills RULES)
  names = jax_primitive_names() | set(RULES) | set(NOT_YET_NATIVE)
  table = []
  for name in sorted(names):
    if missing_rule(name) is None:
      table.append(Row(name, "native", "", takes_complex(name)))
    elif name in CALL_PARAMS:
      table.append(Row(name, "inlined", f"its `{CALL_PARAMS[name]}` is run in place"))
    elif name in COLLECTIVES:
      table.append(Row(name, "collective", "inside shard_map and pmap, an operation over the shards side by side "
                                           "(over shards split on devices: tinygrad's allreduce and copies)"))
    else:
      table.append(Row(name, "fallback", NOT_YET_NATIVE.get(name, "no rule and no reason given")))
  return table


def markdown() -> str:
  table = rows()
  counts = {s: sum(r.status == s for r in table) for s in ("native", "inlined", "collective", "fallback")}
  lines = ["# Primitive coverage of the tinygrad backend", "",
           "Generated from the rule tables by `tinyjax coverage --markdown`; do not edit by hand.", "",
           f"{counts['native']} native, {counts['inlined']} inlined, {counts['collective']} collectives run inside "
           f"shard_map and pmap (tinyjax/ir/spmd.py), {counts['fallback']} run on XLA "
           f"(of {len(table)} primitives).", "",
           "The complex column: whether complex operands run natively too (as (real, imaginary) pairs).", "",
           "| primitive | tinygrad | complex | note |", "|---|---|---|---|"]
  lines += [f"| `{r.primitive}` | {r.status} | {'yes' if r.complex else ''} | {r.note} |" for r in table]
  return "\n".join(lines) + "\n"
